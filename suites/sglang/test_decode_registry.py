"""Padding through SGLang's own decode buffer registry and KV-loc plan, over SGLang's pool.

A full-width replay leaves live values in every buffer; then a smaller batch is placed into its
bucket with ``fill_from``, and its SWA write ids come from SGLang's ``KVIndexTranslator``: the
batch's plan (``own_plan`` + ``bind``) asked for the padded batch's ids, which it pads with the sink.
Checked, behaviour first: writing the padded batch through SGLang's ``set_kv_buffer`` changes no
slot the batch does not own and leaves every live row's own K/V intact, and padded rows attend over
at least one key; then structure: each tail follows the registry's declared policy, seq_lens the
backend's fill value, padded SWA ids the sink.
"""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import given, settings

from fixtures.scenarios.padding import PaddingCase, bucket_boundary_cases, padding_cases
from harness.graph.runner import DEFAULT_CAPTURE_BS
from harness.targets.target import PoolSpec
from harness.targets.sglang.capabilities import NotOnThisSGLang, module
from suites.checks import expect_structure

MAX_BS = 16
BUCKETS = [b for b in DEFAULT_CAPTURE_BS if b <= MAX_BS]
SEQ_LEN_FILL = 1  # the triton / flashinfer backends' fill value
SWA_LAYER, FULL_LAYER = 0, 1


@pytest.fixture(scope="module")
def sglang(target):
    if target.name != "sglang":
        pytest.skip("drives SGLang's own decode buffer registry: run with --target sglang (nox -s sglang)")
    registry = module("sglang.srt.model_executor.cuda_graph_buffer_registry")
    try:  # 0.5.22 on: the batch's KV-loc plan computes the SWA write ids; before, the attention backend translates
        translator = module("sglang.srt.mem_cache.kv_index_translator").KVIndexTranslator
        sliding = module("sglang.srt.mem_cache.kv_loc_plan").IdSpaceKind.SLIDING_WINDOW
    except NotOnThisSGLang:
        translator = sliding = None
    return types.SimpleNamespace(
        KVIndexTranslator=translator,
        SLIDING_WINDOW=sliding,
        PaddingPolicy=registry.PaddingPolicy,
        build_decode_registry=registry.build_decode_registry,
    )


def swa_write_ids(sglang, handle, batch: types.SimpleNamespace, padded: types.SimpleNamespace) -> torch.Tensor:
    """The padded batch's SWA write ids as the installed release computes them: its KV-loc plan (0.5.22 on), else
    the attention backend's one translation per forward of the padded write loc (0.5.13-0.5.21)."""
    pool, allocator = handle.pool, handle.allocator
    if sglang.KVIndexTranslator is None:
        return pool.sglang.translate_loc_from_full_to_swa(padded.out_cache_loc)
    translator = sglang.KVIndexTranslator(
        req_to_token=handle.req_to_token_pool.req_to_token,
        token_to_kv_pool_allocator=allocator.sglang,
        token_to_kv_pool=pool.sglang,
        page_size=1,
        device="cpu",
    )
    translator.own_plan(batch).bind(batch, translator)  # this iteration's plan: each id space computed once
    bound = types.SimpleNamespace(
        **{**vars(batch), "out_cache_loc": padded.out_cache_loc, "batch_size": padded.batch_size}
    )  # the padded batch carries the plan too
    return translator.write_ids(bound, sglang.SLIDING_WINDOW)


def _batch(loc: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor) -> types.SimpleNamespace:
    """The ForwardBatch attributes the decode registry and the KV-loc plan read, for one decode step."""
    return types.SimpleNamespace(
        input_ids=loc + 1000,
        positions=seq_lens - 1,
        out_cache_loc=loc,
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.cpu(),
        mrope_positions=None,
        forward_mode=None,
        spec_info=None,
        batch_size=loc.numel(),
        encoder_lens=None,
    )


