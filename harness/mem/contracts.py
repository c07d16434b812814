"""What the rest of the harness may use of a hybrid pool and its allocator: the contract both the
harness's own memory code (``SWAKVPool``, ``SWATokenToKVPoolAllocator``) and the adapters over real
SGLang (``harness.targets.sglang.adapters``) must meet.

Each member is here because the engine, the suites or the fixtures use it; anything else either side
has (SGLang's page tables, the harness's memo) stays private to that side. ``tests/test_mem_contracts.py``
checks both sides against these protocols.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class KVBuffers(Protocol):
    """One sub-pool (full or SWA) as the suites read it."""

    k_buffer: Sequence[torch.Tensor]
    """Per-layer keys: the suites snapshot them to find slots a forward wrote but does not own."""
    v_buffer: Sequence[torch.Tensor]
    """Per-layer values, snapshotted with the keys."""
    head_num: int
    """The dtype fixtures shape their K/V writes with it."""
    head_dim: int
    """As ``head_num``."""


@runtime_checkable
class SlotOwnership(Protocol):
    """The full-slot allocator inside a hybrid allocator, as the accounting audit asks it."""

    def is_allocated(self, slots: torch.Tensor) -> torch.Tensor:
        """Per slot, whether it is handed out: every token a request holds must own its full slot."""
        ...


@runtime_checkable
class KVPool(Protocol):
    """A hybrid KV pool: full and sliding layers, full slots translated to SWA slots for the latter."""

    device: torch.device
    """The attention backend and the toy decode allocate their index buffers on it."""
    size_swa: int
    """The stale-cache suite maps a probe to the last SWA slot."""
    full_kv_pool: KVBuffers
    """The suites snapshot the full layers' buffers."""
    swa_kv_pool: KVBuffers
    """The suites snapshot the sliding layers' buffers."""
    layers_mapping: Mapping[int, tuple[int, bool]]
    """Layer id -> (index in its sub-pool, is sliding): the dtype fixtures pick one layer of each kind."""

    @property
    def full_to_swa_index_mapping(self) -> torch.Tensor | None:
        """The mapping the pool translates through: the SWA write spy checks each write against it."""
        ...

    def is_swa_layer(self, layer_id: int) -> bool:
        """The SWA write spy checks only sliding layers' writes."""
        ...

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        """Attention reads a layer's keys by slot."""
        ...

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        """Attention reads a layer's values by slot."""
        ...

    def set_kv_buffer(
        self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, swa_loc: torch.Tensor | None = None
    ) -> None:
        """Attention writes the new tokens' K/V; ``swa_loc`` is the forward's pre-translated SWA loc (#23552)."""
        ...

    def invalidate_loc_cache(self) -> None:
        """The engine flushes the pool's translation state before each forward and capture run (#26152)."""
        ...

    def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
        """The model runner translates each forward's write loc once, for every sliding layer (#23552)."""
        ...

    def translate_fresh_loc(self, full_slots: torch.Tensor) -> torch.Tensor:
        """Attention translates the window's key slots, built fresh for this forward."""
        ...


