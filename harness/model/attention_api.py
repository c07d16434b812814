"""The seam between model math and attention/KV-cache implementations.

The model projects q/k/v, applies q/k norms and RoPE, then hands the rotated
tensors to an `AttentionBackend`. The backend alone decides where keys live
(dense recompute, a paged SWA pool, a replayed graph) and which keys a query
may see. Everything it needs to know about the layer is in `AttentionLayerSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from harness.model.window import window_start

__all__ = ["AttentionBackend", "AttentionLayerSpec", "window_start"]


@dataclass(frozen=True)
class AttentionLayerSpec:
    """Static description of one attention layer.

    `scaling` multiplies q·k before soft-capping. `logit_softcap` (None = off) is
    applied as ``tanh(s / cap) * cap`` before masking. `sliding_window` is
    None for full-attention layers; otherwise the query at position ``i`` sees
    keys at positions ``window_start(i, sliding_window) .. i``.
    """

    layer_id: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    scaling: float
    logit_softcap: float | None
    sliding_window: int | None

    @property
    def is_sliding(self) -> bool:
        return self.sliding_window is not None

    @property
    def num_queries_per_kv(self) -> int:
        """GQA group size: query head ``h`` reads kv head ``h // num_queries_per_kv``."""
        return self.num_heads // self.num_kv_heads


@runtime_checkable
class AttentionBackend(Protocol):
    """Computes attention for one layer over a flat ragged token batch.

    Shapes: ``q [T, num_heads, head_dim]``, ``k``/``v [T, num_kv_heads, head_dim]``
    for the T new tokens of the step (RoPE already applied); returns
    ``[T, num_heads, head_dim]`` in q's dtype. q, k and v are views into one fused
    projection (not contiguous): call ``.contiguous()`` before ``.view``-ing them.
    `batch` is opaque to the model: whatever the backend needs (sequence lengths,
    cache slots, ...). A cache-backed backend stores k/v for the new tokens and
    attends over cached + new keys.
    """

    def forward(
        self,
        layer: AttentionLayerSpec,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: Any,
    ) -> torch.Tensor: ...
