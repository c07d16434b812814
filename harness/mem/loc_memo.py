"""The full -> SWA translation memo and the three rules that keep it honest.

Many SWA layers write the same batch locations, so the gather through ``full_to_swa_index_mapping``
runs once per forward, not once per layer (SGLang #25824). A memo keyed on a tensor's identity is a
cache of Python-side decisions, so it needs rules, all of which live here:

1. The key is ``(data_ptr(), numel())``: ``data_ptr()`` includes a view's offset, so equal-length
   views of one storage do not collide (``untyped_storage().data_ptr()`` would, #25824).
2. Whoever changes what a key would translate to flushes it: every mapping mutation, every forward
   start before the graph decision (#26152), every capture run (#25824).
3. Freshly built index tensors (window indices) are translated between two flushes (#26152), so they
   neither trip the stale-key warning nor stay cached for the next ``out_cache_loc``.

A translation that meets a new key although nobody flushed since the last one logs
``STALE_KEY_WARNING``; on a clean forward that never happens (docs/FAULTS.md, invariant 6).
"""

from __future__ import annotations

import logging

import torch

from harness.seams import seam

logger = logging.getLogger(__name__)

STALE_KEY_WARNING = "translate_loc_from_full_to_swa: loc tensor changed without invalidate_loc_cache()"


class SwaLocMemo:
    def __init__(self) -> None:
        self.key: tuple[int, int] | None = None
        self.value: torch.Tensor | None = None

    def invalidate(self) -> None:
        self.key = None
        self.value = None

    @seam("storage-ptr-cache-key")
    def key_of(self, loc: torch.Tensor) -> tuple[int, int]:
        return (loc.data_ptr(), loc.numel())

    def translate(self, mapping: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
        """``mapping[loc]``, computed once per key (rule 1)."""
        key = self.key_of(loc)
        if key != self.key:
            if self.key is not None:
                logger.warning("%s (cached key %s, new key %s)", STALE_KEY_WARNING, self.key, key)
            self.value = mapping[loc]
            self.key = key
        return self.value

    @seam("window-indices-pollute-memo")
    def translate_fresh(self, mapping: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
        """A freshly built index tensor, translated between two flushes (rule 3)."""
        self.invalidate()
        swa = self.translate(mapping, full)
        self.invalidate()
        return swa
