"""Dense no-cache reference attention: recompute every sequence from scratch.

This is the ground truth other backends (SWA pool, graph replay) are compared
against; it is written for obviousness, not speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch

from harness.model.attention_api import AttentionLayerSpec
from harness.model.model import HybridSWAForCausalLM
from harness.model.window import window_start


@dataclass(frozen=True)
class DenseBatch:
    """Whole sequences concatenated in order; sequence i starts at position 0."""

    seq_lens: tuple[int, ...]

    @property
    def offsets(self) -> tuple[int, ...]:
        """Start of each sequence in the flat token layout."""
        return tuple(accumulate(self.seq_lens, initial=0))[:-1]

    @property
    def num_tokens(self) -> int:
        return sum(self.seq_lens)

    def positions(self, device: torch.device | str = "cpu") -> torch.Tensor:
        return torch.cat([torch.arange(n, device=device) for n in self.seq_lens])

    def last_token_indices(self, device: torch.device | str = "cpu") -> torch.Tensor:
        return torch.tensor([o + n - 1 for o, n in zip(self.offsets, self.seq_lens)], device=device)


def visible_mask(length: int, window: int | None, device: torch.device | str = "cpu") -> torch.Tensor:
    """``[L, L]`` bool: query i sees key j iff ``window_start(i, window) <= j <= i``."""
    pos = torch.arange(length, device=device)
    q, k = pos[:, None], pos[None, :]
    return (k <= q) & (k >= window_start(q, window))


class DenseAttention:
    """`AttentionBackend` over `DenseBatch`: causal (+ sliding) attention per sequence."""

    def forward(
        self, layer: AttentionLayerSpec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: DenseBatch
    ) -> torch.Tensor:
        outs = [
            self.attend(layer, q[o : o + n], k[o : o + n], v[o : o + n]) for o, n in zip(batch.offsets, batch.seq_lens)
        ]
        return torch.cat(outs)

    @staticmethod
    def attend(layer: AttentionLayerSpec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """One sequence: ``q [L, H, D]``, ``k``/``v [L, KVH, D]`` -> ``[L, H, D]``."""
        n, h, d = q.shape
        kvh, g = layer.num_kv_heads, layer.num_queries_per_kv
        # GQA: query head h reads kv head h // g, so group q as [KVH, g, L, D].
        qg = q.reshape(n, kvh, g, d).permute(1, 2, 0, 3)
        kg = k.permute(1, 0, 2).unsqueeze(1)  # [KVH, 1, L, D]
        vg = v.permute(1, 0, 2).unsqueeze(1)
        scores = torch.matmul(qg, kg.transpose(-1, -2)) * layer.scaling
        if layer.logit_softcap is not None:
            scores = torch.tanh(scores / layer.logit_softcap) * layer.logit_softcap
        scores = scores.masked_fill(~visible_mask(n, layer.sliding_window, q.device), float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
        out = torch.matmul(probs, vg)  # [KVH, g, L, D]
        return out.permute(2, 0, 1, 3).reshape(n, h, d)


@torch.inference_mode()
def reference_logits(model: HybridSWAForCausalLM, token_ids: list[list[int]]) -> list[torch.Tensor]:
    """Teacher-forced float32 logits ``[len(seq), vocab]`` for each sequence, in torch ops only (no compiled
    kernels, whatever the engine that owns ``model`` uses)."""
    batch = DenseBatch(tuple(len(s) for s in token_ids))
    device = model.embed.device
    input_ids = torch.tensor([t for s in token_ids for t in s], dtype=torch.long, device=device)
    with model.torch_ops_only():
        logits = model(input_ids, batch.positions(device), DenseAttention(), batch)
    return list(logits.split(list(batch.seq_lens)))
