"""One transformer block: pre-norm attention and MLP, with Gemma's sandwich norms."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.model.attention_api import AttentionBackend
from harness.model.config import HybridModelConfig
from harness.model.mlp import GatedMLP
from harness.model.norm import RMSNorm
from harness.model.rotary import Rope
from harness.model.self_attention import SelfAttention


class DecoderLayer(nn.Module):
    """Residual block.

    Plain (Qwen3, Mellum): ``x += attn(norm(x)); x += mlp(norm(x))``.
    Sandwich (Gemma2/3): the attention and MLP outputs are normalised again
    (`post_attn_norm`, `post_mlp_norm`) before the residual add.
    Norm names say where they sit, not what HF calls them: HF's
    ``post_attention_layernorm`` is our `pre_mlp_norm` for Qwen3 but our
    `post_attn_norm` for Gemma (whose pre-MLP norm is ``pre_feedforward_layernorm``).
    """

    def __init__(
        self, config: HybridModelConfig, layer_id: int, dtype: torch.dtype, device: torch.device | str = "cpu"
    ):
        super().__init__()
        hidden, eps, gemma = config.hidden_size, config.rms_norm_eps, config.gemma_norm
        self.input_norm = RMSNorm(hidden, eps=eps, gemma=gemma, dtype=dtype, device=device)
        self.attn = SelfAttention(config, layer_id=layer_id, dtype=dtype, device=device)
        self.pre_mlp_norm = RMSNorm(hidden, eps=eps, gemma=gemma, dtype=dtype, device=device)
        self.mlp = GatedMLP(
            hidden, intermediate_size=config.intermediate_size, act=config.hidden_act, dtype=dtype, device=device
        )
        if config.sandwich_norm:
            self.post_attn_norm = RMSNorm(hidden, eps=eps, gemma=gemma, dtype=dtype, device=device)
            self.post_mlp_norm = RMSNorm(hidden, eps=eps, gemma=gemma, dtype=dtype, device=device)
        else:
            self.post_attn_norm = self.post_mlp_norm = None

    def forward(self, x: torch.Tensor, rope: Rope, attention: AttentionBackend, batch: Any) -> torch.Tensor:
        h = self.attn(self.input_norm(x), rope, attention, batch)
        x = x + h if self.post_attn_norm is None else self.post_attn_norm.add_to(x, h)
        h = self.mlp(self.pre_mlp_norm(x))
        return x + h if self.post_mlp_norm is None else self.post_mlp_norm.add_to(x, h)
