"""The radix cache's rules (``harness/mem/radix_cache.py`` docstring), one small scene each, with window 4 at
page size 1: tombstones, matches that back off, locks that pin only their window, revived tombstones, eviction
that prunes what can never be matched, and a flush refused while requests hold the tree."""

from __future__ import annotations

import pytest
import torch

from harness.mem import HybridPoolSpec, PoolError, build_hybrid_pool
from harness.mem.eviction import Evicted, evict_measured
from harness.mem.radix_cache import RadixCache, joined
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
    cache.slide_windows([req])
    if checkpoint:
        cache.cache_unfinished_req(req)
    else:
        cache.settle_locks()  # rule 11: the scenes read receipts (``req.prefix_lock``) straight after the slide


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


def _path(cache, node) -> list[tuple[int, int]]:
    spans = []
    while node is not cache.root:
        spans.append((node.start, node.end))
        node = node.parent
    return spans[::-1]


def test_a_floor_that_follows_its_window_leaves_no_chain_of_split_nodes_behind(scene):
    """Rule 3's floor splits off one page per decode step; each piece it leaves behind is merged back into its parent
    when nothing tells them apart (issue 58), so the published prompt's live window is one node again once the window
    has passed it (not one node per step), with the same counts, and a repeat still matches all of it."""
    memory, cache = scene
    first = admit(memory, cache, list(range(1, 17)))
    prefill(memory, cache, first, 16, checkpoint=False)
    finish(memory, cache, first)
    assert [(n.start, n.end, n.swa_tombstone) for n in cache._nodes()] == [(0, 12, True), (12, 16, False)]
    second = admit(memory, cache, list(range(1, 17)) + [50])
    assert second.prefix_lock.swa_floor == 13 and _path(cache, second.prefix_lock.node) == [(0, 12), (12, 13), (13, 16)]
    floors, paths = [], []
    for _ in range(3):  # decode: the floor moves 13 -> 14 -> 15, then the window leaves the prefix
        prefill(memory, cache, second, 1, checkpoint=False)
        floors.append(getattr(second.prefix_lock, "swa_floor", None))
        paths.append(_path(cache, second.prefix_lock.node))
        cache.sanity_check()
    assert floors == [14, 15, None]
    # 12..13 and the piece 13..14 merge (same state, no holder); the tombstone 0..12 above them stays apart
    assert paths == [[(0, 12), (12, 14), (14, 16)], [(0, 12), (12, 15), (15, 16)], [(0, 12), (12, 16)]], paths
    assert cache.swa_protected_size() == 0 and cache.protected_size() == 16 and cache.swa_evictable_size() == 4
    cache.release_req(second)
    memory.req_to_token_pool.free(second.req_pool_idx)
    third = admit(memory, cache, list(range(1, 17)) + [60])
    assert third.cache_protected_len == 16
    cache.sanity_check()


def test_a_tombstone_the_request_still_holds_live_is_revived_with_its_swa_slots(scene):
    memory, cache = scene
    a = admit(memory, cache, list(range(1, 11)))
    prefill(memory, cache, a, 10, checkpoint=False)
    a.output = [40, 41, 42, 43]
    grown = memory.allocator.alloc(4)
    memory.req_to_token_pool.write(a.req_pool_idx, 10, grown)
    a.kv_len = a.slots_len = 14
    cache.slide_windows([a])
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


def test_a_finished_insert_gives_back_every_duplicate_in_one_free(scene, monkeypatch):
    """Rule 10: two requests prefill the same prompt; the second to finish meets the first one's tombstone and its
    live leaf, and its slots for both go back in one ``free``: the same slots a free per node gave back."""
    memory, cache = scene
    prompt = list(range(1, 13))
    a, b = admit(memory, cache, prompt), admit(memory, cache, prompt)  # the tree is empty: neither matches
    prefill(memory, cache, a, 12, checkpoint=False)
    prefill(memory, cache, b, 12, checkpoint=False)
    finish(memory, cache, a)  # the tree: 0..7 a tombstone, 8..11 live (rule 6)
    assert [n.swa_tombstone for n in _nodes_on(cache, prompt)] == [True, False]
    b_slots = memory.req_to_token_pool.req_to_token[b.req_pool_idx, :12].clone()
    calls = []
    free = memory.allocator.free
    monkeypatch.setattr(memory.allocator, "free", lambda index: (calls.append(index.clone()), free(index))[1])
    finish(memory, cache, b)
    assert len(calls) == 1, f"{len(calls)} frees for one finished insert"
    assert sorted(calls[0].tolist()) == sorted(b_slots.tolist()), "b's duplicates of both nodes, each once"
    assert not memory.allocator.full_attn_allocator.is_allocated(b_slots).any()
    cache.sanity_check()


