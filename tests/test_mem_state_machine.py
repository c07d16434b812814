"""The harness allocator under the suites' ownership state machine (``suites/pool``), plus what only
the harness's allocator promises: a double free is refused with a named error and changes nothing."""

from __future__ import annotations

import pytest
import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from harness.mem import DoubleFreeError, PoolError
from harness.targets.target import HarnessTarget
from suites.pool.machines import SIZE, allocator_machine


def harness_machine(page_size: int) -> type[RuleBasedStateMachine]:
    class HarnessAllocatorMachine(allocator_machine(HarnessTarget(), page_size)):
        @precondition(lambda self: self.model)
        @rule(data=st.data())
        def double_free_is_refused_and_changes_nothing(self, data):
            freed = [f for f, s in self.model.items() if s == 0]
            free_slots = [f for f in range(page_size, SIZE + page_size) if f not in self.model]
            mapping_before = self.allocator.full_to_swa_index_mapping.clone()
            if freed and data.draw(st.booleans()):
                page = [f for f in self.model if f // page_size == freed[0] // page_size]
                with pytest.raises((DoubleFreeError, PoolError)):
                    self.allocator.free_swa(torch.tensor(page, dtype=torch.int32))
            elif free_slots:
                page_start = free_slots[0] - free_slots[0] % page_size
                page = list(range(page_start, page_start + page_size))
                if any(f in self.model for f in page):
                    return
                with pytest.raises(DoubleFreeError):
                    self.allocator.free(torch.tensor(page, dtype=torch.int32))
            assert torch.equal(self.allocator.full_to_swa_index_mapping, mapping_before)

    return HarnessAllocatorMachine


TestSWAAllocator = harness_machine(1).TestCase
TestPagedSWAAllocator = harness_machine(2).TestCase
