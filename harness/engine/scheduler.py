"""Continuous batching over the hybrid pool: admit, chunked prefill, decode, slide windows, release.

Memory policy, chosen so the engine can never deadlock or run out mid-generation:
* full slots: a request is admitted only when the full pool can hold its whole worst case
  (prompt + max_new_tokens - 1) on top of what running requests have reserved;
* SWA slots: between steps a request holds at most ``window - 1`` of them (older tokens give theirs
  back via ``free_swa``), so a pool of ``max_running * window + max_prefill_tokens`` slots serves
  every decode step and every prefill chunk; the engine checks this size at start-up.
A request that could not fit even into an empty engine is refused when it is added.

Pages (``page_size > 1``), as SGLang's scheduler does them: a request grows with ``alloc_extend`` and
``alloc_decode``, each filling the page of its last token before taking a new one, so its last page
is usually partly used; the window gives back whole pages only (everything before the page that
holds the oldest visible token); reservations and pool sizes count whole pages (``swa_slots_needed``).

Prefix cache (``tree_cache``, ``harness.mem.radix_cache``; on by default in the engine), as SGLang's
scheduler uses its radix cache:
* a request is admitted with its cached prefix: the tree lends it (locked) and its row reads the tree's
  slots; only the tokens after it are prefilled (at least the last prompt token, whose logits it needs);
* full slots: a request reserves its worst case minus its prefix, and is admitted only while what running
  requests may still allocate fits in free slots plus what the tree can evict (``evictable_size``: no
  request locks it); before every allocation the tree gives up what the pools lack, so that promise holds;
* SWA slots: a request's SWA lock on its prefix follows its window, and the window slide keeps ``W``
  tokens below the insert boundary (``RadixCache.swa_keep_from``): a request holds at most two pages more
  than without the cache (one token at page size 1), and the tree's other live SWA KV is evictable on demand;
* every prefill chunk, the prompt's last one too, is checkpointed into the tree after the window slides (the
  harness's tree lays the freed tokens as tombstones), or with no slide where the cache frees the out-of-window
  SWA slots of what it inserts itself (``checkpoint_frees_window``: SGLang's, whose scheduler slides windows only
  in decode; a slide first would free below a pending SWA branch point): the tree gets the prompt's full KV
  and the live SWA KV of its last window (a repeat of the prompt, or a longer prompt that continues it, hits);
  the request's SWA lock on it follows its window; a later prompt that shares only part of a published one
  repairs the window at its branching point (the tree's rule 7); a finished request's KV goes to the tree, an
  aborted or failed one's back to the pools.

Prompt logprobs (``Req.prompt_logprobs``, the server's ``echo``): every chunk of such a request's prefill returns every
row's logits, not only its last prompt token's (``PromptRows`` says which rows are whose), so each prompt position is
scored by the forward that prefilled it. It bypasses the prefix cache both ways: it reads no cached prefix (whose
positions no forward would score) and leaves nothing to the tree (its KV goes back to the pools, its window slides by
the cacheless rule): the tree never sees it, and the requests beside it share only the pools with it, as with any
request (its allocations may make the tree evict, as theirs do).

Speculative decoding (``speculative_tokens > 0``, page size 1): a decode step becomes a verify, an
extend of each request's last token and its drafts (``drafts.propose_drafts``) with every position's
logits. The engine accepts the drafts the target agrees with; ``commit_verify`` keeps their KV and
gives back the slots of the rest. A request never drafts past its reservation: its last possible
token needs no KV, so drafts stop one short of ``max_new_tokens``.

Overlap scheduling (``overlap=True``, ``harness.engine.overlap``: its rules): the next step is scheduled while one
is in flight, so batches are chosen and placed on ``slots_len`` (scheduled tokens) and everything that frees or
publishes KV counts ``kv_len`` (computed tokens); in sync scheduling the two are equal whenever this class looks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from harness.engine.drafts import propose_drafts
from harness.engine.forward_batch import ForwardBatch, ForwardMode
from harness.engine.overlap import FUTURE_TOKEN, Future
from harness.engine.request import FinishReason, Req
from harness.engine.sampling import GREEDY_BELOW
from harness.mem import ReqToTokenPool, SWATokenToKVPoolAllocator
from harness.mem.contracts import PrefixCache
from harness.mem.eviction import Evicted, evict_measured
from harness.mem.index import LOC_DTYPE
from harness.seams import seam


def pages(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size)


def swa_slots_needed(
    *,
    max_running: int,
    window: int | None,
    max_prefill_tokens: int,
    page_size: int = 1,
    speculative_tokens: int = 0,
    prefix_cache: bool = False,
    swa_windows_held: int = 1,
    steps_in_flight: int = 1,
) -> int:
    """The SWA pool that serves every step (see the module docstring). Between steps a request holds the
    pages from the one with its oldest visible token on: at most ``pages(window - 1 + page_size - 1)``,
    two pages more with a prefix cache, and ``swa_windows_held`` windows where the cache's SWA lock holds
    a prefix's window until the request's own has passed it (SGLang's: 2); a step adds a page per request
    (a decode token, or the partial pages around a chunk), a verify its drafts, and the step's prefill
    tokens. At page size 1 without drafts that is ``max_running * window + max_prefill_tokens``, with the
    harness's cache or without. With overlap scheduling ``steps_in_flight`` steps hold new slots at once, each a
    page per request and its prefill tokens (``harness.engine.overlap``, rule 6)."""
    slack = 3 * (page_size - 1) if prefix_cache else page_size - 1
    held = pages(swa_windows_held * (window or 1) - 1 + slack, page_size) + steps_in_flight
    prefill = steps_in_flight * pages(max_prefill_tokens, page_size)
    return (max_running * (held + speculative_tokens) + prefill) * page_size


@dataclass(frozen=True)
class PromptRows:
    """One prompt-logprob request's rows of an extend's logits: rows ``first .. first + count - 1`` are the logits at
    its prompt positions ``position .. position + count - 1``, each predicting the token after it."""

    req: Req
    first: int
    position: int
    count: int


@dataclass
class ScheduledBatch:
    mode: ForwardMode
    reqs: list[Req]
    extend_lens: list[int] | None = None  # new tokens per request (extend and verify)
    drafts: list[list[int]] | None = None  # verify: each request's draft tokens, after its last token
    # Set by build_forward_batch for an extend: the rows of requests scoring their prompt, and then which rows of the
    # logits are the sampling rows, in the order of ``commit``'s requests (None: every row is one, in that order).
    prompt_rows: list[PromptRows] = field(default_factory=list)
    sample_rows: list[int] | None = None
    futures: list[Future] = field(default_factory=list)  # overlap: inputs the step in flight has not sampled yet


class Scheduler:
    def __init__(
        self,
        req_to_token_pool: ReqToTokenPool,
        allocator: SWATokenToKVPoolAllocator,
        *,
        max_running: int,
        chunk_size: int,
        max_prefill_tokens: int,
        window: int | None,
        speculative_tokens: int = 0,
        tree_cache: PrefixCache | None = None,
        overlap: bool = False,
    ) -> None:
        if speculative_tokens and overlap:
            raise ValueError(
                "overlap scheduling needs speculative_tokens 0: a verify's accepted count decides where "
                "the next step starts"
            )
        if speculative_tokens and allocator.page_size > 1:
            raise ValueError(
                "speculative decoding needs page_size 1: rejected drafts give back their slots one "
                "by one, and a page may hold accepted tokens too"
            )
        self.speculative_tokens = speculative_tokens
        self.overlap = overlap
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.max_running = max_running
        self.chunk_size = chunk_size
        self.max_prefill_tokens = max_prefill_tokens
        self.window = window
        self.tree_cache = tree_cache
        self.page_size = allocator.page_size
        self.device = allocator.device
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.evicted = Evicted()  # what the tree's evictions took over the scheduler's life (the server's counters)

    # -- admission -----------------------------------------------------------------------------

    def _outstanding(self) -> int:
        """Full slots running requests may still allocate: their reservations less what they hold."""
        ps = self.page_size
        return sum(r.reserved_tokens - (pages(r.slots_len, ps) * ps - r.cached_tokens) for r in self.running)

    def _headroom(self) -> int:
        """Full slots that can still be handed out: free ones and what the tree can evict."""
        evictable = self.tree_cache.evictable_size() if self.tree_cache is not None else 0
        return self.allocator.full_available_size() + evictable

    def add(self, req: Req) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_running:
            req = self.waiting[0]
            slots = self.req_to_token_pool.alloc(1)
            if slots is None:
                break
            req.req_pool_idx = slots[0]
            cached = self.tree_cache.admit(req, req.prompt_ids) if self._cached(req) else 0
            need = self._reservation(req) - cached
            if self._outstanding() + need > self._headroom():  # waits for running requests to finish
                if self._cached(req):
                    self.tree_cache.release_req(req)
                self.req_to_token_pool.free(req.req_pool_idx)
                req.req_pool_idx, req.kv_len, req.slots_len, req.cache_protected_len = None, 0, 0, 0
                break
            self.waiting.popleft()
            req.reserved_tokens, req.cached_tokens = need, cached
            self.running.append(req)

    def _cached(self, req: Req) -> bool:
        """Whether ``req`` goes through the prefix cache (a request scoring its prompt does not)."""
        return self.tree_cache is not None and req.uses_prefix_cache

    def _reservation(self, req: Req) -> int:
        """A request's worst case in full slots: whole pages."""
        return pages(req.max_total_tokens, self.page_size) * self.page_size

    def _make_room(self, full: int, swa: int) -> None:
        """Before an allocation: the tree gives up what the pools lack (admission promised it can)."""
        if self.tree_cache is None:
            return
        lack_full = max(0, full - self.allocator.full_available_size())
        lack_swa = max(0, swa - self.allocator.swa_available_size())
        if lack_full or lack_swa:
            self.evicted += evict_measured(self.tree_cache, full_tokens=lack_full, swa_tokens=lack_swa)

    # -- one step --------------------------------------------------------------------------------

    def schedule(self) -> ScheduledBatch | None:
        """Prefill first (as SGLang does), else one decode step for every running request."""
        self._admit()
        if not self.running:
            assert not self.waiting, "a request that fits an empty engine was not admitted"
            return None
        prefilling = [r for r in self.running if r.slots_len < len(r.prompt_ids)]  # scheduled, not computed
        if prefilling:
            reqs, lens, budget = [], [], self.max_prefill_tokens
            for req in prefilling:
                n = min(len(req.prompt_ids) - req.slots_len, self.chunk_size, budget)
                if n <= 0:
                    break
                reqs.append(req)
                lens.append(n)
                budget -= n
            return ScheduledBatch(ForwardMode.EXTEND, reqs=reqs, extend_lens=lens)
        if self.speculative_tokens:
            return self._verify(list(self.running))
        decoding = [r for r in self.running if self._needs_token(r)]
        return ScheduledBatch(ForwardMode.DECODE, reqs=decoding) if decoding else None

    @staticmethod
    def _needs_token(req: Req) -> bool:
        """Whether ``req`` still needs a token once every step scheduled for it has run (overlap: rule 5; in sync
        scheduling every running request past its prompt does)."""
        return not req.finished and req.slots_len - len(req.prompt_ids) + 1 < req.sampling.max_new_tokens

    def _verify(self, reqs: list[Req]) -> ScheduledBatch:
        """Each request's last token and its drafts; sampled requests draft nothing (greedy acceptance only)."""
        drafts = []
        for req in reqs:
            room = req.sampling.max_new_tokens - len(req.output_ids) - 1  # the last token needs no KV
            greedy = req.forced_output_ids is not None or req.sampling.temperature < GREEDY_BELOW
            k = min(self.speculative_tokens, room) if greedy else 0
            drafts.append(propose_drafts(req.fill_ids, k))
        return ScheduledBatch(
            ForwardMode.TARGET_VERIFY, reqs=reqs, extend_lens=[1 + len(d) for d in drafts], drafts=drafts
        )

    def build_forward_batch(self, sched: ScheduledBatch) -> ForwardBatch:
        """Allocate the new tokens' slots, record them in req_to_token, and describe the forward."""
        is_decode = sched.mode.is_decode()
        lens = [1] * len(sched.reqs) if is_decode else sched.extend_lens
        loc = self._alloc(sched.reqs, lens, is_decode)
        assert loc is not None, "admission reserved these slots"
        loc = loc.clone()  # the allocator hands out a view of its free list
        input_ids, positions, seq_lens, start = [], [], [], 0
        for i, (req, n) in enumerate(zip(sched.reqs, lens)):
            begin = req.slots_len
            if not is_decode:  # a few long chunks: one write each
                self.req_to_token_pool.write(req.req_pool_idx, begin, loc[start : start + n])
            req.slots_len = begin + n
            if is_decode and begin >= len(req.prompt_ids) + len(req.output_ids):  # sampled by the step in flight
                sched.futures.append(Future(len(input_ids), req, begin))
                input_ids.append(FUTURE_TOKEN)
            elif sched.drafts is None:
                input_ids += req.fill_slice(begin, begin + n)
            else:  # its last token, then its drafts
                input_ids += req.fill_slice(begin, begin + 1) + sched.drafts[i]
            positions += range(begin, begin + n)
            seq_lens.append(begin + n)
            start += n
        if is_decode:  # one token per request: one scatter for the whole batch
            self.req_to_token_pool.write_tokens([r.req_pool_idx for r in sched.reqs], positions, loc)
        logits_rows: list[int] | None = None  # decode: every row
        if sched.drafts is not None:
            logits_rows = list(range(start))
        elif not is_decode:
            logits_rows = self._logits_rows(sched, lens, seq_lens)
        dev = self.device
        return ForwardBatch(
            forward_mode=sched.mode,
            input_ids=torch.tensor(input_ids, dtype=torch.int64, device=dev),
            positions=torch.tensor(positions, dtype=torch.int64, device=dev),
            req_pool_indices=torch.tensor([r.req_pool_idx for r in sched.reqs], dtype=LOC_DTYPE, device=dev),
            seq_lens=torch.tensor(seq_lens, dtype=LOC_DTYPE, device=dev),
            out_cache_loc=loc,
            seq_lens_cpu=seq_lens,
            extend_lens=None if is_decode else list(lens),
            logits_indices=None if logits_rows is None else torch.tensor(logits_rows, dtype=torch.int64, device=dev),
        )

    def _alloc(self, reqs: list[Req], lens: list[int], is_decode: bool) -> torch.Tensor | None:
        if self.page_size == 1:  # slots are interchangeable: one allocation for the batch
            self._make_room(sum(lens), sum(lens))
            return self.allocator.alloc(sum(lens))
        prefix = [r.slots_len for r in reqs]
        seq = [p + n for p, n in zip(prefix, lens)]
        new = sum(pages(n, self.page_size) - pages(p, self.page_size) for p, n in zip(prefix, seq)) * self.page_size
        self._make_room(new, new)
        last = self.req_to_token_pool.last_slots([r.req_pool_idx for r in reqs], prefix)
        if is_decode:
            return self.allocator.alloc_decode(seq, last)
        return self.allocator.alloc_extend(prefix, seq, last)

    @staticmethod
    def _logits_rows(sched: ScheduledBatch, lens: list[int], seq_lens: list[int]) -> list[int]:
        """Extend rows whose logits are needed: the last prompt token of requests finishing prefill, and every row of
        a request scoring its prompt (``sched.prompt_rows``; ``sched.sample_rows`` then picks the sampling rows out:
        a request that generates nothing has none)."""
        rows: list[int] = []
        sample_rows: list[int] = []
        start = 0
        for req, n, seq_len in zip(sched.reqs, lens, seq_lens):
            finishing = seq_len == len(req.prompt_ids)
            if req.prompt_logprobs is not None:
                sched.prompt_rows.append(PromptRows(req, first=len(rows), position=seq_len - n, count=n))
                rows += range(start, start + n)
                if finishing and req.sampling.max_new_tokens:
                    sample_rows.append(len(rows) - 1)
            elif finishing:
                sample_rows.append(len(rows))
                rows.append(start + n - 1)
            start += n
        sched.sample_rows = sample_rows if sched.prompt_rows else None
        return rows

    def commit(self, sched: ScheduledBatch) -> list[Req]:
        """Advance KV lengths after a forward; return the requests whose prompt is now prefilled: they sample a token
        (or, asked for none, finish). A request that finished while the step was in flight (overlap) is a void row:
        its KV length stays (``harness.engine.overlap``, rule 3)."""
        lens = sched.extend_lens or [1] * len(sched.reqs)
        ready, grown = [], []
        for req, n in zip(sched.reqs, lens):
            if req.finished:
                continue
            req.kv_len += n
            grown.append(req)
            if req.prefill_done:
                ready.append(req)
        checkpoint = self.tree_cache is not None and not sched.mode.is_decode()
        if checkpoint and self.tree_cache.checkpoint_frees_window:  # the module docstring: who frees the window
            self._slide_windows([r for r in grown if not r.uses_prefix_cache])  # the tree frees the others'
        else:
            self._slide_windows(grown)
        if checkpoint:
            for req in grown:  # every prefill chunk, the prompt's last one too (SGLang checkpoints each extend)
                if req.uses_prefix_cache:
                    self.tree_cache.cache_unfinished_req(req)
        return ready

    def commit_verify(self, sched: ScheduledBatch, kept: list[int]) -> None:
        """After a verify: each request keeps the KV of its first ``kept[i]`` inputs (its last token and the
        drafts the target accepted) and gives back the slots of the rejected drafts."""
        rejected = []
        for req, width, keep in zip(sched.reqs, sched.extend_lens, kept):
            if keep < width:
                rejected.append((req.req_pool_idx, req.kv_len + keep, req.kv_len + width))
            req.kv_len += keep
            req.slots_len = req.kv_len
        if rejected:
            self.allocator.free(self.req_to_token_pool.read_tokens(rejected))
        self._slide_windows(sched.reqs)

    def _slide_windows(self, reqs: list[Req]) -> None:
        """Give back the SWA slots of positions no future query can see (position < kv_len - W + 1); the tree's rule
        for requests that go through the prefix cache, all of them in one call (a step's frees as one batch)."""
        if self.window is None:
            return
        if self.tree_cache is None:
            own = reqs
        else:
            cached = [r for r in reqs if r.uses_prefix_cache]
            if cached:
                self.tree_cache.slide_windows(cached)
            own = [r for r in reqs if not r.uses_prefix_cache] if len(cached) < len(reqs) else []
        leaving = []
        for req in own:
            keep_from = max(0, self._swept_len(req) - self.window + 1) // self.page_size * self.page_size  # pages
            if keep_from > req.swa_evicted:
                leaving.append((req.req_pool_idx, req.swa_evicted, keep_from))
                req.swa_evicted = keep_from
        if leaving:
            self.allocator.free_swa(self.req_to_token_pool.read_tokens(leaving))

    @seam("async-sweep-counts-in-flight")
    def _swept_len(self, req: Req) -> int:
        """The tokens the window sweep counts: those whose KV is written (``kv_len``), never a step still in flight,
        whose forward reads the window from ``slots_len - W`` (``harness.engine.overlap``, rule 2)."""
        return req.kv_len

    def release(self, req: Req) -> None:
        """A finished (or aborted) request gives back every full slot, the SWA slots it still holds, and its row;
        with a prefix cache, a request that finished well leaves its KV to the tree."""
        if not self._cached(req):
            self.allocator.free(self.req_to_token_pool.req_to_token[req.req_pool_idx, : req.slots_len].clone())
        elif req.finish_reason in (FinishReason.STOP, FinishReason.LENGTH):
            self.tree_cache.cache_finished_req(req)
        else:
            self.tree_cache.release_req(req)
        self.req_to_token_pool.free(req.req_pool_idx)
        self.running.remove(req)
        req.req_pool_idx = None
        req.reserved_tokens = 0

    def cancel(self, req: Req) -> bool:
        """Drop one request: a queued one holds nothing yet, a running one gives back what it holds."""
        if req in self.waiting:
            self.waiting.remove(req)
            return True
        if req in self.running:
            self.release(req)
            return True
        return False

    def abort_all(self) -> list[Req]:
        """Drop every queued and running request and give back their slots (after an engine failure)."""
        dropped = list(self.waiting) + list(self.running)
        self.waiting.clear()
        for req in list(self.running):
            self.release(req)
        return dropped
