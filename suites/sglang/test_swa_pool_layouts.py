"""SGLang's hybrid SWA pool in the layouts and roles the engine suites never build it in.

* PD transfer: what a prefill server registers for KV transfer covers each sub-pool's K and V buffers
  exactly once (full attention as the KV buffers, the window as the state buffers), with their sizes.
* Layer-wise loading: a read of layer ``L`` waits for ``L``'s transfer, once, at the hybrid pool.
* MLA sub-pools (DeepSeek-style latent KV in both halves): a sliding layer's latent rows land at the
  SWA id of the token, a full layer's at its full id, and nothing else changes.
* All-sliding models (``PureSWATokenToKVPoolAllocator``): one pool, ids that translate to themselves;
  alloc / free / free_swa / free_full / groups against a model of ownership.
* Admission: the queries a scheduler asks before it admits or preallocates (what is available in each
  pool, what the radix cache must evict for it), against counts the test holds, and a resize to the
  sizes fixed after graph capture.
"""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from harness.targets.target import PoolSpec

SWA_LAYERS, FULL_LAYERS = [0, 2], [1, 3]


@pytest.fixture(scope="module")
def srt(target):
    if target.name != "sglang":
        pytest.skip("builds SGLang's SWAKVPool in other layouts: run with --target sglang (nox -s sglang)")
    from sglang.srt.mem_cache.allocator.swa import PureSWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc, MLATokenToKVPool
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.runtime_context import get_parallel

    return types.SimpleNamespace(
        SWAKVPool=SWAKVPool,
        MLATokenToKVPool=MLATokenToKVPool,
        KVWriteLoc=KVWriteLoc,
        PureSWATokenToKVPoolAllocator=PureSWATokenToKVPoolAllocator,
        get_parallel=get_parallel,
    )


def mha_pool(srt, **kw):
    shape = dict(size=16, size_swa=8, head_num=2, head_dim=8, dtype=torch.float32)
    return srt.SWAKVPool(
        page_size=1,
        swa_attention_layer_ids=SWA_LAYERS,
        full_attention_layer_ids=FULL_LAYERS,
        device="cpu",
        **{**shape, **kw},
    )


def test_pd_transfer_registers_every_kv_buffer_of_both_sub_pools_once(srt):
    pool = mha_pool(srt)
    kv_ptrs, kv_lens, kv_items = pool.get_contiguous_buf_infos()
    state_ptrs, state_lens, state_items = pool.get_state_buf_infos()
    for name, sub, ptrs, lens, items in (
        ("full", pool.full_kv_pool, kv_ptrs, kv_lens, kv_items),
        ("SWA", pool.swa_kv_pool, state_ptrs, state_lens, state_items),
    ):
        buffers = [*sub.k_buffer, *sub.v_buffer]
        assert sorted(ptrs) == sorted(b.data_ptr() for b in buffers), f"{name}: registered buffers differ from its K/V"
        assert lens == [b.nbytes for b in buffers] and items == [b[0].nbytes for b in buffers], (
            f"{name}: registered sizes {lens} / per slot {items} are not its buffers'"
        )
    assert not set(kv_ptrs) & set(state_ptrs), "a buffer is registered as both KV and state"
    k_bytes, v_bytes = pool.get_kv_size_bytes()
    everything = [*pool.full_kv_pool.k_buffer, *pool.swa_kv_pool.k_buffer]
    assert k_bytes == sum(b.nbytes for b in everything) == v_bytes, "the pool's size is not its sub-pools' K/V bytes"


