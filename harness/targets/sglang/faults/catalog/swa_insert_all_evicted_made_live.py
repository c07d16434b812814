"""Page > window: the frontier reaches the insert boundary, and an insert whose tokens are all evicted makes them live."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-swa-insert-all-evicted-made-live",
    seed="#22470",
    breaks="both halves of #22470's fix reverted: free_swa_out_of_window_slots frees up to "
    "pre_len - sliding_window_size (with page_size > window it reaches page_floor(seq_len)), and the Python tree "
    "core's SWAComponent._populate_range has no case for a new leaf whose tokens are all below the eviction "
    "boundary: it publishes the leaf's SWA window anyway (SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python: the Rust "
    "core has its own insert)",
    user_sees="a leaf over SWA slots already given back is cached as live (its SWA value translates to slot 0): "
    "swa_evictable_size counts slots the tree does not hold, later requests read the padding slot in their "
    "sliding layers, and evicting the leaf frees SWA slots a second time",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot; 5: accounting",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.common.free_swa_out_of_window_slots",
            """evict_threshold = pre_len - ceil_align(
    max(sliding_window_size, page_size), page_size
)""",
            "evict_threshold = pre_len - sliding_window_size",
        ),
        SourceEdit(
            "sglang.srt.mem_cache.unified_cache.components.swa.SWAComponent._populate_range",
            "if live_start is None:\n    continue",
            "if live_start is None:\n    live_start = start",
        ),
    ),
    env=(("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "python"),),
)
