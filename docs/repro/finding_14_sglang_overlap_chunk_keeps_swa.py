"""SGLang: with the overlap scheduler and no prefix sharing (``--disable-radix-cache``), a chunked prefill keeps SWA KV
that no query reads whenever the chunk in flight is shorter than ``chunked_prefill_size`` (swa-harness
docs/FINDINGS.md #14).

``ScheduleBatch.maybe_evict_swa`` (``managers/schedule_batch.py``), which ``alloc_for_extend`` calls before each extend
batch takes its slots, frees a request's SWA slots below ``pre_len - sliding_window_size``
(``free_swa_out_of_window_slots``, ``mem_cache/common.py``). With the overlap scheduler the previous extend batch may
still be running when the next one is scheduled, so its queries may still read the window below its start: the safe
frontier is the start of that chunk in flight. SGLang skips the first two extend batches and then takes the frontier
as ``pre_len - get_schedule().chunked_prefill_size``, the configured chunk size, as if the chunk in flight were always
a full one. The prefill adder shrinks chunks (``PrefillAdder.add_chunked_req``: the SWA budget's
``available_chunk_tokens``, the total budget, the shortest-prefill-first reserve), and after a chunk of ``c <
chunked_prefill_size`` tokens the frontier sits ``chunked_prefill_size - c`` tokens below the chunk's start: that many
SWA slots outside every live query's window stay allocated, and under SWA pressure the next chunk's budget shrinks by
as much.

Scene (SGLang's own calls, in its scheduler's order; page size 4, sliding window 8, chunked_prefill_size 32, SWA and
full pools of 256 slots, a cache built as ``--disable-radix-cache`` builds it: ``UnifiedRadixCache(disable=True)``): a
65-token prompt is prefilled in chunks of 32, 8, 8, 8 and 8 tokens (the first full, the rest shrunk, as the SWA
budget shrinks them). Before each chunk's slots are taken, an overlap extend ``ScheduleBatch`` over the request runs
``maybe_evict_swa``; after it, the chunk's slots are allocated (``alloc_extend``) and the chunk checkpointed
(``checkpoint_kv_cache``). After each ``maybe_evict_swa`` the request may hold no more SWA slots than the window below
the chunk in flight plus that chunk (and less than a page of alignment).

    python finding_14_sglang_overlap_chunk_keeps_swa.py

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
PAGE, WINDOW, CHUNKED_PREFILL_SIZE, SLOTS = 4, 8, 32, 256
CHUNKS = (32, 8, 8, 8, 8)  # a full first chunk, then chunks the prefill adder shrank


class SetupProblem(Exception):
    """The scene could not be built on this install (no SGLang, an API this script does not know): no verdict."""


@dataclass(frozen=True)
class Verdict:
    bug_present: bool
    message: str


@dataclass(frozen=True)
class Pass:
    """One scheduling pass, right after ``maybe_evict_swa``: the chunk it schedules and what the request holds."""

    chunk: int  # 0-based
    start: int  # the chunk's first position (the request's prefix length)
    length: int
    in_flight: tuple[int, int] | None  # (start, length) of the chunk still running, if any
    held: int  # SWA slots the request holds
    evicted_seqlen: int

    @property
    def needed(self) -> int:
        """SWA slots a live query can still read: the window below the chunk in flight, and that chunk."""
        if self.in_flight is None:
            return min(self.start, WINDOW)
        start, length = self.in_flight
        return min(start, WINDOW) + length


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
        from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
        from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.common import checkpoint_kv_cache
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
    except ImportError as error:  # older releases keep the chunk cache and the scheduler's helpers elsewhere
        raise SetupProblem(f"this SGLang lacks the unified cache's API: {error}") from error
    if not hasattr(ScheduleBatch, "maybe_evict_swa"):
        raise SetupProblem("this SGLang's ScheduleBatch has no maybe_evict_swa")
    return SimpleNamespace(
        Req=Req,
        ScheduleBatch=ScheduleBatch,
        SWATokenToKVPoolAllocator=SWATokenToKVPoolAllocator,
        CacheInitParams=CacheInitParams,
        checkpoint_kv_cache=checkpoint_kv_cache,
        ReqToTokenPool=ReqToTokenPool,
        SWAKVPool=SWAKVPool,
        ComponentType=ComponentType,
        UnifiedRadixCache=UnifiedRadixCache,
        ForwardMode=ForwardMode,
        SamplingParams=SamplingParams,
        ServerArgs=ServerArgs,
        set_global_server_args_for_scheduler=set_global_server_args_for_scheduler,
    )


def prefill(chunks: tuple[int, ...] = CHUNKS, *, overlap: bool = True) -> list[Pass]:
    """Prefill one request in ``chunks``, in the scheduler's order, and say what it held after each eviction."""
    import torch

    sgl = _imports()
    sgl.set_global_server_args_for_scheduler(
        sgl.ServerArgs(
            model_path="dummy", page_size=PAGE, chunked_prefill_size=CHUNKED_PREFILL_SIZE, disable_radix_cache=True
        )
    )
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
    # What --disable-radix-cache builds (kv_cache_builder.py): the unified cache with the tree off.
    cache = sgl.UnifiedRadixCache(
        params=sgl.CacheInitParams(
            disable=True,
            req_to_token_pool=rows,
            token_to_kv_pool_allocator=allocator,
            page_size=PAGE,
            sliding_window_size=WINDOW,
            tree_components=(sgl.ComponentType.FULL, sgl.ComponentType.SWA),
            eviction_policy="lru",
            is_eagle=False,
        )
    )
    if not cache.supports_swa() or cache.supports_prefix_sharing():
        raise SetupProblem("the cache built with disable=True is not an SWA cache without prefix sharing")

    prompt = sum(chunks) + 1  # the last chunk is not the last of the prompt: the request stays a chunked one
    req = sgl.Req(
        rid="a",
        origin_input_text="",
        origin_input_ids=array("q", range(1, prompt + 1)),
        sampling_params=sgl.SamplingParams(max_new_tokens=1),
    )
    req.kv.req_pool_idx = 0
    req.kv.cache_protected_len = 0
    req.refresh_fill_ids()
    req.prefix_len = 0
    swa_free = allocator.swa_available_size()
    passes: list[Pass] = []
    for k, length in enumerate(chunks):
        start = req.prefix_len
        # The extend batch of this pass; alloc_for_extend runs maybe_evict_swa before it takes the chunk's slots.
        batch = sgl.ScheduleBatch(
            reqs=[req],
            req_to_token_pool=rows,
            token_to_kv_pool_allocator=allocator,
            tree_cache=cache,
            enable_overlap=overlap,
            forward_mode=sgl.ForwardMode.EXTEND,
        )
        batch.prefix_lens = [start]
        batch.maybe_evict_swa()
        passes.append(
            Pass(
                chunk=k,
                start=start,
                length=length,
                in_flight=(start - chunks[k - 1], chunks[k - 1]) if overlap and k else None,
                held=swa_free - allocator.swa_available_size(),
                evicted_seqlen=req.kv.get_evicted_seqlen(sgl.ComponentType.SWA),
            )
        )
        last = int(rows.req_to_token[0, start - 1]) if start else -1
        slots = allocator.alloc_extend(
            torch.tensor([start]),
            torch.tensor([start]),
            torch.tensor([start + length]),
            torch.tensor([start + length]),
            torch.tensor([last]),
            length,
        )
        if slots is None:
            raise SetupProblem(f"a {length}-token chunk did not fit in pools of {SLOTS}")
        rows.write((0, slice(start, start + length)), slots.to(rows.req_to_token.dtype))
        req.kv.kv_committed_len = req.kv.kv_allocated_len = start + length
        req.extend_batch_idx += 1  # prepare_for_extend counts the batch after its allocation
        req.extend_end = start + length
        sgl.checkpoint_kv_cache(req, cache)  # the chunk's checkpoint: the next extend resumes after it
        if req.prefix_len != start + length:
            raise SetupProblem(f"after the checkpoint the prefix is {req.prefix_len}, not {start + length}")
    return passes


def judge(passes: list[Pass]) -> Verdict:
    """The bug is there when some pass leaves the request more SWA slots than a live query reads (beyond a page's
    alignment)."""
    over = [p for p in passes if p.held > p.needed + PAGE - 1]
    table = "; ".join(f"chunk {p.chunk} at {p.start}: holds {p.held}, needs {p.needed}" for p in passes)
    if not over:
        return Verdict(False, f"no pass holds more SWA slots than its live queries read ({table})")
    p = over[0]
    start, length = p.in_flight or (p.start, 0)
    return Verdict(
        True,
        f"when chunk {p.chunk} ({p.length} tokens from position {p.start}) is scheduled with chunk {p.chunk - 1} "
        f"({length} tokens from position {start}) in flight, the request holds {p.held} SWA slots where {p.needed} "
        f"are needed (no query reads below position {start - min(start, WINDOW)}; window {WINDOW}, "
        f"chunked_prefill_size {CHUNKED_PREFILL_SIZE}): {p.held - p.needed} kept beyond ({table})",
    )


def reproduce() -> Verdict:
    """Build the scene and say whether the request kept SWA slots no live query reads."""
    return judge(prefill())


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
