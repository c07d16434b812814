"""The radix cache's rules (``harness/mem/radix_cache.py`` docstring), one small scene each, with window 4 at
page size 1: tombstones, matches that back off, locks that pin only their window, revived tombstones, eviction
that prunes what can never be matched, and a flush refused while requests hold the tree."""

from __future__ import annotations

import pytest
import torch

from harness.mem import HybridPoolSpec, PoolError, build_hybrid_pool
from harness.mem.eviction import Evicted, evict_measured
from harness.mem.radix_cache import RadixCache
from suites.prefix.machines import SimReq

W = 4


@pytest.fixture
def scene():
    memory = build_hybrid_pool(HybridPoolSpec(size=64, size_swa=32, max_requests=4, max_context_len=64))
    return memory, RadixCache(memory.allocator, memory.req_to_token_pool, sliding_window_size=W)


def admit(memory, cache, prompt: list[int]) -> SimReq:
    req = SimReq(prompt)
    req.req_pool_idx = memory.req_to_token_pool.alloc(1)[0]
    cache.admit(req, prompt)
    return req


def prefill(memory, cache, req: SimReq, n: int, *, checkpoint: bool = True) -> None:
    slots = memory.allocator.alloc(n)
    memory.req_to_token_pool.write(req.req_pool_idx, req.kv_len, slots)
    req.kv_len = req.slots_len = req.kv_len + n
    cache.slide_window(req)
    if checkpoint:
        cache.cache_unfinished_req(req)


def finish(memory, cache, req: SimReq) -> None:
    cache.cache_finished_req(req)
    memory.req_to_token_pool.free(req.req_pool_idx)


def live(memory, slots: torch.Tensor) -> list[bool]:
    return (memory.allocator.full_to_swa_index_mapping[slots.long()] != 0).tolist()


def test_a_chunk_checkpoint_tombstones_what_left_the_window_and_a_match_backs_off_to_a_live_window(scene):
    memory, cache = scene
    prompt = list(range(1, 21))
    req = admit(memory, cache, prompt)
    prefill(memory, cache, req, 12)  # a chunk: tokens 0..7 left the window, 8..11 are live (W below the boundary)
    assert req.cache_protected_len == 12
    assert live(memory, cache.match_prefix(prompt[:12]).indices) == [False] * 8 + [True] * 4
    assert cache.match_prefix(prompt[:12]).length == 12  # 9..11 are the last W - 1 tokens: live
    assert cache.match_prefix(prompt[:11]).length == 11  # and 8..10: a repeat's match stops one token short
    assert cache.match_prefix(prompt[:10] + [99, 98]).length == 0  # would end in the tombstone: backs off
    cache.sanity_check()


def test_the_first_prompt_sharing_part_of_a_published_one_repairs_the_window_where_it_branches(scene):
    """Rule 7: the tree has the full KV of 12 shared tokens but not their window; the first sharer prefills them
    and its checkpoint revives the window at the branching point, so the next sharer hits (as SGLang)."""
    memory, cache = scene
    shared = list(range(1, 13))
    first = admit(memory, cache, shared + list(range(40, 48)))
    prefill(memory, cache, first, 20)  # published: 0..15 tombstoned, 16..19 live
    finish(memory, cache, first)
    sharer = admit(memory, cache, shared + [60, 61, 62])
    assert sharer.cache_protected_len == 0 and sharer.swa_branch == 12  # full KV there, its window tombstoned
    prefill(memory, cache, sharer, 15)
    assert sharer.swa_evicted == 9  # the slide kept the W - 1 tokens below the branching point for the checkpoint
    finish(memory, cache, sharer)
    later = admit(memory, cache, shared + [70, 71])
    assert later.cache_protected_len == 12 and later.swa_branch == 0
    assert live(memory, cache.match_prefix(shared).indices) == [False] * 9 + [True] * 3
    cache.sanity_check()


def test_a_lock_pins_only_its_window_and_swa_eviction_tombstones_the_rest(scene):
    memory, cache = scene
    first = admit(memory, cache, list(range(1, 31)))
    prefill(memory, cache, first, 8, checkpoint=False)
    prefill(memory, cache, first, 8, checkpoint=False)
    finish(memory, cache, first)  # 16 tokens: 0..12 tombstoned by the slide, 13..15 live
    second = admit(memory, cache, list(range(1, 17)) + [50, 51])
    assert second.cache_protected_len == 16 and second.prefix_lock.swa_floor == 13
    assert cache.swa_protected_size() == 3 and cache.protected_size() == 16
    cache.evict(swa_tokens=10)  # nothing the lock pins may go
    assert live(memory, memory.req_to_token_pool.req_to_token[second.req_pool_idx, 13:16]) == [True] * 3
    prefill(memory, cache, second, 2, checkpoint=False)  # the window slides: the SWA lock follows it
    assert second.prefix_lock.swa_floor == 15 and cache.swa_protected_size() == 1
    cache.sanity_check()


