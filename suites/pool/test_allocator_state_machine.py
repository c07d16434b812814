"""The allocator state machine (``suites/pool/machines.py``: random alloc / free / free_swa / clear sequences
against a model of slot ownership) on the target's pool and allocator, at page sizes 1 and 4.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from suites.conftest import examples
from suites.pool.machines import allocator_machine


@pytest.mark.parametrize("page_size", [1, 4])
def test_allocator_state_machine(target, page_size):
    run_state_machine_as_test(
        allocator_machine(target, page_size),
        settings=settings(max_examples=examples(30), stateful_step_count=30, deadline=None),
    )