def check_padding(target, sglang, case: PaddingCase) -> None:
    handle = target.build_pool(PoolSpec(size=64, size_swa=48, max_requests=MAX_BS))
    pool, allocator = handle.pool, handle.allocator
    registry = sglang.build_decode_registry(
        device=torch.device("cpu"),
        max_bs=MAX_BS,
        max_num_token=MAX_BS,
        seq_len_fill_value=SEQ_LEN_FILL,
        cache_loc_dtype=torch.int64,
        register_global_num_tokens=False,
        share_pool=False,
    )
    # A full-width replay: every buffer's prefix holds live values of `previous_bs` requests.
    prev = allocator.alloc(case.previous_bs).long()
    ids = torch.arange(1, case.previous_bs + 1, dtype=torch.int64)
    registry.fill_from(
        _batch(prev, ids, ids + 7),
        raw_bs=case.previous_bs,
        padded_bs=case.previous_bs,
        raw_num_tokens=case.previous_bs,
        padded_num_tokens=case.previous_bs,
    )
    # The live requests' K/V before the smaller batch.
    for layer in (SWA_LAYER, FULL_LAYER):
        pool.set_kv_buffer(layer, prev, torch.ones(case.previous_bs, 2, 8), torch.ones(case.previous_bs, 2, 8))
    live_full, live_swa = prev, pool.translate_loc_from_full_to_swa(prev).long()
    before = {layer: pool.get_key_buffer(layer).clone() for layer in (SWA_LAYER, FULL_LAYER)}

    raw, bs = case.raw_bs, case.bucket
    loc = allocator.alloc(raw).long()
    rows = torch.arange(1, raw + 1, dtype=torch.int64)
    batch = _batch(loc, rows, rows + 3)
    registry.fill_from(batch, raw_bs=raw, padded_bs=bs, raw_num_tokens=raw, padded_num_tokens=bs)
    padded = types.SimpleNamespace(
        **{**vars(batch), "out_cache_loc": registry.get_slot("out_cache_loc").buffer[:bs], "batch_size": bs}
    )

    # Behaviour first. The padded batch writes through SGLang's pool: full layers at the registry's
    # out_cache_loc, sliding layers at this batch's SWA write ids padded with the sink.
    out_cache_loc = padded.out_cache_loc
    swa_ids = swa_write_ids(sglang, handle, batch, padded)
    new = (
        (torch.arange(bs, dtype=torch.float32) + 2.0)[:, None, None].expand(bs, 2, 8).contiguous()
    )  # row i holds i + 2
    pool.set_kv_buffer(FULL_LAYER, out_cache_loc, new, new)
    pool.set_kv_buffer(SWA_LAYER, out_cache_loc, new, new, swa_loc=swa_ids)
    for layer, live in ((FULL_LAYER, live_full), (SWA_LAYER, live_swa)):
        own = pool.translate_loc_from_full_to_swa(loc).long() if layer == SWA_LAYER else loc
        keys = pool.get_key_buffer(layer)
        changed = (keys != before[layer]).flatten(1).any(1).nonzero().flatten().tolist()
        stray = sorted(set(changed) - set(own.tolist()) - {0})
        assert not stray, (
            f"layer {layer}: padded rows wrote slots {stray} they do not own (live: {sorted(live.tolist())})"
        )
        clobbered = [i for i in range(raw) if not torch.equal(keys[own[i]], new[i])]
        assert not clobbered, f"layer {layer}: the K/V of live rows {clobbered} was overwritten by padded rows"
    # Padded rows attend over the keys their seq_lens admit: at least the padding slot, or softmax is empty.
    seq_lens = registry.get_slot("seq_lens").buffer[:bs]
    visible = torch.arange(8)[None, :] < seq_lens[:, None]
    probs = torch.randn(bs, 8).masked_fill(~visible, float("-inf")).softmax(-1)
    assert bool(torch.isfinite(probs).all()), (
        f"rows {(~torch.isfinite(probs).all(1)).nonzero().flatten().tolist()} "
        f"attend over no key (seq_lens {seq_lens.tolist()})"
    )

    # Then structure: each tail follows the policy the registry declares, seq_lens the backend's fill
    # value, and padded SWA write ids are the sink.
    for name in registry.slot_names():
        slot = registry.get_slot(name)
        if slot.buffer is None or slot.buffer.dim() != 1:
            continue
        tail = slot.buffer[raw:bs]
        if slot.padding_policy is sglang.PaddingPolicy.ZERO:
            expect_structure(bool((tail == 0).all()), f"{name}: policy ZERO but the padded tail is {tail.tolist()}")
        elif slot.padding_policy is sglang.PaddingPolicy.FILL_SENTINEL:
            expect_structure(
                bool((tail == SEQ_LEN_FILL).all()),
                f"{name}: padded tail {tail.tolist()}, the backend's fill value is {SEQ_LEN_FILL}",
            )
    expect_structure(bool((swa_ids[raw:] == 0).all()), f"SWA write ids of padded rows: {swa_ids[raw:].tolist()}")


@pytest.mark.parametrize("case", bucket_boundary_cases(BUCKETS, MAX_BS), ids=lambda c: c.name)
def test_bucket_boundaries_after_a_full_width_replay(target, sglang, case):
    check_padding(target, sglang, case)


@settings(max_examples=25, deadline=None)
@given(case=padding_cases(BUCKETS, MAX_BS))
def test_generated_padding_cases(target, sglang, case):
    check_padding(target, sglang, case)