def test_the_reported_kv_size_is_every_k_and_v_buffers_bytes(srt):
    """``mem_usage``, the KV cache size a server reports (``kv_cache_memory_usage_gb``), in GiB: every K and V
    buffer of both sub-pools, counted from the tensors themselves."""
    for kw in ({}, {"size": 40, "size_swa": 24, "head_dim": 4, "dtype": torch.bfloat16}):
        pool = mha_pool(srt, **kw)
        buffers = [
            *pool.full_kv_pool.k_buffer,
            *pool.full_kv_pool.v_buffer,
            *pool.swa_kv_pool.k_buffer,
            *pool.swa_kv_pool.v_buffer,
        ]
        want = sum(b.numel() * b.element_size() for b in buffers) / 2**30
        assert want > 0 and pool.mem_usage == pytest.approx(want, rel=1e-12), (
            f"{kw or 'default sizes'}: the pool reports {pool.mem_usage!r} GiB, its K/V buffers hold {want!r} GiB"
        )


def test_only_a_per_request_ring_allocator_says_it_is_one(target, srt):
    """``is_swa_req_ring``, what SGLang's leak check and pool stats ask before counting SWA tokens: a paged
    hybrid allocator (no ring), an all-sliding one and a plain one are none."""
    from sglang.srt.mem_cache.allocator.swa import is_swa_req_ring

    handle = target.build_pool(PoolSpec(size=32, size_swa=16, max_requests=2, max_context_len=16))
    assert handle.pool.sglang.swa_req_ring_size is None, "the suites' pool has no per-request ring"
    assert is_swa_req_ring(handle.allocator.sglang) is False, "a paged hybrid allocator called a per-request ring"
    pool = mha_pool(srt)
    pure = srt.PureSWATokenToKVPoolAllocator(8, 1, torch.float32, "cpu", pool, need_sort=False)
    assert is_swa_req_ring(pure) is False and is_swa_req_ring(pure.swa_attn_allocator) is False


def test_a_read_waits_for_its_layers_transfer_at_the_hybrid_pool_only(srt):
    pool = mha_pool(srt)
    waits: list[int] = []
    pool.register_layer_transfer_counter(types.SimpleNamespace(wait_until=waits.append))
    assert pool.full_kv_pool.layer_transfer_counter is None and pool.swa_kv_pool.layer_transfer_counter is None, (
        "a sub-pool would wait again"
    )
    for layer in (2, 1, 3, 0):
        k, v = pool.get_kv_buffer(layer)
        assert k is pool.get_key_buffer(layer) and v is pool.get_value_buffer(layer)
        sub = pool.swa_kv_pool if layer in SWA_LAYERS else pool.full_kv_pool
        assert any(k is b for b in sub.k_buffer), f"layer {layer} is served by the wrong sub-pool"
    assert waits == [2, 2, 2, 1, 1, 1, 3, 3, 3, 0, 0, 0], f"reads waited for layers {waits}"
    assert pool.get_v_head_dim() == 8


