"""The SGLang-side catalog by id: every fault module of ``catalog/`` (one module per fault), ``get_fault``, and the
seeds that no longer have a home in 0.5.23."""

from __future__ import annotations

from harness.targets.sglang.faults import SGLangFault
from harness.targets.sglang.faults.catalog import (
    alloc_decode_swa_last_loc_untranslated,
    bigram_frontier_measures_tokens,
    free_swa_keeps_mapping,
    mla_swa_write_at_full_id,
    move_kv_swa_in_full_ids,
    paged_free_swa_clears_passed_tokens,
    prefill_registry_out_cache_loc_not_zeroed,
    ragged_verify_sink_lanes_not_sunk,
    registry_out_cache_loc_not_zeroed,
    release_swa_keeps_padding_page,
    retraction_skips_swa,
    seq_lens_padded_with_zero,
    set_kv_buffer_stale_swa_loc,
    swa_evict_frees_tombstone_into_sink,
    swa_frontier_tombstones_last_leaf,
    swa_insert_all_evicted_made_live,
    swa_prefix_lock_release_behind_hasattr,
    swa_segment_free_clears_representatives,
    swa_tail_mapped_to_head,
    swa_write_ids_not_sink_padded,
    unfinished_insert_drops_swa_evicted,
)

SGLANG_FAULTS: dict[str, SGLangFault] = {
    m.FAULT.id: m.FAULT
    for m in (
        registry_out_cache_loc_not_zeroed,
        swa_write_ids_not_sink_padded,
        seq_lens_padded_with_zero,
        free_swa_keeps_mapping,
        set_kv_buffer_stale_swa_loc,
        alloc_decode_swa_last_loc_untranslated,
        release_swa_keeps_padding_page,
        ragged_verify_sink_lanes_not_sunk,
        swa_tail_mapped_to_head,
        move_kv_swa_in_full_ids,
        retraction_skips_swa,
        mla_swa_write_at_full_id,
        prefill_registry_out_cache_loc_not_zeroed,
        unfinished_insert_drops_swa_evicted,
        swa_frontier_tombstones_last_leaf,
        swa_insert_all_evicted_made_live,
        bigram_frontier_measures_tokens,
        paged_free_swa_clears_passed_tokens,
        swa_segment_free_clears_representatives,
        swa_evict_frees_tombstone_into_sink,
        swa_prefix_lock_release_behind_hasattr,
    )
}

# Seeds (docs/FAULTS.md) whose mechanism SGLang 0.5.23 no longer has, and why.
SEEDS_NOT_PORTED: dict[str, str] = {
    "#23552": "the SWA loc buffer pre-set at decode-graph capture lives in the CUDA decode graph runner, which "
    "does not run on CPU; on the paths that do, the KV-loc plan computes each id space once per forward",
    "#25824": "0.5.23 has no translation memo (no cache key, no invalidation points): the write loc is "
    "translated once per forward by the KV-loc plan and passed in a KVWriteLoc",
    "#26152": "the memo flush before the can-run-graph check and around window indices has no memo to flush in 0.5.23",
}


def get_fault(fault_id: str) -> SGLangFault:
    try:
        return SGLANG_FAULTS[fault_id]
    except KeyError:
        raise ValueError(f"unknown SGLang fault {fault_id!r}; known: {', '.join(SGLANG_FAULTS)}") from None
