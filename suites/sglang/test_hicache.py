"""SGLang's HiCache under the unified radix cache, on CPU: ``init_hicache`` over the harness's ``SGLangPrefixCache``
builds the host pools (full and SWA), the ``HybridCacheController`` and, with ``--hicache-storage-backend file``, its
L3 backend and threads, as a ``--enable-hierarchical-cache`` server builds them; the only stand-ins are the CUDA host
registration, the copy kernel and pinned scratch pages (``harness/targets/sglang/hicache.py`` says which lines need
them and why nothing else does).

Rules held, each on real KV: every position's K and V are stamped with a value derived from (layer, position, K or
V) before the request leaves, and the device pools (and, before an L3 read, the host pools) are scrubbed before
anything is read back.

1. **Write-through backs up at insert.** With ``--hicache-write-policy write_through`` a request's insert queues a
   backup of every node it adds, and the nodes stay locked (protected, not evictable) until a step's
   ``check_hicache_events`` acknowledges the copy. After it: every full token the tree holds has a host copy (the
   full host pool holds exactly the inserted tokens), the SWA host copy covers the window the device tree keeps live
   and nothing else, and each host row holds the KV of its position.
2. **Write-back backs up at eviction.** With ``write_back`` an insert copies nothing; a device eviction backs each
   victim up first and then frees its device slots (demote), so the host holds exactly the evicted tokens.
3. **Eviction to host keeps the prefix.** Once the device copy is evicted, both device pools are wholly free, the
   host pools keep what they held, and a match finds no device prefix but a host hit of every cached token, of which
   the last window (``W - 1`` tokens) also on the SWA host pool.
4. **Load-back returns the KV that was written, or nothing.** The next admission of the prompt loads the host hit
   back (``init_load_back``): its prefix is every cached whole page of the prompt but the last token; the load-back
   holds a host lock and device locks until the next step acknowledges it, and then holds nothing but the request's
   own lock. The request's row then reads, at every position, the values stamped before eviction (full layers),
   window positions have SWA slots holding their SWA values, and positions below the window (tombstones) have
   none. Without device room the load-back is called off whole: no prefix, no lock, no slot kept.
5. **Host eviction frees host leaves.** ``evict_host`` frees the least-recent host-only leaf first; an SWA host
   eviction takes the leaf whole (a leaf without its window can never be hit), and a later match no longer hits.
6. **L3 backup follows the host backup.** With storage, each acknowledged host backup goes on to storage; the node
   holds a host lock (it cannot be host-evicted) until the storage ack drains; then the backend holds one page file
   per cached page and one per page of the live window.
7. **A prefetch brings storage back.** After device and host both lost the prompt, a prefetch of it loads every
   stored page into the host tier, the KV as written, the match is a host hit again, the prefetch outcome counters
   count exactly this one prefetch, and rule 4's load-back follows. The runtime API attaches a backend to a running
   host tier, clears it (a later prefetch misses, counted as one full miss) and detaches it; without HiCache it
   refuses.
8. **Retraction to the host pool brings a request back whole.** A decoding request backed up to the host tier
   (``--disaggregation-decode-retraction-backup host_pool``) and restored into new slots reads every computed
   position's full KV and its window pages' SWA KV back, and its host slots go back.
9. **Buffer mode keeps nothing on host.** With ``--hicache-host-memory-mode buffer_only`` host RAM only stages: a
   backup passes through it to storage and leaves no host value or slot, and a prefetch stages the stored span
   (the KV as written, the window's SWA pages) until admission; an abort gives the staging back.

Node-level checks (host values per node, lock counts) read the Python tree core's nodes; the cache-level ones run on
both tree cores. Skips where SGLang is not installed (``nox -s sglang`` runs it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from harness.mem import HybridPoolSpec
from suites.sglang.test_prefix_cache_adapter import Driver, build, page_floor

PROMPT = [100 + i for i in range(20)]
CASES = [pytest.param((core, ps), id=f"{core}-page{ps}") for core in ("python", "rust") for ps in (1, 4)]


def stamp(layer: int, position: int, which: int) -> float:
    """The value a position's K (which 0) or V (which 1) holds at a layer: distinct for every triple."""
    return 1000.0 * layer + 10.0 * position + which


@dataclass(frozen=True)
class NodeView:
    """One Python-core node, as the rules read it: its tokens' positions and each component's device and host
    slots and locks."""

    node_id: int
    start: int  # the position of its first token
    length: int
    full: list[int] | None
    full_host: list[int] | None
    swa: list[int] | None
    swa_host: list[int] | None
    full_lock: int
    swa_lock: int
    full_host_lock: int
    swa_host_lock: int


