"""Evicting a tombstoned node frees its unmapped full slots as SWA: they map to the sink, page 0 is freed
(#38269 / #38519)."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-swa-evict-frees-tombstone-into-sink",
    seed="#38269 / #38519",
    breaks="SWAComponent.evict_component hands the node's full indices to the SWA free (FreeComponentDeviceSlot -> "
    "free_swa_segment -> _free_swa_pages) whether or not the node still holds SWA KV: the segment path has no "
    "`swa > 0` filter (#38519's finding), so a tombstone's slots, which map to the sink 0, free SWA page 0 (once "
    "per page of the node). Python tree core only (SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python); the Rust core "
    "evicts on its own",
    user_sees="after a full eviction of a tombstoned node the SWA pool counts more free slots than it has and hands "
    "out the padding page: padded lanes then write into a live request's window; a pool that was nearly free "
    "trips SGLang's own `available_size() <= size` assert (#38519's crash)",
    invariant="5: pool accounting; the padding page is never handed out",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.unified_cache.components.swa.SWAComponent.evict_component",
            "if EvictLayer.DEVICE in target and cd.value is not None:",
            "if EvictLayer.DEVICE in target:  # (#38519) a tombstone's full slots, mapped to the sink, too",
        ),
    ),
    env=(("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "python"),),
)
