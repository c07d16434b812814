"""Speculative write windows through SGLang's KV-loc plan, its translator and its decode buffer registry,
over SGLang's pool.

A speculative iteration allocates a ``[batch, width]`` window (width 2-8: the draft token count) and
builds one plan for it; each of its forwards writes part of the window, named by ``cols``:

* a draft step writes one column of every row, or the columns so far (a ``slice``);
* a ragged verify writes each row's first ``k`` tokens, packed, then sink lanes (-1) up to the graph's
  width (a flat index tensor);
* a two-batch-overlap half writes a run of the window's flat tokens (``cols_slice``: a ``TokenSpan``,
  or a flat index where the columns are spread over rows).

The reference is which lane may write where: lane ``i`` writes the window token its column names, in
both id spaces (a sliding layer's id is the mapping of the full id), and a sink lane, or a lane past
the forward's own in a captured graph's buffer, writes slot 0 only. Checked, behaviour first: K/V
written through SGLang's ``set_kv_buffer`` at the ids the plan and the registry give land exactly
there, every lane's own row holds its own value, and no other request's K/V changes; then structure:
the ids equal the reference's, the registry pads the tokens axis of a width-``w`` batch with zeros.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.graph.runner import DEFAULT_CAPTURE_BS
from harness.targets.target import PoolSpec
from suites.checks import expect_structure

MAX_BS, MAX_WIDTH = 6, 8
BUCKETS = [b for b in DEFAULT_CAPTURE_BS if b <= MAX_BS] + [MAX_BS]
SWA_LAYER, FULL_LAYER = 0, 1
SINK = -1


@pytest.fixture(scope="module")
def sglang(target):
    if target.name != "sglang":
        pytest.skip("drives SGLang's own KV-loc plan and decode registry: run with --target sglang (nox -s sglang)")
    from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
    from sglang.srt.mem_cache.kv_loc_plan import IdSpaceKind, TokenSpan
    from sglang.srt.model_executor.cuda_graph_buffer_registry import build_decode_registry
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return types.SimpleNamespace(
        KVIndexTranslator=KVIndexTranslator,
        IdSpaceKind=IdSpaceKind,
        TokenSpan=TokenSpan,
        build_decode_registry=build_decode_registry,
        ForwardMode=ForwardMode,
    )


@dataclass(frozen=True)
class Window:
    bs: int
    width: int
    padded_bs: int  # the captured graph's batch: its buffers hold padded_bs * width tokens
    accepted: tuple[int, ...]  # tokens each row of a ragged verify writes
    step: int  # the draft column of this iteration
    split: int  # where a two-batch-overlap split cuts the forward's tokens


@st.composite
def windows(draw) -> Window:
    bs = draw(st.integers(1, MAX_BS))
    width = draw(st.integers(2, MAX_WIDTH))
    return Window(
        bs=bs,
        width=width,
        padded_bs=min(b for b in BUCKETS if b >= bs),
        accepted=tuple(draw(st.lists(st.integers(1, width), min_size=bs, max_size=bs))),
        step=draw(st.integers(0, width - 1)),
        split=draw(st.integers(0, bs * width)),
    )


def forwards(sglang, w: Window, plan) -> list[tuple[str, object, list[int]]]:
    """(name, cols, the reference's lanes: the flat window position each lane writes, SINK for none)."""
    n = w.bs * w.width
    column = [b * w.width + w.step for b in range(w.bs)]
    so_far = [b * w.width + c for b in range(w.bs) for c in range(w.step + 1)]
    packed = [b * w.width + c for b in range(w.bs) for c in range(w.accepted[b])]
    packed += [SINK] * (n - len(packed))
    out = [
        ("draft step", slice(w.step, w.step + 1), column),
        ("draft steps so far", slice(0, w.step + 1), so_far),
        ("ragged verify", torch.tensor(packed, dtype=torch.int64), packed),
        ("whole window", None, list(range(n))),
    ]
    for half, tokens in (("first", slice(0, w.split)), ("second", slice(w.split, None))):
        out.append((f"{half} half of the window", plan.cols_slice(None, tokens), list(range(n))[tokens]))
        out.append((f"{half} half of the draft steps", plan.cols_slice(slice(0, w.step + 1), tokens), so_far[tokens]))
        out.append((f"{half} half of the ragged verify", plan.cols_slice(torch.tensor(packed), tokens), packed[tokens]))
    return out


def scrambled_pool(target):
    """A pool where a token's full and SWA ids differ but both stay in either pool's range. Fresh, both pools
    hand out 1, 2, 3, ... in step and every id equals its translation, which hides a full id used as an SWA
    id. Here request A's oldest tokens left the window (their SWA slots are free again, their full slots are
    not) and request B, which took the rest, finished: new tokens get full ids from 31 and SWA ids from 1."""
    handle = target.build_pool(PoolSpec(size=96, size_swa=96, max_requests=MAX_BS + 2, max_context_len=64))
    a = handle.allocator.alloc(30)
    handle.allocator.free_swa(a[:29])
    handle.allocator.free(handle.allocator.alloc(66))
    return handle


def translator_of(sglang, handle):
    """SGLang's KV index translator over a built pool, as its model runner builds one on CPU (page size 1)."""
    return sglang.KVIndexTranslator(
        req_to_token=handle.req_to_token_pool.req_to_token,
        token_to_kv_pool_allocator=handle.allocator.sglang,
        token_to_kv_pool=handle.pool.sglang,
        page_size=1,
        device="cpu",
    )


def _batch(**fields) -> types.SimpleNamespace:
    """The ForwardBatch attributes the plan, the translator and the decode registry read."""
    base = dict(mrope_positions=None, forward_mode=None, spec_info=None, encoder_lens=None)
    return types.SimpleNamespace(**{**base, **fields})


def check_window(target, sglang, w: Window) -> None:
    handle = scrambled_pool(target)
    pool, allocator, rows = handle.pool, handle.allocator, handle.req_to_token_pool
    # Another request's tokens, live in both pools: no forward of this iteration may touch them.
    other = allocator.alloc(5).long()
    for layer in (SWA_LAYER, FULL_LAYER):
        pool.set_kv_buffer(layer, other, torch.full((5, 2, 8), -1.0), torch.full((5, 2, 8), -1.0))
    window = allocator.alloc(w.bs * w.width).long()  # row-major [bs, width], as the scheduler assigns it
    req_pool_indices = torch.tensor(rows.alloc(w.bs), dtype=torch.int64)
    seq_lens = torch.full((w.bs,), 9, dtype=torch.int64)
    translator = translator_of(sglang, handle)
    plan = translator.plan(
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens,
        write_virtual=window,
        read_extent=w.width,
    )
    registry = sglang.build_decode_registry(
        device=torch.device("cpu"),
        max_bs=MAX_BS,
        max_num_token=MAX_BS * MAX_WIDTH,
        seq_len_fill_value=1,
        cache_loc_dtype=torch.int64,
        register_global_num_tokens=False,
        share_pool=False,
    )
    # A full-width replay first: every buffer holds live ids of the widest batch.
    stale = torch.arange(1, MAX_BS * MAX_WIDTH + 1, dtype=torch.int64)
    registry.fill_from(
        _batch(
            input_ids=stale,
            positions=stale,
            out_cache_loc=stale,
            req_pool_indices=stale[:MAX_BS],
            seq_lens=stale[:MAX_BS],
            seq_lens_cpu=stale[:MAX_BS],
        ),
        raw_bs=MAX_BS,
        padded_bs=MAX_BS,
        raw_num_tokens=stale.numel(),
        padded_num_tokens=stale.numel(),
    )
    mapping = allocator.full_to_swa_index_mapping
    for name, cols, lanes in forwards(sglang, w, plan):
        batch = _batch(batch_size=w.bs, req_pool_indices=req_pool_indices, seq_lens=seq_lens, seq_lens_cpu=seq_lens)
        plan.bind(batch, translator, cols=cols)
        raw = len(lanes)
        batch.input_ids = batch.positions = torch.zeros(raw, dtype=torch.int64)
        padded_n = w.padded_bs * w.width
        registry.fill_from(batch, raw_bs=w.bs, padded_bs=w.padded_bs, raw_num_tokens=raw, padded_num_tokens=padded_n)
        replay = _batch(
            kv_loc_plan=plan,
            kv_loc_cols=cols,
            batch_size=w.padded_bs,
            out_cache_loc=registry.get_slot("out_cache_loc").buffer[:padded_n],
        )
        full_ids = replay.out_cache_loc
        swa_ids = translator.write_ids(replay, sglang.IdSpaceKind.SLIDING_WINDOW)
        check_writes(pool, name, w, lanes, full_ids, swa_ids, window, mapping, other)
        want_full = [int(window[i]) if i != SINK else 0 for i in lanes] + [0] * (padded_n - raw)
        expect_structure(full_ids.tolist() == want_full, f"{name}: full write ids {full_ids.tolist()} != {want_full}")
        expect_structure(
            swa_ids.tolist() == mapping[torch.tensor(want_full)].tolist(),
            f"{name}: SWA write ids {swa_ids.tolist()} are not the mapping of the full ones",
        )


def check_writes(pool, name, w, lanes, full_ids, swa_ids, window, mapping, other) -> None:
    """Write lane i's value i + 2 through SGLang's pool at the forward's ids, in both kinds of layer."""
    n = full_ids.numel()
    assert swa_ids is not None and swa_ids.numel() == n, f"{name}: {n} full write ids but SWA ids {swa_ids}"
    value = (torch.arange(n, dtype=torch.float32) + 2.0)[:, None, None].expand(n, 2, 8).contiguous()
    for layer, ids, space in ((FULL_LAYER, full_ids, None), (SWA_LAYER, full_ids, swa_ids)):
        before = pool.get_key_buffer(layer).clone()
        if space is None:
            pool.set_kv_buffer(layer, ids, value, value)
        else:
            pool.set_kv_buffer(layer, ids, value, value, swa_loc=space)
        keys = pool.get_key_buffer(layer)
        to_pool = (lambda full: mapping[full]) if layer == SWA_LAYER else (lambda full: full)
        own = {int(to_pool(window[i])): lane for lane, i in enumerate(lanes) if i != SINK}
        changed = set((keys != before).flatten(1).any(1).nonzero().flatten().tolist())
        stray = sorted(changed - set(own) - {0})
        assert not stray, f"{name}, layer {layer}: lanes wrote slots {stray} their window does not give them"
        wrong = [lane for slot, lane in own.items() if not torch.equal(keys[slot], value[lane])]
        assert not wrong, (
            f"{name}, layer {layer}: lanes {wrong} do not hold their own K/V (a sink or padded lane wrote over them)"
        )
        others = to_pool(other)
        assert bool((keys[others] == -1.0).all()), f"{name}, layer {layer}: another request's K/V changed"


@settings(max_examples=40, deadline=None)
@given(w=windows())
def test_speculative_windows_write_only_their_lanes(target, sglang, w):
    check_window(target, sglang, w)


@pytest.mark.parametrize("width", [2, 4, 8])
def test_every_row_ragged_down_to_one_token(target, sglang, width):
    """The raggedest verify: every row writes one token, all other lanes are sinks."""
    check_window(
        target,
        sglang,
        Window(
            bs=MAX_BS, width=width, padded_bs=MAX_BS, accepted=(1,) * MAX_BS, step=width - 1, split=MAX_BS * width // 2
        ),
    )


def test_reads_reach_past_seq_lens_by_the_window_each_forward_writes(target, sglang):
    """A read table covers ``[0, seq_lens + read_extent)``: a verify reads ``width`` tokens past its lengths,
    a draft decode the steps it wrote; a plain decode or extend nothing past them."""
    handle = target.build_pool(PoolSpec(size=64, size_swa=48, max_requests=4, max_context_len=64))
    translator = translator_of(sglang, handle)
    mode, bs, width = sglang.ForwardMode, 3, 5
    ids = torch.arange(1, bs * width + 1, dtype=torch.int64)
    spec = types.SimpleNamespace(draft_token_num=width)
    cases = [
        (mode.TARGET_VERIFY, spec, ids, width),
        (mode.DECODE, spec, ids, width),
        (mode.DRAFT_EXTEND_V2, spec, ids, width),
        (mode.DECODE, None, ids[:bs], 0),
        (mode.EXTEND, spec, ids, 0),
    ]
    for forward_mode, spec_info, write, want in cases:
        batch = _batch(
            out_cache_loc=write,
            req_pool_indices=torch.arange(1, bs + 1),
            seq_lens=torch.full((bs,), 7),
            seq_lens_cpu=torch.full((bs,), 7),
            forward_mode=forward_mode,
            spec_info=spec_info,
            batch_size=bs,
        )
        plan = translator.own_plan(batch)
        assert plan.read_extent == want, (
            f"{forward_mode.name} (spec {spec_info is not None}): reads reach "
            f"{plan.read_extent} past seq_lens, the window it writes is {want}"
        )


def test_a_draft_reading_its_own_table_shares_the_iterations_write_ids(target, sglang):
    """``reads_from``: a draft with a compact table of its own plans its reads there, and writes the very ids
    of the iteration's plan (translated once); reads on this pool stay in each reader's own rows; a replay
    binds the runner's buffer and keeps no virtual mirror."""
    handle = target.build_pool(PoolSpec(size=64, size_swa=48, max_requests=4, max_context_len=64))
    kwargs = dict(
        token_to_kv_pool_allocator=handle.allocator.sglang,
        token_to_kv_pool=handle.pool.sglang,
        page_size=1,
        device="cpu",
    )
    target_rows = handle.req_to_token_pool.req_to_token
    draft_rows = torch.zeros_like(target_rows)
    main = sglang.KVIndexTranslator(req_to_token=target_rows, **kwargs)
    draft = sglang.KVIndexTranslator(req_to_token=draft_rows, **kwargs)
    window = handle.allocator.alloc(6).long()
    lens = torch.full((2,), 4, dtype=torch.int64)
    plan = main.plan(
        req_pool_indices=torch.tensor([1, 2]), seq_lens=lens, seq_lens_cpu=lens, write_virtual=window, read_extent=3
    )
    swa = plan.write_ids(main, kind=sglang.IdSpaceKind.SLIDING_WINDOW)
    assert torch.equal(swa, handle.allocator.full_to_swa_index_mapping[window]), (
        "the plan's SWA ids are not the mapping"
    )
    drafted = plan.reads_from(draft, seq_lens=lens + 1, seq_lens_cpu=lens + 1, read_extent=1)
    again = drafted.write_ids(draft, kind=sglang.IdSpaceKind.SLIDING_WINDOW)
    assert again is swa, "the draft's plan translated the iteration's window again instead of sharing it"
    assert drafted.read_table(reader=draft).ids is draft_rows, "the draft does not read its own table"
    # SWAKVPool is not a unified pool: its full ids are what its kernels index, so reads stay in each
    # reader's own req_to_token rows and no reader is "translated for".
    table = plan.read_table(reader=main)
    assert table.ids is target_rows and torch.equal(table.row_ids, plan.req_pool_indices) and not table.is_translated
    assert not plan.is_translated_for(main) and not plan.is_read_by(draft)
    slots = torch.arange(20, 26, dtype=torch.int64)
    replay = _batch()
    plan.bind_replay(replay, main, slots=slots)
    assert replay.out_cache_loc is slots and replay.out_cache_loc_virtual is None and replay.kv_loc_plan is plan


@settings(max_examples=40, deadline=None)
@given(bs=st.integers(1, MAX_BS), width=st.integers(2, MAX_WIDTH), data=st.data())
def test_accepted_drafts_move_to_the_front_of_their_window(target, sglang, bs, width, data):
    """After a verify, each row keeps the lanes it accepted (a path through its draft, lane 0 first) and
    ``move_kv_cache`` moves their K/V to the front of the row's window, in both sub-pools. Every front slot
    then holds its accepted lane's K/V; no slot outside the fronts changed."""
    handle = scrambled_pool(target)
    pool, allocator = handle.pool, handle.allocator
    for sub in (pool.sglang.full_kv_pool, pool.sglang.swa_kv_pool):
        sub.use_native_move_kv_cache = True  # SGLANG_NATIVE_MOVE_KV_CACHE=1: the Triton copy kernel is GPU-only
    other = allocator.alloc(5).long()
    window = allocator.alloc(bs * width).long()
    mapping = allocator.full_to_swa_index_mapping
    value = (torch.arange(bs * width, dtype=torch.float32) + 2.0)[:, None, None].expand(-1, 2, 8).contiguous()
    for layer in (SWA_LAYER, FULL_LAYER):
        pool.set_kv_buffer(layer, other, torch.full((5, 2, 8), -1.0), torch.full((5, 2, 8), -1.0))
        pool.set_kv_buffer(layer, window, value, value)  # the verify wrote every lane
    tgt, src = [], []
    for b in range(bs):
        path = [0] + sorted(data.draw(st.sets(st.integers(1, width - 1), max_size=width - 1)))
        tgt += [b * width + k for k in range(len(path))]
        src += [b * width + lane for lane in path]
    before = {layer: pool.get_key_buffer(layer).clone() for layer in (SWA_LAYER, FULL_LAYER)}
    pool.sglang.move_kv_cache(window[tgt], window[src])
    for layer, to_pool in ((FULL_LAYER, lambda ids: ids), (SWA_LAYER, lambda ids: mapping[ids])):
        keys = pool.get_key_buffer(layer)
        wrong = [(t, s) for t, s in zip(tgt, src) if not torch.equal(keys[to_pool(window[t])], value[s])]
        assert not wrong, (
            f"layer {layer}: front slots (window position, accepted lane) {wrong} do not hold the accepted lane's K/V"
        )
        changed = set((keys != before[layer]).flatten(1).any(1).nonzero().flatten().tolist())
        stray = sorted(changed - set(to_pool(window[tgt]).tolist()))
        assert not stray, f"layer {layer}: moving accepted drafts wrote slots {stray} outside the fronts"
        assert bool((keys[to_pool(other)] == -1.0).all()), f"layer {layer}: another request's K/V changed"


def test_a_static_hybrid_pools_translator_reads_virtual_and_writes_through_the_mapping(target, sglang):
    """SWAKVPool is not a unified pool: reads stay in ``req_to_token`` (each reader gathers its own rows), the
    window's layers are the sliding sub-pool's, and a batch over a graph runner's own buffer writes its
    sliding layers at the mapping of that buffer's slots (the sink while it holds zeros, at capture)."""
    from sglang.srt.runtime_context import get_parallel

    handle = scrambled_pool(target)
    rows, allocator = handle.req_to_token_pool, handle.allocator
    translator = translator_of(sglang, handle)
    assert not translator.reads_are_translated and translator.full_v2p_table is None
    assert translator.window_kv_kind is sglang.IdSpaceKind.SLIDING_WINDOW
    assert translator.capture_token_capacity(96) == 97, "graph capture rows must cover every slot and the sink"
    with get_parallel().override(attn_dcp_size=1):
        assert not translator.needs_read_translate
        ids = torch.tensor([3, 8, 40])
        assert torch.equal(translator.translate_dcp_read_ids(ids), ids)
    with get_parallel().override(attn_dcp_size=2):
        assert translator.translate_dcp_read_ids(torch.tensor([6, 9])).tolist() == [3, 4], (
            "decode context parallelism widens read ids by its size"
        )

    loc = allocator.alloc(4).long()
    idx = torch.tensor(rows.alloc(2), dtype=torch.int64)
    batch = _batch(
        out_cache_loc=loc,
        req_pool_indices=idx,
        seq_lens=torch.tensor([3, 5]),
        seq_lens_cpu=torch.tensor([3, 5]),
        batch_size=2,
    )
    translator.bind_own_plan(batch)
    plan = batch.kv_loc_plan
    assert batch.out_cache_loc is loc and plan.virtual_write_ids() is loc and not plan.has_read_table()
    for table in (translator.read_table(plan), translator.read_source(plan, req_pool_indices=idx, bs=2)):
        assert table.ids is rows.req_to_token and table.row_ids is idx and not table.is_translated and table.v2p is None
    mapping = allocator.full_to_swa_index_mapping
    swa = translator.write_ids(batch, sglang.IdSpaceKind.SLIDING_WINDOW)
    assert torch.equal(swa, mapping[loc]) and not torch.equal(swa, loc), "sliding writes skip the mapping"

    for held in (torch.zeros(6, dtype=torch.int64), torch.cat([loc, torch.zeros(2, dtype=torch.int64)])):
        warmup = _batch(
            out_cache_loc=held,
            req_pool_indices=torch.zeros(3, dtype=torch.int64),
            seq_lens=torch.ones(3, dtype=torch.int64),
            seq_lens_cpu=torch.ones(3, dtype=torch.int64),
            batch_size=3,
        )
        translator.bind_runner_slots(warmup)
        assert warmup.out_cache_loc is held
        got = translator.write_ids(warmup, sglang.IdSpaceKind.SLIDING_WINDOW)
        assert torch.equal(got, mapping[held]), (
            f"a runner batch over {held.tolist()} writes its window at {got.tolist()}"
        )

    backends = [
        types.SimpleNamespace(kv_index_translator=None),
        None,
        types.SimpleNamespace(kv_index_translator=translator),
    ]
    translator.bind_and_verify_backends(backends)
    assert backends[0].kv_index_translator is translator
    with pytest.raises(AssertionError, match="not this runner's"):
        translator.bind_and_verify_backends([types.SimpleNamespace(kv_index_translator=object())])


@pytest.mark.parametrize("bs,width", [(1, 5), (3, 4)])
def test_a_two_batch_overlap_half_split_again_writes_only_its_own_tokens(target, sglang, bs, width):
    """A two-batch-overlap half is a run of the window's flat tokens; split again (a half of a half, as the
    overlap backend's children cut theirs), each part writes exactly the tokens of the half it names: the
    reference is the window's flat list sliced twice, in both id spaces, never a token past the half's end."""
    handle = scrambled_pool(target)
    rows, allocator = handle.req_to_token_pool, handle.allocator
    translator = translator_of(sglang, handle)
    n = bs * width
    window = allocator.alloc(n).long()
    lens = torch.full((bs,), 5, dtype=torch.int64)
    plan = translator.plan(
        req_pool_indices=torch.tensor(rows.alloc(bs), dtype=torch.int64),
        seq_lens=lens,
        seq_lens_cpu=lens,
        write_virtual=window,
        read_extent=width,
    )
    flat, mapping = window.tolist(), allocator.full_to_swa_index_mapping
    for a in range(n + 1):
        for b in range(a, n + 1):
            half = plan.cols_slice(None, slice(a, b))
            for c in range(b - a + 1):
                for tokens in (slice(c, None), slice(0, c), slice(c, c + 1)):
                    part = plan.cols_slice(half, tokens)
                    want = flat[a:b][tokens]
                    got = plan.virtual_write_ids(cols=part).tolist()
                    assert got == want, (
                        f"tokens {tokens} of the half [{a}, {b}) of a {bs}x{width} window write {got}, not {want}"
                    )
                    swa = plan.write_ids(translator, kind=sglang.IdSpaceKind.SLIDING_WINDOW, cols=part)
                    assert swa.tolist() == mapping[torch.tensor(want, dtype=torch.int64)].tolist(), (
                        f"tokens {tokens} of the half [{a}, {b}): SWA write ids {swa.tolist()} are not the mapping"
                    )
