"""A request whose KV arrives from a prefill server gets its SWA slots mapped to the head of its tokens."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-swa-tail-mapped-to-head",
    seed="#25824 (a mapping written for the wrong tokens)",
    breaks="SWATokenToKVPoolAllocator.alloc_extend_swa_tail maps the SWA tail onto the request's first "
    "swa_tail_len full slots (alloc_full_indices[:swa_tail_len]) instead of its last ones",
    user_sees="on a PD decode server, the window's tokens of a transferred request translate to the sink or to "
    "stale slots: its sliding layers read zeros or another request's keys, and freeing it returns the wrong "
    "SWA pages",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.allocator.swa.SWATokenToKVPoolAllocator.alloc_extend_swa_tail",
            "alloc_full_indices[-swa_tail_len:], alloc_swa_indices",
            "alloc_full_indices[:swa_tail_len], alloc_swa_indices",
        ),
    ),
)
