"""The paged segment free of SWA pages clears only each page's representative's mapping (#27779's rule, #38159)."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-swa-segment-free-clears-representatives",
    seed="#27779 (its page-level mapping cleanup, on the segment path #38159 added)",
    breaks="SWATokenToKVPoolAllocator._free_swa_pages_none_cuda (page_size > 1, the kv-row segment free: window "
    "eviction, tree node frees) frees each page by its representative, mapping[idx[::page_size]] // page_size, "
    "and clears the mapping of those representatives only instead of their whole full pages: #27779's bug, "
    "partial mapping cleanup of a page-granular free, carried onto the fixed-shape path",
    user_sees="every token but the first of each page that left the window still translates to an SWA page that "
    "is free again: once the pool hands it on, the request's later reads and the tree's later frees go to another "
    "request's KV (a second free of that page, or a window that reads foreign K/V)",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.allocator.swa.SWATokenToKVPoolAllocator._free_swa_pages_none_cuda",
            "mapping_indices = self._expand_to_full_pages(full_page_representatives)",
            "mapping_indices = full_page_representatives  # (#27779) the representatives only, not their pages",
        ),
    ),
)
