"""#26152: the per-forward memo flush runs only on the eager path, after the can-run-graph check."""

from __future__ import annotations

import torch

from harness.engine.forward_batch import ForwardBatch
from harness.engine.model_runner import ModelRunner
from harness.faults.base import Fault, Patch

_forward_eager = ModelRunner._forward_eager


def _no_flush_before_graph_check(self: ModelRunner) -> None:
    """Twin of ``ModelRunner._begin_forward``: nothing happens before the graph decision."""


def _eager_flushing_first(self: ModelRunner, batch: ForwardBatch) -> torch.Tensor:
    """Twin of ``ModelRunner._forward_eager``: the flush happens here, on the eager path only."""
    self.pool.invalidate_loc_cache()
    return _forward_eager(self, batch)


FAULT = Fault(
    id="invalidate-after-graph-check",
    seed="#26152",
    breaks="graph forwards start with the memo still keyed on the previous forward's loc tensor",
    user_sees="spurious 'loc tensor changed' warnings on graph forwards; a silent stale hit when the key collides",
    invariant="6: no warning is logged on a clean forward",
    patches=(
        Patch(ModelRunner, "_begin_forward", _no_flush_before_graph_check),
        Patch(ModelRunner, "_forward_eager", _eager_flushing_first),
    ),
)
