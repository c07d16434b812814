"""#29860: with a prefix cache, the window slide keeps ``W - 1`` live tokens below ``kv_len`` instead of below
the insert boundary ``page_floor(kv_len)``: with ``page_size > W`` the frontier reaches the boundary."""

from __future__ import annotations

from harness.faults.base import Fault, Patch
from harness.mem.radix_cache import RadixCache, page_floor


def swa_keep_from(self: RadixCache, kv_len: int) -> int:
    """Twin of ``RadixCache.swa_keep_from``: the bound a decode without a cache uses."""
    return page_floor(max(0, kv_len - (self.sliding_window_size - 1)), self.page_size)


FAULT = Fault(
    id="swa-frontier-tombstones-last-leaf",
    seed="#29860",
    breaks="slide_window frees SWA up to page_floor(kv_len - W + 1); an insert stops at page_floor(kv_len), so "
    "with page_size > W every page the insert adds is already out of the window: the last leaf has no live "
    "window and no match can end in it",
    user_sees="requests that share a finished request's prefix miss the cache for its last pages and prefill "
    "them again (in SGLang: an all-tombstone leaf that hit an assert or leaked SWA memory)",
    invariant="windows: right after an insert, a match of the inserted key finds all of it",
    patches=(Patch(RadixCache, "swa_keep_from", swa_keep_from),),
)
