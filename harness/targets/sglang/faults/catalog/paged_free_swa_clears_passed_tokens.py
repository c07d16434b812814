"""A paged free_swa frees whole SWA pages but clears the mapping of the passed tokens only (#27779)."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-paged-free-swa-clears-passed-tokens",
    seed="#27779",
    breaks="SWATokenToKVPoolAllocator.free_swa (page_size > 1, the set-shaped free) gathers and clears the mapping "
    "of the tokens it is passed only, as before #27779, while the paged SWA allocator frees each touched page "
    "whole: the page's other full slots keep pointing into the page that is free again",
    user_sees="after a partial-page free (a rollback, a free of part of a request's last page) the page's other "
    "tokens still translate to an SWA page the pool hands to the next request: their sliding layers read and "
    "write another request's K/V, and freeing them later frees that page a second time",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot; 5: no full slot maps "
    "into a free SWA page",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.allocator.swa.SWATokenToKVPoolAllocator.free_swa",
            "mapping_indices = self._expand_to_full_pages(free_index)",
            "mapping_indices = free_index  # (#27779) the passed tokens only, not their whole pages",
        ),
    ),
)