class Tier:
    """A driver over a cache with a host tier: stamps KV, scrubs the device, reads the host pools."""

    def __init__(self, driver: Driver, core: str) -> None:
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType

        self.d, self.core, self.ct = driver, core, ComponentType
        self.sgl = driver.cache.sglang
        self.kv = driver.allocator.sglang.get_kvcache()
        self.host = {entry.name.value: entry.host_pool for entry in self.sgl.host_pool_group.entries}
        spec = HybridPoolSpec()  # the layers build() gives the pool
        self.full_layers, self.swa_layers = list(spec.full_layers), list(spec.swa_layers)
        self.built: Any = None  # the HostTier its fixture built
        self.history = driver.window - 1  # the tokens before a query its window reads: SGLang's sliding_window_size

    # -- KV ----------------------------------------------------------------------------------------------------

    def stamp_request(self, req, lo: int, hi: int) -> None:
        """Write each position's stamps into its full slot (full layers) and its SWA slot (SWA layers)."""
        full = self.d.row(req, lo, hi)
        swa = self.d.mapping(full)
        for layer in self.full_layers:
            for which, buf in enumerate((self.kv.get_key_buffer(layer), self.kv.get_value_buffer(layer))):
                for pos, slot in zip(range(lo, hi), full.tolist()):
                    buf[slot] = stamp(layer, pos, which)
        for layer in self.swa_layers:
            for which, buf in enumerate((self.kv.get_key_buffer(layer), self.kv.get_value_buffer(layer))):
                for pos, slot in zip(range(lo, hi), swa.tolist()):
                    if slot > 0:
                        buf[slot] = stamp(layer, pos, which)

    def scrub_device(self) -> None:
        """What a freed slot held is gone: every device KV row reads -1."""
        for layer in self.full_layers + self.swa_layers:
            self.kv.get_key_buffer(layer).fill_(-1.0)
            self.kv.get_value_buffer(layer).fill_(-1.0)

    def device_positions_hold_stamps(self, req, lo: int, hi: int) -> list[str]:
        """Where the request's row [lo, hi) does not read its stamps (full layers at every position, SWA layers
        where the position has an SWA slot)."""
        wrong = []
        full = self.d.row(req, lo, hi)
        swa = self.d.mapping(full)
        for pos, f, w in zip(range(lo, hi), full.tolist(), swa.tolist()):
            for layer in self.full_layers:
                got = (
                    float(self.kv.get_key_buffer(layer)[f].flatten()[0]),
                    float(self.kv.get_value_buffer(layer)[f].flatten()[0]),
                )
                if got != (stamp(layer, pos, 0), stamp(layer, pos, 1)):
                    wrong.append(f"position {pos} full layer {layer} slot {f}: {got}")
            if w > 0:
                for layer in self.swa_layers:
                    buf_k, buf_v = self.kv.get_key_buffer(layer), self.kv.get_value_buffer(layer)
                    got = (float(buf_k[w].flatten()[0]), float(buf_v[w].flatten()[0]))
                    if got != (stamp(layer, pos, 0), stamp(layer, pos, 1)):
                        wrong.append(f"position {pos} SWA layer {layer} slot {w}: {got}")
        return wrong

    def host_rows_hold_stamps(self, pool: str, rows: list[int], positions: list[int]) -> list[str]:
        """Where the host pool's rows do not hold the stamps of the positions they copy (layer by layer: the
        host pool keeps its device pool's layers in order)."""
        host = self.host[pool]
        layers = self.full_layers if pool == "kv" else self.swa_layers
        wrong = []
        for local, layer in enumerate(layers):
            for row, pos in zip(rows, positions):
                got = (float(host.k_buffer[local][row].flatten()[0]), float(host.v_buffer[local][row].flatten()[0]))
                if got != (stamp(layer, pos, 0), stamp(layer, pos, 1)):
                    wrong.append(f"{pool} host row {row} (position {pos}) layer {layer}: {got}")
        return wrong

    # -- pools and nodes ---------------------------------------------------------------------------------------

    def host_used(self) -> dict[str, int]:
        return {name: pool.size - pool.available_size() for name, pool in self.host.items()}

    def nodes(self) -> list[NodeView]:
        """The Python core's nodes, parents first, with the position their first token sits at."""
        out: list[NodeView] = []
        root = self.sgl.tree_core.root_node
        stack = [(child, 0) for child in root.children.values()]
        while stack:
            node, start = stack.pop()
            full, swa = node.component_data[self.ct.FULL], node.component_data[self.ct.SWA]

            def ids(t):
                return None if t is None else [int(x) for x in t.tolist()]

            out.append(
                NodeView(
                    node_id=node.id,
                    start=start,
                    length=len(node.key),
                    full=ids(full.value),
                    full_host=ids(full.host_value),
                    swa=ids(swa.value),
                    swa_host=ids(swa.host_value),
                    full_lock=full.lock_ref,
                    swa_lock=swa.lock_ref,
                    full_host_lock=full.host_lock_ref,
                    swa_host_lock=swa.host_lock_ref,
                )
            )
            stack.extend((child, start + len(node.key)) for child in node.children.values())
        return sorted(out, key=lambda n: n.start)

    def step(self) -> None:
        self.d.cache.hicache_step()

    def check_built(self, policy: str) -> None:
        """The stack init_hicache built (in the test, not the fixture: a fixture's failure is no verdict)."""
        assert self.sgl.cache_controller is not None and self.sgl.is_write_back == (policy == "write_back")
        assert self.sgl.write_through_threshold == (1 if policy == "write_through" else 2)
        assert self.sgl.buffer_pipeline is None and self.sgl.host_memory_mode == "cache"
        assert self.built.full_host_slots >= self.d.allocator.size
        assert self.built.swa_host_slots >= self.d.allocator.size_swa


