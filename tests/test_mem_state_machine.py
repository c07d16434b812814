"""Random alloc / free / free_swa / clear sequences against a plain-Python model of the SWA allocator.

Invariants after every step: no slot is owned twice, free + owned counts add up in both pools, and
the mapping (and its translation through the pool) agrees with ownership.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.mem import DoubleFreeError, PoolError
from tests.mem_helpers import build_swa

SIZE, SIZE_SWA = 24, 12


class SWAAllocatorMachine(RuleBasedStateMachine):
    page_size = 1

    @initialize()
    def setup(self):
        self.pool, self.allocator = build_swa(SIZE, SIZE_SWA, page_size=self.page_size)
        self.model: dict[int, int] = {}  # full slot -> SWA slot, 0 once the slot left the window

    # -- helpers -------------------------------------------------------------------------------

    def _owned_pages(self, with_swa: bool) -> list[list[int]]:
        pages: dict[int, list[int]] = {}
        for full, swa in sorted(self.model.items()):
            pages.setdefault(full // self.page_size, []).append(full)
        return [p for p in pages.values() if not with_swa or all(self.model[f] for f in p)]

    def _pick(self, data, with_swa: bool) -> list[int]:
        pages = self._owned_pages(with_swa)
        chosen = data.draw(st.lists(st.sampled_from(pages), min_size=1, unique_by=lambda p: p[0])) if pages else []
        return [slot for page in chosen for slot in page]

    # -- rules ---------------------------------------------------------------------------------

    @rule(pages=st.integers(0, 8))
    def alloc(self, pages):
        need = pages * self.page_size
        fits = need <= min(SIZE - len(self.model), SIZE_SWA - sum(1 for s in self.model.values() if s))
        out = self.allocator.alloc(need)
        if not fits:
            assert out is None
            return
        assert out is not None and out.dtype == torch.int32 and out.numel() == need
        for full in out.tolist():
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
        if not slots:
            return
        self.allocator.free_swa(torch.tensor(slots, dtype=torch.int32))
        for full in slots:
            self.model[full] = 0

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def double_free_is_refused_and_changes_nothing(self, data):
        freed = [f for f, s in self.model.items() if s == 0]
        free_slots = [f for f in range(self.page_size, SIZE + self.page_size) if f not in self.model]
        mapping_before = self.allocator.full_to_swa_index_mapping.clone()
        if freed and data.draw(st.booleans()):
            page = [f for f in self.model if f // self.page_size == freed[0] // self.page_size]
            with pytest.raises((DoubleFreeError, PoolError)):
                self.allocator.free_swa(torch.tensor(page, dtype=torch.int32))
        elif free_slots:
            page_start = free_slots[0] - free_slots[0] % self.page_size
            page = list(range(page_start, page_start + self.page_size))
            if any(f in self.model for f in page):
                return
            with pytest.raises(DoubleFreeError):
                self.allocator.free(torch.tensor(page, dtype=torch.int32))
        assert torch.equal(self.allocator.full_to_swa_index_mapping, mapping_before)

    @rule()
    def clear(self):
        self.allocator.clear()
        self.model.clear()

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def counts_add_up(self):
        live_swa = [s for s in self.model.values() if s]
        assert self.allocator.full_available_size() + len(self.model) == SIZE
        assert self.allocator.swa_available_size() + len(live_swa) == SIZE_SWA

    @invariant()
    def no_swa_slot_owned_twice(self):
        live_swa = [s for s in self.model.values() if s]
        assert len(set(live_swa)) == len(live_swa)
        assert all(self.page_size <= s < SIZE_SWA + self.page_size for s in live_swa)

    @invariant()
    def mapping_agrees_with_ownership(self):
        mapping = self.allocator.full_to_swa_index_mapping
        expected = [self.model.get(full, 0) for full in range(SIZE + self.page_size)]
        assert mapping[:-1].tolist() == expected
        assert int(mapping[-1]) == -1
        if self.model:
            probe = torch.tensor(sorted(self.model), dtype=torch.int32)
            self.pool.invalidate_loc_cache()
            assert self.pool.translate_loc_from_full_to_swa(probe).tolist() == [self.model[f] for f in sorted(self.model)]


class PagedSWAAllocatorMachine(SWAAllocatorMachine):
    page_size = 2


TestSWAAllocator = SWAAllocatorMachine.TestCase
TestPagedSWAAllocator = PagedSWAAllocatorMachine.TestCase
