"""Every transition a CPU server drives SGLang's ``UnifiedRadixCache`` through, as SGLang's own code enumerates them:
the cache actions of ``unified_cache/cache_action.py`` and the component hooks of ``TreeComponent``
(``unified_cache/components/base.py``), on both tree cores at page 1 and 16.

A scripted tour drives each transition through the harness's adapter (``harness/targets/sglang/prefix_cache.py``)
and holds SGLang's own state after every step: its ``sanity_check``, both pools page by page (free + the tree's +
each request's own = size, nothing held twice), the cache's sizes against its nodes, and what each step must have
done (what a match returns, what an insert freed or revived, what an eviction left). While it runs, every action
SGLang applies and every hook its tree calls is recorded; the census then says each one a server makes ran, none
a server without HiCache, sessions or PD never makes ran, and the tables below name every kind SGLang has, so a
kind a later release adds fails here until it is classed. (``suites/prefix`` drives the same cache at random;
this file names the transition that broke.) Skips where SGLang is not installed.
"""

from __future__ import annotations

import ast
import collections
import functools
import inspect
import random
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch

from harness.mem import HybridPoolSpec
from suites.prefix.machines import SimReq
from suites.sglang.test_prefix_cache_adapter import Driver


@dataclass(frozen=True)
class Runs:
    """A transition a CPU server makes; ``by`` is who calls it: the cache (both tree cores) or the Python tree core
    (the Rust core runs its own walk and calls no Python hook for it)."""

    by: str  # "cache" | "tree"


@dataclass(frozen=True)
class Never:
    """A transition a CPU server without HiCache, sessions or PD never makes: the mode it belongs to, and why."""

    mode: str  # "hicache" | "session" | "component" | "dead"
    why: str


CACHE, TREE = Runs("cache"), Runs("tree")
HOST = "hicache"

# cache_action.py: every action a tree core returns and the cache applies.
ACTIONS: dict[str, Runs | Never] = {
    "FreeDeviceKV": CACHE,  # an insert's duplicates whose SWA the request still holds
    "FreeDeviceKVFullOnly": CACHE,  # duplicates below the request's SWA frontier; a tombstone's replaced full
    "FreeComponentDeviceSlot": CACHE,  # what an eviction walk frees, per component
    "SWARebuild": CACHE,  # a new leaf's window published, a tombstone revived from an insert's fresh KV
    "RecoverSWAWithLockedFull": CACHE,  # a tombstone revived while a running request locks its full KV
    "UpdatePendingBackupOnNodeSplit": Never(
        HOST, "a split emits it only for a write-through-pending node or in buffer mode"
    ),
    "FreeComponentHostSlot": Never(HOST, "host pages"),
    "BackupKV": Never(HOST, "write-through and write-back backups"),
    "MambaEvictExcessPathStates": Never("component", "Mamba state"),
    "RebuildFullToSWAMapping": Never(HOST, "a load-back rebuilding the full-to-SWA mapping of loaded pages"),
    "RecoverEvictedSWA": Never("dead", "neither tree core emits it in 0.5.23 (grep: no constructor call)"),
}

