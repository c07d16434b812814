"""Random alloc / free / free_swa / set_full_to_swa_mapping / clear sequences against a plain-Python
model of ownership, on the target's pool and allocator (page_size 1 and 4).

After every step: no slot is owned twice and slot 0 is never handed out, free + owned counts add up
in both pools, the mapping equals the model (freed-from-window tokens map to the sentinel 0, the
trailing entry maps -1 to -1), and translation through the pool agrees with the mapping.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from harness.targets import PoolSpec, Target
from suites.conftest import examples

SIZE, SIZE_SWA = 24, 16


def machine_for(target: Target, page_size: int) -> type[RuleBasedStateMachine]:
    class AllocatorMachine(RuleBasedStateMachine):
        @initialize()
        def setup(self):
            handle = target.build_pool(PoolSpec(size=SIZE, size_swa=SIZE_SWA, page_size=page_size))
            self.pool, self.allocator = handle.pool, handle.allocator
            self.model: dict[int, int] = {}  # full slot -> SWA slot, 0 once the slot left the window

        def _pages(self, with_swa: bool) -> list[list[int]]:
            pages: dict[int, list[int]] = {}
            for full in sorted(self.model):
                pages.setdefault(full // page_size, []).append(full)
            return [p for p in pages.values() if not with_swa or all(self.model[f] for f in p)]

        def _pick(self, data, with_swa: bool) -> list[int]:
            pages = self._pages(with_swa)
            chosen = data.draw(st.lists(st.sampled_from(pages), min_size=1, unique_by=lambda p: p[0])) if pages else []
            return [slot for page in chosen for slot in page]

        @rule(pages=st.integers(1, 4))
        def alloc(self, pages):
            need = pages * page_size
            live_swa = sum(1 for s in self.model.values() if s)
            fits = need <= min(SIZE - len(self.model), SIZE_SWA - live_swa)
            out = self.allocator.alloc(need)
            if not fits:
                assert out is None, f"alloc({need}) succeeded with {SIZE - len(self.model)} full / {SIZE_SWA - live_swa} SWA free"
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
            assert all(page_size <= s < SIZE_SWA + page_size for s in live_swa), f"SWA slot out of range: {live_swa}"

        @invariant()
        def mapping_equals_the_model(self):
            mapping = self.allocator.full_to_swa_index_mapping
            assert mapping[: SIZE + page_size].tolist() == [self.model.get(f, 0) for f in range(SIZE + page_size)]
            assert int(mapping[-1]) == -1, "the trailing sentinel no longer maps -1 to -1"
            probe = torch.tensor([*sorted(self.model), -1], dtype=torch.int32)
            self.pool.invalidate_loc_cache()
            got = self.pool.translate_loc_from_full_to_swa(probe).tolist()
            assert got == [self.model[f] for f in sorted(self.model)] + [-1], f"translation {got} disagrees with the model"

    return AllocatorMachine


@pytest.mark.parametrize("page_size", [1, 4])
def test_allocator_state_machine(target, page_size):
    run_state_machine_as_test(machine_for(target, page_size),
                              settings=settings(max_examples=examples(30), stateful_step_count=30, deadline=None))