@pytest.mark.parametrize("write", ["latent halves", "combined rows"])
def test_mla_sub_pools_route_latent_rows_by_layer(srt, write):
    """MLA models write a token's latent as two halves (``set_mla_kv_buffer``) or as one combined row
    (``set_kv_buffer``); either way a sliding layer's row lands at the token's SWA id, a full layer's at its
    full id. An MHA pool refuses the latent write by name."""
    kw = dict(page_size=1, enable_memory_saver=False, device="cpu", kv_lora_rank=8, qk_rope_head_dim=4)
    no_parallel_runtime = dict(attn_dcp_size=1, attn_dcp_rank=0, dcp_enabled=False)  # not published on this machine
    with srt.get_parallel().override(**no_parallel_runtime):
        pool = srt.SWAKVPool(
            size=16,
            size_swa=8,
            page_size=1,
            dtype=torch.float32,
            head_num=1,
            head_dim=12,
            swa_attention_layer_ids=[0],
            full_attention_layer_ids=[1],
            device="cpu",
            full_kv_pool_class=srt.MLATokenToKVPool,
            swa_kv_pool_class=srt.MLATokenToKVPool,
            full_kv_pool_kwargs=kw,
            swa_kv_pool_kwargs=kw,
        )
        assert pool.is_mla() and pool.kv_cache_dim == 12
        mapping = torch.cat([torch.zeros(17, dtype=torch.int64), torch.tensor([-1])])
        full = torch.tensor([5, 6, 2])  # inside both pools: a full id used as an SWA id writes, not crashes
        mapping[full] = torch.tensor([3, 7, 1])  # a token's SWA id differs from its full id
        pool.register_mapping(mapping)
        before = {layer: pool.get_key_buffer(layer).clone() for layer in (0, 1)}
        nope = torch.arange(3, dtype=torch.float32)[:, None, None].expand(3, 1, 8) + 1.0
        rope = -nope[:, :, :4]
        row = torch.cat([nope, rope], -1)
        for layer in (0, 1):
            loc = srt.KVWriteLoc(loc=full, swa_loc=pool.translate_loc_from_full_to_swa(full) if layer == 0 else None)
            owner = types.SimpleNamespace(layer_id=layer)
            if write == "latent halves":
                pool.set_mla_kv_buffer(owner, loc, nope, rope)
            else:
                pool.set_kv_buffer(owner, loc, row, None)
        for layer, at in ((0, mapping[full]), (1, full)):
            rows = pool.get_key_buffer(layer)
            assert torch.equal(rows[at], row), f"layer {layer}: latent rows are not at {at.tolist()}"
            changed = set((rows != before[layer]).flatten(1).any(1).nonzero().flatten().tolist())
            assert changed == set(at.tolist()), f"layer {layer}: rows {sorted(changed)} changed, {at.tolist()} written"
    with pytest.raises(TypeError, match="Layer 1 is not backed by an MLA KV pool"):
        mha_pool(srt).set_mla_kv_buffer(types.SimpleNamespace(layer_id=1), srt.KVWriteLoc(loc=full), nope, rope)


SIZE = 12


class PureSWAMachine(RuleBasedStateMachine):
    """All layers slide: one pool, no mapping to keep, free_swa is a free and free_full frees nothing."""

    srt = None

    @initialize()
    def setup(self):
        srt = type(self).srt
        self.pool = srt.SWAKVPool(
            size=SIZE,
            size_swa=SIZE,
            page_size=1,
            dtype=torch.float32,
            head_num=1,
            head_dim=4,
            swa_attention_layer_ids=[0, 1],
            full_attention_layer_ids=[],
            device="cpu",
        )
        self.alloc = srt.PureSWATokenToKVPoolAllocator(SIZE, 1, torch.float32, "cpu", self.pool, need_sort=False)
        self.owned: set[int] = set()

    @rule(n=st.integers(1, 5))
    def alloc_tokens(self, n):
        out = self.alloc.alloc(n)
        if n > SIZE - len(self.owned):
            assert out is None, f"alloc({n}) succeeded with {SIZE - len(self.owned)} slots free"
            return
        got = out.tolist()
        assert 0 not in got and not set(got) & self.owned and len(set(got)) == n, f"alloc({n}) handed out {got}"
        self.owned |= set(got)

    @precondition(lambda self: self.owned)
    @rule(data=st.data(), how=st.sampled_from(["free", "free_swa", "segment", "group"]))
    def release(self, data, how):
        slots = data.draw(st.lists(st.sampled_from(sorted(self.owned)), min_size=1, unique=True))
        index = torch.tensor(slots)
        if how == "free":
            self.alloc.free(index)
        elif how == "free_swa":
            self.alloc.free_swa(index)
        elif how == "segment":
            self.alloc.free_full_segment(index, start_pos=0)  # nothing to release: there is no full pool
            self.alloc.free_full(index)
            self.alloc.free_segment(index, start_pos=0)
        else:
            self.alloc.free_group_begin()
            self.alloc.free_swa_segment(index, start_pos=0)
            assert self.alloc.available_size() == SIZE - len(self.owned), "a grouped free took effect early"
            self.alloc.free_group_end()
        self.owned -= set(slots)

    @rule()
    def clear(self):
        self.alloc.clear()
        self.owned.clear()

    @invariant()
    def accounting_and_translation(self):
        free = SIZE - len(self.owned)
        got = (self.alloc.available_size(), self.alloc.full_available_size(), self.alloc.swa_available_size())
        assert got == (free, free, free), f"available (any, full, SWA) {got}, the model's {free}"
        assert self.alloc.new_pages_available(free, free) and not self.alloc.new_pages_available(free + 1, 0)
        probe = torch.tensor(sorted(self.owned) + [-1])
        assert torch.equal(self.alloc.translate_loc_from_full_to_swa(probe), probe), (
            "an all-SWA id must translate to itself"
        )
        # The pool translates a sliding layer's writes through the mapping the allocator registered with it:
        # every id, the -1 a ragged write names the sink with included, is its own SWA id there too.
        assert torch.equal(self.pool.translate_loc_from_full_to_swa(probe), probe), (
            f"the pool translates {probe.tolist()} to {self.pool.translate_loc_from_full_to_swa(probe).tolist()}"
        )


