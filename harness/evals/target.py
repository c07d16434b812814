"""A *target* is the implementation a suite runs against: pools, allocator, engine.

The interface is deliberately narrow — build a pool, build an engine — so that an adapter over
real SGLang's ``SWAKVPool``/``SWATokenToKVPoolAllocator`` (which run on CPU) can implement
``make_pool`` later; engine-level suites need ``make_engine`` as well.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from harness.engine import Engine, EngineConfig
from harness.mem import ReqToTokenPool, SWAKVPool, SWATokenToKVPoolAllocator

TARGET_ENV = "SWA_HARNESS_TARGET"


@dataclass(frozen=True)
class PoolSpec:
    size: int = 64
    size_swa: int = 24
    swa_layers: Sequence[int] = (0, 2)
    full_layers: Sequence[int] = (1, 3)
    dtype: torch.dtype = torch.float32
    head_num: int = 2
    head_dim: int = 8
    page_size: int = 1
    max_requests: int = 4
    max_context_len: int = 64


@dataclass
class PoolHandle:
    pool: Any
    allocator: Any
    req_to_token_pool: Any


class Target(Protocol):
    name: str

    def make_pool(self, spec: PoolSpec) -> PoolHandle: ...

    def make_engine(self, model_path: str | Path, **config: Any) -> Engine: ...


class HarnessTarget:
    """The harness's own implementation (the default target)."""

    name = "harness"

    def make_pool(self, spec: PoolSpec) -> PoolHandle:
        pool = SWAKVPool(
            spec.size, spec.size_swa, dtype=spec.dtype, head_num=spec.head_num, head_dim=spec.head_dim,
            swa_attention_layer_ids=spec.swa_layers, full_attention_layer_ids=spec.full_layers,
            page_size=spec.page_size,
        )
        allocator = SWATokenToKVPoolAllocator(spec.size, spec.size_swa, pool, page_size=spec.page_size)
        return PoolHandle(pool, allocator, ReqToTokenPool(spec.max_requests, spec.max_context_len))

    def make_engine(self, model_path: str | Path, **config: Any) -> Engine:
        return Engine(EngineConfig(model_path=model_path, **config))


TARGETS: dict[str, type] = {"harness": HarnessTarget}


def load_target(name: str | None = None) -> Target:
    name = name or os.environ.get(TARGET_ENV, "harness")
    try:
        return TARGETS[name]()
    except KeyError:
        raise ValueError(f"unknown target {name!r}; known targets: {', '.join(TARGETS)}") from None
