"""BucketedGraphRunner: what the decode and extend graph runners share. One graph per bucket,
captured largest first (or each on first use), every batch padded up to its bucket and replayed.

A bucket is the tuple of arguments a graph is keyed by: ``(bs, kv_len)`` for decode, ``(num_tokens,)``
for extend. Its first element is the number of rows the static buffers pad and populate, and the
buffers' ``view(*bucket)`` is the batch the graph reads. The order of a capture (capture batch,
metadata, warm-up, capture) and of a replay (graph, populate, metadata, replay) is fixed here, once
for both runners; each runner supplies its buckets and the target and backend calls that differ.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from typing import Any, Generic, TypeVar

import torch

from harness.graph.backends import GraphBackend

Inputs = TypeVar("Inputs")  # what a runner's graphs read: DecodeInputs, ExtendInputs


def first_at_least(buckets: Sequence[int], n: int) -> int | None:
    """The first of the sorted ``buckets`` that is >= ``n``; None when ``n`` is above them all."""
    i = bisect.bisect_left(buckets, n)
    return buckets[i] if i < len(buckets) else None


class BucketedGraphRunner(ABC, Generic[Inputs]):
    """The skeleton (see the module docstring); a runner implements the abstract steps below."""

    buffers: Any  # the runner's static input buffers: reset, pad, view, populate, tensors, logits

    def __init__(self, target: Any, backend: GraphBackend) -> None:
        self.target = target
        self.backend = backend
        self.graphs: dict[Hashable, Any] = {}
        self.ready = False  # captured, or set to capture each graph on first use
        self.lazy = False

    # -- what a runner supplies ----------------------------------------------------------------

    @abstractmethod
    def _buckets(self) -> list[tuple[Any, ...]]:
        """Every bucket, in capture order: largest first."""

    @abstractmethod
    def _key(self, *bucket: Any) -> Hashable:
        """The bucket's key in ``graphs``."""

    @abstractmethod
    def _capture_batch(self, *bucket: Any) -> Inputs:
        """Pad the static buffers for capture and return the batch the graph is captured on."""

    @abstractmethod
    def _prepare(self, inputs: Inputs) -> None:
        """The target's eager preparation, before capture and before every replay."""

    @abstractmethod
    def _forward(self, inputs: Inputs) -> torch.Tensor:
        """The target's body, as the warm-up runs it."""

    @abstractmethod
    def _record(self, inputs: Inputs, *bucket: Any) -> Any:
        """The backend's capture of the body: a graph with ``replay(static_inputs)``."""

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
        for bucket in self._buckets():
            self.graphs[self._key(*bucket)] = self._capture_one(*bucket)

    def graph_for(self, *bucket: Any) -> Any:
        key = self._key(*bucket)
        graph = self.graphs.get(key)
        if graph is None and self.lazy:
            self.buffers.reset()
            graph = self.graphs[key] = self._capture_one(*bucket)
        return graph

    def _capture_one(self, *bucket: Any) -> Any:
        inputs = self._capture_batch(*bucket)
        self._prepare(inputs)
        # Warm-up, then capture, each from a fresh start (#25824: see the target's begin_capture_run).
        self.target.begin_capture_run()
        with torch.no_grad():
            self._forward(inputs)
        self.target.begin_capture_run()
        return self._record(inputs, *bucket)

    # -- replay --------------------------------------------------------------------------------

    def _replay(self, batch: Any, *bucket: Any) -> None:
        """Run the bucket's graph on ``batch`` padded up to it; the logits land in ``buffers.logits``."""
        graph = self.graph_for(*bucket)
        self.buffers.populate(batch, bucket[0])
        self._prepare(self.buffers.view(*bucket))
        graph.replay(self.buffers.tensors())