@runtime_checkable
class KVAllocator(Protocol):
    """The allocator of a hybrid pool: a full slot per token, an SWA slot while it is in the window."""

    size: int
    """Full slots: the engine refuses a request larger than the pool, the scheduler reserves against it."""
    size_swa: int
    """SWA slots: the engine's idle check and the accounting suites count against it."""
    page_size: int
    """Slots per page: above 1 the scheduler grows requests with ``alloc_extend``/``alloc_decode``."""
    device: torch.device
    """The scheduler builds its batch tensors on it."""
    full_to_swa_index_mapping: torch.Tensor
    """Full slot -> SWA slot (0: none). The suites read it; the stale-cache suite also replaces it."""
    full_attn_allocator: SlotOwnership
    """The accounting suite asks it which full slots are handed out."""

    def register_mapping(self) -> None:
        """Hand a replaced mapping to the pool again (the stale-cache suite)."""
        ...

    def full_available_size(self) -> int:
        """Free full slots: the engine's idle check and the accounting suites."""
        ...

    def swa_available_size(self) -> int:
        """Free SWA slots: as ``full_available_size``."""
        ...

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """The scheduler's slots for a batch's new tokens; ``None`` when either pool is full."""
        ...

    def alloc_extend(
        self, prefix_lens: Sequence[int], seq_lens: Sequence[int], last_loc: Sequence[int]
    ) -> torch.Tensor | None:
        """Paged: each request's new tokens, continuing the page of its last token (``last_loc``, -1: none)."""
        ...

    def alloc_extend_swa_tail(
        self, prefix_len: int, seq_len: int, last_loc: int, swa_tail_len: int
    ) -> torch.Tensor | None:
        """Paged, one request: SWA slots only for its last ``swa_tail_len`` tokens (KV from a prefill server)."""
        ...

    def alloc_decode(self, seq_lens: Sequence[int], last_loc: Sequence[int]) -> torch.Tensor | None:
        """Paged: one new token per request, a new page only where the last one is full."""
        ...

    def free(self, free_index: torch.Tensor) -> None:
        """The scheduler frees a finished request's slots (any of them may have left the window)."""
        ...

    def free_full(self, free_index: torch.Tensor) -> None:
        """Full slots whose SWA slots already left the window (the suites drive it; SGLang's scheduler too)."""
        ...

    def available_size(self) -> int:
        """Tokens a new allocation can take: the smaller of the two pools' free slots."""
        ...

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """SGLang's scheduler-facing frees of a request row from a page-aligned position (the paged
        requests suite drives them, with ``free_swa_segment`` and ``free_full_segment``)."""
        ...

    def free_swa_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None: ...

    def free_full_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None: ...

    def free_group_begin(self) -> None:
        """Hold frees until ``free_group_end``: a scheduler step's frees as one batch."""
        ...

    def free_group_end(self) -> None: ...

    def free_swa(self, free_index: torch.Tensor) -> None:
        """The scheduler frees the SWA slots of tokens that left the window."""
        ...

    def set_full_to_swa_mapping(self, full_index: torch.Tensor, swa_index: torch.Tensor) -> None:
        """The suites and fixtures overwrite mapping entries (the cache-restore path SGLang has)."""
        ...

    def clear(self) -> None:
        """The allocator state machine resets everything."""
        ...


# -- the prefix cache --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefixMatch:
    """What a prefix match found: the first ``length`` tokens have KV in the tree, at full slots ``indices``."""

    length: int
    """Matched tokens: whole pages, and only up to a point whose last ``window - 1`` tokens hold live SWA KV."""
    indices: torch.Tensor
    """Their full slots (int64), in position order."""


@dataclass(frozen=True)
class TreeSlots:
    """The slots a prefix cache holds, for the ownership audit."""

    full: torch.Tensor
    """Every full slot a tree node holds (int64)."""
    swa_live: torch.Tensor
    """The subset whose SWA KV the tree still holds (the rest are tombstones: their mapping reads 0)."""


@runtime_checkable
class CacheRequest(Protocol):
    """What a prefix cache reads and writes of a running request (``harness.engine.request.Req`` meets it).

    Positions ``< cache_protected_len`` of the request's row are the tree's (lent by ``prefix_lock``); the
    request owns ``cache_protected_len .. slots_len``; of those, positions ``< swa_evicted`` gave back their SWA slot."""

    req_pool_idx: int | None
    kv_len: int
    slots_len: int
    swa_evicted: int
    cache_protected_len: int
    prefix_lock: object | None
    swa_branch: int  # where the tree held the prefix's full KV but not its window at admission (0: nowhere)

    @property
    def fill_ids(self) -> list[int]: ...


