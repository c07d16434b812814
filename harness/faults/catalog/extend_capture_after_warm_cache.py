"""#25824 on the extend runner: the warm-up fills the memo, so capture hits it and freezes its slots."""

from __future__ import annotations

import dataclasses

from harness.engine.model_runner import ModelRunner
from harness.faults.base import Fault, Patch
from harness.faults.catalog.capture_after_warm_cache import capture_run_keeps_memo
from harness.graph.extend_buffers import ExtendInputs
from harness.graph.extend_runner import ExtendGraphRunner


def _capture_inputs_without_swa_loc(self: ExtendGraphRunner, num_tokens: int) -> ExtendInputs:
    """Twin of ``ExtendGraphRunner._capture_inputs``: the captured body translates the write loc itself."""
    return dataclasses.replace(self.buffers.view(num_tokens), out_cache_loc_swa=None)


FAULT = Fault(
    id="extend-capture-after-warm-cache",
    seed="#25824",
    breaks="the extend runner as the decode runner was before #25824's fix: the captured body translates the "
    "write loc through the memo and no capture run starts from a flushed memo, so capture hits the warm-up's "
    "entry for the static loc buffer and the gather is never recorded",
    user_sees="every prefill through an extend graph writes its sliding-layer K/V at the warm-up's SWA slots "
    "(the padding slot): prompts lose their window, answers degrade with graphs on",
    invariant="1: graph replay equals eager execution",
    patches=(
        Patch(ExtendGraphRunner, "_capture_inputs", _capture_inputs_without_swa_loc),
        Patch(ModelRunner, "begin_capture_run", capture_run_keeps_memo),
    ),
)
