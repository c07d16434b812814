"""Small builders shared by the memory tests."""

from __future__ import annotations

import torch

from harness.mem import HybridPoolSpec, SWAKVPool, SWATokenToKVPoolAllocator, build_hybrid_pool


def build_swa(
    size: int = 32,
    size_swa: int = 16,
    *,
    page_size: int = 1,
    swa_layers: tuple[int, ...] = (0, 2),
    full_layers: tuple[int, ...] = (1, 3),
    dtype: torch.dtype = torch.float32,
    head_num: int = 2,
    head_dim: int = 4,
) -> tuple[SWAKVPool, SWATokenToKVPoolAllocator]:
    memory = build_hybrid_pool(
        HybridPoolSpec(
            size,
            size_swa,
            swa_layers=swa_layers,
            full_layers=full_layers,
            dtype=dtype,
            head_num=head_num,
            head_dim=head_dim,
            page_size=page_size,
        )
    )
    return memory.pool, memory.allocator


def idx(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)
