"""ExtendGraphRunner: capture one piecewise graph per token-count bucket, pad each extend batch's
tokens up to its bucket, replay (SGLang's piecewise CUDA graph runner, on the harness's backends).

The target's captured body runs the model over the bucket's tokens; its attention calls
``graph_break`` (``harness.graph.piecewise``), so the K/V write and the ragged attention over the
pool run eagerly between the captured pieces, with per-request extents from the host, as SGLang
splits its piecewise graph around attention. With graphs ``eager`` the whole body re-runs instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from harness.graph.backends import GraphBackend
from harness.graph.bucketed import BucketedGraphRunner, first_at_least
from harness.graph.extend_buffers import ExtendInputBuffers, ExtendInputs
from harness.seams import seam

DEFAULT_CAPTURE_TOKENS: tuple[int, ...] = (
    8,
    16,
    32,
    48,
    64,
    96,
    128,
    192,
    256,
    384,
    512,
    768,
    1024,
    1536,
    2048,
    3072,
    4096,
    6144,
    8192,
)


def capture_tokens_for(max_tokens: int, candidates: Sequence[int] = DEFAULT_CAPTURE_TOKENS) -> list[int]:
    """Buckets up to ``max_tokens``, which is always the last one (no batch the engine builds is larger)."""
    return sorted({t for t in candidates if t < max_tokens} | {max_tokens})


class ExtendGraphTarget(Protocol):
    def begin_capture_run(self) -> None: ...

    def prepare_extend_graph_metadata(self, inputs: ExtendInputs) -> None:
        """Eager, outside the graph: the attention's per-request metadata for ``inputs.batch``."""

    def extend_graph_forward(self, inputs: ExtendInputs) -> torch.Tensor:
        """The captured body: logits ``[max_reqs, vocab]`` for the rows in ``inputs.logits_indices``."""


class ExtendGraphRunner(BucketedGraphRunner[ExtendInputs]):
    """Piecewise extend graphs, one per token-count bucket; the capture and replay skeleton is
    ``BucketedGraphRunner``'s (see ``GraphRunner``)."""

    target: ExtendGraphTarget
    graphs: dict[int, Any]

    def __init__(
        self,
        target: ExtendGraphTarget,
        backend: GraphBackend,
        *,
        max_tokens: int,
        max_reqs: int,
        vocab_size: int,
        is_hybrid_swa: bool = False,
        device: str | torch.device = "cpu",
        logits_dtype: torch.dtype = torch.float32,
        capture_tokens: Sequence[int] | None = None,
    ) -> None:
        super().__init__(target, backend)
        self.capture_tokens = capture_tokens_for(max_tokens, capture_tokens or DEFAULT_CAPTURE_TOKENS)
        self.max_reqs = max_reqs
        self.buffers = ExtendInputBuffers.create(
            self.capture_tokens[-1],
            max_reqs,
            vocab_size,
            is_hybrid_swa=is_hybrid_swa,
            device=device,
            logits_dtype=logits_dtype,
        )

    def bucket_for(self, num_tokens: int) -> int:
        bucket = first_at_least(self.capture_tokens, num_tokens)
        if num_tokens < 1 or bucket is None:
            raise ValueError(f"{num_tokens} tokens have no bucket (buckets go up to {self.capture_tokens[-1]})")
        return bucket

    def can_run(self, batch: Any) -> bool:
        return (
            self.ready
            and not batch.forward_mode.is_decode()
            and 1 <= batch.input_ids.numel() <= self.capture_tokens[-1]
            and batch.batch_size <= self.max_reqs
            and (batch.logits_indices is None or batch.logits_indices.numel() <= self.max_reqs)
        )  # a verify's rows

    def _buckets(self) -> list[tuple[int]]:
        return [(tokens,) for tokens in reversed(self.capture_tokens)]

    def _key(self, num_tokens: int) -> int:
        return num_tokens

    @seam("extend-capture-after-warm-cache")
    def _capture_inputs(self, num_tokens: int) -> ExtendInputs:
        """The batch the graph is captured on: the static buffers, SWA loc pre-set (#23552, #24743)."""
        return self.buffers.view(num_tokens)

    def _capture_batch(self, num_tokens: int) -> ExtendInputs:
        self.buffers.pad(0, num_tokens)  # an all-padding batch: every write goes to the padding slot
        self.buffers.logits_indices.zero_()
        self.buffers.current = None
        return self._capture_inputs(num_tokens)

    def _prepare(self, inputs: ExtendInputs) -> None:
        self.target.prepare_extend_graph_metadata(inputs)

    def _forward(self, inputs: ExtendInputs) -> torch.Tensor:
        return self.target.extend_graph_forward(inputs)

    def _record(self, inputs: ExtendInputs, num_tokens: int) -> Any:
        return self.backend.capture_piecewise(lambda: self._body(inputs), static_inputs=self.buffers.tensors())

    def _body(self, inputs: ExtendInputs) -> torch.Tensor:
        self.buffers.logits.copy_(self.target.extend_graph_forward(inputs))
        return self.buffers.logits

    def replay(self, batch: Any) -> torch.Tensor:
        """Logits of the batch's ``logits_indices`` rows; a view of the static buffer (valid until the next replay)."""
        self._replay(batch, self.bucket_for(batch.input_ids.numel()))
        return self.buffers.logits[: batch.logits_indices.numel()]