_SESSION = "--enable-session-radix-cache: session refs, the session LRU partition and its leaves"
# TreeComponent's methods (base.py), and SWAComponent's own early release of its window lock.
HOOKS: dict[str, Runs | Never] = {
    "reset_session_state": CACHE,  # every reset clears it (a no-op without sessions)
    "session_ref": Never("session", _SESSION),
    "_can_evict_leaf_atomically": Never("session", _SESSION),
    "_refresh_session_partition": Never("session", _SESSION),
    "_find_reusable_session_leaf": Never("session", _SESSION),
    "resolve_session_leaf": Never("session", _SESSION),
    "_mark_session_leaf": Never("session", _SESSION),
    "_unmark_session_leaf": Never("session", _SESSION),
    "_nearest_session_ancestor": Never("session", _SESSION),
    "_dec_session_coverage": Never("session", _SESSION),
    "_advance_session_coverage": Never("session", _SESSION),
    "_recede_session_coverage": Never("session", _SESSION),
    "register_session_leaf": Never("session", _SESSION),
    "release_session": Never("session", _SESSION),
    "discard_deleted_session_leaf": TREE,  # every leaf removal asks (nothing to discard without sessions)
    "validate_session_state": Never("session", _SESSION),
    "node_has_component_data": TREE,
    "value_len": TREE,
    "reclaimable_value_len": TREE,
    "has_host_value_only": Never(HOST, "host values"),
    "needs_incremental_backup": Never(HOST, "an SWA window backed up to host after its full KV"),
    "refresh_lru": TREE,
    "create_match_validator": TREE,
    "finalize_match_result_in_tree_core": TREE,
    "finalize_match_result_in_cache": CACHE,
    "floor_cache_len": CACHE,
    "update_component_on_insert_overlap": TREE,
    "recover_after_unevict": Never(
        HOST, "an insert over a node whose full KV left the device: only a host copy keeps it"
    ),
    "commit_insert_component_data": TREE,
    "redistribute_on_node_split": TREE,
    "evict_component": TREE,
    "eviction_priority": TREE,
    "evict_device_start": TREE,
    "evict_device_next_node": TREE,
    "evict_device_end": TREE,
    "_evict_device_start": TREE,
    "_evict_device_next_node": TREE,
    "_evict_device_end": TREE,
    "acquire_component_lock": TREE,
    "release_component_lock": TREE,
    "prepare_for_caching_req": CACHE,
    "cleanup_after_caching_req": CACHE,
    "free_out_of_window_slots": CACHE,
    "free_host_values": Never(HOST, "host values freed"),
    "prepare_load_back": Never(HOST, "load-back"),
    "finalize_load_back": Never(HOST, "load-back"),
    "prepare_prefetch": Never(HOST, "storage prefetch"),
    "alloc_prefetch_staging": Never(HOST, "storage prefetch"),
    "buffer_mode_host_pool_entries": Never(HOST, "buffer mode"),
    "buffer_backup_keys": Never(HOST, "buffer mode"),
    "buffer_backup_parent_covered": Never(HOST, "buffer mode"),
    "buffer_belief_policy": Never(HOST, "buffer mode"),
    "create_buffer_pipeline": Never(HOST, "buffer mode"),
    "prepare_buffer_load_back": Never(HOST, "buffer mode"),
    "build_hicache_transfers": Never(HOST, "host transfers"),
    "commit_hicache_transfer": Never(HOST, "host transfers"),
    "drive_host_eviction": Never(HOST, "host eviction"),
    "apply_component_action": CACHE,
    "build_external_linker_transfer": Never(HOST, "the external cache linker"),
    "update_external_linker_load": Never(HOST, "the external cache linker"),
    "release_window_lock": TREE,  # SWAComponent's: the prefix's SWA lock dropped once decode passed it
}


def sglang_actions() -> set[str]:
    """The action kinds SGLang's cache_action.py defines (every msgspec struct but the ComponentAction base)."""
    import msgspec
    from sglang.srt.mem_cache.unified_cache import cache_action

    return {
        name
        for name, obj in vars(cache_action).items()
        if inspect.isclass(obj)
        and issubclass(obj, msgspec.Struct)
        and obj.__module__ == cache_action.__name__
        and obj is not cache_action.ComponentAction
    }


def sglang_hooks() -> set[str]:
    """The methods SGLang's TreeComponent defines (read from its source: properties and dunders aside), and the SWA
    component's release_window_lock."""
    from sglang.srt.mem_cache.unified_cache.components import base

    (component,) = (
        node
        for node in ast.parse(inspect.getsource(base)).body
        if isinstance(node, ast.ClassDef) and node.name == "TreeComponent"
    )
    names = {f.name for f in component.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("__")}
    return names | {"release_window_lock"}


@dataclass(frozen=True)
class Census:
    """What SGLang did while a tour ran: each action applied (by kind), each hook called on a component."""

    actions: collections.Counter
    hooks: collections.Counter


