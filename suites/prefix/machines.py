"""The prefix-cache state machine: requests that share prefixes, driven through any target's ``PrefixCache``
(``harness.mem.contracts``) the way a scheduler drives it, on that target's allocator.

Steps: a request arrives (its prompt branches off one of a few stems, continues a finished conversation, or
repeats a prompt exactly) and is admitted with its cached prefix; a prefill chunk (ending anywhere in a page;
an unfinished request is checkpointed into the tree); a decode token, for one request or for every decoding request
with one window slide for the batch (a scheduler's step); a request finishes (inserted), is
aborted (nothing inserted) or retracted (released and queued again with its output); the tree evicts full
KV or SWA KV on its own. Before an allocation the tree gives up what the pools lack, as a scheduler asks
it to; an allocation that still cannot be served waits (the step does nothing).

After every step, in this order (the target's own ``sanity_check`` last, so that a wrong state is seen by a
suite assertion before the code under test notices it):
* ownership: every full page and every live SWA page is free, a tree node's or one running request's own,
  never two of these; a request's protected prefix reads the tree's slots;
* accounting: per pool, free + evictable + protected + what requests own = size; the tree's evictable +
  protected = what it holds; protected = the union of the running requests' prefixes (lock refs equal
  their holders); nothing is protected once no request runs;
* windows: no running request's window holds a position whose SWA slot is gone, and no request keeps SWA
  KV more than two pages below its window (what leaves the window is given back);
* locks: the SWA KV the tree protects lies in the prefixes of requests whose window has not passed them (a lock
  that never follows its window strands SWA KV: SGLang #28161); the sink is never handed back to the SWA pool's
  page allocator, checked as the call is made (SGLang #38269 / #38519);
* matches: every match ends where its last ``W - 1`` tokens hold live SWA KV; right after a chunk's
  checkpoint, the request's protected prefix is all its whole pages, and a match finds all of it.

With ``overlap`` (``harness/engine/overlap.py``) a decode batch is launched before the one in flight is committed:
its tokens get slots first (``slots_len`` runs one ahead of ``kv_len``), then the batch in flight is committed and
slid on its computed tokens, so every check above also runs with a step in flight. A decode of one request or a
request's leaving commits the batch in flight first (a step's requests are released only after it ran).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.mem.contracts import PrefixCache
from harness.targets.target import PoolSpec, Target
from suites.pool.machines import refuse_padding_give_backs

VOCAB = 5  # few token ids: prompts collide and branch often


@dataclass(frozen=True)
class CacheShape:
    """One configuration of the machine: page size, window, pool sizes in pages."""

    page_size: int
    window: int
    full_pages: int
    swa_pages: int
    max_requests: int = 4

    @property
    def context(self) -> int:
        return 5 * max(self.page_size, self.window) + 8

    def label(self) -> str:
        return f"page{self.page_size}-window{self.window}"


SHAPES = (
    CacheShape(page_size=1, window=4, full_pages=48, swa_pages=20),
    CacheShape(page_size=4, window=6, full_pages=16, swa_pages=9),
    CacheShape(page_size=16, window=8, full_pages=10, swa_pages=6),  # window < page (#22470, #29860)
    CacheShape(page_size=4, window=3, full_pages=16, swa_pages=8),
)


@dataclass(eq=False)
class SimReq:
    """A request as the cache sees it (``CacheRequest``): a row, its lengths, its lock. The suites and tests that
    drive a ``PrefixCache`` without an engine use this one."""

    prompt: list[int]
    rid: int = 0
    output: list[int] = field(default_factory=list)
    req_pool_idx: int | None = None
    kv_len: int = 0
    slots_len: int = 0
    swa_evicted: int = 0
    swa_branch: int = 0
    cache_protected_len: int = 0
    prefix_lock: object | None = None

    @property
    def fill_ids(self) -> list[int]:
        return self.prompt + self.output

    @property
    def prefilling(self) -> bool:
        return self.kv_len < len(self.prompt)


def page_floor(n: int, ps: int) -> int:
    return n // ps * ps


def step(fn: Callable) -> Callable:
    """Mark the machine unhealthy while a step or check runs: if it fails, ``teardown`` leaves the corrupted state
    alone, so the suite's own assertion is what the run reports, not a crash of the code under test cleaning up."""

    @functools.wraps(fn)
    def run(self, *args, **kwargs):
        self.healthy = False
        result = fn(self, *args, **kwargs)
        self.healthy = True
        return result

    return run


