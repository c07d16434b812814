"""RoPE as one batched matmul per layer equals the elementwise rotation; big or non-fp32 steps stay elementwise."""

from __future__ import annotations

import torch

from harness.model.config import RopeConfig
from harness.model.rotary import ROTATION_MATRIX_LIMIT, RotaryTables, apply_rotary


def test_rotation_matrices_equal_the_elementwise_rotation() -> None:
    tables = RotaryTables(RopeConfig(theta=10_000.0), head_dim=16, max_positions=300, dtype=torch.float32)
    positions = torch.tensor([0, 1, 7, 150, 299])
    x = torch.randn(5, 6, 16) * 4
    rope = tables.for_positions(positions)
    assert rope.matrices is not None and rope.matrices.shape == (5, 16, 16)
    cos, sin = tables(positions)
    torch.testing.assert_close(rope(x), apply_rotary(x, cos, sin), rtol=0, atol=1e-5)
    # a strided view (q and k heads split off a fused projection) rotates the same
    fused = torch.randn(5, 9, 16)
    torch.testing.assert_close(rope(fused[:, :6]), apply_rotary(fused[:, :6], cos, sin), rtol=0, atol=1e-5)


def test_large_or_low_precision_steps_rotate_elementwise() -> None:
    d = 16
    tables = RotaryTables(RopeConfig(theta=10_000.0), head_dim=d, max_positions=4096, dtype=torch.float32)
    many = torch.arange(ROTATION_MATRIX_LIMIT // (d * d) + 1)
    x = torch.randn(many.numel(), 2, d)
    rope = tables.for_positions(many)
    assert rope.matrices is None
    assert torch.equal(rope(x), apply_rotary(x, *tables(many)))
    bf16 = RotaryTables(RopeConfig(theta=10_000.0), head_dim=d, max_positions=64, dtype=torch.bfloat16)
    assert bf16.for_positions(torch.tensor([3])).matrices is None
