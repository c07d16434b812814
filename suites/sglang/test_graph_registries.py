"""SGLang's other graph buffer registries, the piecewise prefill graphs' and the eager runner's, and the decode
registry's optional slots, each through a full-width replay and then a smaller batch.

Behaviour first: a prefill graph processes its padded tokens, so writing the padded batch's K/V through
SGLang's pool at the registry's ``out_cache_loc`` must change no slot the batch does not own and leave
every live token's K/V intact; the count of real tokens a padded graph sees (``num_token_non_padded``)
must equal the real count, split over attention-TP ranks so that every real token is counted by exactly
one rank; the eager registry hands a batch back unchanged. Then structure: every tail follows the
policy its slot declares.
"""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.targets.target import PoolSpec
from harness.targets.sglang.capabilities import module, parallel_override
from suites.checks import expect_structure

MAX_BS, MAX_TOKENS, HIDDEN = 4, 32, 4
SWA_LAYER, FULL_LAYER = 0, 1


@pytest.fixture(scope="module")
def srt(target):
    if target.name != "sglang":
        pytest.skip("drives SGLang's graph buffer registries: run with --target sglang (nox -s sglang)")
    registry = module("sglang.srt.model_executor.cuda_graph_buffer_registry")

    def parallel(**values):  # only the tests that set a parallel width need the runtime context (0.5.14 on)
        return parallel_override(module("sglang.srt.runtime_context"))(**values)

    return types.SimpleNamespace(registry=registry, PaddingPolicy=registry.PaddingPolicy, parallel=parallel)


@dataclasses.dataclass
class Batch:
    """The ForwardBatch fields these registries mirror (``extract_buffer`` needs a dataclass to replace)."""

    batch_size: int
    input_ids: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    out_cache_loc: torch.Tensor | None = None
    req_pool_indices: torch.Tensor | None = None
    seq_lens: torch.Tensor | None = None
    seq_lens_cpu: torch.Tensor | None = None
    mrope_positions: torch.Tensor | None = None
    mamba_track_indices: torch.Tensor | None = None
    mamba_track_mask: torch.Tensor | None = None
    mamba_track_seqlens: torch.Tensor | None = None
    encoder_lens: torch.Tensor | None = None
    num_token_non_padded: torch.Tensor | None = None
    global_num_token_non_padded: torch.Tensor | None = None
    global_num_token_non_padded_cpu: int | None = None
    input_embeds: torch.Tensor | None = None  # computed slots: extract_buffer always exposes them
    global_num_tokens_gpu: torch.Tensor | None = None
    global_num_tokens_for_logprob_gpu: torch.Tensor | None = None
    sampling_info: str = "carried from the template"


def token_batch(loc: torch.Tensor, bs: int) -> Batch:
    n = loc.numel()
    return Batch(
        batch_size=bs,
        input_ids=loc + 1000,
        positions=torch.arange(n) + 3,
        out_cache_loc=loc,
        req_pool_indices=torch.arange(1, bs + 1),
        seq_lens=torch.full((bs,), 9),
        seq_lens_cpu=torch.full((bs,), 9),
        mrope_positions=torch.stack([torch.arange(n) + 3] * 3),
        mamba_track_indices=torch.arange(1, bs + 1),
        mamba_track_mask=torch.ones(bs, dtype=torch.bool),
        mamba_track_seqlens=torch.full((bs,), 9, dtype=torch.int32),
    )


def tails_follow_their_policy(srt, reg, raw: tuple[int, int], padded: tuple[int, int]) -> None:
    for name in reg.slot_names():
        slot = reg.get_slot(name)
        if slot.buffer is None or slot.axis == "none":
            continue
        n_raw, n_padded = slot._raw_n(*raw), slot._padded_n(*padded)
        tail = slot.slice_for(*padded)[..., n_raw:n_padded] if slot.slice_fn else slot.buffer[n_raw:n_padded]
        if slot.padding_policy is srt.PaddingPolicy.ZERO:
            expect_structure(bool((tail == 0).all()), f"{name}: policy ZERO but the padded tail is {tail.tolist()}")
        elif slot.padding_policy is srt.PaddingPolicy.FILL_SENTINEL:
            expect_structure(bool((tail == slot.pad_value).all()), f"{name}: tail {tail.tolist()} != {slot.pad_value}")


