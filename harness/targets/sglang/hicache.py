"""SGLang's HiCache host tier (and its L3 storage) over the harness's ``SGLangPrefixCache``, on CPU, in-process.

``UnifiedRadixCache.init_hicache`` builds the same stack a ``--enable-hierarchical-cache`` server builds: a host
pool per device pool (full and SWA), the ``HybridCacheController`` and, with ``storage_backend``, its L3 backend
and threads. On CPU two things stop it, both in the transfer layer, not in the cache under test:

* the host pools are allocated pinned and registered with ``cudaHostRegister``
  (``mem_cache/pool_host/common.py`` 143-147, ``torch.cuda.cudart()``, which a CPU torch has not);
* the copies themselves are ``sgl_kernel.kvcacheio`` kernels, imported only on CUDA, HIP or XPU
  (``mem_cache/pool_host/mha.py`` 60-89): ``--hicache-io-backend direct`` with the ``layer_first`` layout calls
  ``transfer_kv_direct`` (mha.py 533 for a load, 677 for a backup), a name a CPU build never binds.

A third is needed only by the L3 storage read: the host pools are built pinned, and reading a page from storage
allocates its scratch page pinned (``pool_host/mha.py`` 727-733), which a CPU-only torch refuses; ``host_tier``
builds them unpinned.

``cpu_stand_ins`` replaces the first two: no registration (there is no device to register host memory with),
and ``transfer_kv_direct`` as row copies with torch indexing, layer by layer, between the same buffers the kernel
reads and writes. Streams and events are SGLang's own ``torch.cpu`` ones (``get_device_module``): a CPU copy is
done when it returns, so every event reads as complete. Everything else, the controller, the tree's HiCache
transfers and commits, the host allocators, is SGLang's code as a server runs it.
"""

from __future__ import annotations

import atexit
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from harness.targets.sglang.prefix_cache import SGLangPrefixCache


def _copy_rows(
    src_layers: Sequence[torch.Tensor],
    dst_layers: Sequence[torch.Tensor],
    src_indices: torch.Tensor,
    dst_indices: torch.Tensor,
    page_size: int,
) -> None:
    """``transfer_kv_direct``'s effect: ``dst[dst_indices] = src[src_indices]`` for each layer buffer pair."""
    if len(src_layers) != len(dst_layers):
        raise ValueError(f"{len(src_layers)} source layer buffers for {len(dst_layers)} destinations")
    if src_indices.numel() != dst_indices.numel():
        raise ValueError(f"{src_indices.numel()} source rows for {dst_indices.numel()} destination rows")
    src_rows, dst_rows = src_indices.long().cpu(), dst_indices.long().cpu()
    for src, dst in zip(src_layers, dst_layers, strict=True):
        dst[dst_rows] = src[src_rows].to(dst.dtype)


@contextmanager
def cpu_stand_ins() -> Iterator[None]:
    """The two CPU stand-ins of the module docstring, undone on exit."""
    import sglang.srt.mem_cache.pool_host.common as host_common
    import sglang.srt.mem_cache.pool_host.mha as host_mha

    saved_register = host_common._cuda_host_register
    had_copy = hasattr(host_mha, "transfer_kv_direct")
    saved_copy = getattr(host_mha, "transfer_kv_direct", None)
    host_common._cuda_host_register = lambda *args, **kwargs: None
    host_mha.transfer_kv_direct = _copy_rows
    try:
        yield
    finally:
        host_common._cuda_host_register = saved_register
        if had_copy:
            host_mha.transfer_kv_direct = saved_copy
        else:
            del host_mha.transfer_kv_direct


@dataclass(frozen=True)
class HostTier:
    """What ``attach_host_tier`` built: the policy, and the host pools' sizes in tokens."""

    write_policy: str  # "write_through" | "write_back"
    full_host_slots: int
    swa_host_slots: int
    storage_dir: str | None


@contextmanager
def one_rank() -> Iterator[None]:
    """This process's place as a one-rank server states it (tensor and pipeline parallel size 1): the L3 backend's
    config reads the rank (``managers/cache_controller.py`` 762), which only a launched server publishes."""
    from sglang.srt.runtime_context import get_parallel

    with get_parallel().override(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1):
        yield


