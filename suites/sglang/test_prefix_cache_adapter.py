"""SGLangPrefixCache, the PrefixCache contract over SGLang's UnifiedRadixCache, driven by hand on both tree cores: a
chunked prefill, decode with the window sliding, finish, matches, SWA tombstones, eviction and flush, every pool
counted after each step. (``suites/prefix`` drives it hard; this is the smoke test that names what broke.)
Skips where SGLang is not installed (``nox -s sglang`` runs it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from harness.mem import HybridPool, HybridPoolSpec, PoolError
from suites.pool.machines import refuse_padding_give_backs
from suites.prefix.machines import SimReq

WINDOW = 5  # the model's window: a match needs its last 4 tokens live


class Driver:
    """Grows requests page by page on the target's allocator and counts both pools after each step."""

    def __init__(self, memory: HybridPool, cache) -> None:
        self.memory, self.cache, self.window = memory, cache, cache.sliding_window_size
        self.allocator, self.rows = memory.allocator, memory.req_to_token_pool
        self.ps = self.allocator.page_size
        self.running: list[SimReq] = []

    def arrive(self, prompt: list[int]) -> tuple[SimReq, int]:
        req = SimReq(list(prompt))
        req.req_pool_idx = self.rows.alloc(1)[0]
        cached = self.cache.admit(req, req.prompt)
        self.running.append(req)
        return req, cached

    def grow(self, req: SimReq, n: int) -> None:
        last = self.rows.last_slots([req.req_pool_idx], [req.kv_len])
        out = self.allocator.alloc_extend([req.kv_len], [req.kv_len + n], last)
        assert out is not None, f"the pools could not serve {n} more tokens"
        self.rows.write(req.req_pool_idx, req.kv_len, out)
        req.kv_len = req.slots_len = req.kv_len + n

    def decode(self, req: SimReq, token: int) -> None:
        req.output.append(token)
        self.grow(req, 1)
        self.cache.slide_windows([req])

    def leave(self, req: SimReq, *, finished: bool) -> None:
        (self.cache.cache_finished_req if finished else self.cache.release_req)(req)
        assert req.prefix_lock is None, "the request still holds a tree lock after leaving"
        self.rows.free(req.req_pool_idx)
        self.running.remove(req)

    def row(self, req: SimReq, lo: int, hi: int) -> torch.Tensor:
        return self.rows.req_to_token[req.req_pool_idx, lo:hi].long()

    def mapping(self, slots: torch.Tensor) -> torch.Tensor:
        return self.allocator.full_to_swa_index_mapping[slots.long()]

    def check(self) -> None:
        """Per pool: free + the pages the tree holds + those each request owns = size, none held twice; the
        cache's sizes add up to what its nodes hold; tombstones map to no SWA slot; each window is live."""
        tree = self.cache.tree_slots()
        own_full = [self.row(r, r.cache_protected_len, r.slots_len) for r in self.running]
        own_swa = [
            self.mapping(self.row(r, max(r.swa_evicted, r.cache_protected_len), r.slots_len)) for r in self.running
        ]
        self._pages("full", [tree.full, *own_full], self.allocator.full_available_size(), self.allocator.size)
        self._pages(
            "SWA", [self.mapping(tree.swa_live), *own_swa], self.allocator.swa_available_size(), self.allocator.size_swa
        )
        assert self.cache.evictable_size() + self.cache.protected_size() == tree.full.numel()
        assert self.cache.swa_evictable_size() + self.cache.swa_protected_size() == tree.swa_live.numel()
        tombstones = tree.full[~torch.isin(tree.full, tree.swa_live)]
        assert bool((self.mapping(tombstones) == 0).all()), "a tombstoned tree slot still maps to an SWA slot"
        for req in self.running:
            window = self.row(req, max(0, req.kv_len - self.window + 1), req.kv_len)
            assert bool((self.mapping(window) > 0).all()), (
                f"a position in the window of kv_len {req.kv_len} lost its SWA slot"
            )
        self.cache.sanity_check()

    def _pages(self, side: str, holders: list[torch.Tensor], free: int, size: int) -> None:
        owner: dict[int, int] = {}
        for who, slots in enumerate(holders):
            assert bool((slots > 0).all()), f"{side}: holder {who} holds the padding slot"
            for page in set((slots // self.ps).tolist()):
                assert owner.setdefault(page, who) == who, f"{side} page {page} is held twice"
        assert free + self.ps * len(owner) == size, f"{side}: {free} free + {self.ps * len(owner)} held != {size}"


def build(target, *, page_size: int, core: str, window: int = WINDOW, **options) -> Driver:
    from harness.targets.sglang.prefix_cache import SGLangPrefixCache

    memory = target.build_pool(
        HybridPoolSpec(size=128, size_swa=64, page_size=page_size, max_requests=4, max_context_len=64)
    )
    # Invariant 5 at the innermost boundary, as suites/pool checks it: whatever the tree frees (a window slide, an
    # eviction, a tombstone's cascade), the SWA padding page never goes back to the page allocator (#38269, #38519).
    refuse_padding_give_backs(memory.allocator.swa_attn_allocator, page_size)
    return Driver(memory, SGLangPrefixCache(memory, sliding_window_size=window, tree_core=core, **options))


def page_floor(n: int, ps: int) -> int:
    return n // ps * ps


CASES = [pytest.param((core, ps), id=f"{core}-page{ps}") for core in ("python", "rust") for ps in (1, 4)]


@pytest.fixture(params=CASES)
def driver(request, sglang_target) -> Iterator[Driver]:
    core, page_size = request.param
    d = build(sglang_target, page_size=page_size, core=core)
    assert d.cache.tree_core == core, f"SGLang built the {d.cache.tree_core} tree core, not {core}"
    yield d


PROMPT = [7, 3, 9, 1, 4, 4, 2, 8, 6, 5, 3, 1, 9, 9, 2, 7, 1, 3, 5, 8]  # 20 tokens


def test_a_conversation_goes_through_the_tree(driver: Driver):
    d, cache, ps = driver, driver.cache, driver.ps
    req, cached = d.arrive(PROMPT)
    assert cached == 0 and req.kv_len == req.cache_protected_len == 0
    d.check()

    d.grow(req, 13)  # a chunk ending inside a page
    cache.slide_windows([req])
    cache.cache_unfinished_req(req)
    assert req.cache_protected_len == page_floor(13, ps), "a chunk's checkpoint inserts its whole pages"
    assert cache.protected_size() == req.cache_protected_len
    assert cache.match_prefix(req.fill_ids[:13]).length == req.cache_protected_len, "the inserted leaf ends a match"
    assert 0 < req.swa_evicted < req.cache_protected_len, "the chunk's checkpoint gave back the SWA below its window"
    d.check()

    d.grow(req, 7)  # the rest of the prompt, then decode with the window sliding
    cache.slide_windows([req])
    d.check()
    for token in (6, 6, 0, 1, 2, 3, 4):
        d.decode(req, token)
        d.check()
    assert req.swa_evicted >= req.cache_protected_len, "the window moved past the prefix"
    assert cache.swa_protected_size() == 0, "the prefix's SWA lock is dropped once the window passed it"
    kv_len, tokens = req.kv_len, req.fill_ids
    d.leave(req, finished=True)
    d.check()
    assert cache.protected_size() == 0 and cache.evictable_size() == page_floor(kv_len, ps)

    found = cache.match_prefix(tokens)
    assert found.length == page_floor(kv_len, ps), "the finished request's whole pages are cached and match"
    assert found.indices.numel() == found.length and bool(torch.isin(found.indices, cache.tree_slots().full).all())

    # Its early tokens are tombstones (full KV kept, SWA given back): no match may end among them.
    tree = cache.tree_slots()
    assert tree.swa_live.numel() < tree.full.numel(), "no tombstone formed"
    first_live = int(torch.isin(found.indices, tree.swa_live).nonzero()[0])
    assert first_live >= WINDOW - 1
    assert cache.match_prefix(tokens[:first_live]).length == 0, "a match ended on tombstones"

    # A later request sharing the prompt reuses it; released, it inserts nothing.
    req2, cached2 = d.arrive(tokens[:kv_len] + [0, 0])
    assert cached2 == page_floor(kv_len, ps)
    assert torch.equal(d.row(req2, 0, cached2), found.indices)
    assert cache.protected_size() == cached2
    d.check()
    d.grow(req2, 1)
    cache.slide_windows([req2])
    d.check()
    held = cache.evictable_size() + cache.protected_size()
    d.leave(req2, finished=False)
    d.check()
    assert cache.evictable_size() == held, "an aborted request inserted something"

    swa_before, full_before = cache.swa_evictable_size(), cache.evictable_size()
    cache.evict(swa_tokens=1)
    assert cache.swa_evictable_size() < swa_before and cache.evictable_size() <= full_before
    d.check()
    cache.evict(full_tokens=1000)
    assert cache.evictable_size() == cache.swa_evictable_size() == 0
    d.check()
    cache.reset()
    assert (d.allocator.full_available_size(), d.allocator.swa_available_size()) == (
        d.allocator.size,
        d.allocator.size_swa,
    )


def test_a_flush_keeps_running_requests_slots(driver: Driver):
    d, cache = driver, driver.cache
    done, _ = d.arrive(PROMPT)
    d.grow(done, len(PROMPT) - 1)
    d.leave(done, finished=True)
    running, cached = d.arrive([1, 2, 3] * 4)
    assert cached == 0
    d.grow(running, 5)
    cache.reset()  # only a root lock is held: allowed, the tree's slots go back, the request's stay
    d.check()
    assert cache.evictable_size() == 0
    d.grow(running, 6)
    cache.cache_unfinished_req(running)
    d.leave(running, finished=True)
    d.check()


def test_bad_calls_are_refused(sglang_target):
    from harness.mem import build_hybrid_pool
    from harness.targets.sglang.prefix_cache import SGLangPrefixCache

    d = build(sglang_target, page_size=1, core="python")
    req, _ = d.arrive(PROMPT)
    with pytest.raises(PoolError, match="must hold a row and nothing else"):
        d.cache.admit(req, PROMPT)
    with pytest.raises(PoolError, match="not admitted"):
        d.cache.cache_unfinished_req(SimReq(PROMPT, req_pool_idx=req.req_pool_idx))
    req.cache_protected_len = 3
    with pytest.raises(PoolError, match="only the cache moves it"):
        d.cache.cache_unfinished_req(req)
    with pytest.raises(TypeError, match="SGLangTarget.build_pool"):
        SGLangPrefixCache(build_hybrid_pool(HybridPoolSpec()), sliding_window_size=WINDOW)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        SGLangPrefixCache(d.memory, sliding_window_size=1)
    with pytest.raises(ValueError, match="unknown tree core"):
        SGLangPrefixCache(d.memory, sliding_window_size=WINDOW, tree_core="cuda")


def test_an_sglang_without_the_scheduler_calls_is_a_skip_naming_them(sglang_target, monkeypatch):
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    from harness.targets.sglang.capabilities import NotOnThisSGLang

    monkeypatch.delattr(UnifiedRadixCache, "release_swa_prefix_lock")  # a release before the early SWA release
    with pytest.raises(NotOnThisSGLang, match=r"lacks UnifiedRadixCache\.release_swa_prefix_lock"):
        build(sglang_target, page_size=1, core="python")


@pytest.mark.parametrize("core", ["python", "rust"])
def test_a_window_smaller_than_a_page_keeps_the_leaf_matchable(sglang_target, core):
    """Page 4, window 3: a chunk ending 3 tokens into a page must still leave a live window below its insert
    boundary (#22470, #29860: the frontier reached the boundary and the leaf was all tombstone, or made live)."""
    d = build(sglang_target, page_size=4, core=core, window=3)
    req, _ = d.arrive(PROMPT)
    d.grow(req, 15)
    d.cache.slide_windows([req])
    d.cache.cache_unfinished_req(req)
    assert req.cache_protected_len == 12
    found = d.cache.match_prefix(req.fill_ids[:15])
    assert found.length == 12, f"the leaf a checkpoint inserted (12 tokens) does not end a match ({found.length})"
    d.check()


@pytest.mark.parametrize("core", ["python", "rust"])
def test_an_eagle_tree_checkpoint_leaf_ends_a_match(sglang_target, core):
    """An EAGLE server's tree is keyed by token pairs: a checkpoint at ``kv_len`` inserts ``kv_len - 1`` pairs
    (a page less at page multiples), and the SWA frontier must keep a window below that boundary (#34870)."""
    d = build(sglang_target, page_size=4, core=core, bigram_keys=True)
    req, _ = d.arrive(PROMPT + [1, 1, 1, 1])
    d.grow(req, 16)  # a page multiple: the pair key ends a page lower
    d.cache.cache_unfinished_req(req)
    assert req.cache_protected_len == page_floor(16 - 1, 4)
    found = d.cache.match_prefix(req.fill_ids[:17])
    assert found.length == req.cache_protected_len, (
        f"the leaf a checkpoint inserted ({req.cache_protected_len} tokens) does not end a match "
        f"({found.length}): its last window is not live"
    )
    d.check()


def test_a_fault_of_the_python_tree_core_runs_under_it(sglang_target, monkeypatch):
    """A fault carries the SGLang environment its mechanism needs, for its run only."""
    import os

    from harness.targets.sglang.faults import inject
    from harness.targets.sglang.faults.by_id import get_fault

    monkeypatch.delenv("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", raising=False)
    with inject(get_fault("sglang-swa-insert-all-evicted-made-live")):
        assert os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] == "python"
        assert build(sglang_target, page_size=4, core=None).cache.tree_core == "python"
    assert "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND" not in os.environ


def test_the_servers_eviction_ledger_counts_what_sglang_returns(driver: Driver, monkeypatch: pytest.MonkeyPatch):
    """``harness/servers/sglang_server/eviction_ledger.py`` (what an SGLang server's /metrics says its tree evicted,
    which the cache-hit protocol's tight pools must show) measures each eviction on the tree's slots: an SWA eviction
    while a running request locks the prefix tombstones the live tokens below its window (SWA gone, full KV kept);
    once it leaves, a full eviction takes the rest, as many tokens as SGLang's own ``EvictResult`` says."""
    from prometheus_client import REGISTRY
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    from harness.servers.sglang_server import eviction_ledger

    monkeypatch.setattr(UnifiedRadixCache, "_evict", UnifiedRadixCache._evict)  # the wrapper goes with the test
    eviction_ledger.install()
    d, cache = driver, driver.cache

    def counted() -> tuple[float, ...]:
        return tuple(
            REGISTRY.get_sample_value(name + "_total") or 0.0
            for name in (eviction_ledger.FULL, eviction_ledger.SWA, eviction_ledger.TOMBSTONED)
        )

    first, _ = d.arrive(PROMPT)
    d.grow(first, len(PROMPT))
    d.leave(first, finished=True)  # the prompt's last window stays live in the tree
    later, cached = d.arrive(PROMPT + [50, 51, 52])
    assert cached > 0 and cache.swa_evictable_size() > 0, "nothing live below the later request's window"
    d.check()
    start = counted()
    cache.sglang.evict_for_alloc(EvictParams(num_tokens=0, swa_num_tokens=cache.swa_evictable_size()))
    d.check()
    full, swa, tombstoned = (a - b for a, b in zip(counted(), start))
    assert (full, swa > 0, tombstoned) == (0, True, swa), f"full {full}, SWA {swa}, tombstoned {tombstoned}"
    d.leave(later, finished=False)
    start = counted()
    took = cache.sglang.evict_for_alloc(EvictParams(num_tokens=cache.evictable_size()))
    full, _, tombstoned = (a - b for a, b in zip(counted(), start))
    assert full == took.num_tokens_evicted > 0 and tombstoned == 0, (full, tombstoned, took)
    assert cache.evictable_size() == cache.swa_evictable_size() == 0
    d.check()


def _key(tokens):
    from array import array

    from sglang.srt.mem_cache.radix_cache import RadixKey

    return RadixKey(array("q", tokens))


def test_a_touched_prefix_outlives_a_newer_one_in_the_lru(driver: Driver):
    """``touch_prefix``: SGLang's scheduler refreshes a waiting request's cached prefix before it admits (LRU
    eviction under a cache-agnostic policy), so the next eviction takes another prefix first. Two finished
    prompts with nothing in common, the older touched: one eviction of a token takes the newer one's last
    pages and leaves the touched prompt matching whole."""
    d, cache, ps = driver, driver.cache, driver.ps
    older, newer = PROMPT[:16], [60 + t for t in PROMPT[:16]]
    for prompt in (older, newer):
        req, _ = d.arrive(prompt)
        d.grow(req, len(prompt))
        d.leave(req, finished=True)
    held = cache.evictable_size()
    assert held == 2 * page_floor(16, ps), f"the two finished prompts leave {held} tokens in the tree"
    cache.sglang.touch_prefix(_key(older))
    cache.evict(full_tokens=1)
    d.check()
    kept = (cache.match_prefix(older).length, cache.match_prefix(newer).length)
    assert kept[0] == page_floor(16, ps) > kept[1], (
        f"after touching the older prompt, one eviction left (older, newer) matching {kept}: the eviction did not "
        f"take the least recently used prefix"
    )


@pytest.mark.parametrize("core", ["python", "rust"])
def test_a_disabled_caches_insert_keeps_nothing_and_says_so(sglang_target, core):
    """``--disable-radix-cache`` on a hybrid model: an insert keeps nothing and reports a prefix of 0 (the slots
    stay the caller's), a touch walks nothing, and a match after both finds nothing."""
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams

    d = build(sglang_target, page_size=1, core=core, disable=True)
    slots = d.allocator.sglang.alloc(len(PROMPT)).long()
    result = d.cache.sglang.insert(InsertParams(key=_key(PROMPT), value=slots))
    assert result.prefix_len == 0, f"a disabled cache's insert reports a prefix of {result.prefix_len}"
    d.cache.sglang.touch_prefix(_key(PROMPT))
    assert d.cache.match_prefix(PROMPT).length == 0 and d.cache.evictable_size() == 0
    assert d.allocator.full_available_size() == d.allocator.size - len(PROMPT), "the insert took or freed slots"


@pytest.mark.parametrize("window", [0, -1])
def test_sglangs_swa_component_refuses_a_window_of_no_tokens(sglang_target, window):
    """SGLang's own check, below the adapter's: an SWA component over a window of no history is refused by
    name, not built to keep nothing."""
    import dataclasses

    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    d = build(sglang_target, page_size=1, core="python")
    with pytest.raises(ValueError, match="positive sliding_window_size"):
        UnifiedRadixCache(params=dataclasses.replace(d.cache.init_params, sliding_window_size=window))


@pytest.mark.parametrize("checkpoint", [False, True])
def test_sglangs_release_gives_back_the_slots_a_speculative_step_holds_past_the_kv(
    driver: Driver, monkeypatch: pytest.MonkeyPatch, checkpoint
):
    """SGLang's own ``release_kv_cache`` (what its scheduler calls; the adapter replays its steps), under
    speculative decoding: a request holds slots past its KV (a verify's draft lanes, allocated and not
    accepted). Released (finished, or aborted), every slot it does not leave to the tree comes back to both
    pools, the tail past the KV included: counted against what the tree says it holds."""
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH
    from sglang.srt.mem_cache.common import release_kv_cache
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    d, cache, ps = driver, driver.cache, driver.ps
    req, _ = d.arrive(PROMPT)
    d.grow(req, 12)
    cache.slide_windows([req])
    last = d.rows.last_slots([req.req_pool_idx], [req.slots_len])
    tail = d.allocator.alloc_extend([req.slots_len], [req.slots_len + 2 * ps], last)
    assert tail is not None
    d.rows.write(req.req_pool_idx, req.slots_len, tail)
    req.slots_len += 2 * ps  # the draft lanes: allocated, no KV the request keeps
    d.check()
    sgl = cache._sync_in(req)
    rows_freed = []
    monkeypatch.setattr(cache.sglang.req_to_token_pool, "free", rows_freed.append, raising=False)
    with get_spec().override(speculative_algorithm=SpeculativeAlgorithm.EAGLE):
        if checkpoint:
            sgl.finished_reason = FINISH_LENGTH(length=0)
        release_kv_cache(sgl, cache.sglang, checkpoint=checkpoint)
    assert rows_freed == [sgl] and sgl.kv.is_kv_released
    d.running.remove(req)
    d.rows.free(req.req_pool_idx)
    tree = cache.tree_slots()
    held = (tree.full.numel(), tree.swa_live.numel())
    if checkpoint:
        assert held[0] == page_floor(12, ps), f"the finished request's whole pages are not what the tree holds: {held}"
    else:
        assert held == (0, 0), f"an aborted request left {held} (full, SWA) slots in the tree"
    got = (
        d.allocator.size - d.allocator.full_available_size(),
        d.allocator.size_swa - d.allocator.swa_available_size(),
    )
    assert got == held, (
        f"after SGLang's release, the pools hold (full, SWA) {got} slots outside their free lists; the tree holds "
        f"{held}: the slots past the KV did not all come back"
    )


@pytest.mark.parametrize("chunk", [None, 8], ids=["one-prefill", "chunked-at-8"])
def test_a_prompt_finished_over_tombstones_makes_its_prefix_matchable_again(sglang_target, driver: Driver, chunk):
    """A finished conversation leaves its early tokens as tombstones (full KV, no SWA), so no match ends among
    them. A later request with a prefix of it is admitted with no hit past them, computes the rest again and finishes
    right after its prefill (no decode: its window never slid): its insert over the tombstones must give them
    its live window, so its prompt's prefixes match as well as they would had it been the tree's only request.
    Reference: the same request alone on a fresh cache of the same core and page size. Compared over the
    prefixes an admission can hit (``match_kv_cache`` caps a match at the prompt less one token): at page 1 the
    whole 13-token prompt matches 13 alone and 12 over the tombstones, on both tree cores."""
    d, cache, ps = driver, driver.cache, driver.ps
    first, _ = d.arrive(PROMPT)
    if (
        chunk
    ):  # a chunk's checkpoint splits the conversation's path at its whole pages: the later prompt spans two nodes
        d.grow(first, chunk)
        cache.cache_unfinished_req(first)
    d.grow(first, len(PROMPT) - first.kv_len)
    cache.slide_windows([first])
    for token in (6, 6, 0, 1, 2):
        d.decode(first, token)
    d.leave(first, finished=True)
    later = PROMPT[:13]
    before = [cache.match_prefix(later[:k]).length for k in range(1, len(later))]
    assert before[-1] < page_floor(len(later) - 1, ps), f"no tombstones hide the later prompt: it matches {before}"

    def serve(driver: Driver) -> tuple[int, list[int]]:
        req, hit = driver.arrive(later)  # a hit only where a chunk's checkpoint left a live window
        driver.grow(req, len(later) - req.kv_len)
        driver.leave(req, finished=True)
        driver.check()
        return hit, [driver.cache.match_prefix(later[:k]).length for k in range(1, len(later))]

    _, alone = serve(build(sglang_target, page_size=ps, core=cache.tree_core))
    assert alone[-1] > 0, f"a finished prompt alone leaves nothing to match: {alone}"
    hit, got = serve(d)
    # What the later request computed again is what it can give its window to: the prefixes past its hit.
    assert got[hit:] == alone[hit:], (
        f"over the tombstones (a hit of {hit}), the prefixes of the later prompt match {got}; alone on a fresh "
        f"cache, {alone}"
    )


def test_full_evictions_of_an_older_conversation_leave_a_newer_prompts_window_live(driver: Driver):
    """LRU full evictions, a token at a time: the older conversation goes first, its live window leaf, then
    the tombstoned path below it (full KV only: deleting it gives back no SWA slot). Until it is all gone the
    newer prompt, short enough to be all window, keeps every SWA slot and matches whole: an eviction that
    frees no SWA may not count as one that owes the SWA pool something."""
    d, cache, ps = driver, driver.cache, driver.ps
    older, _ = d.arrive(PROMPT)
    d.grow(older, len(PROMPT))
    cache.slide_windows([older])
    for token in (6, 6, 0, 1, 2):
        d.decode(older, token)
    d.leave(older, finished=True)
    newer_prompt = [60 + t for t in PROMPT[:12]]
    newer, _ = d.arrive(newer_prompt)
    d.grow(newer, len(newer_prompt))
    d.leave(newer, finished=True)
    whole = page_floor(len(newer_prompt), ps)
    assert cache.match_prefix(newer_prompt).length == whole
    steps = 0
    while cache.evictable_size() > whole:
        cache.evict(full_tokens=1)
        steps += 1
        d.check()
        state = (cache.match_prefix(newer_prompt).length, cache.swa_evictable_size())
        assert state[0] == whole and state[1] >= whole, (
            f"eviction {steps}: the newer prompt matches {state[0]} of {whole} with {state[1]} SWA tokens left "
            f"evictable, while the older conversation still holds {cache.evictable_size() - whole} tokens"
        )
    assert steps >= 2, "the older conversation went in one eviction: its tombstoned path never was a leaf alone"
    assert cache.match_prefix(newer_prompt).length == cache.swa_evictable_size() == whole
