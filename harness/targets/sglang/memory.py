"""The ``sglang`` target's one class: SGLang's pool, allocator and prefix cache built under the harness's engine, with
a source patch (``SWA_HARNESS_SGLANG_PATCH``) or one catalog fault (``SWA_HARNESS_SGLANG_FAULT``) applied first."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from harness.engine import Engine, EngineConfig
from harness.env import SGLANG_PATCH_ENV as PATCH_ENV
from harness.mem import HybridPool, HybridPoolSpec, ReqToTokenPool
from harness.mem.contracts import PrefixCache
from harness.mem.radix_cache import CacheBuilder
from harness.targets.sglang.faults import activate_from_env, apply_patch_file
from harness.targets.sglang.adapters import SGLangAllocatorAdapter, SGLangPoolAdapter
from harness.targets.sglang.capabilities import first, takes
from harness.targets.sglang.imports import import_sglang

logger = logging.getLogger(__name__)


class SGLangTarget:
    name = "sglang"
    pool_class = SGLangPoolAdapter
    # SGLang keeps ids as int64 and checks no dtype at its boundaries; int32 ids index the same slots.
    index_dtypes = (torch.int32, torch.int64)

    def __init__(self) -> None:
        self.sglang = import_sglang()
        self.version = self.sglang.__version__
        patch_file = os.environ.get(PATCH_ENV)
        if patch_file:
            applied = apply_patch_file(patch_file)  # raises if a match is not found
            logger.warning("sglang target: %d source patch(es) from %s applied", applied, patch_file)
        self.fault = activate_from_env(os.environ)  # SWA_HARNESS_SGLANG_FAULT=<id>: one catalog fault, whole process

    def build_pool(self, spec: HybridPoolSpec) -> HybridPool:
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

        # The allocator moved out of swa_memory_pool.py in 0.5.13; 0.5.13-0.5.15 require enable_kvcache_transpose.
        SWATokenToKVPoolAllocator = first(
            ("sglang.srt.mem_cache.allocator.swa", "SWATokenToKVPoolAllocator"),
            ("sglang.srt.mem_cache.swa_memory_pool", "SWATokenToKVPoolAllocator"),
        )
        device = str(spec.device)
        extra = {"enable_kvcache_transpose": False} if takes(SWAKVPool.__init__, "enable_kvcache_transpose") else {}
        pool = SWAKVPool(
            size=spec.size,
            size_swa=spec.size_swa,
            page_size=spec.page_size,
            dtype=spec.dtype,
            head_num=spec.head_num,
            head_dim=spec.head_dim,
            swa_attention_layer_ids=list(spec.swa_layers),
            full_attention_layer_ids=list(spec.full_layers),
            device=device,
            **extra,
        )
        allocator = SWATokenToKVPoolAllocator(
            spec.size, spec.size_swa, spec.page_size, spec.dtype, device, pool, need_sort=False
        )
        return HybridPool(
            SGLangPoolAdapter(pool),
            SGLangAllocatorAdapter(allocator),
            ReqToTokenPool(spec.max_requests, spec.max_context_len, spec.device),
        )

    def make_engine(self, model_path: str | Path, **config: Any) -> Engine:
        """The harness engine over SGLang's memory: its pool, allocator and prefix cache (UnifiedRadixCache).

        SGLang's cache keeps a request's prefix window locked until the request's own window has passed the prefix
        (the harness's SWA lock follows the window), so a request may hold two windows of SWA KV: the engine sizes
        its SWA pool for that."""
        return Engine(
            EngineConfig(model_path=model_path, **config),
            pool_builder=self.build_pool,
            cache_builder=CacheBuilder(self.build_prefix_cache, swa_windows_held=2),
        )

    def build_prefix_cache(self, memory: HybridPool, *, sliding_window_size: int | None) -> PrefixCache:
        """SGLang's UnifiedRadixCache over ``memory`` (what ``build_pool`` returned); its tree core is
        SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND's (SGLang's default: Rust)."""
        from harness.targets.sglang.prefix_cache import SGLangPrefixCache

        return SGLangPrefixCache(memory, sliding_window_size=sliding_window_size)
