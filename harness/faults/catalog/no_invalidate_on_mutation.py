"""#25824: an allocator mutation of the full -> SWA mapping forgets to invalidate the memo."""

from __future__ import annotations

from harness.faults.base import Fault, Patch
from harness.mem.swa_allocator import SWATokenToKVPoolAllocator

_mapping_changed = SWATokenToKVPoolAllocator._mapping_changed


def _free_swa_forgets_to_invalidate(self: SWATokenToKVPoolAllocator, mutation: str) -> None:
    """Twin of ``SWATokenToKVPoolAllocator._mapping_changed``: ``free_swa`` leaves the memo as it was."""
    if mutation != "free_swa":
        _mapping_changed(self, mutation)


FAULT = Fault(
    id="no-invalidate-on-mutation",
    seed="#25824",
    breaks="free_swa changes the mapping without invalidating the translation memo",
    user_sees="a translation returns SWA slots from before the tokens left the window (slots now owned by others)",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    patches=(Patch(SWATokenToKVPoolAllocator, "_mapping_changed", _free_swa_forgets_to_invalidate),),
)
