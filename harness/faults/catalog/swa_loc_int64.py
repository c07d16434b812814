"""#23552 review / #24743: the SWA loc buffer is int64 while the pool uses int32."""

from __future__ import annotations

from types import MappingProxyType

import torch

from harness.faults.base import Fault, Patch
from harness.graph.buffers import INPUT_DTYPES, DecodeInputBuffers

FAULT = Fault(
    id="swa-loc-int64",
    seed="#23552/#24743",
    breaks="out_cache_loc_swa is allocated as int64; the pool and kernels use int32",
    user_sees="a broken dtype contract: implicit casts and extra memory, or kernels that assume int32 misbehave",
    invariant="4: index tensors have the dtype the pool declares, at every boundary",
    patches=(Patch(DecodeInputBuffers, "dtypes", MappingProxyType({**INPUT_DTYPES, "out_cache_loc_swa": torch.int64})),),
)
