"""free_swa gives the SWA slots back but leaves the full -> SWA mapping pointing at them."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-free-swa-keeps-mapping",
    seed="#25824 (mapping mutation without its bookkeeping)",
    breaks="SWATokenToKVPoolAllocator free_swa (page 1 and paged, CPU path) no longer clears the mapping "
    "entries of the tokens that left the window",
    user_sees="tokens that left the window still translate to SWA slots now owned by other requests; "
    "accounting drifts and reads see another request's K/V",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.allocator.swa.SWATokenToKVPoolAllocator._free_swa_pages_none_cuda",
            "self.clear_full_to_swa_mapping(mapping_indices)",
            "pass",
        ),
    ),
)
