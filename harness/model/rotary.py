"""Rotary position embeddings as precomputed cos/sin tables indexed by position."""

from __future__ import annotations

import torch
from torch import nn

from harness.model.config import RopeConfig


def inv_freq(rope: RopeConfig, head_dim: int) -> torch.Tensor:
    """transformers' default (and linear-scaled) RoPE inverse frequencies, bit for bit."""
    freq = 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    if rope.rope_type == "linear":
        freq = freq / rope.factor
    return freq


class RotaryTables(nn.Module):
    """cos/sin for positions ``0 .. max_positions-1``, shaped ``[P, 1, head_dim]``.

    Tables are built once (fp32 math, then cast to the model dtype exactly as
    transformers casts its per-step cos/sin), so a forward pass costs two index
    ops instead of recomputing trig functions. `sin` is stored sign-folded
    (``[-s, s]``) so rotation is ``x * cos + swap_halves(x) * sin``, which equals
    transformers' ``x * cos + rotate_half(x) * sin`` exactly.
    """

    def __init__(self, rope: RopeConfig, head_dim: int, max_positions: int,
                 dtype: torch.dtype, device: torch.device | str = "cpu"):
        super().__init__()
        self.rope = rope
        freqs = torch.arange(max_positions).float()[:, None] * inv_freq(rope, head_dim)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        sin = emb.sin()
        half = head_dim // 2
        sin_folded = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
        self.register_buffer("cos", emb.cos().to(dtype).unsqueeze(1).to(device), persistent=False)
        self.register_buffer("sin", sin_folded.to(dtype).unsqueeze(1).to(device), persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(cos, sin)`` of shape ``[T, 1, head_dim]`` for `positions` ``[T]``."""
        return self.cos[positions], self.sin[positions]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [T, heads, head_dim]`` (NeoX / rotate-half layout)."""
    swapped = torch.roll(x, x.shape[-1] // 2, dims=-1)  # [x1, x2] -> [x2, x1]
    return x * cos + swapped * sin
