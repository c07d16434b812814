"""One place that wires a hybrid pool: request map, SWA KV pool and its allocator, from one spec.

Engines, targets, tests and the toy decode all build through ``build_hybrid_pool``; a target that
brings its own memory code (real SGLang) supplies another builder with the same signature.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from harness.mem.contracts import KVAllocator, KVPool
from harness.mem.req_to_token_pool import ReqToTokenPool
from harness.mem.swa_allocator import SWATokenToKVPoolAllocator
from harness.mem.swa_kv_pool import SWAKVPool


@dataclass(frozen=True)
class HybridPoolSpec:
    size: int = 64  # full slots
    size_swa: int = 24  # SWA slots
    swa_layers: Sequence[int] = (0, 2)
    full_layers: Sequence[int] = (1, 3)
    dtype: torch.dtype = torch.float32
    head_num: int = 2
    head_dim: int = 8
    page_size: int = 1
    max_requests: int = 4
    max_context_len: int = 64
    device: str | torch.device = "cpu"


@dataclass
class HybridPool:
    """What the engine and the suites need of a target's memory: pool, allocator, request map."""

    pool: KVPool  # SWAKVPool, or an adapter over another target's pool
    allocator: KVAllocator  # SWATokenToKVPoolAllocator, or an adapter over another target's allocator
    req_to_token_pool: ReqToTokenPool


PoolBuilder = Callable[[HybridPoolSpec], HybridPool]


def build_hybrid_pool(spec: HybridPoolSpec) -> HybridPool:
    pool = SWAKVPool(
        spec.size,
        spec.size_swa,
        dtype=spec.dtype,
        head_num=spec.head_num,
        head_dim=spec.head_dim,
        swa_attention_layer_ids=spec.swa_layers,
        full_attention_layer_ids=spec.full_layers,
        page_size=spec.page_size,
        device=spec.device,
    )
    allocator = SWATokenToKVPoolAllocator(spec.size, spec.size_swa, pool, page_size=spec.page_size, device=spec.device)
    return HybridPool(pool, allocator, ReqToTokenPool(spec.max_requests, spec.max_context_len, spec.device))
