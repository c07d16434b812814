"""Small builders shared by the memory tests."""

from __future__ import annotations

import torch

from harness.mem import SWAKVPool, SWATokenToKVPoolAllocator


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
    pool = SWAKVPool(
        size,
        size_swa,
        dtype=dtype,
        head_num=head_num,
        head_dim=head_dim,
        swa_attention_layer_ids=swa_layers,
        full_attention_layer_ids=full_layers,
        page_size=page_size,
    )
    return pool, SWATokenToKVPoolAllocator(size, size_swa, pool, page_size=page_size)


def idx(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)
