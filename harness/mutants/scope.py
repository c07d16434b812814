"""What each engine's mutation run mutates: its SWA memory code, the code the suites were written to hold.

A file is mutated whole, or only in the functions and classes named (qualname prefixes): SGLang's ``common.py`` is
mostly request bookkeeping, and only its SWA frees belong here; vLLM's ``single_type_kv_cache_manager.py`` holds a
manager per attention type, and a hybrid SWA model uses two of them (plus their base class).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

MutantTarget = Literal["sglang", "vllm"]


@dataclass(frozen=True)
class ScopeFile:
    module: str  # dotted module name, as the engine imports it
    only: tuple[str, ...] = ()  # qualname prefixes mutated (empty: the whole file)
    why: str = ""

    def path(self) -> Path:
        """The installed file, found without importing it or its packages (SGLang's imports need the harness's
        shims first; the runner's own process never imports the engine)."""
        top, *rest = self.module.split(".")
        spec = importlib.util.find_spec(top)
        if spec is None or not spec.submodule_search_locations:
            raise LookupError(f"{self.module}: package {top!r} is not installed in this environment")
        base = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        raise LookupError(f"{self.module}: no {base}.py in the installed {top}")

    def holds(self, qualname: str) -> bool:
        return not self.only or any(qualname == p or qualname.startswith(p + ".") for p in self.only)


SCOPES: dict[MutantTarget, tuple[ScopeFile, ...]] = {
    "sglang": (
        ScopeFile("sglang.srt.mem_cache.allocator.swa", why="the SWA allocators: alloc, free, translation"),
        ScopeFile("sglang.srt.mem_cache.swa_memory_pool", why="the hybrid SWA KV pool and its index mapping"),
        ScopeFile("sglang.srt.mem_cache.unified_radix_cache", why="the prefix cache with SWA tombstones and locks"),
        ScopeFile("sglang.srt.mem_cache.unified_cache.components.swa", why="the prefix cache's SWA component"),
        ScopeFile(
            "sglang.srt.mem_cache.common",
            only=(
                "free_swa_out_of_window_slots",
                "free_kv_row_segments",
                "coalesce_ranges",
                "release_kv_cache",
                "_release_overallocated_kv_indices",
            ),
            why="the SWA frees (out-of-window slots, row segments, release at finish)",
        ),
        ScopeFile("sglang.srt.model_executor.cuda_graph_buffer_registry", why="the graph buffers and their padding"),
        ScopeFile("sglang.srt.mem_cache.kv_loc_plan", why="the KV write-location plan"),
    ),
    "vllm": (
        ScopeFile(
            "vllm.v1.core.single_type_kv_cache_manager",
            only=("SingleTypeKVCacheManager", "FullAttentionManager", "SlidingWindowManager"),
            why="the sliding-window manager, the full-attention one beside it in a hybrid model, and their base",
        ),
        ScopeFile("vllm.v1.core.kv_cache_coordinator", why="the hybrid coordinator: one cache hit over both groups"),
        ScopeFile("vllm.v1.core.block_pool", why="the block pool: free queue, prefix hashes, eviction"),
    ),
}
