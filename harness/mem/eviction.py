"""What a prefix cache's evictions took, measured on the slots the tree holds before and after each one.

Any ``PrefixCache`` (the harness's tree or SGLang's through its adapter) reports the slots its nodes hold
(``tree_slots``: every full slot, and the subset whose SWA KV is still live). One eviction's effect is read off those
two sets, so the count is the tree's own state, not a number the cache under test says about itself:

- ``full``: tokens whose full KV left the tree (their nodes were deleted);
- ``swa``: tokens whose live SWA KV left the tree, with their node or not;
- ``tombstoned``: of those, tokens whose full KV stayed: their node became an SWA tombstone.

A suite that claims a pool came under pressure asserts all three moved (``Evicted.all_moved``); the window slide
alone tombstones tokens too, but never through an eviction, so it cannot pass for pressure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.mem.contracts import PrefixCache, TreeSlots


@dataclass(frozen=True)
class Evicted:
    """Tokens an eviction (or a run of them) took from the tree, per kind (see the module docstring)."""

    full: int = 0
    swa: int = 0
    tombstoned: int = 0

    def __add__(self, other: Evicted) -> Evicted:
        return Evicted(self.full + other.full, self.swa + other.swa, self.tombstoned + other.tombstoned)

    @property
    def all_moved(self) -> bool:
        """Full KV and SWA KV were evicted, and some SWA KV was tombstoned (its full KV kept)."""
        return self.full > 0 and self.swa > 0 and self.tombstoned > 0

    @classmethod
    def between(cls, before: TreeSlots, after: TreeSlots) -> Evicted:
        """What left the tree from ``before`` to ``after``. An eviction only takes (``after``'s sets lie inside
        ``before``'s, live SWA inside full), so two counts are differences of sizes and one membership is read: of the
        slots whose SWA was live before, those whose full KV stayed, less those still live, were tombstoned. The
        membership is a mask over slot numbers, not ``torch.isin``: the engine measures every eviction, and on a tree
        of some thousand nodes sorts cost more than the eviction itself (issue 58)."""
        full = before.full.numel() - after.full.numel()
        swa = before.swa_live.numel() - after.swa_live.numel()
        if not before.swa_live.numel() or not after.full.numel():
            return cls(full, swa, 0)
        size = 1 + int(torch.maximum(before.swa_live.max(), after.full.max()))
        full_kept = _members(after.full, size).index_select(0, before.swa_live).sum()
        return cls(full, swa, int(full_kept) - after.swa_live.numel())


def _members(slots: torch.Tensor, size: int) -> torch.Tensor:
    """A boolean mask over slot numbers ``0 .. size - 1``: True where ``slots`` holds the number."""
    return torch.zeros(size, dtype=torch.bool, device=slots.device).index_fill_(0, slots, True)


def evict_measured(cache: PrefixCache, *, full_tokens: int, swa_tokens: int) -> Evicted:
    """``cache.evict`` and what it took."""
    before = cache.tree_slots()
    cache.evict(full_tokens=full_tokens, swa_tokens=swa_tokens)
    return Evicted.between(before, cache.tree_slots())