@settings(max_examples=25, deadline=None)
@given(raw=st.integers(1, MAX_TOKENS - 1), data=st.data())
def test_prefill_graph_padding_writes_only_the_sink(target, srt, raw, data):
    padded = data.draw(st.integers(raw + 1, MAX_TOKENS))
    handle = target.build_pool(PoolSpec(size=96, size_swa=80, max_requests=MAX_BS))
    pool, allocator = handle.pool, handle.allocator
    reg = srt.registry.build_prefill_registry(
        device=torch.device("cpu"),
        max_bs=MAX_BS,
        max_num_token=MAX_TOKENS,
        cache_loc_dtype=torch.int64,
        is_multimodal=True,
        hidden_size=HIDDEN,
        embed_dtype=torch.float32,
        enable_mamba_track=True,
        enable_num_token_non_padded=True,
        share_pool=False,
    )
    # A full-width replay: every token-axis buffer holds a live request's ids, the embeds its activations.
    live = allocator.alloc(MAX_TOKENS).long()
    reg.fill_from(
        token_batch(live, MAX_BS),
        raw_bs=MAX_BS,
        padded_bs=MAX_BS,
        raw_num_tokens=MAX_TOKENS,
        padded_num_tokens=MAX_TOKENS,
    )
    reg.get_slot("input_embeds").buffer.fill_(5.0)  # the graph writes embeds in place
    ones = torch.ones(MAX_TOKENS, 2, 8)
    for layer in (SWA_LAYER, FULL_LAYER):
        pool.set_kv_buffer(layer, live, ones, ones)
    before = {layer: pool.get_key_buffer(layer).clone() for layer in (SWA_LAYER, FULL_LAYER)}

    # A smaller prefill of another request (`raw` fresh slots), run in the `padded`-token graph while the
    # first request is still live.
    loc = allocator.alloc(raw).long()
    batch = token_batch(loc, 1)
    reg.fill_from(batch, raw_bs=1, padded_bs=1, raw_num_tokens=raw, padded_num_tokens=padded)
    view = reg.extract_buffer(padded_bs=1, padded_num_tokens=padded, forward_batch_template=batch)
    new = (torch.arange(padded, dtype=torch.float32) + 2.0)[:, None, None].expand(padded, 2, 8).contiguous()
    for layer in (SWA_LAYER, FULL_LAYER):
        swa = pool.translate_loc_from_full_to_swa(view.out_cache_loc) if layer == SWA_LAYER else None
        pool.set_kv_buffer(layer, view.out_cache_loc, new, new, swa_loc=swa)
        own = pool.translate_loc_from_full_to_swa(loc).long() if layer == SWA_LAYER else loc
        keys = pool.get_key_buffer(layer)
        changed = set((keys != before[layer]).flatten(1).any(1).nonzero().flatten().tolist())
        stray = sorted(changed - set(own.tolist()) - {0})
        assert not stray, f"layer {layer}: padded tokens of the prefill graph wrote slots {stray} they do not own"
        clobbered = [i for i in range(raw) if not torch.equal(keys[own[i]], new[i])]
        assert not clobbered, f"layer {layer}: tokens {clobbered} lost their K/V to padded tokens"
        other = pool.translate_loc_from_full_to_swa(live).long() if layer == SWA_LAYER else live
        assert bool((keys[other] == 1.0).all()), f"layer {layer}: the live request's K/V changed"
    counted = int(reg.get_slot("num_token_non_padded").buffer)
    assert counted == raw, f"the graph counts {counted} real tokens of {raw} (padded to {padded})"

    tails_follow_their_policy(srt, reg, (1, raw), (1, padded))
    embeds_tail = reg.get_slot("input_embeds").buffer[raw:padded]
    expect_structure(bool((embeds_tail == 0).all()), "input_embeds of padded tokens keep the previous replay's")
    expect_structure(
        view.out_cache_loc.numel() == padded
        and view.batch_size == 1
        and view.sampling_info == "carried from the template",
        "extract_buffer's view is not the padded batch",
    )


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_every_real_token_is_counted_by_exactly_one_attention_rank(srt, tp):
    """With attention TP sharding, each rank counts the real tokens of its slice of the padded bucket."""
    registry = srt.registry
    for padded, real in ((16, 16), (16, 9), (16, 1), (32, 17)):
        counts = []
        for rank in range(tp):
            with srt.parallel(tp_size=tp, moe_tp_size=tp, attn_tp_size=tp, attn_tp_rank=rank):  # a consistent topology
                reg = registry.build_prefill_registry(
                    device=torch.device("cpu"),
                    max_bs=MAX_BS,
                    max_num_token=MAX_TOKENS,
                    cache_loc_dtype=torch.int64,
                    enable_num_token_non_padded=True,
                    attn_tp_sharded_fn=lambda n: True,
                    share_pool=False,
                )
                batch = Batch(
                    batch_size=1,
                    input_ids=torch.zeros(real, dtype=torch.int64),
                    positions=torch.zeros(real, dtype=torch.int64),
                    out_cache_loc=torch.zeros(real, dtype=torch.int64),
                    global_num_token_non_padded_cpu=real,
                )
                reg.fill_from(batch, raw_bs=1, padded_bs=1, raw_num_tokens=real, padded_num_tokens=padded)
                counts.append(int(reg.get_slot("num_token_non_padded").buffer))
        chunk = padded // tp
        assert sum(counts) == real and all(0 <= c <= chunk for c in counts), (
            f"tp {tp}, {real} real tokens in a {padded}-token bucket: ranks count {counts}"
        )
        assert counts == [min(max(real - r * chunk, 0), chunk) for r in range(tp)], (
            f"tp {tp}: rank counts {counts} do not follow each rank's slice of the bucket"
        )