@runtime_checkable
class PrefixCache(Protocol):
    """A prefix cache over a hybrid pool, driven the way a scheduler drives it: request by request, and the window
    slide a step's batch at a time.

    ``harness.mem.radix_cache.RadixCache`` meets it, and so does the adapter over SGLang's ``UnifiedRadixCache``
    (``harness.targets.sglang.prefix_cache``). The suites (``suites/prefix/``) hold both to the same invariants:
    ownership, accounting (per pool: free + evictable + protected + what running requests own = size), windows (a
    match ends only where its last ``window - 1`` tokens hold live SWA KV) and equivalence with the cache off."""

    page_size: int
    sliding_window_size: int | None
    # Who frees the SWA slots a prefill chunk's window has passed. False (the harness's tree): the caller slides the
    # window first and the checkpoint inserts the freed tokens as tombstones. True (SGLang's): the checkpoint frees
    # what lies out of the window of the key it inserts, itself, and its scheduler slides windows only in decode,
    # so the caller checkpoints a chunk and slides nothing (a slide first frees below a pending SWA branch point).
    checkpoint_frees_window: bool

    def match_prefix(self, token_ids: Sequence[int]) -> PrefixMatch:
        """The longest usable cached prefix of ``token_ids`` (whole pages); touches it as recently used."""
        ...

    def admit(self, req: CacheRequest, token_ids: Sequence[int]) -> int:
        """Match ``token_ids`` (at most all but the last, whose logits the request needs), lock the match and
        lend it to the request: its row ``[0, n)`` reads the tree's slots, ``kv_len = cache_protected_len = n``.
        Returns ``n``, the cached tokens. The request must hold a row and nothing else."""
        ...

    def cache_unfinished_req(self, req: CacheRequest) -> None:
        """After a prefill chunk: insert the request's KV so far (whole pages), rewrite its row to the tree's
        slots, free its duplicates, move its lock to the new node (SGLang's ``cache_unfinished_req``)."""
        ...

    def cache_finished_req(self, req: CacheRequest) -> None:
        """A finished request: insert its KV (prompt and output, whole pages), give every slot it owns to the
        tree or back to the allocator, and unlock. Its row is the caller's to free."""
        ...

    def release_req(self, req: CacheRequest) -> None:
        """An aborted or retracted request: insert nothing, free every slot it owns, unlock."""
        ...

    def slide_windows(self, reqs: Sequence[CacheRequest]) -> None:
        """For each request (a scheduler step's batch, one call per step): free the SWA slots of its own tokens
        that no future query sees, keeping what an insert at its current length needs; drop the prefix's SWA lock
        once the window has passed it. A batch, so that a cache can free the step's slots in one allocator call
        (issue 58); what leaves is what one call per request would free. A cache may move its locks later, at the
        next call that reads them (the harness's tree, its rule 11), if every size, eviction, match and insert
        reads them as moved."""
        ...

    def evict(self, *, full_tokens: int = 0, swa_tokens: int = 0) -> None:
        """Free at least this many full / SWA slots from unlocked nodes (least recently used first), or all there are."""
        ...

    def evictable_size(self) -> int:
        """Full slots the tree holds that no lock protects."""
        ...

    def protected_size(self) -> int:
        """Full slots the tree holds under a lock."""
        ...

    def swa_evictable_size(self) -> int:
        """Live SWA slots the tree holds that no SWA lock protects."""
        ...

    def swa_protected_size(self) -> int:
        """Live SWA slots the tree holds under an SWA lock."""
        ...

    def tree_slots(self) -> TreeSlots:
        """Every slot the tree holds, for the ownership audit."""
        ...

    def sanity_check(self) -> None:
        """Recount everything the cache keeps as totals; raise naming the first difference."""
        ...

    def reset(self) -> None:
        """Give every slot the tree holds back to the allocator (SGLang's ``/flush_cache``); no lock may be held."""
        ...
