"""#26152: the per-forward memo flush runs only on the eager path, after the can-run-graph check."""

from __future__ import annotations

import torch

from harness.engine.forward_batch import ForwardBatch
from harness.engine.model_runner import ModelRunner
from harness.faults.base import Fault, Patch


@torch.no_grad()
def _forward_flushing_on_eager_path_only(self: ModelRunner, batch: ForwardBatch) -> torch.Tensor:
    """Twin of ``ModelRunner.forward`` with ``invalidate_loc_cache()`` moved after the graph decision."""
    if self.graph_runner is not None and self.graph_runner.can_run(batch, is_decode=batch.forward_mode.is_decode()):
        return self._forward_graph(batch)
    self.pool.invalidate_loc_cache()
    return self._forward_eager(batch)


FAULT = Fault(
    id="invalidate-after-graph-check",
    seed="#26152",
    breaks="graph forwards start with the memo still keyed on the previous forward's loc tensor",
    user_sees="spurious 'loc tensor changed' warnings on graph forwards; a silent stale hit when the key collides",
    invariant="6: no warning is logged on a clean forward",
    patches=(Patch(ModelRunner, "forward", _forward_flushing_on_eager_path_only),),
)