def _nodes_on(cache, key: list[int]) -> list:
    """The nodes on ``key``'s path, root excluded."""
    node, pos, out = cache.root, 0, []
    while pos < len(key) and (child := node.children.get((key[pos],))) is not None:
        out.append(child)
        node, pos = child, pos + len(child.key)
    return out


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


def test_the_slots_held_are_walked_again_after_a_change_and_a_kept_answer_that_went_stale_is_caught(scene):
    """Rule 9: ``tree_slots`` keeps its answer while the sets stand (a lock's floor moving splits and shifts nodes,
    which changes neither), walks again after an insert or an eviction, and ``sanity_check`` fails on a kept answer
    that no longer matches the tree (a mutation path that forgot to drop it)."""
    memory, cache = scene
    a = admit(memory, cache, list(range(1, 11)))
    prefill(memory, cache, a, 10, checkpoint=False)
    finish(memory, cache, a)
    held = cache.tree_slots()
    assert sorted(held.full.tolist()) == sorted(cache.match_prefix(list(range(1, 11))).indices.tolist())
    assert held.swa_live.numel() == 4  # 6..9 live, 0..5 tombstoned
    b = admit(memory, cache, list(range(1, 11)) + [50, 51, 52])
    prefill(memory, cache, b, 1, checkpoint=False)  # the floor moves up the prefix (7 -> 8): no slot comes or goes
    assert b.prefix_lock.swa_floor == 8 and cache.tree_slots() is held
    prefill(memory, cache, b, 2, checkpoint=False)  # the window passes the prefix: the SWA lock is released
    assert b.prefix_lock.swa_floor is None and cache.tree_slots() is held
    cache.sanity_check()
    cache.release_req(b)
    memory.req_to_token_pool.free(b.req_pool_idx)
    cache.evict(full_tokens=10)
    assert cache.tree_slots().full.numel() == 0 and cache.tree_slots().swa_live.numel() == 0
    c = admit(memory, cache, list(range(1, 9)))
    prefill(memory, cache, c, 8, checkpoint=False)
    finish(memory, cache, c)
    assert cache.tree_slots().full.numel() == 8
    cache._slots = held  # as if an insert had not dropped the kept answer
    with pytest.raises(PoolError, match="tree_slots kept an answer the tree no longer gives"):
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


# -- rule 8: a step's window slide in one call ------------------------------------------------------------------------


def _grow(memory, req: SimReq, n: int) -> None:
    """``n`` more tokens' slots for ``req``, with no slide (the scheduler allocates a step's tokens first)."""
    ps, rows = memory.allocator.page_size, memory.req_to_token_pool
    if ps == 1:
        slots = memory.allocator.alloc(n)
    else:
        last = rows.last_slots([req.req_pool_idx], [req.kv_len])
        slots = memory.allocator.alloc_extend([req.kv_len], [req.kv_len + n], last)
    rows.write(req.req_pool_idx, req.kv_len, slots)
    req.kv_len = req.slots_len = req.kv_len + n


