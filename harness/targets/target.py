"""The target interface and the harness's own target; ``load_target`` picks one by name (see the package's
docstring). Kept out of the package's ``__init__`` so that ``harness.targets.preflight`` (which must answer before
any heavy import: no verdict in seconds) imports no torch."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Protocol

import torch

from harness.engine import Engine, EngineConfig
from harness.mem import LOC_DTYPE, HybridPool, HybridPoolSpec, SWAKVPool, build_hybrid_pool
from harness.mem.contracts import PrefixCache
from harness.mem.radix_cache import build_radix_cache

from harness.env import TARGET_ENV

PoolSpec = HybridPoolSpec  # the suites' name for it


class Target(Protocol):
    name: str
    pool_class: type  # the class whose set_kv_buffer every KV write goes through
    index_dtypes: tuple[torch.dtype, ...]  # slot-id dtypes its pool and allocator boundaries accept

    def build_pool(self, spec: HybridPoolSpec) -> HybridPool: ...

    def make_engine(self, model_path: str | Path, **config: Any) -> Engine: ...

    def build_prefix_cache(self, memory: HybridPool, *, sliding_window_size: int | None) -> PrefixCache: ...


class HarnessTarget:
    """The harness's own implementation (the default target)."""

    name = "harness"
    pool_class = SWAKVPool
    index_dtypes = (LOC_DTYPE,)  # int32 only: anything else is an IndexContractError

    def build_pool(self, spec: HybridPoolSpec) -> HybridPool:
        return build_hybrid_pool(spec)

    def make_engine(self, model_path: str | Path, **config: Any) -> Engine:
        return Engine(EngineConfig(model_path=model_path, **config), pool_builder=self.build_pool)

    def build_prefix_cache(self, memory: HybridPool, *, sliding_window_size: int | None) -> PrefixCache:
        return build_radix_cache(memory, sliding_window_size=sliding_window_size)


# name -> "module:Class"; imported on demand, so the harness target never imports SGLang.
TARGETS: dict[str, str] = {
    "harness": "harness.targets.target:HarnessTarget",
    "sglang": "harness.targets.sglang.memory:SGLangTarget",
}


def load_target(name: str | None = None) -> Target:
    name = name or os.environ.get(TARGET_ENV, "harness")
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; known targets: {', '.join(TARGETS)}")
    module, cls = TARGETS[name].split(":")
    return getattr(importlib.import_module(module), cls)()