def test_decode_registry_optional_slots_after_a_full_width_replay(srt):
    reg = srt.registry.build_decode_registry(
        device=torch.device("cpu"),
        max_bs=MAX_BS,
        max_num_token=MAX_BS,
        seq_len_fill_value=1,
        cache_loc_dtype=torch.int64,
        enable_mamba_track=True,
        is_encoder_decoder=True,
        encoder_len_fill_value=7,
        enable_num_token_non_padded=True,
        require_gathered_buffer=True,
        register_global_num_tokens=True,
        share_pool=False,
    )
    full = token_batch(torch.arange(1, MAX_BS + 1), MAX_BS)
    full.encoder_lens = torch.full((MAX_BS,), 30, dtype=torch.int32)
    full.num_token_non_padded = torch.tensor([MAX_BS], dtype=torch.int32)
    reg.fill_from(full, raw_bs=MAX_BS, padded_bs=MAX_BS, raw_num_tokens=MAX_BS, padded_num_tokens=MAX_BS)
    small = token_batch(torch.tensor([9]), 1)
    small.encoder_lens = torch.tensor([5], dtype=torch.int32)
    small.num_token_non_padded = torch.tensor([1], dtype=torch.int32)  # a draft's batch: no global count
    reg.fill_from(small, raw_bs=1, padded_bs=MAX_BS, raw_num_tokens=1, padded_num_tokens=MAX_BS)
    assert int(reg.get_slot("num_token_non_padded").buffer) == 1, "padded rows are counted as real tokens"
    assert reg.get_slot("global_num_tokens_gpu").buffer.tolist() == [MAX_BS], (
        "the gathered batch does not announce its padded token count"
    )
    tails_follow_their_policy(srt, reg, (1, 1), (MAX_BS, MAX_BS))
    enc = reg.get_slot("encoder_lens").buffer
    expect_structure(
        enc.tolist() == [5, 30, 30, 30], f"encoder_lens is copied head-only over its kept tail: {enc.tolist()}"
    )
    view = reg.extract_buffer(padded_bs=MAX_BS, padded_num_tokens=MAX_BS, forward_batch_template=small)
    assert view.seq_lens.tolist() == [9, 1, 1, 1] and view.out_cache_loc.tolist() == [9, 0, 0, 0], (
        f"the padded view reads seq_lens {view.seq_lens.tolist()}, writes at {view.out_cache_loc.tolist()}"
    )


def test_the_eager_registry_hands_a_batch_back_unchanged(srt):
    with srt.parallel(num_dp_ranks=1):
        reg = srt.registry.build_eager_registry(
            device=torch.device("cpu"),
            max_bs=MAX_BS,
            max_num_token=MAX_TOKENS,
            cache_loc_dtype=torch.int64,
            enable_mamba_track=True,
        )
    loc = torch.arange(5, 5 + 6)
    batch = token_batch(loc, 2)
    reg.fill_from(batch, raw_bs=2, padded_bs=2, raw_num_tokens=6, padded_num_tokens=6)
    view = reg.extract_buffer(padded_bs=2, padded_num_tokens=6, forward_batch_template=batch)
    for name in ("input_ids", "positions", "out_cache_loc", "req_pool_indices", "seq_lens", "mamba_track_indices"):
        assert torch.equal(getattr(view, name), getattr(batch, name)), f"{name} changed on its way through"
    slot = reg.get_slot("out_cache_loc")
    moved = torch.arange(40, 46)
    reg.copy_slots({"out_cache_loc": moved, "positions": reg.get_slot("positions").buffer[:6]})
    assert slot.buffer[:6].tolist() == moved.tolist(), "copy_slots did not copy a source into its slot"
    assert reg.get_slot("positions").buffer[:6].tolist() == batch.positions.tolist(), "a slot's own view was disturbed"
    assert srt.registry.same_tensor_view(slot.buffer[:6], slot.slice_for(2, 6)) and not srt.registry.same_tensor_view(
        slot.buffer[:6], moved
    )


