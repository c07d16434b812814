"""Hybrid pool: a full sub-pool for full-attention layers and a smaller SWA sub-pool.

The translation ``full slot -> SWA slot`` goes through a per-forward memo (the design of SGLang
#25824 with the fixes of #26152); its rules live in ``loc_memo.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.mem.errors import IndexContractError, PoolError
from harness.mem.index import LOC_DTYPE, check_index
from harness.mem.kv_pool import MHATokenToKVPool
from harness.mem.loc_memo import SwaLocMemo
from harness.seams import seam


class SWAKVPool:
    """Routes each layer to its sub-pool and translates full slots to SWA slots for sliding layers."""

    def __init__(
        self,
        size: int,
        size_swa: int,
        *,
        dtype: torch.dtype,
        head_num: int,
        head_dim: int,
        swa_attention_layer_ids: Sequence[int],
        full_attention_layer_ids: Sequence[int],
        page_size: int = 1,
        device: str | torch.device = "cpu",
    ) -> None:
        overlap = set(swa_attention_layer_ids) & set(full_attention_layer_ids)
        if overlap:
            raise PoolError(f"layers {sorted(overlap)} are listed as both sliding and full attention")
        self.size = size
        self.size_swa = size_swa
        self.page_size = page_size
        self.dtype = dtype
        self.device = torch.device(device)
        common = dict(dtype=dtype, head_num=head_num, head_dim=head_dim, page_size=page_size, device=device)
        self.full_kv_pool = MHATokenToKVPool(size, layer_num=len(full_attention_layer_ids), **common)
        self.swa_kv_pool = MHATokenToKVPool(size_swa, layer_num=len(swa_attention_layer_ids), **common)
        self.layers_mapping: dict[int, tuple[int, bool]] = {}
        for local_id, layer_id in enumerate(full_attention_layer_ids):
            self.layers_mapping[layer_id] = (local_id, False)
        for local_id, layer_id in enumerate(swa_attention_layer_ids):
            self.layers_mapping[layer_id] = (local_id, True)
        self.full_to_swa_index_mapping: torch.Tensor | None = None
        self.loc_memo = SwaLocMemo()

    # -- layer routing -------------------------------------------------------------------------

    def _route(self, layer_id: int) -> tuple[MHATokenToKVPool, int, bool]:
        try:
            local_id, is_swa = self.layers_mapping[layer_id]
        except KeyError:
            raise PoolError(f"layer {layer_id} is not in this pool (layers {sorted(self.layers_mapping)})") from None
        return (self.swa_kv_pool if is_swa else self.full_kv_pool), local_id, is_swa

    def is_swa_layer(self, layer_id: int) -> bool:
        return self._route(layer_id)[2]

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        pool, local_id, _ = self._route(layer_id)
        return pool.get_key_buffer(local_id)

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        pool, local_id, _ = self._route(layer_id)
        return pool.get_value_buffer(local_id)

    # -- translation ---------------------------------------------------------------------------

    def register_mapping(self, mapping: torch.Tensor) -> None:
        """Adopt the allocator's mapping tensor (one entry per full slot plus the trailing -1 sentinel)."""
        check_index("full_to_swa_index_mapping", mapping, device=self.device)
        expected = self.full_kv_pool.num_slots + 1
        if mapping.numel() != expected:
            raise IndexContractError(f"full_to_swa_index_mapping must have {expected} entries, got {mapping.numel()}")
        self.full_to_swa_index_mapping = mapping
        self.on_mapping_changed("register_mapping")

    @seam(
        "no-invalidate-on-mutation",
        "no-invalidate-on-alloc",
        "no-invalidate-on-free",
        "no-invalidate-on-clear",
        "no-invalidate-on-set-mapping",
        "no-invalidate-on-register-mapping",
    )
    def on_mapping_changed(self, mutation: str) -> None:
        """Every change of the mapping (the allocator's five mutations, a new mapping) ends here: whatever
        the memo holds was translated through the old mapping (loc_memo.py, rule 2)."""
        self.invalidate_loc_cache()

    def invalidate_loc_cache(self) -> None:
        self.loc_memo.invalidate()

    def _mapping(self) -> torch.Tensor:
        if self.full_to_swa_index_mapping is None:
            raise PoolError("no full_to_swa_index_mapping registered: build the SWATokenToKVPoolAllocator first")
        return self.full_to_swa_index_mapping

    def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
        """Full slots -> SWA slots (int32), memoised; -1 maps to -1, a slot whose SWA slot was freed to 0."""
        mapping = self._mapping()
        check_index("kv_indices", kv_indices, device=self.device)
        return self.loc_memo.translate(mapping, kv_indices)

    def translate_fresh_loc(self, full_slots: torch.Tensor) -> torch.Tensor:
        """Translate an index tensor built for this forward (window keys), leaving the memo empty."""
        mapping = self._mapping()
        check_index("full_slots", full_slots, device=self.device)
        return self.loc_memo.translate_fresh(mapping, full_slots)

    # -- writes --------------------------------------------------------------------------------

    def set_kv_buffer(
        self,
        layer_id: int,
        loc: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        swa_loc: torch.Tensor | None = None,
    ) -> None:
        """Write K/V for tokens at full slots ``loc``.

        On a sliding layer the SWA slots come from ``swa_loc`` when the caller pre-translated them once
        for the whole forward, and otherwise from the memoised translation of ``loc``.
        """
        pool, local_id, is_swa = self._route(layer_id)
        if not is_swa:
            pool.set_kv_buffer(local_id, loc, k, v)
            return
        if swa_loc is None:
            swa_loc = self.translate_loc_from_full_to_swa(loc)
        else:
            check_index("swa_loc", swa_loc, device=self.device, dtype=LOC_DTYPE)
        pool.set_kv_buffer(local_id, swa_loc, k, v)