class PrefixCacheMachine(RuleBasedStateMachine):
    """Set ``target`` and ``shape`` on a subclass (``machine_for``) before running it."""

    target: Target
    shape: CacheShape
    overlap: bool = False

    @initialize()
    def setup(self):
        self.healthy = False
        s = self.shape
        self.ps, self.window = s.page_size, s.window
        self.memory = self.target.build_pool(
            PoolSpec(
                size=s.full_pages * s.page_size,
                size_swa=s.swa_pages * s.page_size,
                page_size=s.page_size,
                max_requests=s.max_requests,
                max_context_len=s.context,
            )
        )
        self.allocator, self.rows = self.memory.allocator, self.memory.req_to_token_pool
        refuse_padding_give_backs(self.allocator.swa_attn_allocator, s.page_size)
        self.cache: PrefixCache = self.target.build_prefix_cache(self.memory, sliding_window_size=s.window)
        rng = random.Random(s.page_size * 100 + s.window)
        self.stems = [[rng.randrange(VOCAB) for _ in range(4 * max(s.page_size, s.window))] for _ in range(3)]
        self.finished: list[list[int]] = []  # token ids of finished requests: later turns continue them
        self.running: list[SimReq] = []
        self.slid: set[int] = set()  # requests whose window slid since their lock was last taken
        self.in_flight: list[SimReq] = []  # overlap: the decode batch launched, its KV not yet written
        self.next_rid = 0
        self.healthy = True

    # -- helpers ----------------------------------------------------------------------------------

    def _row(self, req: SimReq, lo: int, hi: int) -> torch.Tensor:
        return self.rows.req_to_token[req.req_pool_idx, lo:hi].long()

    def _mapping(self, slots: torch.Tensor) -> torch.Tensor:
        return self.allocator.full_to_swa_index_mapping[slots.long()]

    def _expect_window_live(self, slots: torch.Tensor, end: int, what: str) -> None:
        """The last ``W - 1`` of ``slots`` (positions ``.. end - 1``) hold live SWA KV."""
        tail = slots[max(0, end - self.window + 1) : end]
        dead = (self._mapping(tail) == 0).nonzero().flatten().tolist()
        assert not dead, (
            f"{what}: positions {[max(0, end - self.window + 1) + d for d in dead]} of the last "
            f"{self.window - 1} before {end} hold no SWA slot (a query there reads freed SWA KV)"
        )

    def _make_room(self, full: int, swa: int) -> bool:
        """Ask the tree for what the pools lack, as a scheduler does before it allocates."""
        lack_full = max(0, full - self.allocator.full_available_size())
        lack_swa = max(0, swa - self.allocator.swa_available_size())
        if lack_full or lack_swa:
            self.cache.evict(full_tokens=lack_full, swa_tokens=lack_swa)
        return self.allocator.full_available_size() >= full and self.allocator.swa_available_size() >= swa

    def _grow(self, req: SimReq, n: int, *, launch: bool = False) -> bool:
        """Slots for positions ``slots_len .. slots_len + n - 1``, their KV written unless ``launch`` (in flight);
        False (nothing taken) when the pools cannot serve it."""
        ps, begin = self.ps, req.slots_len
        need = (-(-(begin + n) // ps) - -(-begin // ps)) * ps
        if not self._make_room(need, need):
            return False
        if ps == 1:
            out = self.allocator.alloc(n)
        else:
            last = int(self.rows.req_to_token[req.req_pool_idx, begin - 1]) if begin else -1
            out = self.allocator.alloc_extend([begin], [begin + n], [last])
        if out is None:
            return False
        self.rows.write(req.req_pool_idx, begin, out)
        req.slots_len = begin + n
        if not launch:
            req.kv_len = req.slots_len
        return True

    def _commit_in_flight(self) -> None:
        """Overlap: the decode batch in flight has run: its KV is written, and its windows slide on that."""
        done, self.in_flight = self.in_flight, []
        for req in done:
            req.kv_len += 1
        if done:
            self._slide(done)

    def _slide(self, reqs: list[SimReq]) -> None:
        self.cache.slide_windows(reqs)
        self.slid.update(r.rid for r in reqs)

    def _retire(self, req: SimReq, how: str) -> None:
        if how == "finish":
            self.cache.cache_finished_req(req)
            self.finished.append(req.fill_ids[: req.kv_len])
        else:
            self.cache.release_req(req)
        self.rows.free(req.req_pool_idx)
        req.req_pool_idx = None
        self.running.remove(req)

    # -- steps ------------------------------------------------------------------------------------

    @precondition(lambda self: len(self.running) < self.shape.max_requests)
    @rule(data=st.data(), kind=st.sampled_from(["branch", "continue", "repeat"]))
    @step
    def arrive(self, data, kind):
        """A new request: a branch off a stem, a later turn of a finished one, or an exact repeat."""
        if kind != "branch" and self.finished:
            base = data.draw(st.sampled_from(self.finished))
            tail = (
                []
                if kind == "repeat"
                else data.draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=self.ps + 3))
            )
            prompt = base + tail if tail else base
        else:
            stem = data.draw(st.sampled_from(self.stems))
            cut = data.draw(st.integers(1, len(stem)))
            prompt = stem[:cut] + data.draw(st.lists(st.integers(0, VOCAB - 1), max_size=self.ps + 3))
        prompt = prompt[: self.shape.context - 8]
        self._admit(SimReq(prompt, self.next_rid))
        self.next_rid += 1

    def _admit(self, req: SimReq) -> None:
        row = self.rows.alloc(1)
        assert row is not None, "a row was free (the precondition) but alloc gave none"
        req.req_pool_idx = row[0]
        peek = self.cache.match_prefix(req.prompt[:-1])
        cached = self.cache.admit(req, req.prompt)
        assert cached == req.kv_len == req.cache_protected_len == req.slots_len, (
            f"admit returned {cached}, the request reads kv_len={req.kv_len}, protected={req.cache_protected_len}"
        )
        assert cached == peek.length and cached % self.ps == 0 and cached < len(req.prompt), (
            f"admit lent {cached} tokens; match_prefix of the same prompt found {peek.length} (page {self.ps})"
        )
        assert torch.equal(self._row(req, 0, cached), peek.indices[:cached].long()), (
            "the request's row does not read the slots the match found"
        )
        self._expect_window_live(self._row(req, 0, cached), cached, f"request {req.rid}: a match of {cached} tokens")
        self.running.append(req)
        self.slid.discard(req.rid)

    @precondition(lambda self: any(r.prefilling for r in self.running))
    @rule(data=st.data())
    @step
    def prefill_chunk(self, data):
        req = data.draw(st.sampled_from([r for r in self.running if r.prefilling]))
        n = data.draw(st.integers(1, min(len(req.prompt) - req.kv_len, 2 * self.ps + self.window)))
        if not self._grow(req, n):
            return
        if not (req.prefilling and self.cache.checkpoint_frees_window):  # harness.engine.scheduler's order
            self._slide([req])
        if req.prefilling:
            self.cache.cache_unfinished_req(req)
            self.slid.discard(req.rid)
            boundary = page_floor(req.kv_len, self.ps)
            assert req.cache_protected_len == boundary, (
                f"request {req.rid}: after a chunk checkpoint at kv_len {req.kv_len} its protected prefix is "
                f"{req.cache_protected_len} tokens, not its whole pages ({boundary})"
            )
            found = self.cache.match_prefix(req.fill_ids[:boundary])
            assert found.length == boundary, (
                f"request {req.rid}: right after its checkpoint, a match of the {boundary} inserted tokens finds "
                f"{found.length}: the leaf it inserted cannot end a match (its last window is not live)"
            )

    @precondition(lambda self: any(not r.prefilling for r in self.running))
    @rule(data=st.data())
    @step
    def decode(self, data):
        self._commit_in_flight()
        req = data.draw(st.sampled_from([r for r in self.running if not r.prefilling]))
        if req.kv_len >= self.shape.context - 1:
            return
        req.output.append((req.rid * 7 + len(req.output)) % VOCAB)
        if not self._grow(req, 1):
            req.output.pop()
            return
        self._slide([req])

    @precondition(lambda self: sum(not r.prefilling for r in self.running) > 1)
    @rule()
    @step
    def decode_batch(self):
        """A scheduler's decode step: a token for every decoding request, then one slide for the whole batch."""
        grown = []
        for req in [r for r in self.running if not r.prefilling and r.slots_len < self.shape.context - 1]:
            req.output.append((req.rid * 7 + len(req.output)) % VOCAB)
            if self._grow(req, 1, launch=self.overlap):
                grown.append(req)
            else:
                req.output.pop()
        if self.overlap:  # this batch launched, the one before it runs and commits
            self._commit_in_flight()
            self.in_flight = grown
        else:
            self._slide(grown)

    @precondition(lambda self: self.running)
    @rule(data=st.data(), how=st.sampled_from(["finish", "finish", "abort", "retract"]))
    @step
    def leave(self, data, how):
        self._commit_in_flight()
        req = data.draw(st.sampled_from(self.running))
        tokens = req.fill_ids[: req.kv_len]
        finish = how == "finish" and not req.prefilling  # an unfinished prompt can only be aborted
        self._retire(req, "finish" if finish else "release")
        if how == "retract" and tokens:  # back to the queue with what it generated, admitted again now
            self._admit(SimReq(tokens + [0], req.rid))

    @rule(full=st.booleans(), tokens=st.integers(1, 40))
    @step
    def evict(self, full, tokens):
        if full:
            self.cache.evict(full_tokens=tokens)
        else:
            self.cache.evict(swa_tokens=tokens)

    # -- invariants ---------------------------------------------------------------------------------

    @invariant()
    @step
    def owned_once_counted_right_windows_live(self):
        ps, tree = self.ps, self.cache.tree_slots()
        own_full = [self._row(r, r.cache_protected_len, r.slots_len) for r in self.running]
        own_swa = [self._row(r, max(r.swa_evicted, r.cache_protected_len), r.slots_len) for r in self.running]
        self._ownership("full", tree.full, own_full, self.allocator.full_available_size(), self.allocator.size)
        self._ownership(
            "SWA",
            self._mapping(tree.swa_live),
            [self._mapping(o) for o in own_swa],
            self.allocator.swa_available_size(),
            self.allocator.size_swa,
        )
        tombstones = tree.full[~torch.isin(tree.full, tree.swa_live)]
        assert bool((self._mapping(tombstones) == 0).all()), "a tombstoned tree slot still maps to an SWA slot"
        for req in self.running:
            prefix = self._row(req, 0, req.cache_protected_len)
            assert bool(torch.isin(prefix, tree.full).all()), (
                f"request {req.rid}: its protected prefix reads slots the tree does not hold"
            )
            self._expect_window_live(self._row(req, 0, req.kv_len), req.kv_len, f"request {req.rid}'s window")
            held_from = page_floor(max(0, req.kv_len - max(self.window, ps) - 2 * ps), ps)
            leaked = (self._mapping(self._row(req, req.cache_protected_len, held_from)) != 0).nonzero().flatten()
            assert leaked.numel() == 0, (
                f"request {req.rid} (kv_len {req.kv_len}) still holds SWA slots of positions "
                f"{(leaked + req.cache_protected_len).tolist()}, far behind its window"
            )
        self._accounting(tree)
        self._locks_follow_windows()
        self.cache.sanity_check()

    def _locks_follow_windows(self) -> None:
        """A request's SWA lock on its prefix ends at the first slide after its window has passed the prefix
        (``kv_len - W`` at or past it), on every target: what the tree protects lies in the other requests'
        prefixes (a checkpoint locks its new prefix anew; the next slide moves that lock).

        SGLang 0.5.23 breaks it for a prefix shorter than its window (docs/FINDINGS.md #13): such a lock's SWA segment
        reaches the root, its receipt's SWA uuid is None, and ``UnifiedRadixCache.release_swa_prefix_lock`` releases
        only a receipt whose uuid is not None, so the prefix's SWA KV stays protected until the request finishes
        (held to it as a strict xfail: suites/prefix/test_prefix_cache_machine.py). Here SGLang is held to what it
        does guarantee: every other lock follows its window."""
        short = self.window - 1 if self.target.name == "sglang" else 0  # SGLang's window: finding #13's prefixes
        passed = [
            r for r in self.running if r.rid in self.slid and r.kv_len - self.window >= r.cache_protected_len >= short
        ]
        pending = sum(r.cache_protected_len for r in self.running if r not in passed)
        assert self.cache.swa_protected_size() <= pending, (
            f"the tree protects {self.cache.swa_protected_size()} tokens' SWA KV, but the requests whose window has not "
            f"passed their prefix hold only {pending} prefix tokens: requests {[r.rid for r in passed]} (prefixes "
            f"{[r.cache_protected_len for r in passed]}) still lock SWA KV their window left behind"
        )

    def _ownership(self, side: str, tree: torch.Tensor, own: list[torch.Tensor], free: int, size: int) -> None:
        ps = self.ps
        owner: dict[int, str] = {}
        for name, slots in [("the tree", tree), *((f"request {r.rid}", o) for r, o in zip(self.running, own))]:
            assert bool((slots > 0).all()), f"{side}: {name} holds the padding slot"
            for page in set((slots // ps).tolist()):
                held = owner.setdefault(page, name)
                assert held == name, f"{side} page {page} is held by {held} and by {name}"
        assert free + ps * len(owner) == size, (
            f"{side} pool: {free} free + {ps * len(owner)} held (tree and requests) != {size} slots"
        )

    def _accounting(self, tree) -> None:
        c = self.cache
        assert c.evictable_size() + c.protected_size() == tree.full.numel(), (
            f"full: evictable {c.evictable_size()} + protected {c.protected_size()} != {tree.full.numel()} held by the tree"
        )
        assert c.swa_evictable_size() + c.swa_protected_size() == tree.swa_live.numel(), (
            f"SWA: evictable {c.swa_evictable_size()} + protected {c.swa_protected_size()} != "
            f"{tree.swa_live.numel()} live SWA slots held by the tree"
        )
        prefixes = [self._row(r, 0, r.cache_protected_len) for r in self.running]
        locked = torch.cat([tree.full[:0], *prefixes]).unique().numel()
        assert c.protected_size() == locked, (
            f"protected {c.protected_size()} full slots, but the running requests' prefixes hold {locked}"
        )
        if not self.running:
            assert c.swa_protected_size() == 0, f"{c.swa_protected_size()} SWA slots protected with no request running"

    def teardown(self):
        """Every request leaves, the tree is flushed: both pools are whole again."""
        if not getattr(self, "healthy", False):
            return  # never set up, or a step failed: its assertion is the report
        self._commit_in_flight()
        for req in list(self.running):
            self._retire(req, "finish")
        self.cache.reset()
        got = (self.allocator.full_available_size(), self.allocator.swa_available_size())
        assert got == (self.allocator.size, self.allocator.size_swa), (
            f"after every request left and the tree was flushed, (full, SWA) free is {got}"
        )


def machine_for(target: Target, shape: CacheShape, *, overlap: bool = False) -> type[PrefixCacheMachine]:
    """The machine bound to one target and shape, its decode batches overlapped or not (Hypothesis runs a class,
    not an instance)."""
    return type(
        f"PrefixCacheMachine_{target.name}_{shape.label()}{'_overlap' if overlap else ''}".replace("-", "_"),
        (PrefixCacheMachine,),
        {"target": target, "shape": shape, "overlap": overlap},
    )
