"""A paged free gives the padding page back to the SWA pool."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-release-swa-keeps-padding-page",
    seed="#24743's hazard (the padding slot 0 taken for a live one)",
    breaks="SWATokenToKVPoolAllocator._release_swa (page_size > 1) no longer drops the mapping entries that read "
    "0, which the page expansion of a partly used last page picks up",
    user_sees="freeing a request whose last page is partly used frees SWA page 0, the padding page: it is "
    "handed out to a request, and padded lanes then write into that request's window; the pool reports more "
    "free SWA slots than it has",
    invariant="5: pool accounting; the padding page is never handed out",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.allocator.swa.SWATokenToKVPoolAllocator._release_swa",
            "swa_indices = swa_indices[swa_indices > 0]",
            "pass",
        ),
    ),
)
