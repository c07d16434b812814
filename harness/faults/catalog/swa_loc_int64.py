"""#23552 review / #24743: the SWA loc buffer is int64 while the pool uses int32."""

from __future__ import annotations

import torch

from harness.faults.base import Fault, Patch, with_entry
from harness.graph.buffers import DECODE_FIELDS, DecodeInputBuffers

_SWA_LOC_INT64 = with_entry(DECODE_FIELDS, "out_cache_loc_swa", dtype=torch.int64)

FAULT = Fault(
    id="swa-loc-int64",
    seed="#23552/#24743",
    breaks="out_cache_loc_swa is allocated as int64; the pool and kernels use int32",
    user_sees="a broken dtype contract: implicit casts and extra memory, or kernels that assume int32 misbehave",
    invariant="4: index tensors have the dtype the pool declares, at every boundary",
    structural_only="on CPU no kernel assumes int32, so the int64 buffer changes memory and casts, not the slots written",
    patches=(Patch(DecodeInputBuffers, "fields", _SWA_LOC_INT64),),
)
