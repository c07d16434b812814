"""Count aten ops inside a block, optionally only those that read given tensors.

Suites use it to state design properties as numbers, e.g. "one gather from the full->SWA mapping per
forward, whatever the number of SWA layers". Counting happens at the dispatcher, below Python, so it
also sees ops replayed from a CPU graph tape.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.op_args import iter_tensors


class OpCounter(TorchDispatchMode):
    """``with OpCounter(reads={"mapping": t}) as c: ...`` then ``c.counts["aten.index"]``, ``c.reads["mapping"]``.

    ``counts`` is keyed by overload packet (``aten.index``, ``aten.mm``, ...). ``reads[name]`` counts
    ops that took a tensor sharing storage with the watched tensor as an input; view ops (slicing,
    reshaping) do not read data and are not counted as reads.
    """

    def __init__(self, reads: Mapping[str, torch.Tensor] | None = None) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.reads: Counter[str] = Counter()
        self._watched = {name: t.untyped_storage().data_ptr() for name, t in (reads or {}).items()}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.counts[str(func.overloadpacket)] += 1
        if self._watched and not func.is_view:
            inputs = {t.untyped_storage().data_ptr() for t in iter_tensors((args, kwargs))}
            for name, ptr in self._watched.items():
                if ptr in inputs:
                    self.reads[name] += 1
        return func(*args, **kwargs)

    def total(self) -> int:
        return sum(self.counts.values())
