"""#24138 review: the backend reads an SWA loc kept as pool state by an earlier batch."""

from __future__ import annotations

import torch

from harness.engine.attention_backend import PoolAttentionBackend
from harness.faults.base import Fault, Patch


def _swa_write_loc_from_pool_state(self: PoolAttentionBackend, layer, batch) -> torch.Tensor | None:
    """Twin of ``PoolAttentionBackend._swa_write_loc``: a pool attribute set once and never cleared."""
    if not layer.is_sliding:
        return None
    if getattr(self.pool, "swa_loc", None) is None:
        self.pool.swa_loc = batch.out_cache_loc_swa
    return self.pool.swa_loc


FAULT = Fault(
    id="stale-pool-attribute-loc",
    seed="#24138 (review)",
    breaks="the SWA write loc comes from a pool attribute written by an earlier batch and never cleared, "
    "not from the batch itself",
    user_sees="a batch writes K/V at the previous batch's SWA slots (or fails on a shape mismatch)",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    patches=(Patch(PoolAttentionBackend, "_swa_write_loc", _swa_write_loc_from_pool_state),),
)