@pytest.fixture
def cpu_hicache():
    from harness.targets.sglang.hicache import cpu_stand_ins

    with cpu_stand_ins():
        yield


def make_tier(sglang_target, core: str, ps: int, policy: str) -> Iterator[Tier]:
    from harness.targets.sglang.hicache import host_tier

    d = build(sglang_target, page_size=ps, core=core)
    assert d.cache.tree_core == core
    with host_tier(d.cache, write_policy=policy) as built:
        tier = Tier(d, core)
        tier.built = built
        yield tier


@pytest.fixture(params=CASES)
def write_through(request, sglang_target, cpu_hicache) -> Iterator[Tier]:
    core, ps = request.param
    yield from make_tier(sglang_target, core, ps, "write_through")


@pytest.fixture(params=CASES)
def write_back(request, sglang_target, cpu_hicache) -> Iterator[Tier]:
    core, ps = request.param
    yield from make_tier(sglang_target, core, ps, "write_back")


def serve_prompt(t: Tier, prompt: list[int]):
    """A request computes the prompt, its KV stamped, and finishes; returns (its row's full slots, the positions
    whose SWA the device tree kept live)."""
    req, cached = t.d.arrive(prompt)
    assert cached == 0
    t.d.grow(req, len(prompt))
    t.d.cache.slide_windows([req])
    t.stamp_request(req, 0, len(prompt))
    full = t.d.row(req, 0, len(prompt)).clone()
    t.d.leave(req, finished=True)
    live = t.d.cache.tree_slots().swa_live
    live_positions = [p for p, s in enumerate(full.tolist()) if s in set(live.tolist())]
    return full, live_positions


# -- 1. write-through ------------------------------------------------------------------------------------------


def test_write_through_backs_up_every_inserted_node_at_the_next_step(write_through: Tier):
    t, ps = write_through, write_through.d.ps
    t.check_built("write_through")
    cached = page_floor(len(PROMPT), ps)
    full, live = serve_prompt(t, PROMPT)
    # the last window is live on device: the positions a query at the end still reads
    assert set(range(cached - t.history, cached)) <= set(live), f"window positions {live} lost their SWA"

    # before the step: the backups are queued, the nodes locked by them
    assert t.sgl.protected_size() == cached and t.sgl.evictable_size() == 0, (
        f"a write-through backup in flight must lock its {cached} tokens: protected {t.sgl.protected_size()}"
    )
    t.step()
    assert t.sgl.protected_size() == 0 and t.sgl.evictable_size() == cached, (
        f"the step acknowledged the backups: protected {t.sgl.protected_size()}, evictable {t.sgl.evictable_size()}"
    )
    assert not t.sgl.ongoing_write_through
    assert t.host_used() == {"kv": cached, "swa": len(live)}, (
        f"host pools hold {t.host_used()}: expected every cached token ({cached}) and the live window ({len(live)})"
    )
    t.d.check()
    if t.core != "python":
        return
    nodes = t.nodes()
    assert sum(n.length for n in nodes) == cached
    for n in nodes:
        positions = list(range(n.start, n.start + n.length))
        assert n.full_host is not None and len(n.full_host) == n.length, f"node {n.node_id} was not backed up"
        assert (n.full_lock, n.swa_lock) == (0, 0), f"node {n.node_id} still locked after its ack"
        assert not t.host_rows_hold_stamps("kv", n.full_host, positions)
        on_device_swa = n.swa is not None
        assert (n.swa_host is not None) == on_device_swa, (
            f"node {n.node_id} (positions {n.start}..{n.start + n.length}): SWA on device {on_device_swa}, "
            f"SWA host copy {n.swa_host}"
        )
        if n.swa_host is not None:
            assert set(positions) <= set(live)
            assert not t.host_rows_hold_stamps("swa", n.swa_host, positions)


