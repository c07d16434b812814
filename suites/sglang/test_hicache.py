"""SGLang's HiCache host tier under the unified radix cache, on CPU: ``init_hicache`` over the harness's
``SGLangPrefixCache`` builds the host pools (full and SWA) and the ``HybridCacheController`` a
``--enable-hierarchical-cache`` server builds; the only stand-ins are the CUDA host registration and the copy kernel
(``harness/targets/sglang/hicache.py`` says which lines need them and why nothing else does).

Rules held, each on real KV: every position's K and V are stamped with a value derived from (layer, position, K or
V) before the request leaves, and the device pools are scrubbed before anything is read back.

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
4. **Load-back returns the KV that was written.** The next admission of the prompt loads the host hit back
   (``init_load_back``): its prefix is every cached whole page of the prompt but the last token; the load-back
   holds a host lock and device locks until the next step acknowledges it, and then holds nothing but the
   request's own lock. The request's row then reads, at every position, the values stamped before eviction (full
   layers), window positions have SWA slots holding their SWA values, and positions below the window (tombstones)
   have none.
5. **Host eviction frees host leaves.** ``evict_host`` frees the host copy of least-recent host-only leaves, full
   and SWA, and a later match no longer hits them.

Node-level checks (host values per node, lock counts) read the Python tree core's nodes; the cache-level ones run on
both tree cores. Skips where SGLang is not installed (``nox -s sglang`` runs it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from harness.mem import HybridPoolSpec
from suites.sglang.test_prefix_cache_adapter import WINDOW, Driver, build, page_floor

HISTORY = WINDOW - 1  # the tokens before a query its window reads: SGLang's sliding_window_size
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
                    node.id,
                    start,
                    len(node.key),
                    ids(full.value),
                    ids(full.host_value),
                    ids(swa.value),
                    ids(swa.host_value),
                    full.lock_ref,
                    swa.lock_ref,
                    full.host_lock_ref,
                    swa.host_lock_ref,
                )
            )
            stack.extend((child, start + len(node.key)) for child in node.children.values())
        return sorted(out, key=lambda n: n.start)

    def step(self) -> None:
        self.d.cache.hicache_step()


@pytest.fixture(scope="module")
def sglang_target():
    from harness.targets.sglang.imports import SGLangUnavailable

    try:
        from harness.targets.sglang import SGLangTarget

        return SGLangTarget()
    except SGLangUnavailable as unavailable:
        pytest.skip(f"SGLang is not importable here: {unavailable}")


@pytest.fixture
def cpu_hicache():
    from harness.targets.sglang.hicache import cpu_stand_ins

    with cpu_stand_ins():
        yield


def make_tier(sglang_target, core: str, ps: int, policy: str) -> Iterator[Tier]:
    from harness.targets.sglang.hicache import attach_host_tier, detach_host_tier

    d = build(sglang_target, page_size=ps, core=core)
    assert d.cache.tree_core == core
    built = attach_host_tier(d.cache, write_policy=policy)
    tier = Tier(d, core)
    assert tier.sgl.cache_controller is not None and tier.sgl.is_write_back == (policy == "write_back")
    assert built.full_host_slots >= d.allocator.size and built.swa_host_slots >= d.allocator.size_swa
    try:
        yield tier
    finally:
        detach_host_tier(d.cache)


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
    cached = page_floor(len(PROMPT), ps)
    full, live = serve_prompt(t, PROMPT)
    # the last window is live on device: the positions a query at the end still reads
    assert set(range(cached - HISTORY, cached)) <= set(live), f"window positions {live} lost their SWA"

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
    assert match(t, PROMPT) == (0, cached, HISTORY), (
        f"after eviction to host (device, host hit, SWA host hit) = {match(t, PROMPT)}; expected 0, {cached}, {HISTORY}"
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
    assert all(swa[p] > 0 for p in range(got - HISTORY, got)), f"window positions lack SWA slots after load-back: {swa}"
    assert all(swa[p] == 0 for p in range(got) if p not in set(live)), f"a tombstoned position got an SWA slot: {swa}"
    t.d.check()
    t.d.leave(req, finished=False)
    t.d.check()
    assert t.sgl.protected_size() == 0


def test_write_through_eviction_to_host_and_load_back(write_through: Tier):
    t = write_through
    cached = page_floor(len(PROMPT), t.d.ps)
    _, live = serve_prompt(t, PROMPT)
    t.step()
    evict_to_host(t, cached, {"kv": cached, "swa": len(live)})
    load_back(t, cached, live)


# -- 2. write-back ---------------------------------------------------------------------------------------------


def test_write_back_copies_at_eviction_not_at_insert(write_back: Tier):
    t = write_back
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


# -- 5. host eviction ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_host_eviction_frees_the_least_recent_host_leaf(policy, sglang_target, cpu_hicache):
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType

    for t in make_tier(sglang_target, "python", 4, policy):
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
