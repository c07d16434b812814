"""#25824: an allocator mutation of the full -> SWA mapping forgets to invalidate the memo."""

from __future__ import annotations

import torch

from harness.faults.base import Fault, Patch
from harness.mem.swa_allocator import SWATokenToKVPoolAllocator

_free_swa = SWATokenToKVPoolAllocator.free_swa


def _free_swa_without_invalidation(self: SWATokenToKVPoolAllocator, free_index: torch.Tensor) -> None:
    """Twin of ``SWATokenToKVPoolAllocator.free_swa`` whose memo flush never happened: the memo is
    left exactly as it was before the mapping changed."""
    pool = self._kvcache
    memo = pool._cached_loc_key, pool._cached_swa_loc
    _free_swa(self, free_index)
    pool._cached_loc_key, pool._cached_swa_loc = memo


FAULT = Fault(
    id="no-invalidate-on-mutation",
    seed="#25824",
    breaks="free_swa changes the mapping without invalidating the translation memo",
    user_sees="a translation returns SWA slots from before the tokens left the window (slots now owned by others)",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    patches=(Patch(SWATokenToKVPoolAllocator, "free_swa", _free_swa_without_invalidation),),
)