@pytest.fixture
def census(monkeypatch: pytest.MonkeyPatch) -> Iterator[Census]:
    """Records, for the test only, every action the cache applies and every hook called on its FULL and SWA
    components (the wrappers call SGLang's own code and change nothing)."""
    from sglang.srt.mem_cache.unified_cache.components import FullComponent, SWAComponent
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    seen = Census(collections.Counter(), collections.Counter())
    apply = UnifiedRadixCache._apply_cache_action

    def applied(self, action):
        seen.actions[type(action).__name__] += 1
        return apply(self, action)

    monkeypatch.setattr(UnifiedRadixCache, "_apply_cache_action", applied)

    def recorded(name: str, fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            seen.hooks[name] += 1
            return fn(*args, **kwargs)

        return call

    for cls in (FullComponent, SWAComponent):
        for name in HOOKS:
            fn = inspect.getattr_static(cls, name, None)
            if inspect.isfunction(fn):
                monkeypatch.setattr(cls, name, recorded(name, fn))
    yield seen


def build(target, *, page_size: int, window: int | None, core: str, **options) -> Driver:
    """A cache over pools roomy enough for the tour's requests at once: 32 and 16 units (a unit: the window or a
    page, whichever is larger, in whole pages) of full and SWA slots."""
    from harness.targets.sglang.prefix_cache import SGLangPrefixCache

    unit = -(-max(page_size, window or 1) // page_size) * page_size
    memory = target.build_pool(
        HybridPoolSpec(
            size=32 * unit, size_swa=16 * unit, page_size=page_size, max_requests=4, max_context_len=16 * unit
        )
    )
    driver = Driver(memory, SGLangPrefixCache(memory, sliding_window_size=window, tree_core=core, **options))
    assert driver.cache.tree_core == core, f"SGLang built the {driver.cache.tree_core} tree core, not {core}"
    return driver


def page_floor(n: int, ps: int) -> int:
    return n // ps * ps


def tombstoned(d: Driver, slots: torch.Tensor) -> torch.Tensor:
    """Which of ``slots`` (full slots the tree holds) have lost their SWA slot."""
    return d.mapping(slots) == 0


SHAPES = [(1, 5), (16, 8)]  # (page, model window): a window of a few pages; a window below one page (#22470)


def tour(d: Driver) -> None:
    """Each transition of a server's requests through the cache, SGLang's state held after every step."""
    cache, ps, window = d.cache, d.ps, d.window
    unit = max(ps, window)
    rng = random.Random(ps * 100 + window)
    prompt = [rng.randrange(1, 50) for _ in range(6 * unit + 3)]

    # A miss, then a chunk: the checkpoint frees the SWA below its window and inserts its whole pages; the new leaf
    # publishes its live window (SWARebuild) and ends a match at once.
    a, cached = d.arrive(prompt)
    assert cached == 0
    d.grow(a, 3 * unit + 1)
    cache.cache_unfinished_req(a)
    assert a.cache_protected_len == page_floor(3 * unit + 1, ps) and a.swa_evicted > 0
    assert cache.match_prefix(a.fill_ids[: a.kv_len]).length == a.cache_protected_len
    d.check()
    # The rest of the prompt: the insert walks over the request's own leaf (nothing duplicated) and adds the next.
    d.grow(a, len(prompt) - a.kv_len)
    cache.cache_unfinished_req(a)
    assert a.cache_protected_len == page_floor(len(prompt), ps)
    d.check()
    # Decode past the window: the window slides, then the prefix's SWA lock is released early (release_window_lock).
    for i in range(window + ps):
        d.decode(a, i % 7)
        d.check()
    assert cache.swa_protected_size() == 0, "the prefix's SWA stayed locked after the window passed it"
    conversation = a.fill_ids[: a.kv_len]
    d.leave(a, finished=True)
    d.check()
    whole = page_floor(len(conversation), ps)
    assert cache.evictable_size() == whole and cache.protected_size() == 0
    tree = cache.tree_slots()
    assert bool(tombstoned(d, tree.full).any()), "the finished conversation left no SWA tombstone"

    # A later turn matches the whole conversation (its last window is live) and locks it, tombstones included.
    turn, cached = d.arrive(conversation + [3])
    assert cached == whole and cache.protected_size() == whole
    d.check()
    # The KV canary's walk over unused cache (unlocked, SWA-resident nodes only) leaves out the window it locked.
    unused = cache.sglang.tree_core.walk_for_kv_canary(True, True).slot_indices
    locked_window = d.row(turn, whole - window + 1, whole)
    assert not bool(torch.isin(locked_window, torch.as_tensor(unused)).any()), "the canary would perturb live KV"

    # A branch inside the tombstones: the match splits a node and finds full KV past the last live window, so it
    # lends nothing and records the branch point; the branch's first checkpoint revives the window below that point
    # with its own fresh SWA KV. The turn above locks the full KV there: SGLang keeps the locked full slots, moves
    # the branch's SWA slots onto them and frees the branch's full ones (RecoverSWAWithLockedFull).
    cut = 2 * unit + 1
    branch, cached = d.arrive(conversation[:cut] + [60, 61, 62] * unit)
    point = cache._tracked[id(branch)].sglang.swa_branching_seqlen
    assert cached == 0 and point == page_floor(cut, ps), (cached, point)
    d.grow(branch, cut + 2 - branch.kv_len)
    cache.cache_unfinished_req(branch)
    assert branch.cache_protected_len == page_floor(cut + 2, ps)
    revived = d.row(branch, point - window + 1, point)  # the window ending at the branch point
    assert not bool(tombstoned(d, revived).any()), "the branch point's window is still tombstoned"
    assert bool(torch.isin(d.row(branch, 0, point), tree.full).all()), "the locked full slots were replaced"
    assert cache.match_prefix(branch.fill_ids[: branch.kv_len]).length == branch.cache_protected_len
    d.check()
    d.leave(turn, finished=False)  # an abort: nothing inserted, the lock goes
    d.check()
    assert cache.evictable_size() + cache.protected_size() == whole + branch.cache_protected_len - point

    # Twins: two requests with one new prompt admitted before either inserted. The second's checkpoint finds its
    # tokens in the tree and frees its own copies (FreeDeviceKV, and FreeDeviceKVFullOnly below its SWA frontier),
    # then reads the tree's slots.
    twin_prompt = [rng.randrange(50, 99) for _ in range(4 * unit)]
    first, _ = d.arrive(twin_prompt)
    second, _ = d.arrive(twin_prompt)
    for twin in (first, second):
        d.grow(twin, 3 * unit)
        cache.cache_unfinished_req(twin)
    assert second.cache_protected_len == first.cache_protected_len == page_floor(3 * unit, ps)
    assert torch.equal(d.row(second, 0, 3 * unit), d.row(first, 0, 3 * unit)), "the second twin kept its copies"
    d.check()
    d.leave(first, finished=False)
    d.leave(second, finished=False)
    d.leave(branch, finished=False)
    d.check()
    assert cache.protected_size() == cache.swa_protected_size() == 0

    # A holder of an internal node: a request whose prefix ends where the branch split the conversation. Evicting
    # every full token then removes every unlocked leaf, parents after their children, and stops at the locked node.
    holder, cached = d.arrive(conversation[:point] + [5] * ps)
    assert cached == point
    swa_before = cache.swa_evictable_size()
    cache.evict(swa_tokens=1)  # the SWA walk: the least recent window tombstoned (or its leaf removed)
    assert cache.swa_evictable_size() < swa_before
    d.check()
    cache.evict(full_tokens=cache.evictable_size())
    assert cache.evictable_size() == 0 and cache.protected_size() == point
    assert cache.match_prefix(conversation[: point + 1]).length == point, "the locked prefix left the tree"
    d.check()
    d.leave(holder, finished=False)
    cache.evict(full_tokens=cache.evictable_size())
    d.check()
    assert cache.tree_slots().full.numel() == 0
    assert cache.sglang.take_events() == [], "KV events piled up on a cache that publishes none"
    cache.reset()
    free = (d.allocator.full_available_size(), d.allocator.swa_available_size())
    assert free == (d.allocator.size, d.allocator.size_swa)


@pytest.mark.parametrize("core", ["python", "rust"])
@pytest.mark.parametrize("page_size,window", SHAPES, ids=[f"page{p}-window{w}" for p, w in SHAPES])
def test_every_server_transition_runs_and_no_other(sglang_target, census: Census, core, page_size, window):
    tour(build(sglang_target, page_size=page_size, window=window, core=core))
    for table, seen, what in ((ACTIONS, census.actions, "action"), (HOOKS, census.hooks, "hook")):
        expected = {k for k, v in table.items() if isinstance(v, Runs) and (v.by == "cache" or core == "python")}
        missing = sorted(expected - set(seen))
        assert not missing, f"the tour on the {core} core never made these server {what}s: {missing}"
        never = sorted(k for k in seen if isinstance(table.get(k), Never))
        assert not never, f"{what}s that no server without HiCache, sessions or PD makes ran: {never}"


def test_the_tables_class_every_action_and_hook_sglang_has(sglang_target):
    for table, found, what in ((ACTIONS, sglang_actions(), "action"), (HOOKS, sglang_hooks(), "component hook")):
        assert set(table) == found, (
            f"SGLang's {what}s not classed here: {sorted(found - set(table))}; classed but gone from SGLang: "
            f"{sorted(set(table) - found)}"
        )


@pytest.mark.parametrize("core", ["python", "rust"])
def test_a_disabled_cache_matches_nothing_and_keeps_nothing(sglang_target, core):
    """``--disable-radix-cache`` on a hybrid model builds the cache disabled: no match, a checkpoint inserts nothing
    (and frees no window: the decode-time slide does), a finished request gives every slot back."""
    d = build(sglang_target, page_size=1, window=5, core=core, disable=True)
    cache = d.cache
    prompt = list(range(1, 21))
    req, cached = d.arrive(prompt)
    assert cached == 0
    d.grow(req, 12)
    cache.slide_windows([req])
    cache.cache_unfinished_req(req)
    assert req.cache_protected_len == 0 and req.swa_evicted > 0
    d.grow(req, len(prompt) - req.kv_len)
    d.decode(req, 3)
    d.check()
    d.leave(req, finished=True)
    assert cache.match_prefix(prompt).length == 0 and cache.evictable_size() == 0
    cache.evict(full_tokens=8, swa_tokens=8)
    d.check()
    assert (d.allocator.full_available_size(), d.allocator.swa_available_size()) == (
        d.allocator.size,
        d.allocator.size_swa,
    )


@pytest.mark.parametrize("core", ["python", "rust"])
def test_a_full_only_tree_splits_a_finished_request_at_its_prompt(sglang_target, core):
    """A model without sliding layers (FULL only): a request inserted once at its finish is split at its prompt's
    last page, so that an eviction drops the output and keeps the prompt."""
    d = build(sglang_target, page_size=4, window=None, core=core)
    cache = d.cache
    prompt = list(range(1, 13))
    req = SimReq(list(prompt))
    req.req_pool_idx = d.rows.alloc(1)[0]
    assert cache.admit(req, prompt) == 0
    d.grow(req, len(prompt))
    for token in (20, 21, 22, 23, 24, 25):
        req.output.append(token)
        d.grow(req, 1)
    conversation = req.fill_ids[: req.kv_len]
    cache.cache_finished_req(req)
    d.rows.free(req.req_pool_idx)
    cache.sanity_check()
    assert cache.evictable_size() == cache.sglang.evictable_size() == 16 and cache.sglang.protected_size() == 0
    assert cache.sglang.swa_reprefill_tail_tokens() == 0, "a tree without SWA asked for a re-prefill"
    cache.evict(full_tokens=1)
    assert cache.evictable_size() == 12, "the eviction did not stop at the prompt"
    assert cache.match_prefix(conversation).length == 12
    cache.sanity_check()


POLICIES = ("lfu", "fifo", "mru", "filo", "priority", "slru", "tlru")


@pytest.mark.parametrize("core", ["python", "rust"])
@pytest.mark.parametrize("policy", POLICIES)
def test_the_tour_holds_under_every_eviction_policy(sglang_target, core, policy):
    """``--radix-eviction-policy``: the full eviction's order changes (``tlru`` also keeps each node's depth and its
    branch's high-water mark on every insert and split); what each step must leave does not."""
    tour(build(sglang_target, page_size=1, window=5, core=core, eviction_policy=policy))


@pytest.mark.parametrize("core", ["python", "rust"])
def test_dfs_weight_orders_waiting_requests_by_their_subtree(sglang_target, core):
    """``--schedule-policy dfs-weight`` orders the waiting queue by the tree: depth first, heavier subtrees first,
    so requests sharing a prefix run together."""
    d = build(sglang_target, page_size=1, window=3, core=core)
    stem = [1, 2, 3, 4, 5, 6]
    for tail in ([7, 7, 7, 7], [8, 8, 8, 8], [8, 8, 8, 8, 9, 9]):  # branches 7 and 8; 8 has a longer leaf below
        req, _ = d.arrive(stem + tail)
        d.grow(req, len(req.prompt) - req.kv_len)
        d.leave(req, finished=True)
    waiting = [d.arrive(stem + tail)[0] for tail in ([7, 7, 7, 7, 0], [8, 8, 8, 8, 0], [8, 8, 8, 8, 9, 9, 0])]
    last_nodes = [d.cache._tracked[id(r)].sglang.last_node for r in waiting]
    assert len(set(last_nodes)) == 3, "the waiting requests should end on three different nodes"
    order = d.cache.sglang.dfs_weight_order(last_nodes)
    assert order == [2, 1, 0], f"the heavier branch (two requests) first, deepest first: {order}"
    d.check()
    for req in waiting:
        d.leave(req, finished=False)
    d.check()