def match(t: Tier, prompt: list[int]) -> tuple[int, int, int]:
    """SGLang's match of the whole prompt: (device prefix, host hit, SWA host hit)."""
    from array import array

    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    m = t.sgl.match_prefix(MatchPrefixParams(key=RadixKey(array("q", prompt))))
    return m.device_prefix_len, m.host_hit_length, m.swa_host_hit_length


def evict_to_host(t: Tier, cached: int, host_expected: dict[str, int]) -> None:
    """Rule 3: a device eviction of everything; the device pools wholly free, the host as expected, the match a
    host hit of every cached token whose last window is on the SWA host pool; then the device is scrubbed."""
    t.d.cache.evict(full_tokens=10_000)
    assert (t.d.allocator.full_available_size(), t.d.allocator.swa_available_size()) == (
        t.d.allocator.size,
        t.d.allocator.size_swa,
    ), "the device eviction left device slots held"
    assert t.host_used() == host_expected, f"host pools hold {t.host_used()} after the eviction, not {host_expected}"
    assert match(t, PROMPT) == (0, cached, t.history), (
        f"after eviction to host (device, host hit, SWA host hit) = {match(t, PROMPT)}; expected 0, {cached}, {t.history}"
    )
    t.scrub_device()


def load_back(t: Tier, cached: int, live: list[int]) -> None:
    """Rule 4: the prompt asked again is loaded back; after the step's ack its row reads the stamped KV."""
    prompt2 = PROMPT + [7, 7]
    expect = min(page_floor(len(prompt2) - 1, t.d.ps), cached)  # all but the last token, of what the tree holds
    req, got = t.d.arrive(prompt2)
    assert got == expect, f"admission loaded back {got} tokens, expected {expect}"
    assert len(t.sgl.ongoing_load_back) == 1, "the load-back is pending until the step acknowledges it"
    assert t.sgl.protected_size() == expect
    if t.core == "python":
        anchor = t.nodes()[-1]
        assert (anchor.full_host_lock, anchor.swa_host_lock) == (1, 1), (
            f"the load-back's anchor holds host locks {anchor.full_host_lock}, {anchor.swa_host_lock}; expected 1, 1"
        )
        assert anchor.full_lock == 2, f"the anchor is locked by the request and the pending load-back: {anchor}"
    t.step()
    assert not t.sgl.ongoing_load_back, "the step did not acknowledge the load-back"
    assert t.sgl.protected_size() == expect, "after the ack only the request's own lock holds the prefix"
    if t.core == "python":
        nodes = t.nodes()
        assert all(n.full_host_lock == 0 and n.swa_host_lock == 0 for n in nodes), "a host lock outlived its load"
        assert all(n.full_lock == 1 for n in nodes), [n.full_lock for n in nodes]
        assert all(n.full is not None and len(n.full) == n.length for n in nodes), "a node was not loaded back"
    wrong = t.device_positions_hold_stamps(req, 0, got)
    assert not wrong, f"loaded-back KV differs from what was written: {wrong[:4]}"
    swa = t.d.mapping(t.d.row(req, 0, got)).tolist()
    assert all(swa[p] > 0 for p in range(got - t.history, got)), (
        f"window positions lack SWA slots after load-back: {swa}"
    )
    assert all(swa[p] == 0 for p in range(got) if p not in set(live)), f"a tombstoned position got an SWA slot: {swa}"
    t.d.check()
    t.d.leave(req, finished=False)
    t.d.check()
    assert t.sgl.protected_size() == 0


def test_write_through_eviction_to_host_and_load_back(write_through: Tier):
    t = write_through
    t.check_built("write_through")
    cached = page_floor(len(PROMPT), t.d.ps)
    _, live = serve_prompt(t, PROMPT)
    t.step()
    evict_to_host(t, cached, {"kv": cached, "swa": len(live)})
    load_back(t, cached, live)


# -- 2. write-back ---------------------------------------------------------------------------------------------


def test_write_back_copies_at_eviction_not_at_insert(write_back: Tier):
    t = write_back
    t.check_built("write_back")
    cached = page_floor(len(PROMPT), t.d.ps)
    _, live = serve_prompt(t, PROMPT)
    t.step()
    assert t.host_used() == {"kv": 0, "swa": 0}, f"write-back copied at insert: host pools hold {t.host_used()}"
    assert not t.sgl.ongoing_write_through
    assert (t.sgl.protected_size(), t.sgl.evictable_size()) == (0, cached), "write-back locked the inserted nodes"
    if t.core == "python":
        assert all(n.full_host is None and n.swa_host is None for n in t.nodes())
    evict_to_host(t, cached, {"kv": cached, "swa": len(live)})
    assert not t.sgl.ongoing_write_through, "the eviction's backups were left in flight"
    if t.core == "python":
        for n in t.nodes():
            positions = list(range(n.start, n.start + n.length))
            assert n.full is None and n.full_host is not None, f"node {n.node_id} was not demoted to host"
            assert not t.host_rows_hold_stamps("kv", n.full_host, positions)
            if n.swa_host is not None:
                assert set(positions) <= set(live)
                assert not t.host_rows_hold_stamps("swa", n.swa_host, positions)
    load_back(t, cached, live)


