"""The paged-requests state machine (``suites/pool/machines.py``: requests that grow page by page against a
model of which request owns which page) on the target's allocator at page sizes 1, 4 and 16, and two
contracts checked directly: a decode that does not fit takes nothing, and a free of nothing changes nothing.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from harness.targets.target import PoolSpec
from suites.conftest import examples
from suites.known_failures import known_failure
from suites.pool.machines import paged_requests_machine


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_paged_requests_machine(target, page_size):
    run_state_machine_as_test(
        paged_requests_machine(target, page_size),
        settings=settings(max_examples=examples(60), stateful_step_count=40, deadline=None),
    )


def test_a_decode_that_does_not_fit_takes_nothing(target, request):
    """The SWA pool is full, the full pool is not: ``alloc_decode`` of a token that opens a page must refuse
    and leave both pools as they were (the contract ``alloc_extend`` keeps)."""
    if target.name == "sglang":
        request.applymarker(
            known_failure(
                "docs/FINDINGS.md #8: SGLang 0.5.23's alloc_decode takes the full pool's page before it finds the SWA "
                "pool short",
                raises=AssertionError,
                match=r"^a refused decode took slots: available \(full, SWA\)",
            )
        )
    handle = target.build_pool(PoolSpec(size=64, size_swa=8, page_size=4))
    allocator = handle.allocator
    first = allocator.alloc_extend([0], [4], [-1])
    allocator.alloc_extend([0], [4], [-1])  # the SWA pool's two pages are taken
    before = (allocator.full_available_size(), allocator.swa_available_size())
    assert allocator.alloc_decode([5], [int(first[-1])]) is None, "a decode was served without an SWA page"
    after = (allocator.full_available_size(), allocator.swa_available_size())
    assert after == before, f"a refused decode took slots: available (full, SWA) {before} -> {after}"


@pytest.mark.parametrize("page_size", [1, 4])
def test_a_free_of_nothing_changes_nothing(target, page_size):
    """A scheduler step frees whatever left the window or finished, which is often nothing: every free, as a
    set or as a row segment, inside a free group or not, takes an empty index and changes no count."""
    handle = target.build_pool(PoolSpec(size=8 * page_size, size_swa=4 * page_size, page_size=page_size))
    allocator = handle.allocator
    held = allocator.alloc_extend([0], [page_size + 1], [-1])
    before = (
        allocator.full_available_size(),
        allocator.swa_available_size(),
        allocator.full_to_swa_index_mapping.clone(),
    )
    nothing = torch.zeros(0, dtype=torch.int32)
    for grouped in (False, True):
        if grouped:
            allocator.free_group_begin()
        allocator.free(nothing)
        allocator.free_swa(nothing)
        allocator.free_full(nothing)
        allocator.free_segment(nothing, start_pos=0)
        allocator.free_swa_segment(nothing, start_pos=0)
        allocator.free_full_segment(nothing, start_pos=0)
        if grouped:
            allocator.free_group_end()
        after = (allocator.full_available_size(), allocator.swa_available_size())
        assert after == before[:2], f"freeing nothing changed the pools: {before[:2]} -> {after}"
        assert torch.equal(allocator.full_to_swa_index_mapping, before[2]), "freeing nothing changed the mapping"
    allocator.free(held)
    assert (allocator.full_available_size(), allocator.swa_available_size()) == (8 * page_size, 4 * page_size)