@contextmanager
def host_tier(
    cache: SGLangPrefixCache,
    *,
    write_policy: str = "write_through",
    host_ratio: float = 2.0,
    storage_dir: str | None = None,
    prefetch_threshold: int | None = None,
    host_memory_mode: str = "cache",
) -> Iterator[HostTier]:
    """``init_hicache`` on ``cache``'s ``UnifiedRadixCache`` with the server arguments a HiCache server takes
    (``--hicache-io-backend direct --hicache-mem-layout layer_first --hicache-ratio``, the write policy and, with
    ``storage_dir``, ``--hicache-storage-backend file`` with ``--file-storage-path``), released on exit. Needs
    ``cpu_stand_ins`` active. With storage, under ``one_rank``."""
    import json
    from contextlib import ExitStack

    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    extra = None
    if storage_dir is not None and prefetch_threshold is not None:
        extra = json.dumps({"prefetch_threshold": prefetch_threshold})
    args = ServerArgs(
        model_path="dummy",
        page_size=cache.page_size,
        hicache_io_backend="direct",
        hicache_mem_layout="layer_first",
        hicache_ratio=host_ratio,
        hicache_write_policy=write_policy,
        hicache_storage_backend=None if storage_dir is None else "file",
        hicache_storage_backend_extra_config=extra,
        file_storage_path=storage_dir,
        hicache_host_memory_mode=host_memory_mode,
        context_length=cache.memory.req_to_token_pool.max_context_len if host_memory_mode == "buffer_only" else None,
    )
    with ExitStack() as stack:
        if storage_dir is not None:
            stack.enter_context(one_rank())
        set_global_server_args_for_scheduler(args)
        sgl: Any = cache.sglang
        sgl.init_hicache(args, cache.init_params)
        atexit.unregister(sgl.shutdown)  # released below; atexit would keep the pools alive until exit
        for entry in sgl.host_pool_group.entries:
            # The third CPU stand-in: the host pools are built pinned (pool_host/mha.py 143, a default no builder
            # overrides), and an L3 read allocates its scratch page with torch.zeros(pin_memory=True) (mha.py
            # 727-733), which a CPU-only torch refuses. Nothing is pinned here: there is no device to pin for.
            entry.host_pool.pin_memory = False
        try:
            sizes = {entry.name.value: entry.host_pool.size for entry in sgl.host_pool_group.entries}
            yield HostTier(
                write_policy=write_policy,
                full_host_slots=sizes["kv"],
                swa_host_slots=sizes.get("swa", 0),
                storage_dir=storage_dir,
            )
        finally:
            if sgl.cache_controller is not None and sgl.enable_storage:
                sgl.cache_controller._stop_storage_threads()
            sgl.release_host_resources()


@dataclass(frozen=True)
class Prefetch:
    """A storage prefetch as the scheduler sees it: the tokens asked for past the tree's match, the tokens it
    loaded into the host tier, and the steps it took."""

    asked: int
    loaded: int
    start: int | None  # the position the loaded span starts at (None: nothing loaded)
    steps: int


def wait_for_storage_backups(cache: SGLangPrefixCache, *, timeout_s: float = 10.0) -> int:
    """Step (``check_hicache_events``, as every scheduler step does) until no L3 backup is in flight; returns the
    steps taken. The backups run on the controller's thread, so this waits for it."""
    sgl: Any = cache.sglang
    deadline = time.monotonic() + timeout_s
    steps = 0
    while True:
        sgl.check_hicache_events()
        steps += 1
        pending = sgl.ongoing_backup if sgl.buffer_pipeline is None else sgl.buffer_pipeline.ongoing_backup
        if not pending:
            return steps
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} storage backups still in flight after {timeout_s} s")
        time.sleep(0.005)


def prefetch(cache: SGLangPrefixCache, token_ids: Sequence[int], rid: str, *, timeout_s: float = 10.0) -> Prefetch:
    """The scheduler's storage prefetch of a waiting request (``_prefetch_kvcache``: match, then
    ``prefetch_from_storage`` of what lies past the match, up to all tokens but the last), stepped until
    ``check_prefetch_progress`` says it is done, and the loaded span popped as admission pops it."""
    from array import array

    from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    sgl: Any = cache.sglang
    ids = array("q", (int(t) for t in token_ids))
    found = sgl.match_prefix(MatchPrefixParams(key=RadixKey(ids[: len(ids) - 1])))
    matched = found.device_prefix_len + found.host_hit_length
    asked = ids[matched : len(ids) - 1]
    handle = CacheRequestHandle(rid, 0)
    sgl.prefetch_from_storage(
        handle,
        found.last_host_node,
        asked,
        sgl.get_last_hash_value(found.last_host_node),
        None,
        matched_prefix_tokens=ids[:matched],
    )
    deadline = time.monotonic() + timeout_s
    steps = 0
    while True:
        sgl.check_hicache_events()
        steps += 1
        if sgl.check_prefetch_progress(handle):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the prefetch of {rid} did not finish in {timeout_s} s")
        time.sleep(0.005)
    loaded, start = sgl.pop_prefetch_loaded_span(handle)
    return Prefetch(asked=len(asked), loaded=loaded, start=start, steps=steps)
