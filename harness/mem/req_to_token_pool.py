"""Request slot x position -> full KV slot id."""

from __future__ import annotations

import torch

from harness.mem.errors import DoubleFreeError, IndexContractError, PaddingSlotError, PoolError
from harness.mem.index import LOC_DTYPE, PADDING_SLOT, check_index


class ReqToTokenPool:
    """Maps ``(request slot, position)`` to the full KV slot holding that token.

    Row 0 is the padding request: it is never handed out and stays all zeros, so a padded row of a
    graph batch (``req_pool_indices`` filled with 0) reads only the padding KV slot.
    """

    def __init__(self, size: int, max_context_len: int, device: str | torch.device = "cpu") -> None:
        if size < 1 or max_context_len < 1:
            raise PoolError(f"ReqToTokenPool needs size >= 1 and max_context_len >= 1, got {size}, {max_context_len}")
        self.size = size
        self.max_context_len = max_context_len
        self.device = torch.device(device)
        self.req_to_token = torch.zeros((size + 1, max_context_len), dtype=LOC_DTYPE, device=self.device)
        self.clear()

    def clear(self) -> None:
        self.req_to_token.zero_()
        self.free_slots: list[int] = list(range(1, self.size + 1))
        self._is_free = [False] + [True] * self.size

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, need_size: int) -> list[int] | None:
        """Hand out ``need_size`` request slots, or ``None`` when too few are free (SGLang's contract)."""
        if need_size < 0:
            raise PoolError(f"ReqToTokenPool.alloc needs a non-negative size, got {need_size}")
        if need_size > len(self.free_slots):
            return None
        taken, self.free_slots = self.free_slots[:need_size], self.free_slots[need_size:]
        for slot in taken:
            self._is_free[slot] = False
        return taken

    def free(self, req_pool_indices: int | list[int]) -> None:
        slots = [req_pool_indices] if isinstance(req_pool_indices, int) else list(req_pool_indices)
        for slot in slots:
            if slot == PADDING_SLOT:
                raise PaddingSlotError("request slot 0 is the padding request and cannot be freed")
            if not 0 < slot <= self.size:
                raise IndexContractError(f"request slot {slot} is outside [1, {self.size}]")
            if self._is_free[slot] or slots.count(slot) > 1:
                raise DoubleFreeError(f"request slot {slot} is already free")
        for slot in slots:
            self._is_free[slot] = True
            self.req_to_token[slot].zero_()
            self.free_slots.append(slot)

    def write(self, req_pool_idx: int, start: int, locs: torch.Tensor) -> None:
        """Record the full KV slots of positions ``start .. start + len(locs) - 1`` of one request."""
        check_index("locs", locs, device=self.device)
        if not 0 < req_pool_idx <= self.size or self._is_free[req_pool_idx]:
            raise IndexContractError(f"request slot {req_pool_idx} is not allocated")
        end = start + locs.numel()
        if start < 0 or end > self.max_context_len:
            raise IndexContractError(f"positions [{start}, {end}) do not fit in max_context_len={self.max_context_len}")
        self.req_to_token[req_pool_idx, start:end] = locs

    def write_tokens(self, req_pool_indices: list[int], positions: list[int], locs: torch.Tensor) -> None:
        """Record one full KV slot per ``(request slot, position)`` pair in a single scatter: a decode
        step's tokens, one per request, without a tensor op per request."""
        check_index("locs", locs, device=self.device)
        if not len(req_pool_indices) == len(positions) == locs.numel():
            raise IndexContractError(
                f"write_tokens: {len(req_pool_indices)} request slots, {len(positions)} "
                f"positions and {locs.numel()} locs"
            )
        if not req_pool_indices:
            return
        for slot in req_pool_indices:
            if not 0 < slot <= self.size or self._is_free[slot]:
                raise IndexContractError(f"request slot {slot} is not allocated")
        if min(positions) < 0 or max(positions) >= self.max_context_len:
            raise IndexContractError(
                f"positions {min(positions)}..{max(positions)} do not fit in max_context_len={self.max_context_len}"
            )
        width = self.max_context_len
        flat = torch.tensor(
            [slot * width + pos for slot, pos in zip(req_pool_indices, positions)],
            dtype=torch.int64,
            device=self.device,
        )
        self.req_to_token.view(-1)[flat] = locs

    def read_tokens(self, ranges: list[tuple[int, int, int]]) -> torch.Tensor:
        """The slots of positions ``[start, end)`` of each ``(request slot, start, end)``, concatenated,
        in one gather."""
        width, flat = self.max_context_len, []
        for slot, start, end in ranges:  # checked and flattened in one pass: a decode step reads one per request
            if not (0 <= slot <= self.size and 0 <= start <= end <= width):
                raise IndexContractError(
                    f"read_tokens: request slot {slot}, positions [{start}, {end}) are outside "
                    f"{self.size} slots x max_context_len={width}"
                )
            base = slot * width
            if end - start == 1:
                flat.append(base + start)
            else:
                flat.extend(range(base + start, base + end))
        return self.req_to_token.view(-1).index_select(0, torch.tensor(flat, dtype=torch.int64, device=self.device))

    def last_slots(self, req_pool_indices: list[int], lengths: list[int]) -> list[int]:
        """The full slot of each request's last token (position ``length - 1``), -1 where it has none yet:
        where a paged allocation continues."""
        ranges = [(slot, n - 1, n) for slot, n in zip(req_pool_indices, lengths) if n > 0]
        held = iter(self.read_tokens(ranges).tolist()) if ranges else iter(())
        return [next(held) if n > 0 else -1 for n in lengths]