def runner_buffers(max_bs: int, max_tokens: int, prefill: bool) -> types.SimpleNamespace:
    """A graph runner's own input buffers, which a registry adopts (``source=``) instead of allocating."""
    tokens, rows = (max_tokens,), (max_bs,)
    src = types.SimpleNamespace(
        input_ids=torch.zeros(tokens, dtype=torch.int64),
        positions=torch.zeros(tokens, dtype=torch.int64),
        out_cache_loc=torch.zeros(tokens, dtype=torch.int64),
        pp_proxy_tensors={"hidden_states": torch.zeros(max_tokens if prefill else max_bs, HIDDEN)},
    )
    if not prefill:
        src.req_pool_indices = torch.zeros(rows, dtype=torch.int64)
        src.seq_lens, src.seq_lens_cpu = torch.ones(rows, dtype=torch.int64), torch.ones(rows, dtype=torch.int64)
        src.mrope_positions = torch.zeros((3, max_tokens), dtype=torch.int64)
        src.ngram_embedding_info = types.SimpleNamespace(
            column_starts=torch.zeros(rows, dtype=torch.int64), req_lens=torch.zeros(rows, dtype=torch.int64)
        )
        src.rids_int = torch.zeros(rows, dtype=torch.int64)
    return src


@pytest.mark.parametrize("prefill", [False, True], ids=["decode", "prefill"])
def test_a_registry_over_a_runners_buffers_fills_those_very_buffers(srt, prefill):
    """Capture and replay must see one allocation: a registry built over the runner's buffers fills them in place,
    side inputs included (pipeline-parallel proxies from the replay's argument, n-gram and canary ids from the
    batch), and refuses a buffer of the wrong shape or dtype instead of copying into a stranger."""
    src = runner_buffers(MAX_BS, MAX_TOKENS, prefill)
    reg_kwargs = dict(
        device=torch.device("cpu"),
        max_bs=MAX_BS,
        max_num_token=MAX_TOKENS,
        cache_loc_dtype=torch.int64,
        share_pool=False,
        source=src,
    )
    build = srt.registry.build_prefill_registry if prefill else srt.registry.build_decode_registry
    if not prefill:
        reg_kwargs.update(seq_len_fill_value=1, register_global_num_tokens=False)
    reg = build(**reg_kwargs)
    for name in ("input_ids", "positions", "out_cache_loc"):
        assert reg.get_slot(name).buffer is getattr(src, name), f"{name}: the registry allocated its own buffer"
    assert reg.has_slot("pp_proxy_tensors.hidden_states") and not reg.has_slot("input_embeds")
    n = 6 if prefill else 3
    loc = torch.arange(11, 11 + n)
    batch = token_batch(loc, 1 if prefill else n)
    hidden = torch.full((n, HIDDEN), 3.0)
    if not prefill:
        batch.ngram_embedding_info = types.SimpleNamespace(
            column_starts=torch.tensor([4, 5, 6]), req_lens=torch.tensor([7, 8, 9])
        )
        batch.rids_int = torch.tensor([21, 22, 23])
    proxies = types.SimpleNamespace(tensors={"hidden_states": hidden})
    padded_bs, padded_tokens = (1, MAX_TOKENS) if prefill else (MAX_BS, MAX_BS)
    src.pp_proxy_tensors["hidden_states"].fill_(9.0)  # the previous replay's proxies
    reg.fill_from(
        batch,
        raw_bs=batch.batch_size,
        padded_bs=padded_bs,
        raw_num_tokens=n,
        padded_num_tokens=padded_tokens,
        pp_proxy_tensors=proxies,
    )
    assert src.out_cache_loc[:n].tolist() == loc.tolist() and src.input_ids[:n].tolist() == (loc + 1000).tolist()
    proxy = src.pp_proxy_tensors["hidden_states"]
    assert bool((proxy[:n] == 3.0).all()), "the replay's pipeline-parallel proxies did not reach the runner's buffer"
    if prefill:  # a prefill graph processes every padded token: their proxies must be benign
        assert bool((proxy[n:] == 0).all()), "padded tokens of a prefill graph keep the previous replay's proxies"
        assert bool((src.out_cache_loc[n:] == 0).all()), "padded tokens of a prefill graph keep write locations"
    else:
        assert src.ngram_embedding_info.column_starts.tolist()[:n] == [4, 5, 6] and src.rids_int[:n].tolist() == [
            21,
            22,
            23,
        ]
        assert src.seq_lens.tolist() == [9, 9, 9, 1], f"padded rows' seq_lens {src.seq_lens.tolist()}"
    wrong = runner_buffers(MAX_BS, MAX_TOKENS, prefill)
    wrong.out_cache_loc = torch.zeros(MAX_TOKENS + 1, dtype=torch.int64)
    with pytest.raises(ValueError, match="out_cache_loc"):
        build(**{**reg_kwargs, "source": wrong})
    wrong.out_cache_loc = torch.zeros(MAX_TOKENS, dtype=torch.int32)
    with pytest.raises(ValueError, match="dtype"):
        build(**{**reg_kwargs, "source": wrong})


