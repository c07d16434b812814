"""#24138 review: a path reads an SWA write loc kept as pool state by an earlier batch, never cleared."""

from __future__ import annotations

import torch

from harness.engine.attention_backend import PoolAttentionBackend
from harness.faults.base import Fault, Patch


def _swa_write_loc_from_pool_state(self: PoolAttentionBackend, layer, batch) -> torch.Tensor | None:
    """Twin of ``PoolAttentionBackend._swa_write_loc``: the extend path leaves its loc on the pool, and the
    decode path takes the pool's loc whenever it has the right shape, as the reviewed code did."""
    if not layer.is_sliding:
        return None
    own = batch.out_cache_loc_swa
    if self.extend is not None:
        self.pool.swa_loc = own  # set here, never cleared
        return own
    stale = getattr(self.pool, "swa_loc", None)
    return stale if stale is not None and own is not None and stale.shape == own.shape else own


FAULT = Fault(
    id="stale-pool-attribute-loc",
    seed="#24138 (review)",
    breaks="the extend path stores its SWA write loc as pool state and the decode path reads that attribute "
    "instead of the batch's own loc whenever the shapes agree; nothing ever clears it",
    user_sees="a decode batch with as many tokens as the last extend batch writes its sliding-layer K/V at that "
    "batch's SWA slots: silent corruption, no shape error",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    patches=(Patch(PoolAttentionBackend, "_swa_write_loc", _swa_write_loc_from_pool_state),),
)
