"""The harness's pool and allocator interfaces over real SGLang's ``SWAKVPool`` and
``SWATokenToKVPoolAllocator``, so the harness's engine, scheduler and graph runner run on SGLang's
memory code. Every adapter method is a thin translation; behaviour is SGLang's.

The API moved between releases; each adapter asks ``capabilities`` what the installed SGLang has (up to
0.5.12.post1 the SWA write ids are pool state, 0.5.13 takes ``set_kv_buffer(loc, swa_loc=...)``, 0.5.14 on a
``KVWriteLoc``; ``free_full`` arrived in 0.5.19, the segment frees in 0.5.20, grouped frees in 0.5.18) and a method it
lacks is a skip that names it. Paged allocation runs as a Triton kernel up to 0.5.21: a skip naming it CPU-unreachable.

Where the two designs differ, the adapter follows SGLang's own callers:
* 0.5.23 has no translation memo (the write loc is translated once per forward by its KV-loc plan),
  so ``invalidate_loc_cache`` has nothing to flush and translation is a plain gather.
* SGLang keeps slot ids as int64; the harness engine carries int32. The adapter converts at this
  boundary, in both directions, and nowhere else.
* SGLang's ``free`` requires every slot to still hold its SWA peer (its scheduler frees slots that
  left the window with ``free_full``); the harness's ``free`` takes any owned slots, so the adapter
  splits them the way SGLang's scheduler does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.mem.index import LOC_DTYPE
from harness.targets.sglang.capabilities import method, module, on_cpu, takes


@dataclass(frozen=True)
class _Layer:
    """What SGLang's ``set_kv_buffer`` reads of its ``RadixAttention`` layer argument."""

    layer_id: int


def _long(index: torch.Tensor) -> torch.Tensor:
    return index.to(torch.int64)


class SGLangPoolAdapter:
    def __init__(self, pool) -> None:  # sglang.srt.mem_cache.swa_memory_pool.SWAKVPool
        self.sglang = pool
        # 0.5.14 on: one KVWriteLoc argument; before, a keyword (0.5.13) or pool state (see set_kv_buffer).
        self._write_loc = getattr(module("sglang.srt.mem_cache.memory_pool"), "KVWriteLoc", None)
        self.device = torch.device(pool.device)
        self.size, self.size_swa, self.page_size, self.dtype = pool.size, pool.size_swa, pool.page_size, pool.dtype
        self.full_kv_pool, self.swa_kv_pool = pool.full_kv_pool, pool.swa_kv_pool  # each has k_buffer / v_buffer lists
        self.layers_mapping = pool.layers_mapping

    @property
    def full_to_swa_index_mapping(self) -> torch.Tensor:
        return self.sglang.full_to_swa_index_mapping

    def is_swa_layer(self, layer_id: int) -> bool:
        return self.layers_mapping[layer_id][1]

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.sglang.get_key_buffer(layer_id)

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.sglang.get_value_buffer(layer_id)

    def invalidate_loc_cache(self) -> None:
        """Nothing to flush: 0.5.23 translates once per forward and keeps no memo."""

    def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
        return self.sglang.translate_loc_from_full_to_swa(_long(kv_indices)).to(LOC_DTYPE)

    translate_fresh_loc = translate_loc_from_full_to_swa  # without a memo a fresh tensor needs no flushes

    def set_kv_buffer(
        self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, swa_loc: torch.Tensor | None = None
    ) -> None:
        """SGLang's write: a ``KVWriteLoc`` whose ``swa_loc`` is set for sliding layers."""
        if self.is_swa_layer(layer_id) and swa_loc is None:
            swa_loc = self.translate_loc_from_full_to_swa(loc)
        loc, swa_loc = _long(loc), None if swa_loc is None else _long(swa_loc)
        if self._write_loc is not None:
            self.sglang.set_kv_buffer(_Layer(layer_id), self._write_loc(loc=loc, swa_loc=swa_loc), k, v)
        elif takes(self.sglang.set_kv_buffer, "swa_loc"):
            self.sglang.set_kv_buffer(_Layer(layer_id), loc, k, v, swa_loc=swa_loc)
        else:  # up to 0.5.12.post1 the SWA ids are pool state, set by the model runner for each forward
            self.sglang.set_swa_loc(swa_loc)
            try:
                self.sglang.set_kv_buffer(_Layer(layer_id), loc, k, v)
            finally:
                self.sglang.set_swa_loc(None)


class _FullAllocatorView:
    """``is_allocated`` over SGLang's token allocator, for the accounting audit."""

    def __init__(self, allocator) -> None:
        self.sglang = allocator

    def is_allocated(self, index: torch.Tensor) -> torch.Tensor:
        free = torch.cat([self.sglang.free_pages, self.sglang.release_pages])
        return ~torch.isin(_long(index), free)


