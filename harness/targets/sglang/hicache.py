"""SGLang's HiCache host tier (and its L3 storage) over the harness's ``SGLangPrefixCache``, on CPU, in-process.

``UnifiedRadixCache.init_hicache`` builds the same stack a ``--enable-hierarchical-cache`` server builds: a host
pool per device pool (full and SWA), the ``HybridCacheController`` and, with ``storage_backend``, its L3 backend
and threads. On CPU two things stop it, both in the transfer layer, not in the cache under test:

* the host pools are allocated pinned and registered with ``cudaHostRegister``
  (``mem_cache/pool_host/common.py`` 143-147, ``torch.cuda.cudart()``, which a CPU torch has not);
* the copies themselves are ``sgl_kernel.kvcacheio`` kernels, imported only on CUDA, HIP or XPU
  (``mem_cache/pool_host/mha.py`` 60-89): ``--hicache-io-backend direct`` with the ``layer_first`` layout calls
  ``transfer_kv_direct`` (mha.py 533 for a load, 677 for a backup), a name a CPU build never binds.

``cpu_stand_ins`` replaces exactly those two: no registration (there is no device to register host memory with),
and ``transfer_kv_direct`` as row copies with torch indexing, layer by layer, between the same buffers the kernel
reads and writes. Streams and events are SGLang's own ``torch.cpu`` ones (``get_device_module``): a CPU copy is
done when it returns, so every event reads as complete. Everything else, the controller, the tree's HiCache
transfers and commits, the host allocators, is SGLang's code as a server runs it.
"""

from __future__ import annotations

import atexit
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


def attach_host_tier(
    cache: SGLangPrefixCache,
    *,
    write_policy: str = "write_through",
    host_ratio: float = 2.0,
    storage_dir: str | None = None,
    prefetch_threshold: int | None = None,
) -> HostTier:
    """``init_hicache`` on ``cache``'s ``UnifiedRadixCache`` with the server arguments a HiCache server takes
    (``--hicache-io-backend direct --hicache-mem-layout layer_first --hicache-ratio``, the write policy and, with
    ``storage_dir``, ``--hicache-storage-backend file``). Needs ``cpu_stand_ins`` active. The caller releases it
    with ``detach_host_tier``."""
    import json

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
    )
    set_global_server_args_for_scheduler(args)
    sgl = cache.sglang
    sgl.init_hicache(args, cache.init_params)
    atexit.unregister(sgl.shutdown)  # the fixture releases it; atexit would keep the pools alive until exit
    entries = {entry.name.value: entry.host_pool.size for entry in sgl.host_pool_group.entries}
    return HostTier(write_policy, entries["kv"], entries.get("swa", 0), storage_dir)


def detach_host_tier(cache: SGLangPrefixCache) -> None:
    sgl: Any = cache.sglang
    if sgl.cache_controller is not None and sgl.enable_storage:
        sgl.cache_controller._stop_storage_threads()
    sgl.release_host_resources()
