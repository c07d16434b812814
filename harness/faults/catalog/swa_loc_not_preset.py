"""#23552: the decode graph is captured without the SWA loc buffer pre-set."""

from __future__ import annotations

from harness.faults.base import Fault, Patch
from harness.graph.buffers import DecodeInputs
from harness.graph.runner import GraphRunner


def capture_inputs_without_swa_loc(self: GraphRunner, bs: int, kv_len: int | None) -> DecodeInputs:
    """Twin of ``GraphRunner._capture_inputs``: ``out_cache_loc_swa`` left out of the capture batch."""
    inputs = self.buffers.view(bs, kv_len)
    inputs.out_cache_loc_swa = None  # the captured body falls back to translating full -> SWA itself
    return inputs


FAULT = Fault(
    id="swa-loc-not-preset",
    seed="#23552",
    breaks="capture records the slow path: the graph gathers full->SWA itself although the loc was "
    "already translated for the batch and copied into the static out_cache_loc_swa buffer",
    user_sees="slower decode: an extra mapping gather in every replayed forward",
    invariant="design: one full->SWA translation of the write loc per forward",
    structural_only="#23552's effect is an extra mapping gather per replayed forward (speed); the slots written stay correct",
    patches=(Patch(GraphRunner, "_capture_inputs", capture_inputs_without_swa_loc),),
)
