"""#22470: with ``page_size > W`` the window slide reached ``page_floor(seq_len)``, and the insert had no
case for a key whose every new token was already out of the window: it added them as a live node."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.faults.base import Fault, Patch
from harness.faults.catalog.swa_frontier_tombstones_last_leaf import swa_keep_from
from harness.mem.radix_cache import RadixCache, TreeNode


def _add_new(
    self: RadixCache, parent: TreeNode, key: Sequence[int], values: torch.Tensor, pos: int, swa_evicted_seqlen: int
) -> tuple[TreeNode, int]:
    """Twin of ``RadixCache._add_new``: no case for ``swa_evicted_seqlen >= len(key)``; the new tokens fall
    through to a live node."""
    end = len(key)
    if pos < swa_evicted_seqlen < end:
        parent = self._new_child(parent, key, values, pos, swa_evicted_seqlen, tombstone=True)
        pos = swa_evicted_seqlen
    return self._new_child(parent, key, values, pos, end, tombstone=False), end


FAULT = Fault(
    id="swa-frontier-reaches-insert-boundary",
    seed="#22470",
    breaks="slide_window frees SWA up to page_floor(kv_len - W + 1), which with page_size > W reaches the insert "
    "boundary, and _add_new turns tokens that are all out of the window into a live node",
    user_sees="the SWA pool's evictable count grows past what it holds (negative usage), a later request matches "
    "into SWA slots that are free or another request's, and evicting the node frees them twice",
    invariant="accounting: per pool, free + evictable + protected + running = size",
    patches=(Patch(RadixCache, "swa_keep_from", swa_keep_from), Patch(RadixCache, "_add_new", _add_new)),
)
