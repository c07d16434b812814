"""#26152: window indices are translated through the memo without flushing it before and after."""

from __future__ import annotations

import torch

from harness.faults.base import Fault, Patch
from harness.mem.loc_memo import SwaLocMemo


def _translate_fresh_unflushed(self: SwaLocMemo, mapping: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """Twin of ``SwaLocMemo.translate_fresh`` without the two flushes."""
    return self.translate(mapping, full)


FAULT = Fault(
    id="window-indices-pollute-memo",
    seed="#26152",
    breaks="freshly built window_kv_indices go through the memo while it holds another key, and stay cached afterwards",
    user_sees="warning noise on every forward; on a key collision the next translation reuses wrong slots",
    invariant="6: no warning is logged on a clean forward",
    structural_only="the visible effect is a stale-key warning on every forward; a wrong slot needs a memo key collision "
    "(a window-index tensor's address and length reused by the next out_cache_loc), which no run has been seen to hit",
    patches=(Patch(SwaLocMemo, "translate_fresh", _translate_fresh_unflushed),),
)
