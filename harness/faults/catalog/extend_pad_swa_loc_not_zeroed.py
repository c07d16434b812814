"""#24743 on the extend path: the extend graph's padded SWA loc tail keeps the previous replay's slots."""

from __future__ import annotations

from harness.faults.base import Fault, Patch, with_entry
from harness.graph.extend_buffers import EXTEND_FIELDS, ExtendInputBuffers

_SWA_LOC_UNPADDED = with_entry(EXTEND_FIELDS, "out_cache_loc_swa", pad=None)

FAULT = Fault(
    id="extend-pad-swa-loc-not-zeroed",
    seed="#24743",
    breaks="when an extend batch's tokens are padded up to their bucket, the out_cache_loc_swa tail is not reset "
    "to the padding slot (SGLang's piecewise runner zeroes it), so padded tokens write K/V into SWA slots a "
    "previous, larger extend gave to live requests",
    user_sees="silent SWA KV corruption of live requests after every padded prefill",
    invariant="2: padded rows write only to the sentinel slot",
    patches=(Patch(ExtendInputBuffers, "fields", _SWA_LOC_UNPADDED),),
)
