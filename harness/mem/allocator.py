"""Free-list allocator over the slots of one KV pool, with optional pages (SGLang's paged allocator).

Contract for an allocation that does not fit: ``alloc`` returns ``None`` and changes nothing (SGLang's
documented behaviour; the scheduler decides whether to wait or refuse). Everything else that is
wrong — an unaligned size, a double free, freeing the padding slot, an index tensor of the wrong
dtype, device or rank — raises a ``PoolError`` naming the problem, before any state changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.mem.errors import AlignmentError, DoubleFreeError, PaddingSlotError, PoolError
from harness.mem.index import LOC_DTYPE, check_index, check_slot_range, slot_bounds


class TokenToKVPoolAllocator:
    """Owns slots ``page_size .. size + page_size - 1``; page 0 (slots ``0 .. page_size - 1``) is padding.

    With ``page_size > 1`` the slots of a page are contiguous, so token ``i`` of a page lives at
    ``page * page_size + i``. ``alloc`` hands out whole pages; ``alloc_extend`` grows requests, each
    first filling the page its last token is on (SGLang's paged allocator), so a request's last page
    is usually partly used, and freeing a request's slots frees the pages they are on.
    """

    def __init__(self, size: int, page_size: int = 1, device: str | torch.device = "cpu") -> None:
        if size < 1 or page_size < 1 or size % page_size:
            raise PoolError(f"allocator size {size} must be a positive multiple of page_size {page_size}")
        self.size = size
        self.page_size = page_size
        self.device = torch.device(device)
        self.num_pages = size // page_size
        self._page_is_free = torch.zeros(self.num_pages + 1, dtype=torch.bool, device=self.device)
        self._page_offsets = torch.arange(page_size, dtype=LOC_DTYPE, device=self.device)
        # The values written into _page_is_free, made once (``t[i] = True`` makes a tensor of True every call).
        self._free, self._taken = (torch.tensor(v, device=self.device) for v in (True, False))
        self.clear()

    def clear(self) -> None:
        self.free_pages = torch.arange(1, self.num_pages + 1, dtype=LOC_DTYPE, device=self.device)
        self._page_is_free.fill_(True)
        self._page_is_free[0] = False

    def available_size(self) -> int:
        return self.free_pages.numel() * self.page_size

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """``need_size`` slots as an int32 tensor, or ``None`` when the pool is too full."""
        if need_size < 0:
            raise PoolError(f"alloc needs a non-negative size, got {need_size}")
        if need_size % self.page_size:
            raise AlignmentError(f"alloc size {need_size} is not a multiple of page_size {self.page_size}")
        num_pages = need_size // self.page_size
        if num_pages > self.free_pages.numel():
            return None
        pages, self.free_pages = self.free_pages[:num_pages], self.free_pages[num_pages:]
        self._page_is_free.index_put_((pages,), self._taken)
        if self.page_size == 1:
            # A view into the free list, like SGLang's: successive allocations are views of one
            # storage at different offsets, which is exactly what a storage-keyed memo gets wrong.
            return pages
        return (pages[:, None] * self.page_size + self._page_offsets).reshape(-1)

    def alloc_extend(
        self, prefix_lens: Sequence[int], seq_lens: Sequence[int], last_loc: Sequence[int]
    ) -> torch.Tensor | None:
        """Slots for tokens ``prefix_lens[i] .. seq_lens[i] - 1`` of each request, in order, or ``None``
        (nothing taken) when the new pages do not fit. ``last_loc[i]`` is the slot of the request's last
        token (-1: none); its page is filled first, then whole new pages are taken."""
        if not len(prefix_lens) == len(seq_lens) == len(last_loc):
            raise PoolError(
                f"alloc_extend: {len(prefix_lens)} prefix lengths, {len(seq_lens)} sequence lengths "
                f"and {len(last_loc)} last slots for one batch"
            )
        ps = self.page_size
        new_pages = 0
        for prefix, seq, last in zip(prefix_lens, seq_lens, last_loc):
            if not 0 <= prefix <= seq:
                raise PoolError(f"alloc_extend: a request grows from {prefix} to {seq} tokens")
            if prefix % ps and (last < ps or (last + 1) % ps != prefix % ps):
                raise PoolError(
                    f"alloc_extend: last slot {last} is not where token {prefix - 1} of a "
                    f"page-aligned request lives (page_size {ps})"
                )
            new_pages += -(-seq // ps) - -(-prefix // ps)
        if new_pages > self.free_pages.numel():
            return None
        pages, self.free_pages = self.free_pages[:new_pages], self.free_pages[new_pages:]
        self._page_is_free.index_put_((pages,), self._taken)
        out, taken = [], iter(pages.tolist())
        for prefix, seq, last in zip(prefix_lens, seq_lens, last_loc):
            for pos in range(prefix, seq):
                out.append(last + 1 if pos % ps else next(taken) * ps)
                last = out[-1]
        return torch.tensor(out, dtype=LOC_DTYPE, device=self.device)

    def pages_of(self, free_index: torch.Tensor) -> torch.Tensor:
        """Validate slots about to be freed and return their distinct pages; raises before any change."""
        check_index("free_index", free_index, device=self.device)
        if free_index.numel() == 0:
            return free_index
        bounds = slot_bounds(free_index)  # one pass for both checks below
        if bounds[0] < self.page_size and bounds[1] >= 0:  # some slot may be on the padding page: name it first
            padding = free_index[(free_index >= 0) & (free_index < self.page_size)]
            if padding.numel():
                raise PaddingSlotError(f"slots {padding.tolist()} belong to the padding page and are never allocated")
        check_slot_range("free_index", free_index, low=self.page_size, high=self.size + self.page_size, bounds=bounds)
        pages = self.page_index(free_index)
        if pages.numel() > 1:  # sorted and deduplicated; one slot needs neither
            pages = torch.unique(pages)
        if self.page_size == 1 and pages.numel() != free_index.numel():
            raise DoubleFreeError(f"free_index names a slot more than once: {free_index.tolist()}")
        if self.page_size > 1 and torch.unique(free_index).numel() != free_index.numel():
            raise DoubleFreeError(f"free_index names a slot more than once: {free_index.tolist()}")
        if self._page_is_free.index_select(0, pages).any():  # the failing path alone pays for naming them
            already_free = pages[self._page_is_free[pages]]
            raise DoubleFreeError(
                f"{'slots' if self.page_size == 1 else 'pages'} {already_free.tolist()} are already free"
            )
        return pages

    def free(self, free_index: torch.Tensor) -> None:
        """Free the pages these slots are on: a request's last page is freed with its used slots alone."""
        self.give_back(self.pages_of(free_index))

    def give_back(self, pages: torch.Tensor) -> None:
        """Free pages ``pages_of`` returned (validated, distinct): a caller that validates two pools before changing
        either frees here without a second validation."""
        if pages.numel() == 0:
            return
        self._page_is_free.index_put_((pages,), self._free)
        self.free_pages = torch.cat((self.free_pages, pages.to(LOC_DTYPE)))

    def page_index(self, slots: torch.Tensor) -> torch.Tensor:
        """The page of each slot (the slots themselves when pages are single slots)."""
        return slots if self.page_size == 1 else slots // self.page_size

    def any_free(self, slots: torch.Tensor) -> bool:
        """Whether any of these slots (none on the padding page) is free; one reduction."""
        return bool(self._page_is_free.index_select(0, self.page_index(slots)).any())

    def is_allocated(self, slots: torch.Tensor) -> torch.Tensor:
        """Per slot: whether it is currently handed out (padding counts as not allocated)."""
        pages = self.page_index(slots)
        return ~self._page_is_free[pages] & (pages > 0)