def _step_scene(page_size: int) -> tuple:
    """Three requests right before a step's slide, each owing the pool SWA slots: one that continues a published
    prompt (its SWA lock on the prefix must follow its window), one that shares only part of it (rule 7's
    branching point holds part of its window back) and one with no prefix. Built the same way every call."""
    memory = build_hybrid_pool(
        HybridPoolSpec(size=256, size_swa=128, max_requests=4, max_context_len=64, page_size=page_size)
    )
    cache = RadixCache(memory.allocator, memory.req_to_token_pool, sliding_window_size=W)
    ps = page_size
    published = admit(memory, cache, list(range(1, 4 * ps + 9)))
    _grow(memory, published, len(published.prompt))
    cache.slide_windows([published])
    finish(memory, cache, published)
    reqs = [
        admit(memory, cache, published.prompt + [40, 41, 42]),
        admit(memory, cache, published.prompt[: 2 * ps + 4] + [60, 61, 62, 63]),
        admit(memory, cache, [90 + i for i in range(2 * ps + 5)]),
    ]
    assert reqs[0].prefix_lock.swa_floor is not None and reqs[1].swa_branch > 0, "the scene lost what it is about"
    for req in reqs:
        _grow(memory, req, len(req.prompt) - req.kv_len)
        req.output = [70, 71, 72, 73, 74]
        _grow(memory, req, len(req.output))  # decode tokens never slid: every request owes SWA slots
    return memory, cache, reqs


def _slide_state(memory, cache, reqs) -> dict:
    alloc = memory.allocator
    tree = cache.tree_slots()
    return {
        "mapping": alloc.full_to_swa_index_mapping.clone(),
        "free swa pages": sorted(alloc.swa_attn_allocator.free_pages.tolist()),
        "free full pages": alloc.full_attn_allocator.free_pages.tolist(),
        "requests": [
            (r.swa_evicted, r.cache_protected_len, r.prefix_lock.node.end, r.prefix_lock.swa_floor) for r in reqs
        ],
        "tree slots": (sorted(tree.full.tolist()), sorted(tree.swa_live.tolist())),
        "sizes": (
            cache.evictable_size(),
            cache.protected_size(),
            cache.swa_evictable_size(),
            cache.swa_protected_size(),
        ),
    }


@pytest.mark.parametrize("page_size", [1, 4])
def test_one_slide_for_the_step_frees_exactly_what_a_slide_per_request_freed(page_size):
    """Rule 8: the same scene slid request by request and in one batch: the same SWA slots go back (the mapping, the
    free SWA pages as a set, everything else exactly), the same locks follow, in one ``free_swa`` instead of one per
    request that owes slots. Only the order of the free list differs (one free sorts the whole step's pages)."""
    states, calls = [], []
    for batched in (False, True):
        memory, cache, reqs = _step_scene(page_size)
        frees, real = [], memory.allocator.free_swa
        memory.allocator.free_swa = lambda index, _real=real, _frees=frees: (_frees.append(index.clone()), _real(index))
        if batched:
            cache.slide_windows(reqs)
        else:
            for req in reqs:
                cache.slide_windows([req])
        cache.sanity_check()
        states.append(_slide_state(memory, cache, reqs))
        calls.append(frees)
    per_request, batch = calls
    assert len(per_request) == 3 and len(batch) == 1, f"free_swa calls: {len(per_request)} and {len(batch)}"
    assert batch[0].tolist() == torch.cat(per_request).tolist(), "the batch freed other full slots"
    mappings = [state.pop("mapping") for state in states]
    assert torch.equal(*mappings), "full slots map to other SWA slots after the batched slide"
    assert states[0] == states[1]
    before = _slide_state(*_step_scene(page_size))
    assert states[1]["requests"] != before["requests"] and states[1]["sizes"] != before["sizes"], "nothing slid"
    freed_pages = len(states[1]["free swa pages"]) - len(before["free swa pages"])
    assert freed_pages * page_size == batch[0].numel() > 0, "the free SWA pages grew by other than what was freed"


