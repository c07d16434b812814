"""#25824: the translation memo is keyed by the storage pointer, blind to view offsets."""

from __future__ import annotations

import torch

from harness.faults.base import Fault, Patch
from harness.mem.swa_kv_pool import SWAKVPool


def _storage_key(self: SWAKVPool, kv_indices: torch.Tensor) -> tuple[int, int]:
    """Twin of ``SWAKVPool._loc_cache_key``: two views of one storage at different offsets collide."""
    return (kv_indices.untyped_storage().data_ptr(), kv_indices.numel())


FAULT = Fault(
    id="storage-ptr-cache-key",
    seed="#25824",
    breaks="the memo key is untyped_storage().data_ptr(); equal-length views at different offsets of one "
    "storage (e.g. successive allocations, which are views of the free list) share a key",
    user_sees="the second view gets the first view's SWA slots",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    patches=(Patch(SWAKVPool, "_loc_cache_key", _storage_key),),
)
