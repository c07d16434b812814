"""Weights of the linear projections, laid out for the CPU GEMM."""

from __future__ import annotations

import torch
from torch import nn


def linear_weight(
    out_features: int, in_features: int, dtype: torch.dtype, device: torch.device | str = "cpu"
) -> nn.Parameter:
    """An ``[out, in]`` weight for ``F.linear`` whose memory is ``[in, out]`` row-major.

    ``F.linear(x, w)`` multiplies by ``w.t()``; with this layout that operand is contiguous, and on one
    CPU thread MKL's GEMM runs the decode-sized products of the engine bench about 1.5x faster than over
    the transposed operand (``docs/BENCHMARKS.md``, profile). Loading copies into it like any parameter;
    cuBLAS takes either layout at the same cost.
    """
    storage = torch.empty(in_features, out_features, dtype=dtype, device=device)
    return nn.Parameter(storage.t(), requires_grad=False)