def test_a_load_back_without_device_room_loads_nothing_and_holds_nothing(write_through: Tier):
    """Rule 4's other side: when running requests hold the device pool, the load-back is called off whole: the
    request is admitted without a prefix, no lock, host lock or pending load-back remains, the host keeps it all."""
    t, ps = write_through, write_through.d.ps
    cached = page_floor(len(PROMPT), ps)
    _, live = serve_prompt(t, PROMPT)
    t.step()
    evict_to_host(t, cached, {"kv": cached, "swa": len(live)})
    hogs = []
    for k in range(2):  # two running requests of 60 tokens hold 120 of the 128 full slots, none evictable
        hog, got = t.d.arrive([500 + 100 * k + i for i in range(60)])
        assert got == 0
        for _ in range(15):
            t.d.grow(hog, 4)
            t.d.cache.slide_windows([hog])
        hogs.append(hog)
    free = t.d.allocator.full_available_size()
    assert free < cached, f"{free} free full slots leave room for the {cached}-token load-back"

    req, got = t.d.arrive(PROMPT + [7, 7])
    assert got == 0 and req.cache_protected_len == 0, f"a load-back without device room admitted {got} tokens"
    assert not t.sgl.ongoing_load_back and t.sgl.protected_size() == 0
    assert t.d.allocator.full_available_size() == free, "the called-off load-back kept device slots"
    assert t.host_used() == {"kv": cached, "swa": len(live)}
    if t.core == "python":
        nodes = t.nodes()
        assert all((n.full_lock, n.swa_lock, n.full_host_lock, n.swa_host_lock) == (0, 0, 0, 0) for n in nodes), nodes
    assert match(t, PROMPT) == (0, cached, t.history)
    t.step()
    t.d.check()
    for r in [req, *hogs]:
        t.d.leave(r, finished=False)
    t.d.check()
    load_back(t, cached, live)  # with the room back, the same prompt loads


# -- 5. host eviction ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_host_eviction_frees_the_least_recent_host_leaf(policy, sglang_target, cpu_hicache):
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType

    for t in make_tier(sglang_target, "python", 4, policy):
        t.check_built(policy)
        cached = page_floor(len(PROMPT), t.d.ps)
        _, live = serve_prompt(t, PROMPT)
        t.step()
        evict_to_host(t, cached, {"kv": cached, "swa": len(live)})
        leaf = t.nodes()[-1]
        assert leaf.swa_host is not None and leaf.start + leaf.length == cached

        # SWA host eviction: the leaf's window goes and with it the leaf (a leaf without its window can never be
        # hit), full host copy and all; nothing hits any more (a host hit must end with its window)
        freed = t.sgl.evict_host(1, ComponentType.SWA)
        assert freed == len(leaf.swa_host), f"an SWA host eviction freed {freed}, the leaf's window is {leaf.swa_host}"
        assert t.host_used() == {"kv": cached - leaf.length, "swa": 0}, t.host_used()
        rest = t.nodes()
        assert leaf.node_id not in [n.node_id for n in rest] and sum(n.length for n in rest) == cached - leaf.length
        assert match(t, PROMPT)[1:] == (0, 0), f"a host hit without its window: {match(t, PROMPT)}"

        # full host eviction: the least-recent host leaf (now the deepest node left) goes first, then the rest
        freed = t.sgl.evict_host(1)
        assert freed == rest[-1].length, f"evicting one host token freed {freed}, not the leaf's {rest[-1].length}"
        assert t.host_used() == {"kv": cached - leaf.length - rest[-1].length, "swa": 0}
        assert [n.node_id for n in t.nodes()] == [n.node_id for n in rest[:-1]]
        freed = t.sgl.evict_host(10_000)
        assert freed == sum(n.length for n in rest[:-1]) and t.host_used() == {"kv": 0, "swa": 0}
        assert t.nodes() == [], "host-only nodes with no host copy left stayed in the tree"
        t.sgl.sanity_check()


# -- 6-7. L3 storage (the file backend) ------------------------------------------------------------------------


STORAGE_CASES = [
    *(pytest.param((core, ps, 5), id=f"{core}-page{ps}") for core in ("python", "rust") for ps in (1, 4)),
    pytest.param(("python", 1, 2), id="python-page1-window2"),  # a one-token window: one SWA page per prompt
]