class SGLangAllocatorAdapter:
    def __init__(self, allocator) -> None:  # sglang.srt.mem_cache.allocator.swa.SWATokenToKVPoolAllocator
        self.sglang = allocator
        self.size, self.size_swa, self.page_size = allocator.size_full, allocator.size_swa, allocator.page_size
        self.device = torch.device(allocator.device)
        self.full_attn_allocator = _FullAllocatorView(allocator.full_attn_allocator)
        self.swa_attn_allocator = allocator.swa_attn_allocator  # SGLang's own; suites watch what is handed back

    @property
    def full_to_swa_index_mapping(self) -> torch.Tensor:
        return self.sglang.full_to_swa_index_mapping

    @full_to_swa_index_mapping.setter
    def full_to_swa_index_mapping(self, mapping: torch.Tensor) -> None:
        self.sglang.full_to_swa_index_mapping = mapping

    def register_mapping(self) -> None:
        """Hand the (possibly rebuilt) mapping to the pool again, as SGLang's allocator does at init."""
        self.sglang.get_kvcache().register_mapping(self.sglang.full_to_swa_index_mapping)

    def full_available_size(self) -> int:
        return self.sglang.full_available_size()

    def swa_available_size(self) -> int:
        return self.sglang.swa_available_size()

    def available_size(self) -> int:
        return self.sglang.available_size()

    def alloc(self, need_size: int) -> torch.Tensor | None:
        if self.page_size == 1:
            out = self.sglang.alloc(need_size)
            return None if out is None else out.to(LOC_DTYPE)
        return self.alloc_extend([0], [need_size], [-1])  # paged: one fresh request of need_size tokens

    def _lens(self, values: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        cpu = torch.tensor(list(values), dtype=torch.int64)
        return cpu.to(self.device), cpu

    def alloc_extend(
        self, prefix_lens: Sequence[int], seq_lens: Sequence[int], last_loc: Sequence[int]
    ) -> torch.Tensor | None:
        """SGLang's scheduler: ``alloc`` of the batch's new tokens at page size 1, ``alloc_extend`` above."""
        if self.page_size == 1:
            return self.alloc(sum(seq_lens) - sum(prefix_lens))
        (prefix, prefix_cpu), (seq, seq_cpu) = self._lens(prefix_lens), self._lens(seq_lens)
        last = self._lens(last_loc)[0]
        with on_cpu("paged alloc_extend"):
            out = self.sglang.alloc_extend(prefix, prefix_cpu, seq, seq_cpu, last, sum(seq_lens) - sum(prefix_lens))
        return None if out is None else out.to(LOC_DTYPE)

    def alloc_extend_swa_tail(
        self, prefix_len: int, seq_len: int, last_loc: int, swa_tail_len: int
    ) -> torch.Tensor | None:
        (prefix, prefix_cpu), (seq, seq_cpu) = self._lens([prefix_len]), self._lens([seq_len])
        with on_cpu("alloc_extend_swa_tail"):
            out = method(self.sglang, "alloc_extend_swa_tail")(
                prefix, prefix_cpu, seq, seq_cpu, self._lens([last_loc])[0], seq_len - prefix_len, swa_tail_len
            )
        return None if out is None else out.to(LOC_DTYPE)

    def alloc_decode(self, seq_lens: Sequence[int], last_loc: Sequence[int]) -> torch.Tensor | None:
        if self.page_size == 1:
            return self.alloc(len(seq_lens))
        seq, seq_cpu = self._lens(seq_lens)
        with on_cpu("paged alloc_decode"):
            out = self.sglang.alloc_decode(seq, seq_cpu, self._lens(last_loc)[0])
        return None if out is None else out.to(LOC_DTYPE)

    def free_full(self, free_index: torch.Tensor) -> None:
        method(self.sglang, "free_full")(_long(free_index))

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        method(self.sglang, "free_segment")(_long(free_index), start_pos=start_pos)

    def free_swa_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        method(self.sglang, "free_swa_segment")(_long(free_index), start_pos=start_pos)

    def free_full_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        method(self.sglang, "free_full_segment")(_long(free_index), start_pos=start_pos)

    def free_group_begin(self) -> None:
        method(self.sglang, "free_group_begin")()

    def free_group_end(self) -> None:
        method(self.sglang, "free_group_end")()

    def free(self, free_index: torch.Tensor) -> None:
        if free_index.numel() == 0:
            return
        index = _long(free_index)
        with on_cpu("paged free"):
            if not hasattr(self.sglang, "free_full"):  # before 0.5.19 ``free`` skips slots without an SWA peer itself
                self.sglang.free(index)
                return
            holds_swa = self.sglang.full_to_swa_index_mapping[index] > 0
            self.sglang.free(index[holds_swa])
            self.sglang.free_full(index[~holds_swa])

    def free_swa(self, free_index: torch.Tensor) -> None:
        with on_cpu("paged free_swa"):
            self.sglang.free_swa(_long(free_index))

    def set_full_to_swa_mapping(self, full_index: torch.Tensor, swa_index: torch.Tensor) -> None:
        method(self.sglang, "set_full_to_swa_mapping")(_long(full_index), _long(swa_index))

    def clear(self) -> None:
        self.sglang.clear()
