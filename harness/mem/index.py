"""The index-tensor contract shared by every pool boundary.

Location tensors (full KV slots, SWA KV slots, request-to-token entries) are ``int32``: that is what
the pools store and what SGLang's kernels assume (#23552 and #24743 were about an ``int64`` SWA loc
buffer sneaking in). Checking at the boundary turns a silent implicit cast into a named error.
"""

from __future__ import annotations

import torch

from harness.mem.errors import IndexContractError

LOC_DTYPE = torch.int32
"""dtype of every slot-id tensor: full locs, SWA locs, req_to_token rows."""

PADDING_SLOT = 0
"""Slot 0 of every KV pool is the padding sentinel: padded tokens write there, harmlessly."""


def check_index(
    name: str,
    index: torch.Tensor,
    *,
    device: torch.device,
    dtype: torch.dtype = LOC_DTYPE,
    ndim: int = 1,
) -> None:
    """Raise ``IndexContractError`` unless ``index`` is a tensor of this dtype, device and rank."""
    if not isinstance(index, torch.Tensor):
        raise IndexContractError(f"{name} must be a torch.Tensor, got {type(index).__name__}")
    if index.dtype != dtype:
        raise IndexContractError(f"{name} must have dtype {dtype}, got {index.dtype}")
    if index.device.type != device.type:
        raise IndexContractError(f"{name} must be on device {device}, got {index.device}")
    if index.dim() != ndim:
        raise IndexContractError(f"{name} must have rank {ndim}, got shape {tuple(index.shape)}")


def slot_bounds(index: torch.Tensor) -> tuple[int, int]:
    """Smallest and largest slot id of a non-empty index, in one pass; a host sync, so never inside capture."""
    lo, hi = torch.aminmax(index)
    return int(lo), int(hi)


def check_slot_range(
    name: str, index: torch.Tensor, *, low: int, high: int, bounds: tuple[int, int] | None = None
) -> None:
    """Raise unless every slot id lies in ``[low, high)`` (``bounds``: the index's ``slot_bounds``, if read)."""
    if index.numel() == 0:
        return
    lo, hi = bounds or slot_bounds(index)
    if lo < low or hi >= high:
        raise IndexContractError(f"{name} holds slot ids in [{lo}, {hi}], outside the valid range [{low}, {high})")
