"""SGLang: with the overlap scheduler and no prefix sharing (``--disable-radix-cache``), a chunked prefill keeps SWA KV
that no query reads whenever the chunk in flight is shorter than ``chunked_prefill_size`` (swa-harness
docs/FINDINGS.md #14). The same code is in every release from 0.5.11 (and in 0.5.10) to 0.5.23.

``ScheduleBatch.maybe_evict_swa`` (``managers/schedule_batch.py``), which the extend allocation (``alloc_for_extend``)
calls before each extend batch takes its slots, frees a request's SWA slots below ``pre_len - sliding_window_size``.
With the overlap scheduler the previous extend batch may still be running when the next one is scheduled, so its
queries may still read the window below its start: the safe frontier is the start of that chunk in flight. SGLang skips
the first two extend batches and then takes the frontier as ``pre_len - chunked_prefill_size``, the configured chunk
size, as if the chunk in flight were always a full one. The prefill adder shrinks chunks
(``PrefillAdder.add_chunked_req``: the total budget and, for an SWA model, the SWA budget less a page; from 0.5.21
through ``available_chunk_tokens``), and after a chunk of ``c < chunked_prefill_size`` tokens the frontier sits
``chunked_prefill_size - c`` tokens below the chunk's start: that many SWA slots outside every live query's window stay
allocated, and under SWA pressure the next chunk's budget shrinks by as much.

The branch runs for the cache that ``--disable-radix-cache`` builds for an SWA model with chunked prefill: up to
0.5.21 ``SWAChunkCache`` (the branch asks ``is_chunk_cache()``), from 0.5.22 ``UnifiedRadixCache(disable=True)`` (it
asks ``not supports_prefix_sharing()``). The scene builds the release's own:

- 0.5.22 on: page size 4, the unified cache, each chunk's slots by ``alloc_extend`` and its checkpoint by
  ``checkpoint_kv_cache``;
- up to 0.5.21: ``SWAChunkCache`` at page size 1 (the paged ``alloc_extend`` is a Triton kernel there, with no CPU
  path), each chunk's slots by the allocator's ``alloc``. The scheduler's checkpoint there
  (``ChunkCache.cache_unfinished_req``) only copies the row into ``req.prefix_indices``, whose length is the next
  batch's ``prefix_lens``: the scene passes that length itself.

Scene (SGLang's own calls, in its scheduler's order; sliding window 8, chunked_prefill_size 32, SWA and full pools of
256 slots): a 65-token prompt is prefilled in chunks of 32, 8, 8, 8 and 8 tokens (the first full, the rest shrunk, as
the prefill adder's budgets shrink them). Before each chunk's slots are taken, an overlap extend ``ScheduleBatch``
over the request runs ``maybe_evict_swa``; after it, the chunk's slots are allocated. After each ``maybe_evict_swa``
the request may hold no more SWA slots than the window below the chunk in flight plus that chunk, and less than a
page of alignment and a page of margin more (0.5.11-0.5.13 keep one page below the window; 0.5.14 on drop it for the
chunk cache).

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
    page: int  # the scene's page size (1 up to 0.5.21, 4 from 0.5.22)

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
    """SGLang's pieces the scene calls, and which cache ``--disable-radix-cache`` builds for an SWA model with chunked
    prefill in this release: ``SWAChunkCache`` where ``mem_cache/chunk_cache.py`` has it (up to 0.5.21), else
    ``UnifiedRadixCache(disable=True)`` with the chunk checkpoint ``checkpoint_kv_cache`` (0.5.22 on)."""
    try:
        _stub_torchvision()
        from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
    except ImportError as error:
        raise SetupProblem(f"this SGLang lacks the scheduler's or the SWA pool's API: {error}") from error
    try:  # the allocator moved out of swa_memory_pool.py in 0.5.13
        from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    except ImportError:
        try:
            from sglang.srt.mem_cache.swa_memory_pool import SWATokenToKVPoolAllocator
        except ImportError as error:
            raise SetupProblem(f"this SGLang has no SWATokenToKVPoolAllocator: {error}") from error
    if not hasattr(ScheduleBatch, "maybe_evict_swa"):
        raise SetupProblem("this SGLang's ScheduleBatch has no maybe_evict_swa")
    sgl = SimpleNamespace(
        Req=Req,
        ScheduleBatch=ScheduleBatch,
        SWATokenToKVPoolAllocator=SWATokenToKVPoolAllocator,
        CacheInitParams=CacheInitParams,
        ReqToTokenPool=ReqToTokenPool,
        SWAKVPool=SWAKVPool,
        ForwardMode=ForwardMode,
        SamplingParams=SamplingParams,
        ServerArgs=ServerArgs,
        set_global_server_args_for_scheduler=set_global_server_args_for_scheduler,
        SWAChunkCache=None,
        ComponentType=None,
    )
    try:
        from sglang.srt.mem_cache.chunk_cache import SWAChunkCache

        sgl.SWAChunkCache = SWAChunkCache
    except ImportError:  # 0.5.22 on: the unified cache with the tree off
        try:
            from sglang.srt.mem_cache.common import checkpoint_kv_cache
            from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
            from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        except ImportError as error:
            raise SetupProblem(f"this SGLang has neither SWAChunkCache nor the unified cache's API: {error}") from error
        sgl.checkpoint_kv_cache = checkpoint_kv_cache
        sgl.ComponentType = ComponentType
        sgl.UnifiedRadixCache = UnifiedRadixCache
    return sgl


def _kv(req: object) -> object:
    """Where the request keeps its row and its protected length: ``req.kv`` (a ``ReqKvInfo`` with ``req_pool_idx``)
    from 0.5.19, the request itself before (0.5.16-0.5.18 have a ``req.kv`` that holds only the SWA cursor and the
    allocated length, and is None until the first allocation)."""
    kv = getattr(req, "kv", None)
    return kv if kv is not None and hasattr(kv, "req_pool_idx") else req


def _evicted_seqlen(req: object) -> int:
    """The request's SWA eviction cursor: one per component from 0.5.21, ``req.kv.swa_evicted_seqlen`` from 0.5.16,
    ``req.swa_evicted_seqlen`` before."""
    kv = getattr(req, "kv", None)
    if kv is None:  # up to 0.5.15; 0.5.16-0.5.18 before the first allocation (no cursor yet: nothing evicted)
        return getattr(req, "swa_evicted_seqlen", 0)
    if hasattr(kv, "get_evicted_seqlen"):
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType

        return kv.get_evicted_seqlen(ComponentType.SWA)
    return kv.swa_evicted_seqlen


def _record_allocation(req: object, end: int) -> None:
    """What ``alloc_for_extend`` records on the request once a chunk's slots are taken: the KV lengths, and in
    0.5.16-0.5.18 the ``ReqKvInfo`` it creates at the first allocation (where the SWA cursor lives)."""
    if hasattr(req, "kv") and req.kv is None:
        from sglang.srt.managers.schedule_batch import ReqKvInfo

        req.kv = ReqKvInfo(kv_allocated_len=end, swa_evicted_seqlen=0)
    for holder in (_kv(req), getattr(req, "kv", None)):
        for name in ("kv_committed_len", "kv_allocated_len"):
            if holder is not None and hasattr(holder, name):
                setattr(holder, name, end)


def prefill(chunks: tuple[int, ...] = CHUNKS, *, overlap: bool = True) -> list[Pass]:
    """Prefill one request in ``chunks``, in the scheduler's order, and say what it held after each eviction."""
    import torch

    sgl = _imports()
    chunk_cache = sgl.SWAChunkCache is not None
    # Up to 0.5.21 the paged alloc_extend is a Triton kernel (no CPU path): the chunk-cache scene takes page size 1,
    # where the allocator's alloc is plain torch. The mechanism does not depend on the page size.
    page = 1 if chunk_cache else PAGE
    sgl.set_global_server_args_for_scheduler(
        sgl.ServerArgs(
            model_path="dummy", page_size=page, chunked_prefill_size=CHUNKED_PREFILL_SIZE, disable_radix_cache=True
        )
    )
    pool_args = {}
    if "enable_kvcache_transpose" in inspect.signature(sgl.SWAKVPool.__init__).parameters:
        pool_args["enable_kvcache_transpose"] = False
    pool = sgl.SWAKVPool(
        size=SLOTS,
        size_swa=SLOTS,
        page_size=page,
        dtype=torch.float32,
        head_num=1,
        head_dim=4,
        swa_attention_layer_ids=[0],
        full_attention_layer_ids=[1],
        device="cpu",
        **pool_args,
    )
    allocator = sgl.SWATokenToKVPoolAllocator(SLOTS, SLOTS, page, torch.float32, "cpu", pool, need_sort=False)
    rows = sgl.ReqToTokenPool(size=2, max_context_len=SLOTS, device="cpu", enable_memory_saver=False)
    if chunk_cache:
        # What --disable-radix-cache builds for an SWA model with chunked prefill up to 0.5.21 (the cache selection:
        # managers/scheduler.py up to 0.5.12.post1, mem_cache/registry.py from 0.5.13): SWAChunkCache.
        cache = sgl.SWAChunkCache(
            sgl.CacheInitParams(
                disable=True,
                req_to_token_pool=rows,
                token_to_kv_pool_allocator=allocator,
                page_size=page,
                chunked_prefill_size=CHUNKED_PREFILL_SIZE,
                sliding_window_size=WINDOW,
            )
        )
        if not cache.supports_swa() or not cache.is_chunk_cache():
            raise SetupProblem("SWAChunkCache is not an SWA chunk cache in this SGLang")
    else:
        # What --disable-radix-cache builds from 0.5.22 (kv_cache_builder.py): the unified cache with the tree off.
        cache = sgl.UnifiedRadixCache(
            params=sgl.CacheInitParams(
                disable=True,
                req_to_token_pool=rows,
                token_to_kv_pool_allocator=allocator,
                page_size=page,
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
        origin_input_ids=array("q", range(1, prompt + 1)) if not chunk_cache else list(range(1, prompt + 1)),
        sampling_params=sgl.SamplingParams(max_new_tokens=1),
    )
    kv = _kv(req)
    kv.req_pool_idx = 0
    kv.cache_protected_len = 0
    if not chunk_cache:
        req.refresh_fill_ids()
        req.prefix_len = 0
    swa_free = allocator.swa_available_size()
    passes: list[Pass] = []
    start = 0
    for k, length in enumerate(chunks):
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
                evicted_seqlen=_evicted_seqlen(req),
                page=page,
            )
        )
        if chunk_cache:
            slots = allocator.alloc(length)
        else:
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
        _record_allocation(req, start + length)
        req.extend_batch_idx += 1  # prepare_for_extend counts the batch after its allocation
        if chunk_cache:
            # ChunkCache.cache_unfinished_req only copies the row into req.prefix_indices, whose length is the next
            # batch's prefix_lens: the scene passes that length itself.
            start += length
            continue
        req.extend_end = start + length
        sgl.checkpoint_kv_cache(req, cache)  # the chunk's checkpoint: the next extend resumes after it
        if req.prefix_len != start + length:
            raise SetupProblem(f"after the checkpoint the prefix is {req.prefix_len}, not {start + length}")
        start += length
    return passes


def judge(passes: list[Pass]) -> Verdict:
    """The bug is there when some pass leaves the request more SWA slots than a live query reads, beyond a page of
    alignment and the one page of margin that the eviction of 0.5.11-0.5.13 keeps below the window."""
    over = [p for p in passes if p.held > p.needed + 2 * p.page - 1]
    table = "; ".join(f"chunk {p.chunk} at {p.start}: holds {p.held}, needs {p.needed}" for p in passes)
    page = passes[0].page if passes else PAGE
    if not over:
        return Verdict(False, f"no pass holds more SWA slots than its live queries read (page {page}; {table})")
    p = over[0]
    start, length = p.in_flight or (p.start, 0)
    return Verdict(
        True,
        f"when chunk {p.chunk} ({p.length} tokens from position {p.start}) is scheduled with chunk {p.chunk - 1} "
        f"({length} tokens from position {start}) in flight, the request holds {p.held} SWA slots where {p.needed} "
        f"are needed (no query reads below position {start - min(start, WINDOW)}; window {WINDOW}, "
        f"chunked_prefill_size {CHUNKED_PREFILL_SIZE}, page {p.page}): {p.held - p.needed} kept beyond ({table})",
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
