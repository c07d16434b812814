"""Every catalog fault by id (the rows of docs/FAULTS.md). Apart from the package's ``__init__``, which loads it
on first use: the catalog imports the engine (torch), and the kill matrix must say NO VERDICT before that."""

from __future__ import annotations

from harness.faults.base import Fault
from harness.faults.catalog import (
    async_sweep_counts_in_flight,
    capture_after_warm_cache,
    chunked_insert_drops_swa_evicted,
    chunked_prompt_logprobs_from_prompt_start,
    evict_frees_sink_swa,
    extend_capture_after_warm_cache,
    extend_pad_swa_loc_not_zeroed,
    invalidate_after_graph_check,
    no_invalidate_on_mutation,
    pad_swa_loc_not_zeroed,
    paged_free_swa_keeps_page_mapping,
    prefill_ignores_precomputed_loc,
    resume_key_drops_env,
    resume_key_drops_generation_budget,
    series_ignores_checkpoint,
    stale_pool_attribute_loc,
    storage_ptr_cache_key,
    swa_frontier_reaches_insert_boundary,
    swa_frontier_tombstones_last_leaf,
    swa_lock_release_skipped,
    swa_loc_int64,
    swa_loc_not_preset,
    tokenizer_memo_keyed_by_folder,
    window_indices_pollute_memo,
)

FAULTS: dict[str, Fault] = {
    fault.id: fault
    for m in (
        swa_loc_not_preset,
        pad_swa_loc_not_zeroed,
        swa_loc_int64,
        prefill_ignores_precomputed_loc,
        stale_pool_attribute_loc,
        storage_ptr_cache_key,
        no_invalidate_on_mutation,
        capture_after_warm_cache,
        invalidate_after_graph_check,
        window_indices_pollute_memo,
        extend_pad_swa_loc_not_zeroed,
        extend_capture_after_warm_cache,
        chunked_insert_drops_swa_evicted,
        swa_frontier_tombstones_last_leaf,
        swa_frontier_reaches_insert_boundary,
        # The field's SWA bug classes of mid to late 2026 (issue 56): overlap scheduling, paged frees, the sink, locks.
        async_sweep_counts_in_flight,
        paged_free_swa_keeps_page_mapping,
        evict_frees_sink_swa,
        swa_lock_release_skipped,
        # The layers between a run and its verdict (issue 41): what reuses a result, keyed by what produced it.
        resume_key_drops_env,
        resume_key_drops_generation_budget,
        series_ignores_checkpoint,
        tokenizer_memo_keyed_by_folder,
        # What lm-eval's loglikelihood tasks read (issue 54): echoed prompt logprobs under chunked prefill.
        chunked_prompt_logprobs_from_prompt_start,
    )
    for fault in getattr(m, "FAULTS_BY_POINT", None)
    or (m.FAULT,)  # a module holds one fault, or one per mutation point
}


def get_fault(fault_id: str) -> Fault:
    try:
        return FAULTS[fault_id]
    except KeyError:
        raise ValueError(f"unknown fault {fault_id!r}; known faults: {', '.join(FAULTS)}") from None
