"""The pool suites' state machines, on any target's pool and allocator (``suites/pool`` runs them; ``tests/``
drives the allocator machine on the harness's own allocator).

``AllocatorMachine``: random alloc / free / free_swa / clear sequences against a plain-Python model of slot
ownership. After every step: no slot is owned twice and slot 0 is never handed out, free + owned counts add
up in both pools, the mapping equals the model (freed-from-window tokens map to the sentinel 0, the trailing
entry maps -1 to -1), and translation through the pool agrees with the mapping.

``PagedRequestsMachine``: requests that grow page by page, against a plain-Python model of which request owns
which page (the allocator machine holds slots; this one holds requests, as a scheduler drives them).

Steps: a batch of requests grows (``alloc_extend``: new requests and prefill chunks, ending anywhere in a
page), a request arrives with its KV from a prefill server and SWA slots for its window's pages only
(``alloc_extend_swa_tail``), a batch decodes one token each (``alloc_decode``), a request's oldest whole pages
leave the window (``free_swa``, or the scheduler's ``free_swa_segment``), a request finishes with its last page
partly used (``free``; ``free_full`` for what already left the window, then ``free``; or the scheduler's row
segments), several finish in one free group, everything is cleared. An allocation the model says does not fit
must return ``None`` and take nothing.

After every step: a request's tokens sit at consecutive offsets of its pages, its SWA slots at the same
offsets of SWA pages (both pools page in step), no page belongs to two requests and page 0 is never
handed out, ``available_size`` and both pools' available sizes equal the model's free pages, and the
mapping and the pool's translation equal the model.

Hypothesis runs a machine class, not an instance: the target and page size are class attributes, set on a
subclass by ``allocator_machine`` / ``paged_requests_machine``. The subclass keeps the base's name, so a
failing run prints ``state = PagedRequestsMachine()`` as it always did. (Hypothesis derives a derandomized
run's seed from the machine class's source, so editing a machine changes which examples it draws.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.targets.target import PoolSpec, Target

SIZE, SIZE_SWA = 24, 16  # the allocator machine's pools, in slots
FULL_PAGES, SWA_PAGES = 8, 5  # the paged-requests machine's pools, in pages
HOW_REQUESTS_FINISH = ["free", "split", "segments"]


# -- the allocator machine ------------------------------------------------------------------------


class AllocatorMachine(RuleBasedStateMachine):
    """Slot ownership under alloc / free / free_swa / clear. Set ``target`` and ``page_size`` on a subclass
    (``allocator_machine``) before running it."""

    target: Target
    page_size: int

    @initialize()
    def setup(self):
        handle = self.target.build_pool(PoolSpec(size=SIZE, size_swa=SIZE_SWA, page_size=self.page_size))
        self.pool, self.allocator = handle.pool, handle.allocator
        self.model: dict[int, int] = {}  # full slot -> SWA slot, 0 once the slot left the window

    def _pages(self, with_swa: bool) -> list[list[int]]:
        pages: dict[int, list[int]] = {}
        for full in sorted(self.model):
            pages.setdefault(full // self.page_size, []).append(full)
        return [p for p in pages.values() if not with_swa or all(self.model[f] for f in p)]

    def _pick(self, data: st.DataObject, with_swa: bool) -> list[int]:
        pages = self._pages(with_swa)
        chosen = data.draw(st.lists(st.sampled_from(pages), min_size=1, unique_by=lambda p: p[0])) if pages else []
        return [slot for page in chosen for slot in page]

    @rule(pages=st.integers(1, 4))
    def alloc(self, pages):
        need = pages * self.page_size
        live_swa = sum(1 for s in self.model.values() if s)
        fits = need <= min(SIZE - len(self.model), SIZE_SWA - live_swa)
        out = self.allocator.alloc(need)
        if not fits:
            assert out is None, (
                f"alloc({need}) succeeded with {SIZE - len(self.model)} full / {SIZE_SWA - live_swa} SWA free"
            )
            return
        assert out is not None and out.numel() == need, f"alloc({need}) failed although it fits"
        for full in out.tolist():
            assert full != 0, "the padding slot 0 was handed out"
            assert full not in self.model, f"full slot {full} handed out twice"
            self.model[full] = int(self.allocator.full_to_swa_index_mapping[full])

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def free(self, data):
        slots = self._pick(data, with_swa=False)
        self.allocator.free(torch.tensor(slots, dtype=torch.int32))
        for full in slots:
            del self.model[full]

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data())
    def free_swa(self, data):
        slots = self._pick(data, with_swa=True)
        if slots:
            self.allocator.free_swa(torch.tensor(slots, dtype=torch.int32))
            for full in slots:
                self.model[full] = 0

    @rule()
    def clear(self):
        self.allocator.clear()
        self.model.clear()

    @invariant()
    def counts_add_up(self):
        live_swa = [s for s in self.model.values() if s]
        assert self.allocator.full_available_size() + len(self.model) == SIZE, "full-pool counts do not add up"
        assert self.allocator.swa_available_size() + len(live_swa) == SIZE_SWA, "SWA-pool counts do not add up"

    @invariant()
    def no_swa_slot_owned_twice_and_none_is_padding(self):
        live_swa = [s for s in self.model.values() if s]
        assert len(set(live_swa)) == len(live_swa), f"an SWA slot is owned twice: {sorted(live_swa)}"
        assert all(self.page_size <= s < SIZE_SWA + self.page_size for s in live_swa), (
            f"SWA slot out of range: {live_swa}"
        )

    @invariant()
    def mapping_equals_the_model(self):
        mapping = self.allocator.full_to_swa_index_mapping
        assert mapping[: SIZE + self.page_size].tolist() == [self.model.get(f, 0) for f in range(SIZE + self.page_size)]
        assert int(mapping[-1]) == -1, "the trailing sentinel no longer maps -1 to -1"
        probe = torch.tensor([*sorted(self.model), -1], dtype=torch.int32)
        self.pool.invalidate_loc_cache()
        got = self.pool.translate_loc_from_full_to_swa(probe).tolist()
        assert got == [self.model[f] for f in sorted(self.model)] + [-1], f"translation {got} disagrees with the model"


def allocator_machine(target: Target, page_size: int) -> type[AllocatorMachine]:
    """The allocator machine bound to one target and page size (Hypothesis runs a class, not an instance)."""
    return type("AllocatorMachine", (AllocatorMachine,), {"target": target, "page_size": page_size})


# -- the paged-requests machine: its model ----------------------------------------------------------


@dataclass
class Request:
    """The model's view of one request: where each of its tokens sits in both pools."""

    full: list[int] = field(default_factory=list)  # full slot of each token
    swa: list[int] = field(default_factory=list)  # SWA slot of each token, 0 once it left the window
    evicted: int = 0  # tokens before this gave their SWA slots back (whole pages)


