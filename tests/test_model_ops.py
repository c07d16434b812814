"""Small-op facts: RoPE/norm equal transformers' formulas; the forward is lean and fused."""

from __future__ import annotations

import pytest
import torch
from transformers.models.gemma2.modeling_gemma2 import Gemma2RMSNorm, rotate_half
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from harness.model import AttentionBackend, AttentionLayerSpec, DenseAttention, load_model
from harness.model.config import SUPPORTED_ACTIVATIONS, RopeConfig
from harness.model.mlp import ACTIVATIONS
from harness.model.norm import RMSNorm
from harness.model.rotary import RotaryTables, apply_rotary
from harness.opcount import OpCounter
from fixtures.checkpoints import ARCHS, checkpoint


def test_rotary_equals_rotate_half_formula() -> None:
    tables = RotaryTables(RopeConfig(theta=10_000.0), head_dim=8, max_positions=64, dtype=torch.float32)
    pos = torch.tensor([0, 3, 17, 63])
    x = torch.randn(4, 3, 8)
    emb = torch.cat([pos[:, None].float() * (1.0 / 10_000.0 ** (torch.arange(0, 8, 2).float() / 8))] * 2, -1)
    want = x * emb.cos()[:, None] + rotate_half(x) * emb.sin()[:, None]
    cos, sin = tables(pos)
    assert torch.equal(apply_rotary(x, cos, sin), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_flavours_equal_transformers(dtype: torch.dtype) -> None:
    w = torch.randn(16)
    x = (torch.randn(5, 16) * 3).to(dtype)
    gemma_hf, qwen_hf = Gemma2RMSNorm(16).to(dtype), Qwen3RMSNorm(16).to(dtype)
    gemma, qwen = RMSNorm(16, 1e-6, True, dtype), RMSNorm(16, 1e-6, False, dtype)
    with torch.no_grad():
        gemma_hf.weight.copy_(w), qwen_hf.weight.copy_(w)
        gemma.scale.copy_(w.to(dtype).float() + 1.0), qwen.scale.copy_(w.to(dtype))
        if dtype == torch.float32:  # mean(x^2) as |x|^2 / n (one vector_norm): within a few ulp
            torch.testing.assert_close(gemma(x), gemma_hf(x), rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(qwen(x), qwen_hf(x), rtol=1e-6, atol=1e-6)
        else:  # low precision: transformers' ops and casts, bit for bit
            assert torch.equal(gemma(x), gemma_hf(x)) and torch.equal(qwen(x), qwen_hf(x))
        assert gemma(x).dtype == qwen(x).dtype == dtype


def test_config_and_mlp_agree_on_activations() -> None:
    assert set(SUPPORTED_ACTIVATIONS) == set(ACTIVATIONS)


def test_dense_attention_satisfies_protocol() -> None:
    assert isinstance(DenseAttention(), AttentionBackend)
    spec = AttentionLayerSpec(
        0, num_heads=4, num_kv_heads=2, head_dim=8, scaling=0.3, logit_softcap=None, sliding_window=3
    )
    assert spec.is_sliding and spec.num_queries_per_kv == 2


class _Echo:
    """Backend stub so only the model's own ops are counted."""

    def forward(self, layer, q, k, v, batch):
        return q


@pytest.mark.parametrize("arch", ARCHS)
def test_decode_forward_is_fused_and_lean(arch: str) -> None:
    """4 matmuls per layer (qkv, o, gate_up, down) + LM head; one cos/sin lookup per RoPE base."""
    model = load_model(checkpoint(arch))
    n_layers, n_ropes = model.config.num_hidden_layers, len(model.rotary)
    assert n_ropes == (2 if arch in ("gemma3_text", "mellum") else 1)
    ids, positions = torch.tensor([1, 2, 3]), torch.tensor([5, 9, 30])
    with torch.inference_mode(), OpCounter() as ops:
        model(ids, positions, _Echo(), None)
    matmuls = sum(ops.counts[k] for k in ("aten.linear", "aten.mm", "aten.addmm", "aten.matmul"))
    assert matmuls == 4 * n_layers + 1, dict(ops.counts)
    assert ops.counts["aten.index"] == 2 * n_ropes, dict(ops.counts)
    assert ops.counts["aten.to"] == 0 and ops.counts["aten._to_copy"] == 0, "fp32 model records casts"
    # measured: gemma2 178 (4 layers), gemma3_text 298 (6 layers), qwen3 150 (4 layers)
    assert ops.total() <= 50 * n_layers + 10, f"{arch}: {ops.total()} ops for {n_layers} layers"
