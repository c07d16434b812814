"""The prefix-cache state machine (``suites/prefix/machines.py``) on the target's cache and allocator, at page
sizes 1, 4 and 16 and with the window smaller than a page, its decode batches in sync or overlap scheduling."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from harness.engine.overlap import Schedule
from suites.conftest import examples
from suites.prefix.machines import SHAPES, machine_for


@pytest.mark.parametrize("schedule", [s.value for s in Schedule])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.label())
def test_prefix_cache_machine(target, shape, schedule):
    run_state_machine_as_test(
        machine_for(target, shape, overlap=schedule == Schedule.OVERLAP),
        settings=settings(max_examples=examples(40), stateful_step_count=40, deadline=None),
    )
