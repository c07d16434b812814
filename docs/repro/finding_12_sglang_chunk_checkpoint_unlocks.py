"""SGLang: a prefill chunk's checkpoint leaves the request's KV in the radix tree unlocked, and an eviction hands its
slots to another request while it still reads them (swa-harness docs/FINDINGS.md #12).

``UnifiedRadixCache.checkpoint`` (``mem_cache/unified_radix_cache.py``, SGLang 0.5.22) frees the request's SWA slots
out of the window first (``free_swa_out_of_window_slots``, frontier ``pre_len - max(sliding_window_size,
page_size)``), inserts the chunk's whole pages, then matches the tree again to find the node its lock moves to. Where
the window is not a multiple of the page size, that frontier reaches into the last window below the page-aligned
insert end, the inserted leaf ends with fewer than ``sliding_window_size`` live SWA tokens, and the SWA match refuses
it: the re-match stops short, ``cache_protected_len`` and the lock stay where they were, and the tree holds the
request's pages with no lock on them. 0.5.23 aligns the frontier to the page (``ceil_align``) and moves the lock to the
node the insert returned.

Scene (SGLang's own calls, in its scheduler's order; page size 4, sliding window 5, full and SWA pools of 64 slots):
one request of 30 prompt tokens is admitted to an empty tree (``match_kv_cache``, ``lock``), its first prefill chunk
of 10 tokens is allocated (``alloc_extend``) and checkpointed (``checkpoint_kv_cache``, as after every extend). Then
the allocator asks the tree for room (``evict_for_alloc``, what ``evict_to_free_tokens`` does under pressure) and a
second request takes every free page. No slot of the running request's row may be handed out.

    python finding_12_sglang_chunk_checkpoint_unlocks.py

Needs only SGLang (``pip install sglang``) and torch; runs on CPU, in about a second after the imports.
Exit status: 1 while the bug is there, 0 when it is fixed, 2 when the script could not set the scene up.
"""

from __future__ import annotations

import inspect
import sys
import traceback
from array import array
from dataclasses import dataclass
from types import SimpleNamespace

EXIT_FIXED, EXIT_BUG, EXIT_SETUP = 0, 1, 2
PAGE, WINDOW, SLOTS, PROMPT, CHUNK = 4, 5, 64, 30, 10  # a chunk that ends 2 tokens into a page (10 = 2 mod 4)


class SetupProblem(Exception):
    """The scene could not be built on this install (no SGLang, an API this script does not know): no verdict."""


@dataclass(frozen=True)
class Verdict:
    bug_present: bool
    message: str


def _stub_torchvision() -> None:
    """SGLang's config modules import torchvision at module level, and never call it on the allocator's path. Where
    torchvision is absent or cannot load (a CPU-only torch), stand-ins with the names imported keep the import going;
    transformers is told first that torchvision is unavailable, so it never uses them."""
    import enum
    import importlib.machinery
    import types

    try:
        import torchvision  # noqa: F401

        return
    except Exception:  # noqa: BLE001 - absent, or a wheel that does not load beside this torch
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()  # cached False before the stand-ins exist

    def stub(name: str, **attrs: object) -> None:
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__path__ = []
        module.__dict__.update(attrs)
        sys.modules[name] = module

    class InterpolationMode(enum.Enum):
        NEAREST = "nearest"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"

    def unavailable(*_args: object, **_kwargs: object) -> None:
        raise NotImplementedError("torchvision stand-in of the reproducer script")

    stub("torchvision")
    stub("torchvision.transforms", InterpolationMode=InterpolationMode)
    stub("torchvision.transforms.functional", InterpolationMode=InterpolationMode)
    stub("torchvision.io", decode_jpeg=unavailable)


def _imports() -> SimpleNamespace:
    """SGLang's pieces the scene calls (0.5.22 and later)."""
    try:
        _stub_torchvision()
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.common import checkpoint_kv_cache, match_kv_cache
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
    except ImportError as error:  # before 0.5.22 the radix cache and its scheduler helpers are elsewhere
        raise SetupProblem(f"this SGLang lacks the unified radix cache's API: {error}") from error
    return SimpleNamespace(
        Req=Req,
        SWATokenToKVPoolAllocator=SWATokenToKVPoolAllocator,
        EvictParams=EvictParams,
        CacheInitParams=CacheInitParams,
        checkpoint_kv_cache=checkpoint_kv_cache,
        match_kv_cache=match_kv_cache,
        ReqToTokenPool=ReqToTokenPool,
        SWAKVPool=SWAKVPool,
        ComponentType=ComponentType,
        UnifiedRadixCache=UnifiedRadixCache,
        SamplingParams=SamplingParams,
        ServerArgs=ServerArgs,
        set_global_server_args_for_scheduler=set_global_server_args_for_scheduler,
    )