@pytest.fixture(params=STORAGE_CASES)
def with_storage(request, sglang_target, cpu_hicache, tmp_path) -> Iterator[Tier]:
    from harness.targets.sglang.hicache import host_tier

    core, ps, window = request.param
    d = build(sglang_target, page_size=ps, core=core, window=window)
    cached = page_floor(len(PROMPT), ps)  # the threshold is the whole hit: one token less is not prefetched
    with host_tier(d.cache, storage_dir=str(tmp_path), prefetch_threshold=cached) as built:
        tier = Tier(d, core)
        assert tier.sgl.enable_storage and built.storage_dir == str(tmp_path)
        yield tier


def stored_pages(t: Tier, tmp: str) -> tuple[int, int]:
    """(KV pages, SWA pages) the file backend holds: one file per page and pool, an SWA page's key marked."""
    import os

    names = os.listdir(tmp)
    swa = sum(".swa" in name for name in names)
    return len(names) - swa, swa


def test_storage_backup_then_prefetch_brings_the_kv_back(with_storage: Tier):
    from harness.targets.sglang.hicache import prefetch, wait_for_storage_backups

    t, ps = with_storage, with_storage.d.ps
    storage = t.d.cache.sglang.cache_controller.storage_backend.file_path
    cached = page_floor(len(PROMPT), ps)
    _, live = serve_prompt(t, PROMPT)
    t.step()  # the host backups are acknowledged; each then goes on to storage

    # 6. the L3 backup: each node holds a host lock until its storage ack drains, then the pages are on disk
    assert t.sgl.ongoing_backup, "no storage backup followed the host backups"
    if t.core == "python":
        backing = {node_id for node_id, _ in t.sgl.ongoing_backup.values()}
        assert all(n.full_host_lock == 1 for n in t.nodes() if n.node_id in backing)
        assert t.sgl.evict_host(10_000) == 0, "a host copy in flight to storage was host-evicted"
    wait_for_storage_backups(t.d.cache)
    if t.core == "python":
        assert all(n.full_host_lock == 0 and n.swa_host_lock == 0 for n in t.nodes()), "a storage ack kept its lock"
    window_pages = -(-len(live) // ps)
    assert stored_pages(t, storage) == (cached // ps, window_pages), (
        f"storage holds {stored_pages(t, storage)} (KV, SWA) pages; expected every cached page ({cached // ps}) and "
        f"the window's ({window_pages})"
    )

    # both tiers lose the prompt: only storage has it
    t.d.cache.evict(full_tokens=10_000)
    assert t.sgl.evict_host(10_000) == cached and t.host_used() == {"kv": 0, "swa": 0}
    assert match(t, PROMPT) == (0, 0, 0)
    t.scrub_device()
    t.host["kv"].k_buffer.fill_(-1.0)
    t.host["kv"].v_buffer.fill_(-1.0)
    t.host["swa"].k_buffer.fill_(-1.0)
    t.host["swa"].v_buffer.fill_(-1.0)

    # 7. the prefetch reads it back into the host tier, the KV as written; the outcome counters count it alone
    before = t.sgl.prefetch_outcome_stats_snapshot()
    assert set(before.values()) == {0}, f"prefetch outcome counters before any prefetch: {before}"
    prompt2 = PROMPT + [7, 7]
    got = prefetch(t.d.cache, prompt2, "again")
    assert (got.asked, got.loaded, got.start) == (len(prompt2) - 1, cached, 0), f"{got}: expected {cached} from 0"
    requested = page_floor(len(prompt2) - 1, ps)  # what the prefetch asked storage for: whole pages
    expected_stats = dict.fromkeys(before, 0) | {
        "attempts": 1,
        "issued": 1,
        "l3_demand_requests": 1,
        "l1l2_miss_tokens": requested,
        "l3_miss_tokens": requested - cached,
    }
    assert t.sgl.prefetch_outcome_stats_snapshot() == expected_stats, t.sgl.prefetch_outcome_stats_snapshot()
    # a prefetch of one token past nothing: whole pages only, so at page 1 an attempt declined as too short (below
    # the threshold), at a larger page no attempt at all; nothing is issued either way
    short = prefetch(t.d.cache, [900, 901], "short")
    assert (short.asked, short.loaded, short.start) == (1, 0, None), short
    one = 1 if ps == 1 else 0
    expected_stats |= {"attempts": 1 + one, "declined_too_short": one}
    assert t.sgl.prefetch_outcome_stats_snapshot() == expected_stats, t.sgl.prefetch_outcome_stats_snapshot()
    assert t.host_used() == {"kv": cached, "swa": len(live)}, t.host_used()
    occupied = t.sgl.cache_controller.prefetch_tokens_occupied
    assert occupied == 0, f"a finished prefetch still occupies {occupied} tokens of the prefetch budget"
    assert match(t, PROMPT) == (0, cached, t.history), f"after the prefetch: {match(t, PROMPT)}"
    if t.core == "python":
        for n in t.nodes():
            positions = list(range(n.start, n.start + n.length))
            assert n.full is None and n.full_host is not None
            assert not t.host_rows_hold_stamps("kv", n.full_host, positions), "storage gave back other KV"
            if n.swa_host is not None:
                assert not t.host_rows_hold_stamps("swa", n.swa_host, positions), "storage gave back other SWA KV"
        assert all(n.full_host_lock == 0 for n in t.nodes()), "the prefetch kept a host lock"
    load_back(t, cached, live)


def test_storage_attached_at_runtime_backs_up_clears_and_detaches(sglang_target, cpu_hicache, tmp_path):
    """The runtime storage API (``/attach_hicache_storage_backend``, ``/clear_hicache_storage``, detach): refused
    without HiCache; with the host tier, an attached file backend takes rule 6's backups, a clear empties it (a
    later prefetch misses, counted as one full miss), a detach turns storage off."""
    import json

    from harness.targets.sglang.hicache import host_tier, one_rank, prefetch, wait_for_storage_backups

    d = build(sglang_target, page_size=4, core="python")
    with one_rank(), host_tier(d.cache) as built:
        t = Tier(d, "python")
        t.built = built
        assert not t.sgl.enable_storage
        ok, why = t.sgl.attach_storage_backend(
            "file", json.dumps({"file_storage_path": str(tmp_path), "prefetch_threshold": 4})
        )
        assert ok and t.sgl.enable_storage, why

        # a prompt within one window: its one node is all window, and all of it is backed up, full and SWA
        short = PROMPT[:4]
        serve_prompt(t, short)
        t.step()
        assert t.host_used() == {"kv": 4, "swa": 4}, t.host_used()
        (node,) = t.nodes()
        assert node.full_host is not None and node.swa_host is not None and len(node.swa_host) == 4
        assert not t.host_rows_hold_stamps("swa", node.swa_host, [0, 1, 2, 3])
        wait_for_storage_backups(d.cache)
        assert stored_pages(t, str(tmp_path)) == (1, 1)

        assert t.sgl.clear_storage_backend() is True
        assert stored_pages(t, str(tmp_path)) == (0, 0), "a clear left pages in storage"
        t.d.cache.evict(full_tokens=10_000)
        assert t.sgl.evict_host(10_000) == 4 and match(t, short) == (0, 0, 0)
        got = prefetch(t.d.cache, short + [7], "after-clear")
        assert (got.asked, got.loaded, got.start) == (4, 0, None), got
        stats = t.sgl.prefetch_outcome_stats_snapshot()
        assert (stats["revoked_full_miss"], stats["revoked_insufficient"], stats["l3_miss_tokens"]) == (1, 0, 4), stats
        assert t.host_used() == {"kv": 0, "swa": 0}, "a prefetch that missed kept host slots"

        ok, why = t.sgl.detach_storage_backend()
        assert ok and not t.sgl.enable_storage, why

    # last: without HiCache the API refuses (a mutant that breaks this path crashes on None, which would hide the
    # assertions above)
    plain = build(sglang_target, page_size=4, core="python")
    ok, why = plain.cache.sglang.attach_storage_backend("file", json.dumps({"file_storage_path": str(tmp_path)}))
    assert not ok and "--enable-hierarchical-cache" in why, (ok, why)
    assert plain.cache.sglang.clear_storage_backend() is False


# -- 8. retraction to the host pool ----------------------------------------------------------------------------


@pytest.mark.parametrize("ps,computed", [(1, 20), (4, 20), (4, 19)])
def test_a_request_retracted_to_the_host_pool_comes_back_whole(ps, computed, sglang_target, cpu_hicache):
    """Rule 8 (``--disaggregation-decode-retraction-backup host_pool``, ``common.py``'s ``backup_kv_cache`` /
    ``restore_kv_cache``): a decoding request retracted to the host tier and re-admitted into new slots reads every
    computed position's full KV back and its window's SWA KV (the window's pages), and the host slots it took go
    back. ``computed`` off a page boundary pads the copy to whole pages."""
    for t in make_tier(sglang_target, "python", ps, "write_through"):
        assert t.sgl.supports_retraction_backup()
        prompt = [200 + i for i in range(computed)]
        req, _ = t.d.arrive(prompt)
        t.d.grow(req, computed)
        t.stamp_request(req, 0, computed)
        req.output.append(9)  # the next input token: its KV is not computed yet (seqlen = computed + 1)
        sgl = t.d.cache._sync_in(req)
        backup = t.sgl.backup_kv_cache(sgl)
        assert backup is not None, "the host pools had room for the backup"
        padded = -(-computed // ps) * ps
        assert len(backup.host_indices) == padded, f"backed up {len(backup.host_indices)} slots, not {padded}"
        held = t.host_used()
        window_start = max(0, computed - t.history) // ps * ps
        assert held == {"kv": padded, "swa": padded - window_start}, held
        t.d.leave(req, finished=False)  # retracted: its slots go back and other requests write there
        t.scrub_device()

        again, cached = t.d.arrive(prompt)
        assert cached == 0
        t.d.grow(again, computed)
        again.output.append(9)
        t.sgl.restore_kv_cache(t.d.cache._sync_in(again), backup)
        assert t.host_used() == {"kv": 0, "swa": 0}, "the restore kept host slots"
        full = t.d.row(again, 0, computed)
        wrong = []
        for pos, slot in zip(range(computed), full.tolist()):
            for layer in t.full_layers:
                got = float(t.kv.get_key_buffer(layer)[slot].flatten()[0])
                if got != stamp(layer, pos, 0):
                    wrong.append(f"position {pos} full layer {layer}: {got}")
        swa = t.d.mapping(full).tolist()
        for pos in range(window_start, computed):
            for layer in t.swa_layers:
                got = float(t.kv.get_value_buffer(layer)[swa[pos]].flatten()[0])
                if got != stamp(layer, pos, 1):
                    wrong.append(f"position {pos} SWA layer {layer}: {got}")
        assert not wrong, f"the restored request reads other KV: {wrong[:4]}"
        t.d.leave(again, finished=False)
        t.d.check()


# -- 9. buffer mode (host RAM as staging only) -----------------------------------------------------------------


@pytest.mark.parametrize("ps", [1, 4])
def test_buffer_mode_stages_through_host_and_keeps_nothing_there(ps, sglang_target, cpu_hicache, tmp_path):
    """Rule 9 (``--hicache-host-memory-mode buffer_only``): host RAM only stages. An insert's backup passes through
    it to storage (every cached page and the window's pages stored) and leaves no host value and no host slot; a
    device eviction leaves nothing to hit; a prefetch stages the stored span in host RAM (the full pages with the
    KV as written, and the window's SWA pages) for admission, and an abort gives the staging back."""
    from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle

    from harness.targets.sglang.hicache import host_tier, prefetch, wait_for_storage_backups

    d = build(sglang_target, page_size=ps, core="python")
    cached = page_floor(len(PROMPT), ps)
    with host_tier(d.cache, storage_dir=str(tmp_path), prefetch_threshold=cached, host_memory_mode="buffer_only"):
        t = Tier(d, "python")
        assert t.sgl.buffer_pipeline is not None and t.sgl.host_memory_mode == "buffer_only"
        _, live = serve_prompt(t, PROMPT)
        t.step()
        wait_for_storage_backups(d.cache)
        assert stored_pages(t, str(tmp_path)) == (cached // ps, -(-len(live) // ps)), stored_pages(t, str(tmp_path))
        assert t.host_used() == {"kv": 0, "swa": 0}, f"buffer mode kept {t.host_used()} on host after storing"
        assert all(n.full_host is None and n.swa_host is None for n in t.nodes()), "a node holds a host value"

        t.d.cache.evict(full_tokens=10_000)
        assert match(t, PROMPT) == (0, 0, 0), "buffer mode hit a host copy it must not keep"
        t.host["kv"].k_buffer.fill_(-1.0)
        t.host["kv"].v_buffer.fill_(-1.0)

        got = prefetch(d.cache, PROMPT + [7, 7], "buffered")
        handle = CacheRequestHandle("buffered", 0)
        assert got.loaded == cached and t.sgl.buffer_pipeline.has_staged(handle), got
        staged = t.sgl.buffer_pipeline.staged_prefetches[handle]
        assert (staged.matched_len, staged.num_tokens) == (0, cached)
        assert t.host_used() == {"kv": cached, "swa": len(live)}, t.host_used()
        rows = [int(x) for x in staged.host_indices.tolist()]
        assert not t.host_rows_hold_stamps("kv", rows, list(range(cached))), "the staged pages hold other KV"
        swa_staged = [x for x in staged.aux_xfers if x.name.value == "swa"]
        assert sum(len(x.host_indices) for x in swa_staged) == len(live)

        cc = t.sgl.cache_controller
        assert cc.prefetch_tokens_occupied == cached, f"the staging occupies {cc.prefetch_tokens_occupied} tokens"
        t.sgl.release_aborted_request(handle)
        assert cc.prefetch_tokens_occupied == 0, f"an aborted staging still occupies {cc.prefetch_tokens_occupied}"
        assert not t.sgl.buffer_pipeline.has_staged(handle)
        assert t.host_used() == {"kv": 0, "swa": 0}, f"an aborted request's staging stayed: {t.host_used()}"
