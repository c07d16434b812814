"""Allocator of a hybrid SWA pool: full slots and SWA slots, tied by ``full_to_swa_index_mapping``."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.mem.allocator import TokenToKVPoolAllocator
from harness.mem.errors import AlignmentError, DoubleFreeError, IndexContractError, PoolError
from harness.mem.index import LOC_DTYPE, check_index, check_slot_range
from harness.mem.swa_kv_pool import SWAKVPool
from harness.seams import seam


class SWATokenToKVPoolAllocator:
    """Every token gets a full slot and, while it is inside the window, an SWA slot.

    ``full_to_swa_index_mapping[full_slot]`` is the token's SWA slot, 0 once the token left the window
    (``free_swa``) or before it was allocated; a trailing entry holds -1 so that -1 translates to -1.
    Every mutation of the mapping invalidates the pool's translation memo.
    """

    def __init__(
        self,
        size: int,
        size_swa: int,
        kvcache: SWAKVPool,
        *,
        page_size: int = 1,
        device: str | torch.device = "cpu",
    ) -> None:
        if (kvcache.size, kvcache.size_swa, kvcache.page_size) != (size, size_swa, page_size):
            raise PoolError(
                f"allocator sizes (full={size}, swa={size_swa}, page={page_size}) do not match the pool's "
                f"(full={kvcache.size}, swa={kvcache.size_swa}, page={kvcache.page_size})"
            )
        self.size = size
        self.size_swa = size_swa
        self.page_size = page_size
        self.device = torch.device(device)
        self.full_attn_allocator = TokenToKVPoolAllocator(size, page_size, device)
        self.swa_attn_allocator = TokenToKVPoolAllocator(size_swa, page_size, device)
        self._kvcache = kvcache
        self.full_to_swa_index_mapping = torch.zeros(size + page_size + 1, dtype=LOC_DTYPE, device=self.device)
        self.full_to_swa_index_mapping[-1] = -1
        self._free_group: list | None = None  # (free, index) calls held until free_group_end
        self.register_mapping()

    def register_mapping(self) -> None:
        """Hand the mapping tensor to the pool (again, e.g. after it was rebuilt)."""
        self._kvcache.register_mapping(self.full_to_swa_index_mapping)

    # -- sizes ---------------------------------------------------------------------------------

    def full_available_size(self) -> int:
        return self.full_attn_allocator.available_size()

    def swa_available_size(self) -> int:
        return self.swa_attn_allocator.available_size()

    def available_size(self) -> int:
        """Tokens that ``alloc`` can serve now: each needs a slot in both pools."""
        return min(self.full_available_size(), self.swa_available_size())

    # -- mutations (each one ends in the pool's on_mapping_changed) ----------------------------

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """Full slots for ``need_size`` new tokens, each mapped to a fresh SWA slot; ``None`` if either pool is full."""
        if need_size < 0 or need_size % self.page_size:
            raise AlignmentError(
                f"alloc size {need_size} must be a non-negative multiple of page_size {self.page_size}"
            )
        if need_size > self.available_size():
            return None
        full = self.full_attn_allocator.alloc(need_size)
        swa = self.swa_attn_allocator.alloc(need_size)
        assert full is not None and swa is not None  # guaranteed by the size check above
        self.full_to_swa_index_mapping[full] = swa
        self._kvcache.on_mapping_changed("alloc")
        return full

    def alloc_extend(
        self, prefix_lens: Sequence[int], seq_lens: Sequence[int], last_loc: Sequence[int]
    ) -> torch.Tensor | None:
        """Grow each request from ``prefix_lens[i]`` to ``seq_lens[i]`` tokens; ``last_loc[i]`` is the full
        slot of its last token (-1: a new request). Both pools page in step: the SWA side continues from
        the SWA peer of the same last token, so a token's full and SWA slots sit at the same offset of
        their pages. ``None``, with nothing taken, when either pool lacks the new pages."""
        last = torch.tensor(list(last_loc), dtype=torch.int64, device=self.device)
        swa_last = self.full_to_swa_index_mapping[last].tolist()  # -1 maps to -1 (the trailing entry)
        if any(s == 0 for s in swa_last):
            raise PoolError(
                f"alloc_extend: a request's last token (full slots {list(last_loc)}) holds no SWA slot; "
                "it cannot have left the window"
            )
        ps = self.page_size
        new_pages = sum(-(-seq // ps) - -(-prefix // ps) for prefix, seq in zip(prefix_lens, seq_lens)) * ps
        if new_pages > self.available_size():
            return None
        full = self.full_attn_allocator.alloc_extend(prefix_lens, seq_lens, last_loc)
        swa = self.swa_attn_allocator.alloc_extend(prefix_lens, seq_lens, swa_last)
        assert full is not None and swa is not None  # guaranteed by the size check above
        self.full_to_swa_index_mapping[full] = swa
        self._kvcache.on_mapping_changed("alloc")  # the same mutation point as alloc: new tokens get mappings
        return full

    def alloc_extend_swa_tail(
        self, prefix_len: int, seq_len: int, last_loc: int, swa_tail_len: int
    ) -> torch.Tensor | None:
        """One request's full slots for tokens ``prefix_len .. seq_len - 1``, SWA slots for the last
        ``swa_tail_len`` of them only: a request whose KV arrives from a prefill server needs no SWA
        slots for tokens already out of its window. The tail starts a page, so both pools stay in step."""
        ps, n = self.page_size, seq_len - prefix_len
        if not 0 <= swa_tail_len <= n or (seq_len - swa_tail_len) % ps:
            raise AlignmentError(
                f"alloc_extend_swa_tail: an SWA tail of {swa_tail_len} of tokens "
                f"{prefix_len}..{seq_len - 1} does not start a page of {ps}"
            )
        full_pages, swa_pages = -(-seq_len // ps) - -(-prefix_len // ps), -(-swa_tail_len // ps)
        if full_pages * ps > self.full_available_size() or swa_pages * ps > self.swa_available_size():
            return None
        full = self.full_attn_allocator.alloc_extend([prefix_len], [seq_len], [last_loc])
        swa = self.swa_attn_allocator.alloc_extend([0], [swa_tail_len], [-1])
        assert full is not None and swa is not None  # guaranteed by the size check above
        self.full_to_swa_index_mapping[full[n - swa_tail_len :]] = swa
        self._kvcache.on_mapping_changed("alloc")
        return full

    def alloc_decode(self, seq_lens: Sequence[int], last_loc: Sequence[int]) -> torch.Tensor | None:
        """One new token per request (its ``seq_lens[i]``-th): ``alloc_extend`` from ``seq_lens[i] - 1``."""
        return self.alloc_extend([n - 1 for n in seq_lens], seq_lens, last_loc)

    def free(self, free_index: torch.Tensor) -> None:
        """Give back full slots and whatever SWA slots they still hold (with their pages)."""
        check_index("free_index", free_index, device=self.device)
        if self._held(self.free, free_index):
            return
        if free_index.numel() == 0:
            return
        full_pages = self.full_attn_allocator.pages_of(free_index)  # validates every slot before either pool changes
        swa = self.full_to_swa_index_mapping.index_select(0, free_index)  # in range: checked above
        swa_pages = self.swa_attn_allocator.pages_of(swa[swa > 0])
        self.full_attn_allocator.give_back(full_pages)
        self.swa_attn_allocator.give_back(swa_pages)
        self.full_to_swa_index_mapping[free_index] = 0
        self._kvcache.on_mapping_changed("free")

    @seam("paged-free-swa-keeps-page-mapping")
    def free_swa(self, free_index: torch.Tensor) -> None:
        """Give back only the SWA slots of tokens that left the window; they keep their full slots. Whole pages only:
        a page's SWA slots go back together, so a free of part of a page is refused (SGLang #27779 expands it to the
        page instead); either way no token is left mapped to a page that went back."""
        check_index("free_index", free_index, device=self.device)
        if self._held(self.free_swa, free_index):
            return
        if free_index.numel() == 0:
            return
        check_slot_range("free_index", free_index, low=self.page_size, high=self.size + self.page_size)
        # Each check is one reduction; naming the culprits is the failing path's cost.
        full = self.full_attn_allocator
        if full.any_free(free_index):  # in range, so none is on the padding page
            raise PoolError(
                f"free_swa: full slots {free_index[~full.is_allocated(free_index)].tolist()} are not allocated"
            )
        swa = self.full_to_swa_index_mapping.index_select(0, free_index)  # in range: checked above
        if not swa.all():
            released = free_index[swa == 0]
            raise DoubleFreeError(f"free_swa: full slots {released.tolist()} hold no SWA slot (already released)")
        if (
            self.page_size > 1
            and torch.unique(free_index // self.page_size).numel() * self.page_size != free_index.numel()
        ):
            raise AlignmentError(
                f"free_swa: a window frees whole pages of {self.page_size} slots, got "
                f"{free_index.tolist()}; the rest of a page is still in the window"
            )
        self.swa_attn_allocator.free(swa)
        self.full_to_swa_index_mapping[free_index] = 0
        self._kvcache.on_mapping_changed("free_swa")

    def free_full(self, free_index: torch.Tensor) -> None:
        """Give back full slots whose SWA slots already left the window (SGLang's scheduler frees those apart)."""
        check_index("free_index", free_index, device=self.device)
        if self._held(self.free_full, free_index):
            return
        if free_index.numel() == 0:
            return
        check_slot_range("free_index", free_index, low=self.page_size, high=self.size + self.page_size)
        held = self.full_to_swa_index_mapping.index_select(0, free_index)
        if held.any():
            raise PoolError(f"free_full: full slots {free_index[held != 0].tolist()} still hold SWA slots; use free")
        self.full_attn_allocator.free(free_index)  # the mapping already reads 0 here: nothing to invalidate

    def set_full_to_swa_mapping(self, full_index: torch.Tensor, swa_index: torch.Tensor) -> None:
        """Overwrite mapping entries directly (cache restore paths); the caller owns their consistency."""
        check_index("full_index", full_index, device=self.device)
        check_index("swa_index", swa_index, device=self.device)
        if full_index.numel() != swa_index.numel():
            raise IndexContractError(
                f"set_full_to_swa_mapping: {full_index.numel()} full slots but {swa_index.numel()} SWA slots"
            )
        check_slot_range("full_index", full_index, low=0, high=self.size + self.page_size)
        check_slot_range("swa_index", swa_index, low=0, high=self.size_swa + self.page_size)
        self.full_to_swa_index_mapping[full_index] = swa_index
        self._kvcache.on_mapping_changed("set_full_to_swa_mapping")

    # -- SGLang's scheduler-facing forms of the frees ------------------------------------------

    def _segment_start(self, start_pos: int) -> None:
        if start_pos % self.page_size:
            raise AlignmentError(f"a kv-row segment starts at position {start_pos}, not on a page of {self.page_size}")

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """``free`` of a request's positions ``start_pos ..`` (a page-aligned start): how SGLang's
        scheduler frees a finished request's row."""
        self._segment_start(start_pos)
        self.free(free_index)

    def free_swa_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """``free_swa`` of positions ``start_pos ..``: how SGLang's scheduler slides a window."""
        self._segment_start(start_pos)
        self.free_swa(free_index)

    def free_full_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        self._segment_start(start_pos)
        self.free_full(free_index)

    def free_group_begin(self) -> None:
        """Hold every free until ``free_group_end`` (SGLang batches a step's frees this way)."""
        if self._free_group is not None:
            raise PoolError("free groups cannot be nested")
        self._free_group = []

    def free_group_end(self) -> None:
        held, self._free_group = self._free_group, None
        if held is None:
            raise PoolError("free_group_end without free_group_begin")
        for free, index in held:
            free(index)

    def _held(self, free, free_index: torch.Tensor) -> bool:
        """Inside a free group: keep a copy of the call for the group's end."""
        if self._free_group is None:
            return False
        self._free_group.append((free, free_index.clone()))
        return True

    def clear(self) -> None:
        self._free_group = None
        self.full_attn_allocator.clear()
        self.swa_attn_allocator.clear()
        self.full_to_swa_index_mapping.zero_()
        self.full_to_swa_index_mapping[-1] = -1
        self._kvcache.on_mapping_changed("clear")
