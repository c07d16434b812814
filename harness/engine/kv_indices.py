"""Which KV slots a decode query reads: index builders shared by the attention backend and the toy target.

Window convention (transformers'): with ``sliding_window = W`` the token at position ``i`` sees
positions ``i - W < j <= i``, i.e. itself and the ``W - 1`` before it. For a decode row whose
``seq_len`` counts the new token, that is positions ``seq_len - W .. seq_len - 1``.
"""

from __future__ import annotations

import functools

import torch

from harness.mem.index import PADDING_SLOT


def decode_kv_indices(
    req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, kv_len: int, out: torch.Tensor
) -> None:
    """Full slots of positions ``0 .. kv_len - 1`` of each row into ``out[:bs, :kv_len]``.

    Entries past a row's ``seq_len`` are whatever ``req_to_token`` holds there (0 for slots never
    written); readers mask them by ``seq_lens``.
    """
    bs = req_pool_indices.numel()
    torch.index_select(req_to_token[:, :kv_len], 0, req_pool_indices, out=out[:bs, :kv_len])


def decode_window_positions(seq_lens: torch.Tensor, window: int) -> torch.Tensor:
    """Positions ``seq_len - W .. seq_len - 1`` per row; negative ones do not exist and are masked."""
    offsets = torch.arange(-window, 0, device=seq_lens.device, dtype=seq_lens.dtype)
    return seq_lens[:, None] + offsets


@functools.cache
def _window_offsets(window: int, device: torch.device) -> torch.Tensor:
    """``-W .. -1`` as int64 (gather's index dtype), made once: host metadata only, never inside a capture,
    where a tensor kept across calls would be one the graph's memory planner believes it owns."""
    return torch.arange(-window, 0, device=device)


def decode_window_full_indices(
    req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor, window: int
) -> torch.Tensor:
    """Full slots of each row's window ``[bs, W]`` (the padding slot where the position is < 0).

    Host metadata (outside any graph); ``decode_window_positions``' positions, in int64 so the gather
    takes them as they are.
    """
    positions = seq_lens[:, None] + _window_offsets(window, seq_lens.device)
    # One gather of the W entries per row from the flat table (not a copy of whole rows first): a row
    # outside the table gives an index outside it, which index_select refuses.
    width = req_to_token.shape[1]
    flat = torch.add(positions.clamp(min=0), req_pool_indices[:, None], alpha=width)
    full = req_to_token.view(-1).index_select(0, flat.view(-1)).view(positions.shape)
    return torch.where(positions >= 0, full, PADDING_SLOT)
