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

import logging
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from harness.graph.backends import GraphBackend
from harness.graph.bucketed import BucketedGraphRunner, first_at_least
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


class GraphRunner(BucketedGraphRunner[DecodeInputs]):
    """Decode graphs, one per batch-size bucket (and KV-length bucket).

    ``BucketedGraphRunner`` runs each capture: ``_capture_batch`` (pad, then the ``_capture_inputs``
    seam), ``_prepare``, a warm-up ``_forward`` and ``_record``, both runs from a fresh
    ``begin_capture_run``; what follows says what each step is for decode.
    """

    target: DecodeGraphTarget
    graphs: dict[tuple[int, int | None], object]

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
        super().__init__(target, backend)
        self.capture_bs = capture_bs_for(max_bs, capture_bs or DEFAULT_CAPTURE_BS)
        self.max_bs = self.capture_bs[-1]
        self.buffers = DecodeInputBuffers.create(
            self.max_bs, vocab_size, is_hybrid_swa=is_hybrid_swa, device=device, logits_dtype=logits_dtype
        )
        self.kv_len_buckets: list[int | None] = sorted(set(kv_len_buckets)) if kv_len_buckets else [None]

    # -- bucket choice -------------------------------------------------------------------------

    def bucket_for(self, raw_bs: int) -> int:
        """The first captured bucket >= raw_bs."""
        bucket = first_at_least(self.capture_bs, raw_bs)
        if raw_bs < 1 or bucket is None:
            raise ValueError(f"batch size {raw_bs} has no bucket (buckets go up to {self.max_bs})")
        return bucket

    def kv_bucket_for(self, batch: Any) -> int | None:
        """The first KV-length bucket that holds every row's keys (None when graphs are not keyed by it)."""
        if self.kv_len_buckets == [None]:
            return None
        longest = longest_seq_len(batch)
        bucket = first_at_least(self.kv_len_buckets, longest)
        if bucket is None:
            raise ValueError(f"sequence length {longest} exceeds the largest KV bucket {self.kv_len_buckets[-1]}")
        return bucket

    def can_run(self, batch: Any, *, is_decode: bool = True) -> bool:
        if not (is_decode and self.ready and 1 <= batch.batch_size <= self.max_bs):
            return False
        return self.kv_len_buckets == [None] or longest_seq_len(batch) <= self.kv_len_buckets[-1]

    # -- capture -------------------------------------------------------------------------------

    def _buckets(self) -> list[tuple[int, int | None]]:
        """Largest first: by batch size, then by KV length."""
        return [(bs, kv_len) for bs in reversed(self.capture_bs) for kv_len in reversed(self.kv_len_buckets)]

    def _key(self, bs: int, kv_len: int | None) -> tuple[int, int | None]:
        return bs, kv_len

    @seam("swa-loc-not-preset", "capture-after-warm-cache")
    def _capture_inputs(self, bs: int, kv_len: int | None) -> DecodeInputs:
        """The batch the graph is captured on: the static buffers, SWA loc pre-set (#23552)."""
        return self.buffers.view(bs, kv_len)

    def _capture_batch(self, bs: int, kv_len: int | None) -> DecodeInputs:
        self.buffers.pad(0, bs)  # capture on an all-padding batch: writes go to the padding slot
        return self._capture_inputs(bs, kv_len)

    def _prepare(self, inputs: DecodeInputs) -> None:
        self.target.prepare_graph_metadata(inputs)

    def _forward(self, inputs: DecodeInputs) -> torch.Tensor:
        return self.target.graph_forward(inputs)

    def _record(self, inputs: DecodeInputs, bs: int, kv_len: int | None) -> object:
        return self.backend.capture(lambda: self._body(inputs, bs), static_inputs=self.buffers.tensors())

    def _body(self, inputs: DecodeInputs, bs: int) -> torch.Tensor:
        logits = self.target.graph_forward(inputs)
        self.buffers.logits[:bs].copy_(logits)
        return self.buffers.logits[:bs]

    # -- replay --------------------------------------------------------------------------------

    def replay(self, batch: Any) -> torch.Tensor:
        """Logits of the ``raw_bs`` real rows; a view of the static logits buffer (valid until the next replay)."""
        raw_bs = batch.batch_size
        self._replay(batch, self.bucket_for(raw_bs), self.kv_bucket_for(batch))
        return self.buffers.logits[:raw_bs]