@pytest.mark.parametrize("n", [None, 0, 1, 3])
def test_joined_values_read_as_torch_cat_and_halves_of_one_split_join_without_a_copy(n):
    """The floor's shift and a merge join two node values (issue 58). Two halves of one split join as a wider view of
    the first, sharing its storage; values from two storages, or not adjacent in one, are copied by ``torch.cat``; the
    values read the same either way."""
    whole = torch.arange(10, 20, dtype=torch.int32)
    upper, lower = whole[:4], whole[4:]
    expected = torch.cat((upper, lower if n is None else lower[:n]))
    view = joined(upper, lower, n)
    assert torch.equal(view, expected)
    assert view.untyped_storage().data_ptr() == whole.untyped_storage().data_ptr()
    apart = [(upper, lower.clone()), (whole[:3], whole[4:]), (whole[4:], whole[:4])]  # two storages; a gap; reversed
    for a, b in apart:
        out = joined(a, b, n)
        assert torch.equal(out, torch.cat((a, b if n is None else b[:n])))
        assert out.untyped_storage().data_ptr() not in {a.untyped_storage().data_ptr(), b.untyped_storage().data_ptr()}


# -- rule 11: floors settle when read ---------------------------------------------------------------------------------


def _floor_scene():
    """A request whose SWA lock crosses a node boundary as its window moves: the tree holds 0..11 tombstoned, 12..15
    and 16..17 live (two published prompts); the request continues the longer one (lock on 16..18, floor 15, so
    12..16 is split at 15). Each decode step moves its floor one token: 16 (the node 15..16 left behind), 17 (inside
    16..18), then the window passes the prefix and the SWA lock ends."""
    memory = build_hybrid_pool(HybridPoolSpec(size=64, size_swa=32, max_requests=4, max_context_len=64))
    cache = RadixCache(memory.allocator, memory.req_to_token_pool, sliding_window_size=W)
    first = admit(memory, cache, list(range(1, 17)))
    prefill(memory, cache, first, 16, checkpoint=False)
    finish(memory, cache, first)
    longer = admit(memory, cache, list(range(1, 17)) + [50, 51])
    prefill(memory, cache, longer, 2, checkpoint=False)
    finish(memory, cache, longer)
    req = admit(memory, cache, list(range(1, 17)) + [50, 51, 60])
    assert req.prefix_lock.swa_floor == 15 and _path(cache, req.prefix_lock.node) == [
        (0, 12),
        (12, 15),
        (15, 16),
        (16, 18),
    ]
    return memory, cache, req


def _floor_state(cache, req) -> tuple:
    nodes = sorted(
        (n.start, n.end, n.swa_tombstone, n.full_lock_ref, sorted((+n.swa_locks).items())) for n in cache._nodes()
    )
    sizes = (cache.evictable_size(), cache.protected_size(), cache.swa_evictable_size(), cache.swa_protected_size())
    return req.prefix_lock.swa_floor, _path(cache, req.prefix_lock.node), nodes, sizes


def test_a_slide_moves_no_lock_and_the_next_read_moves_it_once_to_the_tree_a_move_per_step_gives():
    """Rule 11 (issue 58): a decode step's slide only notes that the lock owes its window a step; the next call that
    reads the tree's locks (here an SWA size) moves it once, however many steps it owes, and the tree, the receipt and
    the counts are then what a floor moved at every step gives, across the node boundary the floor passed (the merge
    goes on up: rule 3) and after the window has passed the prefix."""
    eager, lazy = [], []
    for settle_each_step in (True, False):
        memory, cache, req = _floor_scene()
        moves, real = [], cache._follow_window
        cache._follow_window = lambda r, _real=real, _moves=moves: (_moves.append(r.kv_len), _real(r))
        states = eager if settle_each_step else lazy
        for steps in (2, 1):
            floor = req.prefix_lock.swa_floor
            for _ in range(steps):
                _grow(memory, req, 1)
                cache.slide_windows([req])
                if settle_each_step:
                    cache.settle_locks()
            if not settle_each_step:
                assert moves == [] and req.prefix_lock.swa_floor == floor, "a slide moved the lock"
            protected = cache.swa_protected_size()  # the read
            if not settle_each_step:
                assert len(moves) == 1, f"the read moved the lock {len(moves)} times"
                moves.clear()
            states.append((protected, *_floor_state(cache, req)))
        cache.sanity_check()
    assert lazy == eager
    assert [s[:3] for s in lazy] == [(1, 17, [(0, 12), (12, 17), (17, 18)]), (0, None, [(0, 12), (12, 18)])], lazy