def test_all_sliding_allocator_state_machine(srt):
    PureSWAMachine.srt = srt
    run_state_machine_as_test(PureSWAMachine, settings=settings(max_examples=40, stateful_step_count=30, deadline=None))


def test_all_sliding_allocator_refuses_what_it_cannot_do(srt):
    """One pool and no mapping: paged allocation and mapping edits fail by name, not by a wrong slot."""
    pool = srt.SWAKVPool(
        size=SIZE,
        size_swa=SIZE,
        page_size=1,
        dtype=torch.float32,
        head_num=1,
        head_dim=4,
        swa_attention_layer_ids=[0, 1],
        full_attention_layer_ids=[],
        device="cpu",
    )
    alloc = srt.PureSWATokenToKVPoolAllocator(SIZE, 1, torch.float32, "cpu", pool, need_sort=False)
    ids = torch.tensor([1, 2])
    for call, match in (
        (lambda: alloc.alloc_extend(), "page_size > 1"),
        (lambda: alloc.alloc_decode(), "page_size > 1"),
        (lambda: alloc.alloc_extend_swa_tail(), "page_size > 1"),
        (lambda: alloc.set_full_to_swa_mapping(ids, ids), "no full->SWA mapping"),
        (lambda: alloc.clear_full_to_swa_mapping(ids), "no full->SWA mapping"),
    ):
        with pytest.raises(NotImplementedError, match=match):
            call()
    assert alloc.available_size() == SIZE, "a refused call changed the pool"
    held = alloc.alloc(3)
    alloc.free_group_begin()
    alloc.free(torch.zeros(0, dtype=torch.int64))
    alloc.free_swa(torch.zeros(0, dtype=torch.int64))
    alloc.free(held)
    assert alloc.available_size() == SIZE - 3, "a grouped free took effect before the group ended"
    alloc.free_group_end()
    assert alloc.available_size() == SIZE, "the group's frees were lost"


class EvictionLog:
    """The radix cache a scheduler hands the allocator: records what it is asked to evict, evicts nothing."""

    def __init__(self, sharing: bool = True) -> None:
        self.asked: list[tuple[int, int]] = []
        self.sharing = sharing

    def supports_prefix_sharing(self) -> bool:
        return self.sharing

    def evict_for_alloc(self, params) -> None:
        self.asked.append((params.num_tokens, params.swa_num_tokens))


