"""Static input buffers of the extend (prefill) graph, with declarative padding of the tail.

An extend batch is a flat run of ``T`` new tokens from ``B`` requests; the graph captured for the
token bucket ``t >= T`` runs on all ``t`` rows, so rows ``T .. t - 1`` must be harmless: they write
K/V only to the padding slot 0 of each pool (SGLang's piecewise runner zeroes the padded SWA loc,
#24743) and belong to no request, so no real token attends to them. Per-request extents are host
data, kept beside the buffers for the eager attention between the graph's pieces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import torch

from harness.graph.buffers import DecodeField, copy_rows, reset_inputs
from harness.mem.index import LOC_DTYPE, PADDING_SLOT
from harness.seams import seam_value

EXTEND_FIELDS: Mapping[str, DecodeField] = MappingProxyType(
    {
        "input_ids": DecodeField(torch.int64, 0),
        "positions": DecodeField(torch.int64, 0),
        "out_cache_loc": DecodeField(LOC_DTYPE, PADDING_SLOT),
        "out_cache_loc_swa": DecodeField(LOC_DTYPE, PADDING_SLOT, swa_only=True),
    }
)


@dataclass
class ExtendInputs:
    """An extend batch as the captured graph sees it: token tensors of the bucket's length, the rows
    whose logits are wanted, and the real batch's host-side extents (for the eager attention)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    out_cache_loc: torch.Tensor
    out_cache_loc_swa: torch.Tensor | None
    logits_indices: torch.Tensor  # [max_reqs] rows of T; the tail repeats row 0 and is sliced off
    batch: Any = None  # the real ForwardBatch (None while capturing on an all-padding batch)


@dataclass
class ExtendInputBuffers:
    inputs: dict[str, torch.Tensor]  # field -> [max_tokens]
    logits_indices: torch.Tensor  # [max_reqs]
    logits: torch.Tensor  # [max_reqs, vocab]
    current: Any = field(default=None)  # the real batch of the last populate()

    fields: ClassVar[Mapping[str, DecodeField]] = EXTEND_FIELDS

    @classmethod
    def create(
        cls,
        max_tokens: int,
        max_reqs: int,
        vocab_size: int,
        *,
        is_hybrid_swa: bool,
        device: str | torch.device = "cpu",
        logits_dtype: torch.dtype = torch.float32,
    ) -> "ExtendInputBuffers":
        inputs = {
            name: torch.full((max_tokens,), f.pad or 0, dtype=f.dtype, device=device)
            for name, f in cls.fields.items()
            if is_hybrid_swa or not f.swa_only
        }
        return cls(
            inputs,
            torch.zeros(max_reqs, dtype=torch.int64, device=device),
            torch.zeros((max_reqs, vocab_size), dtype=logits_dtype, device=device),
        )

    @property
    def max_tokens(self) -> int:
        return self.inputs["input_ids"].numel()

    def tensors(self) -> dict[str, torch.Tensor]:
        return {**self.inputs, "logits_indices": self.logits_indices, "logits": self.logits}

    def view(self, num_tokens: int) -> ExtendInputs:
        views = {name: self.inputs[name][:num_tokens] if name in self.inputs else None for name in EXTEND_FIELDS}
        return ExtendInputs(**views, logits_indices=self.logits_indices, batch=self.current)

    def populate(self, batch: Any, num_tokens: int) -> None:
        """Copy the batch's ``T`` tokens into rows ``[0, T)`` and pad ``[T, num_tokens)`` per the table."""
        real = batch.input_ids.numel()
        if not 0 < real <= num_tokens <= self.max_tokens:
            raise ValueError(f"cannot place {real} tokens into bucket {num_tokens} (buffers hold {self.max_tokens})")
        copy_rows({name: buf[:real] for name, buf in self.inputs.items()}, batch, real, "extend")
        self.pad(real, num_tokens)
        wanted = batch.logits_indices
        self.logits_indices.zero_()
        self.logits_indices[: wanted.numel()].copy_(wanted)
        self.current = batch

    def reset(self) -> None:
        """Back to the state ``create`` left (before a lazy capture, which must see what a start-up capture saw)."""
        reset_inputs(self.inputs, self.fields)
        self.logits_indices.zero_()
        self.current = None

    def pad(self, start: int, end: int) -> None:
        for name, buf in self.inputs.items():
            fill = self.fields[name].pad
            if fill is not None and start < end:
                buf[start:end].fill_(fill)


seam_value(ExtendInputBuffers, "fields", "extend-pad-swa-loc-not-zeroed")
