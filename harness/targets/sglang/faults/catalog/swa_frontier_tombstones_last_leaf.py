"""The out-of-window SWA frontier keeps only the window, not a page: with page > window the last leaf is all tombstone."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-swa-frontier-tombstones-last-leaf",
    seed="#29860",
    breaks="free_swa_out_of_window_slots, on a prefix-sharing cache, frees up to pre_len - sliding_window_size "
    "(page-floored; SGLANG_OPT_SWA_EVICT_DROP_PAGE_MARGIN's frontier) instead of keeping "
    "max(sliding_window_size, page_size) rounded up to whole pages: with page_size > window the frontier "
    "reaches page_floor(seq_len), the insert boundary",
    user_sees="a chunk's checkpoint inserts a leaf whose SWA KV is all gone: a match can never end on it, so "
    "the next request sharing that prefix re-prefills it (and pre-0.5.23 trees asserted or leaked SWA memory)",
    invariant="matches: the leaf a checkpoint inserts ends a match (its last W - 1 tokens hold live SWA KV)",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.common.free_swa_out_of_window_slots",
            """evict_threshold = pre_len - ceil_align(
    max(sliding_window_size, page_size), page_size
)""",
            "evict_threshold = pre_len - sliding_window_size",
        ),
    ),
)
