"""#26152: window indices are translated through the memo without flushing it before and after."""

from __future__ import annotations

import torch

from harness.engine.attention_backend import PoolAttentionBackend
from harness.faults.base import Fault, Patch


def _translate_window_unflushed(self: PoolAttentionBackend, full_slots: torch.Tensor) -> torch.Tensor:
    """Twin of ``PoolAttentionBackend.translate_window`` without the two ``invalidate_loc_cache()``."""
    return self.pool.translate_loc_from_full_to_swa(full_slots)


FAULT = Fault(
    id="window-indices-pollute-memo",
    seed="#26152",
    breaks="freshly built window_kv_indices go through the memo while it holds another key, and stay "
    "cached afterwards",
    user_sees="warning noise on every forward; on a key collision the next translation reuses wrong slots",
    invariant="6: no warning is logged on a clean forward",
    patches=(Patch(PoolAttentionBackend, "translate_window", _translate_window_unflushed),),
)
