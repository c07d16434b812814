"""#25824: the translation memo is keyed by the storage pointer, blind to view offsets."""

from __future__ import annotations

import torch

from harness.faults.base import Fault, Patch
from harness.mem.loc_memo import SwaLocMemo


def _storage_key(self: SwaLocMemo, loc: torch.Tensor) -> tuple[int, int]:
    """Twin of ``SwaLocMemo.key_of``: two views of one storage at different offsets collide."""
    return (loc.untyped_storage().data_ptr(), loc.numel())


FAULT = Fault(
    id="storage-ptr-cache-key",
    seed="#25824",
    breaks="the memo key is untyped_storage().data_ptr(); equal-length views at different offsets of one "
    "storage (e.g. successive allocations, which are views of the free list) share a key",
    user_sees="the second view gets the first view's SWA slots",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    patches=(Patch(SwaLocMemo, "key_of", _storage_key),),
)