def pages(tokens: int, page_size: int) -> int:
    """Pages that ``tokens`` tokens fill, the last one perhaps partly."""
    return -(-tokens // page_size)


def refuse_padding_give_backs(inner: object, page_size: int) -> None:
    """Invariant 5 at the innermost boundary: the hybrid allocator never hands the SWA padding page back to
    its page allocator. Checked as the call is made, before the target's own accounting asserts."""
    for name, page_of in (("free", lambda ids: ids // page_size), ("free_page_ids", lambda ids: ids)):
        give_back = getattr(inner, name, None)
        if give_back is not None:
            setattr(inner, name, _padding_checked(give_back, page_of, name))


def _padding_checked(give_back: Callable, page_of: Callable[[torch.Tensor], torch.Tensor], name: str) -> Callable:
    """``give_back`` that first asserts no id in the call lies on page 0 (``page_of`` maps ids to pages)."""

    def checked(ids: torch.Tensor, *args, **kwargs):
        assert not bool((page_of(ids) == 0).any()), (
            f"the SWA padding page is handed back ({name} of {ids.tolist()[:8]}): the next alloc gives it "
            "to a request, and padded lanes write into that request's window"
        )
        return give_back(ids, *args, **kwargs)

    return checked


def expect_request_in_page_order(rid: int, req: Request, ps: int) -> None:
    """A request's tokens sit at consecutive offsets of its full pages, its live SWA slots at the same offsets
    of SWA pages, and exactly the tokens before ``evicted`` have no SWA slot."""
    for i, (full, swa) in enumerate(zip(req.full, req.swa)):
        assert full % ps == i % ps, f"request {rid}: token {i} at full slot {full}, offset {full % ps}"
        if i % ps:
            assert full == req.full[i - 1] + 1, f"request {rid}: token {i} left its page ({req.full})"
        if swa:
            assert swa % ps == i % ps, f"request {rid}: token {i} at SWA slot {swa}, offset {swa % ps}"
            if i % ps and req.swa[i - 1]:
                assert swa == req.swa[i - 1] + 1, f"request {rid}: token {i}'s SWA slot left its page"
    assert all(s == 0 for s in req.swa[: req.evicted]) and all(req.swa[req.evicted :]), (
        f"request {rid}: SWA slots {req.swa} do not match its window (first {req.evicted} evicted)"
    )


# -- the paged-requests machine -----------------------------------------------------------------------


class PagedRequestsMachine(RuleBasedStateMachine):
    """Requests growing, leaving the window and finishing, page by page. Set ``target`` and ``page_size`` on a
    subclass (``paged_requests_machine``) before running it."""

    target: Target
    page_size: int

    @property
    def size(self) -> int:
        return FULL_PAGES * self.page_size

    @property
    def size_swa(self) -> int:
        return SWA_PAGES * self.page_size

    @initialize()
    def setup(self):
        handle = self.target.build_pool(PoolSpec(size=self.size, size_swa=self.size_swa, page_size=self.page_size))
        self.pool, self.allocator = handle.pool, handle.allocator
        refuse_padding_give_backs(self.allocator.swa_attn_allocator, self.page_size)
        self.reqs: dict[int, Request] = {}
        self.next_rid = 0

    # -- the model's pages ---------------------------------------------------------------------

    def _full_pages(self) -> set[int]:
        return {s // self.page_size for r in self.reqs.values() for s in r.full}

    def _swa_pages(self) -> set[int]:
        return {s // self.page_size for r in self.reqs.values() for s in r.swa if s}

    def _fits(self, prefix: list[int], seq: list[int]) -> bool:
        new = sum(pages(n, self.page_size) - pages(p, self.page_size) for p, n in zip(prefix, seq))
        return new <= FULL_PAGES - len(self._full_pages()) and new <= SWA_PAGES - len(self._swa_pages())

    def _record(self, rids: list[int], prefix: list[int], seq: list[int], out: torch.Tensor) -> None:
        assert out is not None and out.numel() == sum(seq) - sum(prefix), (
            f"{sum(seq) - sum(prefix)} tokens asked, got {None if out is None else out.numel()}"
        )
        mapping = self.allocator.full_to_swa_index_mapping
        slots = iter(out.tolist())
        for rid, p, n in zip(rids, prefix, seq):
            req = self.reqs.setdefault(rid, Request())
            for _ in range(n - p):
                full = next(slots)
                req.full.append(full)
                req.swa.append(int(mapping[full]))

    def _draw_batch(self, data: st.DataObject, *, decode: bool) -> list[int]:
        """Which requests grow: up to three live ones, and for an extend perhaps a new one."""
        live = sorted(self.reqs)
        rids = data.draw(st.lists(st.sampled_from(live), unique=True, max_size=3)) if live else []
        if not decode and (not rids or data.draw(st.booleans())):
            rids.append(self.next_rid)  # a new request joins the batch
        return rids

    def _grow(self, data: st.DataObject, *, decode: bool) -> None:
        rids = self._draw_batch(data, decode=decode)
        if not rids:
            return
        ps = self.page_size
        prefix = [len(self.reqs[r].full) if r in self.reqs else 0 for r in rids]
        grow = [1] * len(rids) if decode else [data.draw(st.integers(1, 2 * ps + 1)) for _ in rids]
        seq = [p + g for p, g in zip(prefix, grow)]
        last = [self.reqs[r].full[-1] if r in self.reqs else -1 for r in rids]
        fits = self._fits(prefix, seq)
        if decode and not fits:
            return  # a decode that does not fit is the scheduler's to prevent (SGLang raises on it)
        before = (self.allocator.full_available_size(), self.allocator.swa_available_size())
        out = self.allocator.alloc_decode(seq, last) if decode else self.allocator.alloc_extend(prefix, seq, last)
        if not fits:
            assert out is None, f"alloc_extend {prefix} -> {seq} succeeded without the pages for it"
            after = (self.allocator.full_available_size(), self.allocator.swa_available_size())
            assert after == before, f"a refused alloc_extend took slots: available {before} -> {after}"
            return
        if self.next_rid in rids:
            self.next_rid += 1
        self._record(rids, prefix, seq, out)

    # -- steps ---------------------------------------------------------------------------------

    def arrives_from_prefill(self, n, window):
        """A request whose KV a prefill server computed: full slots for all of it, SWA slots from the page
        holding the start of its window on (``alloc_extend_swa_tail``, as SGLang's decode server asks).
        A rule only on the bound subclass (``paged_requests_machine``): its strategies depend on the page size."""
        ps = self.page_size
        start = max(0, n - window) // ps * ps
        fits_full = pages(n, ps) <= FULL_PAGES - len(self._full_pages())
        fits = fits_full and pages(n - start, ps) <= SWA_PAGES - len(self._swa_pages())
        out = self.allocator.alloc_extend_swa_tail(0, n, -1, n - start)
        if not fits:
            assert out is None, f"alloc_extend_swa_tail of {n} tokens succeeded without the pages for it"
            return
        self._record([self.next_rid], [0], [n], out)
        self.reqs[self.next_rid].evicted = start
        self.next_rid += 1

    @rule(data=st.data())
    def extend(self, data):
        self._grow(data, decode=False)

    @precondition(lambda self: self.reqs)
    @rule(data=st.data())
    def decode(self, data):
        self._grow(data, decode=True)

    @precondition(lambda self: any(len(r.full) - 1 >= r.evicted + self.page_size for r in self.reqs.values()))
    @rule(data=st.data(), segment=st.booleans())
    def window_leaves(self, data, segment):
        """The request's oldest pages leave the window, as a set (``free_swa``) or as the scheduler's
        row segment (``free_swa_segment``); the page with its last token never does."""
        ps = self.page_size
        movable = sorted(rid for rid, r in self.reqs.items() if len(r.full) - 1 >= r.evicted + ps)
        req = self.reqs[data.draw(st.sampled_from(movable))]
        whole = ((len(req.full) - 1) // ps * ps - req.evicted) // ps
        end = req.evicted + data.draw(st.integers(1, whole)) * ps
        leaving = torch.tensor(req.full[req.evicted : end], dtype=torch.int32)
        if segment:
            self.allocator.free_swa_segment(leaving, start_pos=req.evicted)
        else:
            self.allocator.free_swa(leaving)
        req.swa[req.evicted : end] = [0] * (end - req.evicted)
        req.evicted = end

    def _release(self, rid: int, how: str) -> None:
        req = self.reqs.pop(rid)
        gone, live = (
            torch.tensor(part, dtype=torch.int32) for part in (req.full[: req.evicted], req.full[req.evicted :])
        )
        if how == "free":
            self.allocator.free(torch.tensor(req.full, dtype=torch.int32))
        elif how == "split":  # what left the window apart, as sets
            self.allocator.free_full(gone)
            self.allocator.free(live)
        else:  # the scheduler's row segments, from page-aligned positions
            self.allocator.free_full_segment(gone, start_pos=0)
            self.allocator.free_segment(live, start_pos=req.evicted)

    @precondition(lambda self: self.reqs)
    @rule(data=st.data(), how=st.sampled_from(HOW_REQUESTS_FINISH))
    def finish(self, data, how):
        self._release(data.draw(st.sampled_from(sorted(self.reqs))), how)

    @precondition(lambda self: len(self.reqs) >= 2)
    @rule(data=st.data())
    def finish_in_one_group(self, data):
        """Several requests finish in one scheduler step: their frees are held until the group ends."""
        rids = data.draw(st.lists(st.sampled_from(sorted(self.reqs)), min_size=2, unique=True))
        self.allocator.free_group_begin()
        for rid in rids:
            self._release(rid, data.draw(st.sampled_from(HOW_REQUESTS_FINISH)))
        self.allocator.free_group_end()

    @rule()
    def clear(self):
        self.allocator.clear()
        self.reqs.clear()

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def accounting_equals_the_model(self):
        full_free = self.size - self.page_size * len(self._full_pages())
        swa_free = self.size_swa - self.page_size * len(self._swa_pages())
        got = (
            self.allocator.full_available_size(),
            self.allocator.swa_available_size(),
            self.allocator.available_size(),
        )
        assert got == (full_free, swa_free, min(full_free, swa_free)), (
            f"available (full, SWA, both) {got}, the model's {(full_free, swa_free, min(full_free, swa_free))}"
        )

    @invariant()
    def requests_fill_pages_in_order_in_both_pools(self):
        for rid, req in self.reqs.items():
            expect_request_in_page_order(rid, req, self.page_size)

    @invariant()
    def no_page_owned_twice_and_none_is_padding(self):
        for side, slots_of in (("full", lambda r: r.full), ("SWA", lambda r: [s for s in r.swa if s])):
            owner: dict[int, int] = {}
            for rid, req in self.reqs.items():
                for page in {s // self.page_size for s in slots_of(req)}:
                    assert page != 0, f"request {rid} holds the padding page of the {side} pool"
                    assert owner.setdefault(page, rid) == rid, f"{side} page {page} owned by {owner[page]} and {rid}"
        limit = (FULL_PAGES + 1, SWA_PAGES + 1)
        assert max(self._full_pages(), default=1) < limit[0] and max(self._swa_pages(), default=1) < limit[1]

    @invariant()
    def mapping_and_translation_equal_the_model(self):
        ps = self.page_size
        want = [0] * (self.size + ps)
        for req in self.reqs.values():
            for full, swa in zip(req.full, req.swa):
                want[full] = swa
        mapping = self.allocator.full_to_swa_index_mapping
        assert mapping[: self.size + ps].tolist() == want, "the full -> SWA mapping disagrees with the model"
        assert int(mapping[-1]) == -1, "the trailing sentinel no longer maps -1 to -1"
        held = sorted(f for r in self.reqs.values() for f in r.full)
        self.pool.invalidate_loc_cache()
        got = self.pool.translate_loc_from_full_to_swa(torch.tensor([*held, -1], dtype=torch.int32)).tolist()
        assert got == [want[f] for f in held] + [-1], "translation through the pool disagrees with the model"


def paged_requests_machine(target: Target, page_size: int) -> type[PagedRequestsMachine]:
    """The paged-requests machine bound to one target and page size (Hypothesis runs a class, not an instance).
    ``arrives_from_prefill`` becomes a rule here because its strategies' bounds are in pages (a request of up
    to three pages, a window of up to two); its precondition keeps it off page size 1."""
    as_rule = rule(n=st.integers(1, 3 * page_size), window=st.integers(1, 2 * page_size))
    arrives = precondition(lambda self: self.page_size > 1)(as_rule(PagedRequestsMachine.arrives_from_prefill))
    return type(
        "PagedRequestsMachine",
        (PagedRequestsMachine,),
        {"target": target, "page_size": page_size, "arrives_from_prefill": arrives},
    )
