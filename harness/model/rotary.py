"""Rotary position embeddings as precomputed cos/sin tables indexed by position."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.model.config import RopeConfig

ROTATION_MATRIX_LIMIT = 1 << 18
"""Most elements (``T * head_dim**2``) of a step's rotation matrices; bigger steps rotate elementwise."""


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

    def __init__(
        self,
        rope: RopeConfig,
        head_dim: int,
        max_positions: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ):
        super().__init__()
        self.rope = rope
        freqs = torch.arange(max_positions).float()[:, None] * inv_freq(rope, head_dim)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        sin = emb.sin()
        half = head_dim // 2
        sin_folded = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
        self.register_buffer("cos", emb.cos().to(dtype).unsqueeze(1).to(device), persistent=False)
        self.register_buffer("sin", sin_folded.to(dtype).unsqueeze(1).to(device), persistent=False)

        # For rotation matrices: the identity, and the half swap (x @ swap == roll(x, head_dim // 2)).
        half_swap = torch.roll(torch.eye(head_dim), half, dims=1)
        self.register_buffer("eye", torch.eye(head_dim, dtype=dtype, device=device), persistent=False)
        self.register_buffer("half_swap", half_swap.to(dtype).to(device), persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(cos, sin)`` of shape ``[T, 1, head_dim]`` for `positions` ``[T]``."""
        return self.cos[positions], self.sin[positions]

    def for_positions(self, positions: torch.Tensor) -> "Rope":
        """The rotation for a forward's tokens, built once and shared by every layer using these tables."""
        cos, sin = self(positions)
        t, d = positions.shape[0], cos.shape[-1]
        if self.cos.dtype != torch.float32 or t * d * d > ROTATION_MATRIX_LIMIT:
            return Rope(cos, sin, None)
        # R_t = diag(cos_t) + half_swap * sin_t (column j scaled by cos_t[j], sin_t[j]): x @ R_t rotates
        # a row at position t, so each layer rotates its q and k heads with one bmm instead of four ops.
        return Rope(cos, sin, torch.addcmul(cos * self.eye, sin, self.half_swap))


@dataclass(frozen=True)
class Rope:
    """RoPE for the ``T`` tokens of one forward: ``rope(x)`` rotates ``x [T, heads, head_dim]``.

    ``matrices [T, head_dim, head_dim]`` (fp32 models, small steps such as decode) turn the rotation
    into one batched matmul per layer; it equals `apply_rotary` up to float rounding of the two-term
    sum (the other terms are exact zeros). Without them the rotation is `apply_rotary` itself.
    """

    cos: torch.Tensor
    sin: torch.Tensor
    matrices: torch.Tensor | None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.matrices is None:
            return apply_rotary(x, self.cos, self.sin)
        return torch.bmm(x, self.matrices)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [T, heads, head_dim]`` (NeoX / rotate-half layout)."""
    swapped = torch.roll(x, x.shape[-1] // 2, dims=-1)  # [x1, x2] -> [x2, x1]
    return x * cos + swapped * sin
