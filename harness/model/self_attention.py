"""One attention layer's projections; the attention itself is the backend's job."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.model.attention_api import AttentionBackend, AttentionLayerSpec
from harness.model.config import HybridModelConfig
from harness.model.linear import linear_weight
from harness.model.norm import RMSNorm
from harness.model.rotary import Rope


class SelfAttention(nn.Module):
    """Fused qkv projection -> q/k RMSNorm -> RoPE -> backend -> output projection.

    q and k travel together as one ``[T, H + KVH, D]`` tensor through the norm and
    the rotation (their norm weights are stacked per head), so each step is a
    single op whatever the head counts.
    """

    def __init__(
        self, config: HybridModelConfig, layer_id: int, dtype: torch.dtype, device: torch.device | str = "cpu"
    ):
        super().__init__()
        h, kvh, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.spec = AttentionLayerSpec(
            layer_id=layer_id,
            num_heads=h,
            num_kv_heads=kvh,
            head_dim=d,
            scaling=config.attn_scaling,
            logit_softcap=config.attn_logit_softcap,
            sliding_window=config.layer_window(layer_id),
        )

        def param(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(*shape, dtype=dtype, device=device), requires_grad=False)

        self.qkv = linear_weight((h + 2 * kvh) * d, config.hidden_size, dtype, device)
        self.qkv_bias = param((h + 2 * kvh) * d) if config.attention_bias else None
        self.o = linear_weight(config.hidden_size, h * d, dtype, device)
        self.o_bias = param(config.hidden_size) if config.attention_bias else None
        self.qk_norm = (
            RMSNorm((h + kvh, d), eps=config.rms_norm_eps, gemma=config.gemma_norm, dtype=dtype, device=device)
            if config.qk_norm
            else None
        )

    def forward(self, x: torch.Tensor, rope: Rope, attention: AttentionBackend, batch: Any) -> torch.Tensor:
        s = self.spec
        t = x.shape[0]
        qkv = F.linear(x, self.qkv, self.qkv_bias).view(t, s.num_heads + 2 * s.num_kv_heads, s.head_dim)
        qk, v = qkv.split([s.num_heads + s.num_kv_heads, s.num_kv_heads], dim=1)
        if self.qk_norm is not None:
            qk = self.qk_norm(qk)
        qk = rope(qk)
        q, k = qk.split([s.num_heads, s.num_kv_heads], dim=1)
        out = attention.forward(s, q, k, v, batch)
        return F.linear(out.reshape(t, s.num_heads * s.head_dim), self.o, self.o_bias)

    def extra_repr(self) -> str:
        return f"{self.spec}"
