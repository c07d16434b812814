"""Moving accepted drafts' K/V addresses the SWA sub-pool with full-pool ids."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-move-kv-swa-in-full-ids",
    seed="#24138's hazard (an id of one sub-pool used in the other's space)",
    breaks="SWAKVPool.move_kv_cache moves the sliding-window sub-pool's K/V at the full ids (tgt_loc, src_loc) "
    "instead of their translations",
    user_sees="after a speculative verify, the accepted drafts' sliding-layer K/V stay where the verify wrote "
    "them and whatever SWA slots carry the full ids' numbers are overwritten: another request's window, or "
    "this one's",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.swa_memory_pool.SWAKVPool.move_kv_cache",
            "self.swa_kv_pool.move_kv_cache(tgt_loc_swa, src_loc_swa)",
            "self.swa_kv_pool.move_kv_cache(tgt_loc, src_loc)",
        ),
    ),
)
