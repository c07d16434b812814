"""GraphRunner: capture one decode graph per batch-size bucket, pad each batch up to its bucket, replay.

The runner knows nothing of models or pools: a *target* supplies the body to capture
(``graph_forward``), the eager per-batch preparation that must run before capture and before every
replay (``prepare_graph_metadata``, e.g. attention index buffers, as SGLang's attention backends
do), and a hook run before the warm-up and before the capture (``begin_capture_run``: whatever
Python-side state would otherwise be frozen into the graph, such as a memo, is reset there).

Optionally graphs are also keyed by a KV-length bucket: a CUDA attention kernel reads only each
row's real keys, but a torch reference kernel reads a fixed ``[bs, kv_len]`` block, so capturing
per (bs, kv_len) keeps a short sequence from paying for the longest one.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from harness.graph.backends import GraphBackend
from harness.graph.buffers import DecodeInputBuffers, DecodeInputs
from harness.seams import seam

logger = logging.getLogger(__name__)

DEFAULT_CAPTURE_BS: tuple[int, ...] = (1, 2, 4, 8, 12, *range(16, 257, 8))
"""SGLang's default decode buckets (up to 256)."""


def capture_bs_for(max_bs: int, candidates: Sequence[int] = DEFAULT_CAPTURE_BS) -> list[int]:
    buckets = sorted({bs for bs in candidates if 1 <= bs <= max_bs})
    if not buckets:
        raise ValueError(f"no capture bucket fits max_bs={max_bs} (candidates start at {min(candidates)})")
    return buckets


class DecodeGraphTarget(Protocol):
    def begin_capture_run(self) -> None:
        """Before the warm-up run and before the capture run: reset Python-side caches."""

    def prepare_graph_metadata(self, inputs: DecodeInputs) -> None:
        """Eager, outside the graph: fill the target's own static buffers from ``inputs``."""

    def graph_forward(self, inputs: DecodeInputs) -> torch.Tensor:
        """The captured body: logits ``[bs, vocab]`` for the batch in ``inputs``."""


def longest_seq_len(batch: Any) -> int:
    """The batch's longest row: from its host copy of ``seq_lens`` where it has one (an engine's ForwardBatch,
    as SGLang's ``seq_lens_cpu``), else read from the tensor (a host sync)."""
    host = getattr(batch, "seq_lens_cpu", None)
    return max(host) if host else int(batch.seq_lens.max())


class GraphRunner:
    def __init__(
        self,
        target: DecodeGraphTarget,
        backend: GraphBackend,
        *,
        max_bs: int,
        vocab_size: int,
        is_hybrid_swa: bool = False,
        device: str | torch.device = "cpu",
        logits_dtype: torch.dtype = torch.float32,
        capture_bs: Sequence[int] | None = None,
        kv_len_buckets: Sequence[int] | None = None,
    ) -> None:
        self.target = target
        self.backend = backend
        self.capture_bs = capture_bs_for(max_bs, capture_bs or DEFAULT_CAPTURE_BS)
        self.max_bs = self.capture_bs[-1]
        self.buffers = DecodeInputBuffers.create(
            self.max_bs, vocab_size, is_hybrid_swa=is_hybrid_swa, device=device, logits_dtype=logits_dtype
        )
        self.kv_len_buckets: list[int | None] = sorted(set(kv_len_buckets)) if kv_len_buckets else [None]
        self.graphs: dict[tuple[int, int | None], object] = {}
        self.ready = False  # captured, or set to capture each graph on first use
        self.lazy = False

    # -- bucket choice -------------------------------------------------------------------------

    def bucket_for(self, raw_bs: int) -> int:
        """The first captured bucket >= raw_bs."""
        i = bisect.bisect_left(self.capture_bs, raw_bs)
        if raw_bs < 1 or i == len(self.capture_bs):
            raise ValueError(f"batch size {raw_bs} has no bucket (buckets go up to {self.max_bs})")
        return self.capture_bs[i]

    def kv_bucket_for(self, batch: Any) -> int | None:
        """The first KV-length bucket that holds every row's keys (None when graphs are not keyed by it)."""
        if self.kv_len_buckets == [None]:
            return None
        longest = longest_seq_len(batch)
        i = bisect.bisect_left(self.kv_len_buckets, longest)
        if i == len(self.kv_len_buckets):
            raise ValueError(f"sequence length {longest} exceeds the largest KV bucket {self.kv_len_buckets[-1]}")
        return self.kv_len_buckets[i]

    def can_run(self, batch: Any, *, is_decode: bool = True) -> bool:
        if not (is_decode and self.ready and 1 <= batch.batch_size <= self.max_bs):
            return False
        return self.kv_len_buckets == [None] or longest_seq_len(batch) <= self.kv_len_buckets[-1]

    # -- capture -------------------------------------------------------------------------------

    def capture(self, *, lazy: bool = False) -> None:
        """Largest bucket first, as SGLang does, so smaller graphs reuse the pool's memory.

        ``lazy``: capture nothing now, each graph on the first batch that needs it, from reset buffers
        (as at start-up). Start-up then takes seconds, not the minute a large model's 30-odd captures
        take; but a graph captured mid-run sees a pool with live requests, which SGLang's never does.
        """
        self.ready, self.lazy = True, lazy
        if lazy:
            return
        for bs in reversed(self.capture_bs):
            for kv_len in reversed(self.kv_len_buckets):
                self.graphs[bs, kv_len] = self._capture_one(bs, kv_len)

    def graph_for(self, bs: int, kv_len: int | None) -> object:
        graph = self.graphs.get((bs, kv_len))
        if graph is None and self.lazy:
            self.buffers.reset()
            graph = self.graphs[bs, kv_len] = self._capture_one(bs, kv_len)
        return graph

    @seam("swa-loc-not-preset", "capture-after-warm-cache")
    def _capture_inputs(self, bs: int, kv_len: int | None) -> DecodeInputs:
        """The batch the graph is captured on: the static buffers, SWA loc pre-set (#23552)."""
        return self.buffers.view(bs, kv_len)

    def _capture_one(self, bs: int, kv_len: int | None) -> object:
        self.buffers.pad(0, bs)  # capture on an all-padding batch: writes go to the padding slot
        inputs = self._capture_inputs(bs, kv_len)
        self.target.prepare_graph_metadata(inputs)
        # Warm-up, then capture, each from a fresh start (#25824: see the target's begin_capture_run).
        self.target.begin_capture_run()
        with torch.no_grad():
            self.target.graph_forward(inputs)
        self.target.begin_capture_run()
        return self.backend.capture(lambda: self._body(inputs, bs), static_inputs=self.buffers.tensors())

    def _body(self, inputs: DecodeInputs, bs: int) -> torch.Tensor:
        logits = self.target.graph_forward(inputs)
        self.buffers.logits[:bs].copy_(logits)
        return self.buffers.logits[:bs]

    # -- replay --------------------------------------------------------------------------------

    def replay(self, batch: Any) -> torch.Tensor:
        """Logits of the ``raw_bs`` real rows; a view of the static logits buffer (valid until the next replay)."""
        raw_bs = batch.batch_size
        bs, kv_len = self.bucket_for(raw_bs), self.kv_bucket_for(batch)
        graph = self.graph_for(bs, kv_len)
        self.buffers.populate(batch, bs)
        self.target.prepare_graph_metadata(self.buffers.view(bs, kv_len))
        graph.replay(self.buffers.tensors())
        return self.buffers.logits[:raw_bs]