def test_a_tombstone_the_request_still_holds_live_is_revived_with_its_swa_slots(scene):
    memory, cache = scene
    a = admit(memory, cache, list(range(1, 11)))
    prefill(memory, cache, a, 10, checkpoint=False)
    a.output = [40, 41, 42, 43]
    grown = memory.allocator.alloc(4)
    memory.req_to_token_pool.write(a.req_pool_idx, 10, grown)
    a.kv_len = a.slots_len = 14
    cache.slide_window(a)
    finish(memory, cache, a)  # 0..10 tombstoned, 11..13 live
    b = admit(memory, cache, list(range(1, 8)) + [70])  # branches at 7: nothing live to end a match in
    assert b.cache_protected_len == 0
    prefill(memory, cache, b, 8, checkpoint=False)  # b holds 5..7 live (its window)
    finish(memory, cache, b)
    node = cache.match_prefix(list(range(1, 8)) + [70])
    assert node.length == 8 and all(live(memory, node.indices[5:8])), "b's live window revived the shared tombstone"
    cache.sanity_check()
    got = memory.allocator.swa_available_size() + cache.swa_evictable_size() + cache.swa_protected_size()
    assert got == memory.allocator.size_swa, "revived SWA slots are counted once"


def test_full_eviction_takes_leaves_and_the_tombstones_they_leave_behind(scene):
    memory, cache = scene
    req = admit(memory, cache, list(range(1, 13)))
    prefill(memory, cache, req, 12, checkpoint=False)
    finish(memory, cache, req)
    assert cache.evictable_size() == 12
    cache.evict(full_tokens=1)  # the live leaf goes, and its tombstone parent cannot end a match: it goes too
    assert cache.evictable_size() == 0 and memory.allocator.full_available_size() == memory.allocator.size
    cache.sanity_check()


def test_what_an_eviction_took_is_measured_on_the_tree_full_swa_and_tombstoned_apart(scene):
    """``evict_measured`` (the engine's eviction ledger, which the servers' /metrics count): an SWA eviction of a
    node a running request holds by its full KV tombstones it (SWA gone, full kept); a full eviction deletes the
    path (full and live SWA gone, nothing tombstoned); an eviction that finds nothing unlocked takes nothing."""
    memory, cache = scene
    a = admit(memory, cache, list(range(1, 11)))
    prefill(memory, cache, a, 10, checkpoint=False)
    finish(memory, cache, a)  # 0..5 tombstoned, 6..9 live
    b = admit(memory, cache, list(range(1, 11)) + [50, 51, 52])
    assert b.cache_protected_len == 10 and b.prefix_lock.swa_floor == 7  # 7..9 pinned, 6 is not
    assert evict_measured(cache, full_tokens=0, swa_tokens=1) == Evicted(full=0, swa=1, tombstoned=1)
    assert evict_measured(cache, full_tokens=5, swa_tokens=5) == Evicted()  # the rest is locked
    cache.release_req(b)
    memory.req_to_token_pool.free(b.req_pool_idx)
    assert evict_measured(cache, full_tokens=10, swa_tokens=0) == Evicted(full=10, swa=3, tombstoned=0)
    assert Evicted(1, 2, 3) + Evicted(1, 1, 1) == Evicted(2, 3, 4) and not Evicted(1, 1, 0).all_moved
    cache.sanity_check()


def test_a_flush_while_a_request_holds_the_tree_is_refused_by_name(scene):
    memory, cache = scene
    req = admit(memory, cache, list(range(1, 9)))
    prefill(memory, cache, req, 6)
    with pytest.raises(PoolError, match="still locked by running requests"):
        cache.reset()
    cache.release_req(req)
    cache.reset()
    alloc = memory.allocator
    assert (alloc.full_available_size(), alloc.swa_available_size()) == (alloc.size, alloc.size_swa)
    assert cache.match_prefix(list(range(1, 9))).length == 0
