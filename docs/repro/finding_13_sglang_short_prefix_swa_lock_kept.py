"""SGLang: a request whose cached prefix is shorter than the sliding window never gives up its prefix's SWA lock
early; the prefix's SWA KV stays protected until the request finishes (swa-harness docs/FINDINGS.md #13).

With ``SGLANG_OPT_RELEASE_PREFILL_SWA=1`` the decode step's ``maybe_evict_swa`` (``managers/schedule_batch.py``) calls
``UnifiedRadixCache.release_swa_prefix_lock`` once a request has decoded past the window, so that its prefix's SWA KV
becomes evictable (the unified cache's wiring of SGLang #28161). ``release_swa_prefix_lock``
(``mem_cache/unified_radix_cache.py``) releases only a lock whose receipt carries an SWA boundary uuid
(``lock.receipt.component_lock_uuids.get(ComponentType.SWA) is not None``). But the receipt protocol
(``IncLockRefResult``, ``mem_cache/base_prefix_cache.py``: "``None`` means root, while an absent entry means no
receipt") records ``None`` for a lock whose SWA segment reached the root before covering a window
(``SWAComponent.acquire_component_lock``): any lock on a prefix shorter than the window. ``.get(...) is not None``
cannot tell that lock from no lock, so its SWA part is never released early; it goes only when the request finishes.

Scene (SGLang's own calls, in its scheduler's order; page size 4, sliding window 5, full and SWA pools of 64 slots):
a request of 6 prompt tokens is admitted to an empty tree, prefilled and checkpointed (``checkpoint_kv_cache``, as after
every extend: its lock moves to the 4-token prompt node), then decodes 12 tokens, each step sliding its window
(``evict_sliding_windows``) and, from the ``swa_retain_window``-th step on, releasing its prefix's SWA lock
(``release_swa_prefix_lock``, what ``maybe_evict_swa`` does with the option on). Its window then lies 12 tokens past
its prefix: the tree may protect no SWA KV.

    python finding_13_sglang_short_prefix_swa_lock_kept.py

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
PAGE, WINDOW, SLOTS, PROMPT, DECODE = 4, 5, 64, 6, 12  # the prompt's whole pages (4 tokens) are fewer than WINDOW


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
    """SGLang's pieces the scene calls (0.5.23)."""
    try:
        _stub_torchvision()
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.common import checkpoint_kv_cache, match_kv_cache
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
    except ImportError as error:
        raise SetupProblem(f"this SGLang lacks the unified radix cache's API: {error}") from error
    if not hasattr(UnifiedRadixCache, "release_swa_prefix_lock"):
        raise SetupProblem("this SGLang's UnifiedRadixCache has no release_swa_prefix_lock (no early SWA release)")
    return SimpleNamespace(
        Req=Req,
        SWATokenToKVPoolAllocator=SWATokenToKVPoolAllocator,
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
    """Build the scene and say whether the tree still protects SWA KV the request's window has left behind."""
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

    def grow(n: int) -> None:
        """Slots for the next ``n`` positions of the request's row (the allocator's extend path)."""
        begin = req.kv.kv_allocated_len
        last = int(rows.req_to_token[0, begin - 1]) if begin else -1
        slots = allocator.alloc_extend(
            torch.tensor([begin]),
            torch.tensor([begin]),
            torch.tensor([begin + n]),
            torch.tensor([begin + n]),
            torch.tensor([last]),
            n,
        )
        if slots is None:
            raise SetupProblem(f"{n} slots did not fit in pools of {SLOTS}")
        rows.write((0, slice(begin, begin + n)), slots.to(rows.req_to_token.dtype))
        req.kv.kv_committed_len = req.kv.kv_allocated_len = begin + n

    # Admission to the empty tree, as the scheduler's prefill adder does it.
    ids = array("q", range(1, PROMPT + 1))
    req = sgl.Req(
        rid="a", origin_input_text="", origin_input_ids=ids, sampling_params=sgl.SamplingParams(max_new_tokens=64)
    )
    req.kv.req_pool_idx = 0
    req.refresh_fill_ids()
    sgl.match_kv_cache(req, cache, req.full_untruncated_fill_ids, max_prefix_len=PROMPT - 1)
    if req.prefix_len:
        raise SetupProblem(f"an empty tree matched {req.prefix_len} tokens")
    req.kv.cache_protected_len = 0
    req.lock = cache.lock(req.last_node)

    # The prefill and its checkpoint: the lock moves onto the prompt's whole pages.
    grow(PROMPT)
    req.extend_end = PROMPT
    sgl.checkpoint_kv_cache(req, cache)
    prefix = req.kv.cache_protected_len
    if not 0 < prefix < WINDOW:
        raise SetupProblem(f"the checkpoint protected {prefix} tokens, not a prefix shorter than the window")
    uuids = req.lock.receipt.component_lock_uuids
    if sgl.ComponentType.SWA not in uuids:
        raise SetupProblem("the checkpoint's lock took no SWA segment")

    # Decode steps, each sliding the window, then releasing the prefix's SWA lock as maybe_evict_swa does.
    retain = cache.swa_retain_window
    for step in range(1, DECODE + 1):
        req.output_ids.append(0)
        req.refresh_fill_ids()
        grow(1)
        allocator.free_group_begin()
        cache.evict_sliding_windows(req, req.kv.kv_committed_len - 1)
        if step >= retain:
            cache.release_swa_prefix_lock(req)
        allocator.free_group_end()
    cache.sanity_check()

    kv_len, protected = req.kv.kv_committed_len, cache.swa_protected_size()
    state = (
        f"a request whose prefix is {prefix} tokens (window {WINDOW}; its lock's SWA receipt "
        f"{uuids[sgl.ComponentType.SWA]!r}) decoded to {kv_len} tokens, {kv_len - prefix} past its prefix"
    )
    if protected:
        return Verdict(
            True,
            f"{state}, and the tree still protects {protected} tokens' SWA KV (its prefix lock's SWA part released: "
            f"{req.lock.swa_released}); they stay protected until the request finishes",
        )
    return Verdict(False, f"{state}; its prefix's SWA KV is evictable (the tree protects none)")


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
