"""#24743: the padded tail of the SWA loc buffer keeps the previous replay's slots."""

from __future__ import annotations

from harness.faults.base import Fault, Patch, with_entry
from harness.graph.buffers import DECODE_FIELDS, DecodeInputBuffers

_SWA_LOC_UNPADDED = with_entry(DECODE_FIELDS, "out_cache_loc_swa", pad=None)

FAULT = Fault(
    id="pad-swa-loc-not-zeroed",
    seed="#24743",
    breaks="when raw_bs < bs the out_cache_loc_swa tail is not reset to the padding slot, so padded rows "
    "write K/V into SWA slots that the previous, larger replay gave to live requests",
    user_sees="silent KV corruption; AIME accuracy fell ~10 points on MiMo-V2.5-Pro",
    invariant="2: padded rows write only to the sentinel slot",
    patches=(Patch(DecodeInputBuffers, "fields", _SWA_LOC_UNPADDED),),
)
