"""Per-layer K and V buffers of one attention kind (full or sliding)."""

from __future__ import annotations

import torch

from harness.mem.errors import PoolError
from harness.mem.index import check_index

KV_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class MHATokenToKVPool:
    """K/V buffers ``[size + page_size, kv_heads, head_dim]`` per layer; slot 0 (page 0) is padding.

    Padded tokens of a graph batch write to slot 0, so its contents are garbage by design and no
    reader may rely on them.
    """

    def __init__(
        self,
        size: int,
        *,
        dtype: torch.dtype,
        head_num: int,
        head_dim: int,
        layer_num: int,
        page_size: int = 1,
        device: str | torch.device = "cpu",
    ) -> None:
        if dtype not in KV_DTYPES:
            raise PoolError(f"KV dtype must be one of {KV_DTYPES}, got {dtype}")
        if size < 1 or page_size < 1 or size % page_size:
            raise PoolError(f"pool size {size} must be a positive multiple of page_size {page_size}")
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.head_num = head_num
        self.head_dim = head_dim
        self.layer_num = layer_num
        self.device = torch.device(device)
        self.num_slots = size + page_size
        shape = (self.num_slots, head_num, head_dim)
        self.k_buffer = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(layer_num)]
        self.v_buffer = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(layer_num)]

    def _check_layer(self, layer_id: int) -> None:
        if not 0 <= layer_id < self.layer_num:
            raise PoolError(f"layer {layer_id} is outside this pool's {self.layer_num} layers")

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        self._check_layer(layer_id)
        return self.k_buffer[layer_id]

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        self._check_layer(layer_id)
        return self.v_buffer[layer_id]

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write one K/V row per location; values are cast to the pool dtype as SGLang's pools do."""
        self._check_layer(layer_id)
        check_index("loc", loc, device=self.device)
        expected = (loc.numel(), self.head_num, self.head_dim)
        if tuple(k.shape) != expected or tuple(v.shape) != expected:
            raise PoolError(
                f"set_kv_buffer expects k and v of shape {expected} (one row per loc), "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        self.k_buffer[layer_id][loc] = k.to(self.dtype)
        self.v_buffer[layer_id][loc] = v.to(self.dtype)
