"""Static input buffers of the decode graph, with declarative padding of the tail.

A batch of ``raw_bs`` requests replays the graph captured for bucket ``bs >= raw_bs``. Rows
``raw_bs .. bs - 1`` still run through the graph, so what they hold decides what they do: the
padding policy fills them so that they attend over one token (``seq_lens`` = 1) of the padding
request (row 0 of ``req_to_token``) and write K/V only to the padding slot 0 of each pool
(#24743: an SWA loc tail that kept the previous replay's slots made padded rows overwrite live
requests' SWA KV). ``DECODE_FIELDS`` is the one table of the decode inputs: each entry's dtype and
padding can be audited and tested on its own, and everything else derives from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import torch

from harness.mem.errors import IndexContractError
from harness.mem.index import LOC_DTYPE, PADDING_SLOT
from harness.seams import seam_value


@dataclass(frozen=True)
class DecodeField:
    dtype: torch.dtype
    pad: int | None  # what padded rows hold; None: the tail keeps whatever the last replay left there
    swa_only: bool = False  # exists only when the model has sliding layers


DECODE_FIELDS: Mapping[str, DecodeField] = MappingProxyType(
    {
        "input_ids": DecodeField(torch.int64, 0),
        "req_pool_indices": DecodeField(LOC_DTYPE, 0),  # the padding request: its req_to_token row is all padding slots
        "seq_lens": DecodeField(LOC_DTYPE, 1),  # attend over exactly one (padding) token: no empty softmax
        "positions": DecodeField(torch.int64, 0),
        "out_cache_loc": DecodeField(LOC_DTYPE, PADDING_SLOT),
        "out_cache_loc_swa": DecodeField(LOC_DTYPE, PADDING_SLOT, swa_only=True),
    }
)


@dataclass
class DecodeInputs:
    """A decode batch as tensors of length ``batch_size`` (one per ``DECODE_FIELDS`` entry): a view
    of the static buffers, or an eager batch. The engine's ``ForwardBatch`` carries the same names."""

    input_ids: torch.Tensor
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    positions: torch.Tensor
    out_cache_loc: torch.Tensor
    out_cache_loc_swa: torch.Tensor | None
    kv_len: int | None = None
    """Keys each row may read (a graph's fixed bound, >= every seq_len); None: the target's maximum."""

    @property
    def batch_size(self) -> int:
        return self.input_ids.numel()


@dataclass
class DecodeInputBuffers:
    """One tensor per decode field, sized for the largest bucket; every bucket's graph reads a prefix."""

    inputs: dict[str, torch.Tensor]  # field name -> [max_bs]; swa-only fields absent without SWA layers
    logits: torch.Tensor
    # Per row count: each field's first rows, and every static tensor by name. Views of static tensors stay
    # valid, and replay runs once per decode step, so they are built once, not on every replay.
    _heads: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict, init=False, repr=False)
    _tensors: dict[str, torch.Tensor] = field(init=False, repr=False)

    fields: ClassVar[Mapping[str, DecodeField]] = DECODE_FIELDS

    def __post_init__(self) -> None:
        self._tensors = {**self.inputs, "logits": self.logits}

    @classmethod
    def create(
        cls,
        max_bs: int,
        vocab_size: int,
        *,
        is_hybrid_swa: bool,
        device: str | torch.device = "cpu",
        logits_dtype: torch.dtype = torch.float32,
    ) -> "DecodeInputBuffers":
        inputs = {
            name: torch.full((max_bs,), f.pad or 0, dtype=f.dtype, device=device)
            for name, f in cls.fields.items()
            if is_hybrid_swa or not f.swa_only
        }
        return cls(inputs, torch.zeros((max_bs, vocab_size), dtype=logits_dtype, device=device))

    @property
    def max_bs(self) -> int:
        return self.inputs["input_ids"].numel()

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every static tensor by name: what a captured graph reads and writes."""
        return self._tensors

    def heads(self, n: int) -> dict[str, torch.Tensor]:
        """Each field's rows ``[0, n)`` (views, built once per ``n``)."""
        heads = self._heads.get(n)
        if heads is None:
            heads = self._heads[n] = {name: buf[:n] for name, buf in self.inputs.items()}
        return heads

    def view(self, bs: int, kv_len: int | None = None) -> DecodeInputs:
        """A new ``DecodeInputs`` over rows ``[0, bs)`` (a fresh object: callers may set its fields)."""
        heads = self.heads(bs)
        return DecodeInputs(**{name: heads.get(name) for name in DECODE_FIELDS}, kv_len=kv_len)

    def populate(self, batch: Any, bs: int) -> None:
        """Copy ``batch`` (anything with the decode fields) into rows ``[0, raw_bs)`` and pad rows
        ``[raw_bs, bs)`` per the table."""
        raw_bs = batch.batch_size
        if not 0 < raw_bs <= bs <= self.max_bs:
            raise ValueError(f"cannot place a batch of {raw_bs} into bucket {bs} (buffers hold {self.max_bs})")
        copy_rows(self.heads(raw_bs), batch, raw_bs, "decode")
        self.pad(raw_bs, bs)

    def reset(self) -> None:
        """Back to the state ``create`` left (before a lazy capture, which must see what a start-up capture saw)."""
        reset_inputs(self.inputs, self.fields)

    def pad(self, start: int, end: int) -> None:
        if start >= end:
            return
        for name, buf in self.inputs.items():
            fill = self.fields[name].pad
            if fill is not None:
                buf[start:end].fill_(fill)


def reset_inputs(inputs: dict[str, torch.Tensor], fields: Mapping[str, DecodeField]) -> None:
    """Every row of every static input to its initial value: the field's padding value, else 0."""
    for name, buf in inputs.items():
        buf.fill_(fields[name].pad or 0)


def copy_rows(heads: dict[str, torch.Tensor], batch: Any, n: int, graph: str) -> None:
    """Copy each of the batch's ``n``-long input tensors into ``heads`` (each static buffer's first ``n``
    rows), refusing a missing field, another dtype or another length by name (a silent cast or a short
    copy would leave stale rows behind); then all copies in one call."""
    srcs = []
    for name, dst in heads.items():
        src = getattr(batch, name)
        if src is None:
            raise ValueError(f"the {graph} graph reads {name}, but the batch does not carry it")
        if src.dtype != dst.dtype:
            raise IndexContractError(f"batch.{name} has dtype {src.dtype}, the graph buffer {dst.dtype}")
        if src.numel() != dst.numel():
            raise ValueError(f"batch.{name} has {src.numel()} entries for {n} rows")
        srcs.append(src)
    torch._foreach_copy_(list(heads.values()), srcs)


seam_value(DecodeInputBuffers, "fields", "pad-swa-loc-not-zeroed", "swa-loc-int64")
