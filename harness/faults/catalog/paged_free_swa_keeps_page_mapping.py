"""SGLang #27779: with page size > 1, ``free_swa`` gives back the SWA page of every token passed, but clears the
mapping of the passed tokens only: the page's other tokens still map into the freed page."""

from __future__ import annotations

import torch

from harness.faults.base import Fault, Patch
from harness.mem.index import check_index
from harness.mem.swa_allocator import SWATokenToKVPoolAllocator


def free_swa(self: SWATokenToKVPoolAllocator, free_index: torch.Tensor) -> None:
    """Twin of ``SWATokenToKVPoolAllocator.free_swa``: SGLang's before #27779. The paged SWA allocator frees whole
    pages; the mapping is cleared token by token (correct at page size 1 only)."""
    check_index("free_index", free_index, device=self.device)
    if self._held(self.free_swa, free_index) or free_index.numel() == 0:
        return
    swa = self.full_to_swa_index_mapping.index_select(0, free_index)
    self.swa_attn_allocator.free(swa[swa > 0])
    self.full_to_swa_index_mapping[free_index] = 0
    self._kvcache.on_mapping_changed("free_swa")


FAULT = Fault(
    id="paged-free-swa-keeps-page-mapping",
    seed="SGLang #27779",
    breaks="free_swa of some tokens of a page (page_size > 1) frees the whole SWA page but zeroes only those tokens' "
    "mapping entries: the page's other tokens still map into it",
    user_sees="the next allocation hands the page to another request while those tokens still read it (their window "
    "attends over the other request's K/V), and their later free gives the page back twice (SGLang: a corrupted "
    "SWA free list, available > size)",
    invariant="ownership: no token maps to an SWA page that is free or another request's",
    patches=(Patch(SWATokenToKVPoolAllocator, "free_swa", free_swa),),
)
