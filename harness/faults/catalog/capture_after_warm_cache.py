"""#25824: the warm-up run fills the memo, so capture hits it and never records the gather."""

from __future__ import annotations

from harness.engine.model_runner import ModelRunner
from harness.faults.base import Fault, Patch
from harness.faults.catalog.swa_loc_not_preset import capture_inputs_without_swa_loc
from harness.graph.runner import GraphRunner


def capture_run_keeps_memo(self: ModelRunner) -> None:
    """Twin of ``ModelRunner.begin_capture_run``: capture runs start with whatever the memo holds."""


FAULT = Fault(
    id="capture-after-warm-cache",
    seed="#25824",
    breaks="the runner as #25824 had it before its fix: the captured body translates the write loc through "
    "the memo (no pre-set buffer) and neither run starts with a flushed memo, so capture hits the warm-up's "
    "entry for the static loc buffer and the gather is never recorded",
    user_sees="every replayed decode writes K/V at the warm-up's SWA slots: accuracy collapses with graphs on",
    invariant="1: graph replay equals eager execution",
    patches=(
        Patch(GraphRunner, "_capture_inputs", capture_inputs_without_swa_loc),
        Patch(ModelRunner, "begin_capture_run", capture_run_keeps_memo),
    ),
)
