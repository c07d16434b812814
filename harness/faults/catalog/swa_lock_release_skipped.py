"""SGLang #28161: the scheduler's window slide asked the cache to move a request's SWA lock behind a ``hasattr``
guard on a method only the legacy tree had: on the unified tree the call silently did nothing."""

from __future__ import annotations

from harness.faults.base import Fault, Patch
from harness.mem.contracts import CacheRequest
from harness.mem.radix_cache import RadixCache


def _follow_window(self: RadixCache, req: CacheRequest) -> None:
    """Twin of ``RadixCache._follow_window``: ``maybe_evict_swa``'s guarded call; this tree has no
    ``dec_swa_lock_only`` (the legacy ``SWARadixCache``'s name), so the lock never follows the window."""
    release = getattr(self, "dec_swa_lock_only", None)
    if release is not None:
        release(req)


FAULT = Fault(
    id="swa-lock-release-skipped",
    seed="SGLang #28161",
    breaks="slide_windows never moves a request's SWA lock: the prefix window it locked at admission stays "
    "protected until the request finishes, long after its own window has passed the prefix",
    user_sees="SWA KV that no query can see stays locked: the tree cannot evict it, SWA pressure evicts other "
    "requests' live windows instead and a pool sized for one window per request runs short (SGLang: Full-locked "
    "leaves stranded in the SWA LRU, then the cascade-evict assert)",
    invariant="locks: a request pins no SWA KV once its window has passed its prefix",
    patches=(Patch(RadixCache, "_follow_window", _follow_window),),
)