def reproduce() -> Verdict:
    """Build the scene and say whether a slot the running request reads was handed to another request."""
    import torch

    sgl = _imports()
    sgl.set_global_server_args_for_scheduler(sgl.ServerArgs(model_path="dummy", page_size=PAGE))
    pool_args = {}
    if "enable_kvcache_transpose" in inspect.signature(sgl.SWAKVPool.__init__).parameters:
        pool_args["enable_kvcache_transpose"] = False
    pool = sgl.SWAKVPool(
        size=SLOTS,
        size_swa=SLOTS,
        page_size=PAGE,
        dtype=torch.float32,
        head_num=1,
        head_dim=4,
        swa_attention_layer_ids=[0],
        full_attention_layer_ids=[1],
        device="cpu",
        **pool_args,
    )
    allocator = sgl.SWATokenToKVPoolAllocator(SLOTS, SLOTS, PAGE, torch.float32, "cpu", pool, need_sort=False)
    rows = sgl.ReqToTokenPool(size=2, max_context_len=SLOTS, device="cpu", enable_memory_saver=False)
    cache = sgl.UnifiedRadixCache(
        params=sgl.CacheInitParams(
            disable=False,
            req_to_token_pool=rows,
            token_to_kv_pool_allocator=allocator,
            page_size=PAGE,
            sliding_window_size=WINDOW,
            tree_components=(sgl.ComponentType.FULL, sgl.ComponentType.SWA),
            eviction_policy="lru",
            is_eagle=False,
        )
    )

    # Admission to the empty tree, as the scheduler's prefill adder does it.
    ids = array("q", range(1, PROMPT + 1))
    req = sgl.Req(
        rid="a", origin_input_text="", origin_input_ids=ids, sampling_params=sgl.SamplingParams(max_new_tokens=1)
    )
    req.kv.req_pool_idx = 0
    req.refresh_fill_ids()
    sgl.match_kv_cache(req, cache, req.full_untruncated_fill_ids, max_prefix_len=PROMPT - 1)
    if req.prefix_len:
        raise SetupProblem(f"an empty tree matched {req.prefix_len} tokens")
    req.kv.cache_protected_len = 0
    req.lock = cache.lock(req.last_node)

    # The first chunk: its slots, its forward (no KV value matters here), its checkpoint.
    zero = torch.tensor([0])
    slots = allocator.alloc_extend(zero, zero, torch.tensor([CHUNK]), torch.tensor([CHUNK]), torch.tensor([-1]), CHUNK)
    if slots is None:
        raise SetupProblem(f"{CHUNK} slots did not fit in pools of {SLOTS}")
    rows.write((0, slice(0, CHUNK)), slots.to(rows.req_to_token.dtype))
    req.kv.kv_committed_len = req.kv.kv_allocated_len = CHUNK
    req.extend_end = CHUNK
    sgl.checkpoint_kv_cache(req, cache)
    in_tree = cache.full_evictable_size() + cache.full_protected_size()
    protected = req.kv.cache_protected_len

    # Pressure: the allocator asks the tree for room, and another request takes every free page.
    cache.evict_for_alloc(sgl.EvictParams(num_tokens=SLOTS, swa_num_tokens=0))
    free = allocator.full_available_size()
    other = allocator.alloc_extend(zero, zero, torch.tensor([free]), torch.tensor([free]), torch.tensor([-1]), free)
    if other is None:
        raise SetupProblem(f"the {free} free slots could not be allocated")
    reading = rows.req_to_token[0, :CHUNK].tolist()
    shared = sorted(set(reading) & set(other.tolist()))
    state = f"after the checkpoint of a {CHUNK}-token chunk the tree holds {in_tree} tokens, {protected} protected"
    if shared:
        return Verdict(
            True,
            f"{state}; an eviction freed them and another request was handed slots {shared}, which the running "
            f"request still reads (its row: {reading})",
        )
    return Verdict(False, f"{state}; an eviction left the running request's slots alone")


def main() -> int:
    try:
        verdict = reproduce()
    except SetupProblem as problem:
        print(f"SETUP PROBLEM (no verdict): {problem}")
        return EXIT_SETUP
    except Exception as error:  # noqa: BLE001 - anything else is no verdict either; show it whole
        traceback.print_exc()
        said = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        print(f"SETUP PROBLEM (no verdict): the scene raised {type(error).__name__}: {said} (traceback above)")
        return EXIT_SETUP
    try:
        from importlib.metadata import version

        release = version("sglang")
    except Exception:  # noqa: BLE001 - a source tree without metadata
        release = "(unknown)"
    print(f"sglang {release}: {'BUG PRESENT' if verdict.bug_present else 'fixed'}: {verdict.message}")
    return EXIT_BUG if verdict.bug_present else EXIT_FIXED


if __name__ == "__main__":
    sys.exit(main())