@settings(max_examples=30, deadline=None)
@given(page=st.sampled_from([1, 4]), used=st.integers(0, 10), evicted=st.integers(0, 10), ask=st.integers(0, 80))
def test_admission_queries_match_what_the_pools_hold(target, srt, page, used, evicted, ask):
    size, size_swa = 64, 32
    handle = target.build_pool(PoolSpec(size=size, size_swa=size_swa, page_size=page))
    allocator = handle.allocator.sglang
    used = min(used, size_swa // page - 1)  # what both pools can hold: every page but the padding one
    tokens = used * page
    held = handle.allocator.alloc_extend([0], [tokens], [-1]) if tokens else torch.zeros(0, dtype=torch.int32)
    assert held is not None, f"{tokens} tokens in whole pages of {page} did not fit pools of {size}/{size_swa}"
    left = min(evicted, max(used - 1, 0)) * page  # whole pages, never the last one
    if left:
        handle.allocator.free_swa(held[:left])
    full_free, swa_free = size - tokens, size_swa - (tokens - left)
    assert (allocator.full_available_size(), allocator.swa_available_size(), allocator.available_size()) == (
        full_free,
        swa_free,
        min(full_free, swa_free),
    )
    assert allocator.swa_capacity_and_available(full_capacity=size, swa_capacity=size_swa) == (
        (size, full_free),
        (size_swa, swa_free),
    )
    assert allocator.size == min(size, size_swa) and allocator.size_full == size and allocator.size_swa == size_swa
    assert f"#swa-available-size: {swa_free}" in allocator.debug_print()
    assert (
        allocator.new_pages_available(full_free // page, swa_free // page)
        and not allocator.new_pages_available(full_free // page + 1, 0)
        and not allocator.new_pages_available(0, swa_free // page + 1)
    )

    cache = EvictionLog()
    allocator.evict_to_free_tokens(cache, ask)
    short = (max(0, ask - full_free), max(0, ask - swa_free))
    assert cache.asked == ([short] if any(short) else []), (
        f"asked to evict {cache.asked} for {ask} tokens, short {short}"
    )
    unshared = EvictionLog(sharing=False)
    allocator.evict_to_free_tokens(unshared, ask)
    assert unshared.asked == [], "a cache without prefix sharing has nothing to evict"

    cache = EvictionLog()
    shortfall = allocator.reclaim_for_prealloc(cache, 0, ask)
    if ask <= swa_free:
        assert shortfall is None and cache.asked == [], (
            f"{ask} SWA tokens fit in {swa_free} but reclaim asked {cache.asked}"
        )
    else:
        assert cache.asked == [(0, ask - swa_free)], (
            f"reclaim asked {cache.asked} for an SWA shortfall of {ask - swa_free}"
        )
        assert f"needed={ask}, available={swa_free}" in shortfall

    if tokens:
        probe = held.long()
        assert torch.equal(
            allocator.translate_swa_indices_for_transfer(probe), handle.allocator.full_to_swa_index_mapping[probe]
        )
    # After graph capture the pools are resized to their final sizes and start empty.
    allocator.resize(types.SimpleNamespace(full_max_total_num_tokens=48, swa_max_total_num_tokens=16))
    assert (allocator.full_available_size(), allocator.swa_available_size()) == (48, 16), "resize left slots behind"
    assert handle.allocator.alloc_extend([0], [17], [-1]) is None, (
        "a resized SWA pool handed out more than its 16 slots"
    )
    assert handle.allocator.alloc_extend([0], [16], [-1]) is not None, "a resized SWA pool refused its 16 slots"


@settings(max_examples=30, deadline=None)
@given(page=st.sampled_from([1, 2, 4]), tokens=st.integers(1, 20), data=st.data())
def test_a_set_shaped_swa_free_gives_back_whole_pages_and_all_their_mappings(target, srt, page, tokens, data):
    """``free_swa`` takes any set of slots (SGLang's set-shaped free: an allocation's rollback, part of a page). The
    paged SWA allocator gives back each touched page whole, so every full slot of such a page must stop mapping into
    it, not only the slots passed (#27779): afterwards the SWA pool's free slots plus the pages still mapped add up
    to its size (no full slot points into a free page), and freeing the rest of the request frees nothing twice."""
    size, size_swa = 64, 32
    handle = target.build_pool(PoolSpec(size=size, size_swa=size_swa, page_size=page))
    allocator, mapping = handle.allocator.sglang, handle.allocator.full_to_swa_index_mapping
    held = handle.allocator.alloc_extend([0], [tokens], [-1])
    assert held is not None, f"{tokens} tokens did not fit pools of {size}/{size_swa}"
    held = held.long()
    chosen = data.draw(st.lists(st.integers(0, tokens - 1), min_size=1, unique=True), label="freed positions")
    allocator.free_swa(held[chosen])

    touched = set((held[chosen] // page).tolist())
    pages_of = held // page
    still = [int(f) for f, p in zip(held, pages_of) if int(p) in touched and int(mapping[f]) != 0]
    assert not still, (
        f"free_swa of positions {sorted(chosen)} (page {page}) gave their full pages {sorted(touched)} back, yet "
        f"full slots {still} still map into them"
    )
    live = held[mapping[held] != 0]
    mapped_pages = set((mapping[live] // page).tolist())
    assert allocator.swa_available_size() + page * len(mapped_pages) == size_swa, (
        f"SWA pool: {allocator.swa_available_size()} free + {page * len(mapped_pages)} still mapped != {size_swa}"
    )
    handle.allocator.free(held.to(torch.int32))
    assert (allocator.full_available_size(), allocator.swa_available_size()) == (size, size_swa), (
        "after the request freed everything the pools are not whole again"
    )


@pytest.mark.parametrize(
    "ranges,dead_lo,cursor",
    [
        ([(4, 12)], 6, 12),  # the window slid to the range's end; a raised floor keeps [4, 6) in the window
        ([(4, 12), (13, 16)], 6, 12),  # a second range past the cursor
        ([(4, 16)], 6, 12),  # the cursor inside the range
        ([(4, 16)], 4, 12),  # no floor above the range's start
        ([(0, 6), (8, 16)], 3, 10),  # the dead span crosses the gap
        ([(4, 12)], 8, 8),  # a floor at the cursor: nothing dead
    ],
)
def test_a_rows_ranges_go_back_once_the_window_dead_span_full_side_only(target, srt, ranges, dead_lo, cursor):
    """``free_kv_row_segments``: a request's row ranges go back to both pools, except ``[dead_lo, cursor)``,
    whose SWA the window's slide already gave back, which goes back full-side only. A raised SWA floor
    (prefill-aware SWA: ``swa_dead_lo`` above the range's start) keeps the head of the range in the window.
    Reference: what the row holds, counted by hand; every slot comes back exactly once."""
    from sglang.srt.mem_cache.common import free_kv_row_segments

    n = 16
    handle = target.build_pool(PoolSpec(size=48, size_swa=48, max_requests=2, max_context_len=n))
    sg = handle.allocator.sglang
    full0, swa0 = sg.full_available_size(), sg.swa_available_size()
    row = sg.alloc(n).long()
    sg.free_swa(row[dead_lo:cursor])  # the slide: the dead span's SWA slots are free already
    freed = {p for start, end in ranges for p in range(start, end)}
    dead = set(range(dead_lo, cursor))
    free_kv_row_segments(
        sg,
        [(row[start:end], start) for start, end in ranges],
        swa_evicted_seqlen=cursor,
        swa_dead_lo=dead_lo,
    )
    kept_full = n - len(freed)
    kept_swa = len(set(range(n)) - freed - dead)
    got = (full0 - sg.full_available_size(), swa0 - sg.swa_available_size())
    assert got == (kept_full, kept_swa), (
        f"ranges {ranges}, SWA dead [{dead_lo}, {cursor}): the row still holds (full, SWA) {got} slots, "
        f"it kept {(kept_full, kept_swa)}"
    )
    mapping = sg.full_to_swa_index_mapping
    live = sorted(set(range(n)) - freed - dead)
    assert bool((mapping[row[live]] > 0).all()), "a kept position lost its SWA slot"
    back = [p for p in sorted(freed) if int(mapping[row[p]]) != 0]
    assert not back, f"freed positions {back} still map to an SWA slot"
    full_all = sg.alloc(sg.full_available_size())
    assert full_all is not None and len(set(full_all.tolist())) == full_all.numel() and 0 not in full_all.tolist(), (
        "the full pool hands a slot out twice: a freed slot went back more than once"
    )
    assert not set(full_all.tolist()) & set(row[sorted(set(range(n)) - freed)].tolist()), (
        "the full pool hands out a slot the row still holds"
    )
