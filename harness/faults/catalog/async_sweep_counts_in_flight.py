"""vLLM #47728: under async scheduling the sliding window is swept on the scheduled token count, which counts the
step still in flight, so a position that step's forward reads leaves the window before the forward runs."""

from __future__ import annotations

from harness.engine.request import Req
from harness.engine.scheduler import Scheduler
from harness.faults.base import Fault, Patch


def _swept_len(self: Scheduler, req: Req) -> int:
    """Twin of ``Scheduler._swept_len``: the scheduled count (vLLM's optimistic ``num_computed_tokens``)."""
    return req.slots_len


FAULT = Fault(
    id="async-sweep-counts-in-flight",
    seed="vLLM #47728",
    breaks="with overlap scheduling the window slide at a step's commit counts slots_len (kv_len plus the next step, "
    "already launched) instead of kv_len: it frees the SWA page of position slots_len - W, which the in-flight "
    "step's forward still reads, and the next scheduling pass hands that page to another request",
    user_sees="with overlap (async) scheduling and the prefix cache off, outputs differ from sync scheduling: the "
    "in-flight step reads a freed window position (vLLM: silent garbage under async scheduling with a KV connector "
    "or rejected drafts); sync scheduling is untouched",
    invariant="overlap: the window sweep counts computed tokens; nothing an in-flight step reads is freed",
    patches=(Patch(Scheduler, "_swept_len", _swept_len),),
)
