"""The harness's ``PrefixCache`` over real SGLang's ``UnifiedRadixCache``, the prefix cache every hybrid-SWA SGLang
server builds (a FULL and an SWA component, SWA tombstones), over the real ``SWAKVPool`` and
``SWATokenToKVPoolAllocator`` that ``SGLangTarget.build_pool`` builds. Behaviour is SGLang's; every method is the
sequence SGLang's own scheduler runs for that step:

* ``admit``: ``match_kv_cache`` (the admission match, capped at all tokens but the last), the prefix becomes the
  request's ``cache_protected_len``, ``lock(last_node)``, and ``prefix_device_indices`` written into its row;
* ``cache_unfinished_req``: ``checkpoint_kv_cache`` (``checkpoint`` up to the KV computed so far, which frees the
  out-of-window SWA slots first, inserts, frees the duplicates and moves the lock);
* ``cache_finished_req`` / ``release_req``: ``release_kv_cache`` with and without the checkpoint (``checkpoint``,
  ``free_kv_row`` of what the request owns, ``unlock``, the over-allocated tail, ``on_release``), except the row,
  which the contract leaves to the caller;
* ``slide_windows``: the decode step's ``maybe_evict_swa`` (one free group around the batch; per request
  ``evict_sliding_windows``, then ``release_swa_prefix_lock`` once the window has passed the prefix, as with
  ``SGLANG_OPT_RELEASE_PREFILL_SWA=1``);
* ``evict``: ``evict_for_alloc(EvictParams)``, the allocator's request for a shortfall; the sizes,
  ``sanity_check`` and ``reset`` are the cache's own.

SGLang keeps a request's cache state on its ``Req`` (lock receipt, last node, the SWA branching point, what it
already inserted), so the adapter keeps one SGLang ``Req`` per harness request, copies the harness's fields in
before each call and SGLang's results out after it. Both read one request row: SGLang's cache sees the harness's
``ReqToTokenPool`` tensor through a thin shim.

Window convention: the harness's ``sliding_window_size`` is the model's window ``W`` (a query sees itself and the
``W - 1`` tokens before it); SGLang's is the history a query reads, ``W - 1``, the value its model runner takes
from ``get_attention_sliding_window_size`` (Gemma2: ``config.sliding_window - 1``). The adapter converts once, here.

Tree cores: SGLang runs the tree walk in Rust by default and in Python with
``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python`` (or ``tree_core="python"`` here); both meet the same contract.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.mem import HybridPool, PoolError, ReqToTokenPool
from harness.mem.contracts import CacheRequest, PrefixMatch, TreeSlots
from harness.mem.index import LOC_DTYPE
from harness.targets.sglang.adapters import SGLangAllocatorAdapter
from harness.targets.sglang.capabilities import first, lacks, module, takes

TREE_CORES = ("python", "rust")

# What a request needs of UnifiedRadixCache, as the 0.5.23 scheduler calls it; an older cache lacks some.
_CACHE_METHODS = (
    "checkpoint",
    "free_kv_row",
    "lock",
    "unlock",
    "release_swa_prefix_lock",
    "evict_sliding_windows",
    "prefix_device_indices",
    "path_device_indices",
    "on_release",
    "sanity_check",
)


class _ReqToTokenShim:
    """SGLang's view of the harness's ``ReqToTokenPool``: the same int32 tensor, and its ``write((row, slice),
    values)`` checked by the harness pool (an unallocated row or a position past the context is refused)."""

    def __init__(self, pool: ReqToTokenPool) -> None:
        self.harness = pool
        self.device = pool.device
        self.size = pool.size
        self.max_context_len = pool.max_context_len

    @property
    def req_to_token(self) -> torch.Tensor:
        return self.harness.req_to_token

    def write(self, indices: tuple[int, slice], values: torch.Tensor) -> None:
        row, positions = indices
        start = positions.start or 0
        if positions.step not in (None, 1) or (positions.stop is not None and positions.stop - start != values.numel()):
            raise PoolError(f"req_to_token write of {values.numel()} slots into positions {positions} of row {row}")
        self.harness.write(int(row), start, values.to(LOC_DTYPE))


@dataclass(frozen=True)
class _Tracked:
    """A harness request and the SGLang ``Req`` that carries its cache state between calls."""

    req: CacheRequest
    sglang: Any  # sglang.srt.managers.schedule_batch.Req
    admitted_ids: tuple[int, ...]


class SGLangPrefixCache:
    """``PrefixCache`` (``harness.mem.contracts``) over SGLang's ``UnifiedRadixCache``; see the module docstring."""

    # SGLang's checkpoint frees what lies out of the window of the key it inserts (free_out_of_window_slots), and its
    # scheduler slides a request's window only in decode (maybe_evict_swa skips extend for a prefix-sharing cache)
    checkpoint_frees_window = True

    def __init__(
        self,
        memory: HybridPool,
        *,
        sliding_window_size: int | None,
        tree_core: str | None = None,
        bigram_keys: bool = False,
        disable: bool = False,
        eviction_policy: str = "lru",
    ) -> None:
        """``tree_core``: ``"python"`` or ``"rust"``; None takes ``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND`` (SGLang's
        default, Rust). ``bigram_keys``: the tree an EAGLE server builds (``is_eagle``), keyed by token pairs.
        ``disable``: the cache a ``--disable-radix-cache`` server builds for a hybrid model (it matches and keeps
        nothing). ``eviction_policy``: ``--radix-eviction-policy`` (``"tlru"`` keeps per-node depth bookkeeping)."""
        if not isinstance(memory.allocator, SGLangAllocatorAdapter):
            raise TypeError(
                f"SGLangPrefixCache needs the memory SGLangTarget.build_pool builds (its allocator over "
                f"SGLang's), got an allocator of type {type(memory.allocator).__name__}"
            )
        if sliding_window_size is not None and sliding_window_size < 2:
            raise ValueError(
                f"SGLang's SWA component needs a window of at least 2 tokens (it keeps W - 1 = "
                f"{sliding_window_size - 1} tokens of history, and must keep one), got {sliding_window_size}"
            )
        if tree_core is not None and tree_core not in TREE_CORES:
            raise ValueError(f"unknown tree core {tree_core!r}; SGLang has {', '.join(TREE_CORES)}")

        UnifiedRadixCache = getattr(module("sglang.srt.mem_cache.unified_radix_cache"), "UnifiedRadixCache", None)
        if UnifiedRadixCache is None:
            raise lacks("sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache")
        missing = [name for name in _CACHE_METHODS if not hasattr(UnifiedRadixCache, name)]
        if missing:
            raise lacks(", ".join(f"UnifiedRadixCache.{name}" for name in missing) + " (the 0.5.23 scheduler's calls)")
        CacheInitParams = first(("sglang.srt.mem_cache.cache_init_params", "CacheInitParams"))
        ComponentType = first(
            ("sglang.srt.mem_cache.unified_cache.component_type", "ComponentType"),
            ("sglang.srt.mem_cache.unified_cache.components.base", "ComponentType"),
        )
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

        self.page_size = memory.allocator.page_size
        self.sliding_window_size = sliding_window_size
        self.checkpoint_frees_window = not disable  # a disabled cache's checkpoint returns before its window free
        self.memory = memory
        self._swa = ComponentType.SWA
        # What SGLang's Req and cache read of the server (the page size), set the way its unit-test kit does.
        set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", page_size=self.page_size))
        components = (ComponentType.FULL,) if sliding_window_size is None else (ComponentType.FULL, ComponentType.SWA)
        extra = {}
        if tree_core is not None:
            if not takes(CacheInitParams, "tree_core_backend"):
                raise lacks("CacheInitParams.tree_core_backend (a tree core chosen per cache)")
            extra["tree_core_backend"] = tree_core
        params = CacheInitParams(
            disable=disable,
            req_to_token_pool=_ReqToTokenShim(memory.req_to_token_pool),
            token_to_kv_pool_allocator=memory.allocator.sglang,
            page_size=self.page_size,
            sliding_window_size=None if sliding_window_size is None else sliding_window_size - 1,
            tree_components=components,
            eviction_policy=eviction_policy,
            is_eagle=bigram_keys,
            **extra,
        )
        self.sglang = UnifiedRadixCache(params=params)
        self.init_params = params  # what init_hicache takes again, to build a host tier over this cache
        self.tree_core = self.sglang._tree_core_backend  # "python" or "rust", after SGLang's own fallbacks
        self._tracked: dict[int, _Tracked] = {}  # by id() of the harness request, which _Tracked keeps alive
        self._rids = itertools.count()

    # -- requests ----------------------------------------------------------------------------------------------

    def admit(self, req: CacheRequest, token_ids: Sequence[int]) -> int:
        """The admission match (``match_kv_cache``), the lock the prefill adder takes, the prefix written into
        the request's row as ``prefix_device_indices`` gives it."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.mem_cache.common import match_kv_cache
        from sglang.srt.sampling.sampling_params import SamplingParams

        if req.req_pool_idx is None or req.slots_len or req.prefix_lock is not None or id(req) in self._tracked:
            raise PoolError("admit: the request must hold a row and nothing else")
        ids = tuple(int(t) for t in token_ids)
        sgl = Req(
            rid=f"harness-{next(self._rids)}",
            origin_input_text="",
            origin_input_ids=array("q", ids),
            sampling_params=SamplingParams(temperature=0, max_new_tokens=1),
        )
        sgl.kv.req_pool_idx = req.req_pool_idx
        sgl.refresh_fill_ids()
        match_kv_cache(sgl, self.sglang, sgl.full_untruncated_fill_ids, max_prefix_len=max(len(ids) - 1, 0))
        if getattr(self.sglang, "cache_controller", None) is not None and sgl.needs_host_load_back():
            self._init_load_back(sgl)
        n = sgl.prefix_len
        sgl.kv.cache_protected_len = n
        sgl.lock = self.sglang.lock(sgl.last_node)
        if n:
            self.memory.req_to_token_pool.write(
                req.req_pool_idx, 0, self.sglang.prefix_device_indices(sgl).to(LOC_DTYPE)
            )
        sgl.kv.kv_committed_len = sgl.kv.kv_allocated_len = n
        self._tracked[id(req)] = _Tracked(req, sgl, ids)
        req.kv_len = req.slots_len = req.cache_protected_len = n
        req.swa_evicted = 0
        req.prefix_lock = sgl.lock
        return n

    def _init_load_back(self, sgl: Any) -> None:
        """With a HiCache host tier (``harness.targets.sglang.hicache``): the prefill adder's load-back of a host
        hit (``init_load_back``: device slots for the host pages, the H2D queued, the nodes locked until it is
        acknowledged), the loaded tokens added to the prefix. The copy starts at the batch's
        ``ready_to_load_host_cache`` and is acknowledged by a later ``check_hicache_events``: ``hicache_step``."""
        from sglang.srt.mem_cache.base_prefix_cache import InitLoadBackParams

        loaded = self.sglang.init_load_back(
            InitLoadBackParams(best_match_node=sgl.best_match_node, host_hit_length=sgl.host_hit_length, req=sgl)
        )
        sgl.host_loaded_length, sgl.last_node = loaded  # all the host hit or none: the caller's tests hold it
        sgl.prefix_len += sgl.host_loaded_length

    def hicache_step(self) -> None:
        """The scheduler's HiCache calls around a batch: ``ready_to_load_host_cache`` (the queued load-backs
        start) before the forward and ``check_hicache_events`` (pending backups flushed, finished writes and
        loads acknowledged, storage queues drained) after it."""
        self.sglang.ready_to_load_host_cache()
        self.sglang.check_hicache_events()

    def cache_unfinished_req(self, req: CacheRequest) -> None:
        """``checkpoint_kv_cache``: what a chunk (or a running request) has computed goes into the tree.

        When its admission match found full KV past the last live SWA window (``swa_branching_seqlen``), SGLang's
        first checkpoint inserts only up to that branch point, so that its window is still live when it goes in,
        and leaves the rest to the request's next checkpoint; the contract inserts all whole pages computed, so
        that next checkpoint runs at once."""
        from sglang.srt.mem_cache.common import checkpoint_kv_cache

        sgl = self._sync_in(req)
        branch_pending = sgl.swa_branching_seqlen is not None and sgl.swa_branching_seqlen > sgl.kv.cache_protected_len
        checkpoint_kv_cache(sgl, self.sglang)
        if branch_pending and sgl.swa_branching_seqlen is None:
            checkpoint_kv_cache(sgl, self.sglang)
        self._sync_out(req, sgl)

    def cache_finished_req(self, req: CacheRequest) -> None:
        """``release_kv_cache(checkpoint=True)`` of a request finished by length, its row left to the caller."""
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH

        sgl = self._sync_in(req)
        sgl.finished_reason = FINISH_LENGTH(length=len(sgl.output_ids))
        self._release(req, sgl, checkpoint=True)

    def release_req(self, req: CacheRequest) -> None:
        """``release_kv_cache(checkpoint=False)``: an aborted or retracted request inserts nothing."""
        from sglang.srt.managers.schedule_batch import FINISH_ABORT

        sgl = self._sync_in(req)
        sgl.finished_reason = FINISH_ABORT()
        self._release(req, sgl, checkpoint=False)

    def _release(self, req: CacheRequest, sgl: Any, *, checkpoint: bool) -> None:
        owned = sgl.owned_kv_len()
        if checkpoint:
            sgl.refresh_fill_ids()
            self.sglang.checkpoint(sgl, up_to=owned)
        self.sglang.free_kv_row(sgl.kv, [(sgl.kv.cache_protected_len, owned)])
        self.sglang.unlock(sgl.lock)
        sgl.lock = None
        # What the request holds past its KV (a step in flight), from the next allocator page on: the page that
        # holds its last KV token went back with the range above.
        tail = -(-owned // self.page_size) * self.page_size
        if tail < sgl.kv.kv_allocated_len:
            self.sglang.free_kv_row(sgl.kv, [(tail, sgl.kv.kv_allocated_len)])
        self.sglang.on_release(sgl, checkpointed=checkpoint)
        self._sync_out(req, sgl)
        sgl.kv.mark_kv_released()
        del self._tracked[id(req)]

    def slide_windows(self, reqs: Sequence[CacheRequest]) -> None:
        """The decode step's ``maybe_evict_swa``, as SGLang runs it over a batch: one free group around the step,
        and inside it, request by request, ``evict_sliding_windows`` (its out-of-window SWA slots below the
        frontier SGLang keeps for an insert at ``kv_len``) and, once ``kv_len`` is a window past the prefix,
        ``release_swa_prefix_lock``."""
        if self.sliding_window_size is None:
            return
        allocator = self.memory.allocator
        allocator.free_group_begin()
        try:
            for req in reqs:
                sgl = self._sync_in(req)
                self.sglang.evict_sliding_windows(sgl, req.kv_len)
                if req.kv_len - self.sglang.sliding_window_size >= sgl.kv.cache_protected_len:
                    self.sglang.release_swa_prefix_lock(sgl)
                self._sync_out(req, sgl)
        finally:
            allocator.free_group_end()

    def _sync_in(self, req: CacheRequest) -> Any:
        """The harness request's state onto its SGLang ``Req``, before a call."""
        tracked = self._tracked.get(id(req))
        if tracked is None or tracked.req is not req:
            raise PoolError("the request was not admitted to this cache (or it already finished)")
        sgl = tracked.sglang
        if req.req_pool_idx != sgl.kv.req_pool_idx:
            raise PoolError(f"the request moved from row {sgl.kv.req_pool_idx} to {req.req_pool_idx} while cached")
        if req.cache_protected_len != sgl.kv.cache_protected_len:
            raise PoolError(
                f"cache_protected_len is {req.cache_protected_len}, the cache lent "
                f"{sgl.kv.cache_protected_len}: only the cache moves it"
            )
        fill = req.fill_ids
        if tuple(fill[: len(tracked.admitted_ids)]) != tracked.admitted_ids:
            raise PoolError("fill_ids no longer start with the tokens the request was admitted with")
        if not req.cache_protected_len <= req.kv_len <= req.slots_len <= len(fill) + 1:
            raise PoolError(
                f"cache_protected_len {req.cache_protected_len} <= kv_len {req.kv_len} <= slots_len "
                f"{req.slots_len} <= len(fill_ids) + 1 = {len(fill) + 1} does not hold"
            )
        sgl.output_ids = array("q", fill[len(tracked.admitted_ids) :])
        sgl.refresh_fill_ids()
        sgl.kv.kv_committed_len = req.kv_len
        sgl.kv.kv_allocated_len = req.slots_len
        sgl.kv.set_evicted_seqlen(self._swa, req.swa_evicted)
        sgl.extend_end = req.kv_len
        return sgl

    def _sync_out(self, req: CacheRequest, sgl: Any) -> None:
        """What SGLang moved, back onto the harness request: the tree's prefix, the SWA frontier, the lock."""
        req.cache_protected_len = sgl.kv.cache_protected_len
        req.swa_evicted = sgl.kv.get_evicted_seqlen(self._swa)
        req.prefix_lock = sgl.lock

    # -- the tree ----------------------------------------------------------------------------------------------

    def match_prefix(self, token_ids: Sequence[int]) -> PrefixMatch:
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        result = self.sglang.match_prefix(MatchPrefixParams(key=RadixKey(array("q", (int(t) for t in token_ids)))))
        n = result.device_prefix_len
        indices = self.sglang.path_device_indices(result.last_device_node).to(torch.int64)
        if indices.numel() < n:
            raise PoolError(f"SGLang matched {n} tokens but the path to its last node holds {indices.numel()} slots")
        return PrefixMatch(n, indices[:n])

    def evict(self, *, full_tokens: int = 0, swa_tokens: int = 0) -> None:
        """``evict_for_alloc``, as the allocator's ``evict_to_free_tokens`` asks it for a shortfall: each pool's
        free slots grow by at least that many (what a full eviction frees on the SWA side counts), or by all the
        tree can give."""
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        if full_tokens < 0 or swa_tokens < 0:
            raise ValueError(
                f"evict: token counts must be >= 0, got full_tokens={full_tokens}, swa_tokens={swa_tokens}"
            )
        self.sglang.evict_for_alloc(EvictParams(num_tokens=full_tokens, swa_num_tokens=swa_tokens))

    def evictable_size(self) -> int:
        return self.sglang.full_evictable_size()

    def protected_size(self) -> int:
        return self.sglang.full_protected_size()

    def swa_evictable_size(self) -> int:
        return self.sglang.swa_evictable_size()

    def swa_protected_size(self) -> int:
        return self.sglang.swa_protected_size()

    def tree_slots(self) -> TreeSlots:
        return unified_tree_slots(self.sglang, swa=self.sliding_window_size is not None)

    def sanity_check(self) -> None:
        """SGLang's own tree check (structure, leaf sets, LRUs, sizes recounted per node), then the totals against
        the slots the tree reports."""
        try:
            self.sglang.sanity_check()
        except AssertionError as failed:
            raise PoolError(f"SGLang's UnifiedRadixCache.sanity_check failed: {failed}") from None
        slots = self.tree_slots()
        for name, kept, held in (
            ("evictable + protected", self.evictable_size() + self.protected_size(), slots.full.numel()),
            (
                "swa_evictable + swa_protected",
                self.swa_evictable_size() + self.swa_protected_size(),
                slots.swa_live.numel() if self.sliding_window_size is not None else 0,
            ),
        ):
            if kept != held:
                raise PoolError(f"{name} is {kept}, the tree's nodes hold {held} slots")

    def reset(self) -> None:
        """SGLang's ``/flush_cache`` runs only on an idle server and clears the whole allocator; here running
        requests may hold slots of their own (and a lock on the root, which protects nothing), so the tree gives
        back exactly its own slots (SGLang's eviction of every unlocked node) before ``reset`` rebuilds it, and
        those root locks move to the new root."""
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        if self.protected_size():
            raise PoolError(f"reset: {self.protected_size()} cached tokens are still locked by running requests")
        held = [t for t in self._tracked.values() if t.sglang.lock is not None]
        for tracked in held:
            self.sglang.unlock(tracked.sglang.lock)
        self.sglang.evict(EvictParams(num_tokens=self.evictable_size()))
        left = self.sglang.all_values_flatten().numel()
        if left:
            raise PoolError(f"reset: {left} full slots stayed on tree nodes after evicting everything unlocked")
        self.sglang.reset()
        root = self.sglang.root_node_handle()
        for tracked in held:
            sgl = tracked.sglang
            sgl.last_node, sgl.swa_branching_seqlen = root, None  # both described the old tree
            sgl.lock = tracked.req.prefix_lock = self.sglang.lock(root)


def unified_tree_slots(cache: Any, *, swa: bool) -> TreeSlots:
    """Every full slot on a node of SGLang's ``UnifiedRadixCache`` ``cache``, and those of the nodes whose SWA value
    the tree holds (the KV-canary walk both tree cores have, restricted to SWA-resident nodes)."""
    full = cache.all_values_flatten().to(torch.int64)
    if not swa:
        return TreeSlots(full=full, swa_live=full.clone())
    live = cache.tree_core.walk_for_kv_canary(False, True).slot_indices
    return TreeSlots(full=full, swa_live=torch.as_tensor(live, dtype=torch.int64).reshape(-1))