def test_a_malformed_slot_fails_by_name_and_a_disabled_one_is_never_filled(srt):
    registry, Policy = srt.registry, srt.PaddingPolicy
    with pytest.raises(ValueError, match="axis must be one of"):
        registry.GraphSlot("seq_lens", lambda bs, mt: (bs,), torch.int64, axis="rows")
    reg = registry.CudaGraphBufferRegistry(
        device=torch.device("cpu"), max_bs=MAX_BS, max_num_tokens=MAX_TOKENS, share_pool=False
    )
    reg.register_slot(
        registry.GraphSlot(
            "seq_lens", lambda bs, mt: (bs,), torch.int64, axis="bs", padding_policy=Policy.FILL_SENTINEL
        )
    )  # a sentinel with no value
    reg.register_slot(registry.GraphSlot("positions", lambda bs, mt: (mt,), torch.int64, enabled=False))
    with pytest.raises(ValueError, match="already registered"):
        reg.register_slot(registry.GraphSlot("seq_lens", lambda bs, mt: (bs,), torch.int64, axis="bs"))
    assert reg.has_slot("seq_lens") and not reg.has_slot("positions") and reg.get_slot("positions").buffer is None
    with pytest.raises(RuntimeError, match="'positions': buffer not allocated"):
        reg.get_slot("positions").slice_for(1, 1)
    with pytest.raises(RuntimeError, match="FILL_SENTINEL requires pad_value"):
        reg.fill_from(
            Batch(batch_size=1, seq_lens=torch.tensor([3]), positions=torch.tensor([2])),
            raw_bs=1,
            padded_bs=2,
            raw_num_tokens=1,
            padded_num_tokens=2,
        )


@pytest.mark.parametrize("tp", [2, 4])
def test_a_decode_graphs_real_token_count_is_split_over_attention_ranks(srt, tp):
    """The decode registry's count of real tokens, from the batch's global count, per attention-TP rank."""
    padded, real = 8, 5
    counts = []
    for rank in range(tp):
        with srt.parallel(tp_size=tp, moe_tp_size=tp, attn_tp_size=tp, attn_tp_rank=rank):  # a consistent topology
            reg = srt.registry.build_decode_registry(
                device=torch.device("cpu"),
                max_bs=padded,
                max_num_token=padded,
                seq_len_fill_value=1,
                cache_loc_dtype=torch.int64,
                enable_num_token_non_padded=True,
                attn_tp_sharded_fn=lambda n: True,
                register_global_num_tokens=False,
                share_pool=False,
            )
            batch = token_batch(torch.arange(1, real + 1), real)
            batch.global_num_token_non_padded = torch.tensor([real], dtype=torch.int32)
            reg.fill_from(batch, raw_bs=real, padded_bs=padded, raw_num_tokens=real, padded_num_tokens=padded)
            counts.append(int(reg.get_slot("num_token_non_padded").buffer))
    assert sum(counts) == real and counts == [
        min(max(real - r * (padded // tp), 0), padded // tp) for r in range(tp)
    ], f"{real} real tokens of {padded} over {tp} ranks counted as {counts}"
