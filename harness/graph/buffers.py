"""Static input buffers of the decode graph, with declarative padding of the tail.

A batch of ``raw_bs`` requests replays the graph captured for bucket ``bs >= raw_bs``. Rows
``raw_bs .. bs - 1`` still run through the graph, so what they hold decides what they do: the
padding policy fills them so that they attend over one token (``seq_lens`` = 1) of the padding
request (row 0 of ``req_to_token``) and write K/V only to the padding slot 0 of each pool
(#24743: an SWA loc tail that kept the previous replay's slots made padded rows overwrite live
requests' SWA KV). The policy is data, so each entry can be audited and tested on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import ClassVar, Protocol

import torch

from harness.mem.errors import IndexContractError
from harness.mem.index import LOC_DTYPE, PADDING_SLOT

INPUT_FIELDS = ("input_ids", "req_pool_indices", "seq_lens", "positions", "out_cache_loc", "out_cache_loc_swa")

DECODE_PAD_POLICY: Mapping[str, int] = MappingProxyType(
    {
        "input_ids": 0,
        "req_pool_indices": 0,  # the padding request: its req_to_token row is all padding slots
        "seq_lens": 1,  # attend over exactly one (padding) token: no empty softmax
        "positions": 0,
        "out_cache_loc": PADDING_SLOT,
        "out_cache_loc_swa": PADDING_SLOT,
    }
)

INPUT_DTYPES: Mapping[str, torch.dtype] = MappingProxyType(
    {
        "input_ids": torch.int64,
        "req_pool_indices": LOC_DTYPE,
        "seq_lens": LOC_DTYPE,
        "positions": torch.int64,
        "out_cache_loc": LOC_DTYPE,
        "out_cache_loc_swa": LOC_DTYPE,
    }
)


class DecodeBatchLike(Protocol):
    """What a decode batch must carry to run through the graph (the engine's ForwardBatch does)."""

    batch_size: int
    input_ids: torch.Tensor
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    positions: torch.Tensor
    out_cache_loc: torch.Tensor
    out_cache_loc_swa: torch.Tensor | None


@dataclass
class DecodeInputs:
    """A decode batch as tensors of length ``batch_size``: a view of the buffers, or an eager batch."""

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
    """One set of buffers sized for the largest bucket; every bucket's graph reads a prefix of them."""

    input_ids: torch.Tensor
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    positions: torch.Tensor
    out_cache_loc: torch.Tensor
    out_cache_loc_swa: torch.Tensor | None
    logits: torch.Tensor

    pad_policy: ClassVar[Mapping[str, int]] = DECODE_PAD_POLICY
    dtypes: ClassVar[Mapping[str, torch.dtype]] = INPUT_DTYPES

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
        def make(name: str) -> torch.Tensor:
            return torch.full((max_bs,), cls.pad_policy.get(name, 0), dtype=cls.dtypes[name], device=device)

        return cls(
            input_ids=make("input_ids"),
            req_pool_indices=make("req_pool_indices"),
            seq_lens=make("seq_lens"),
            positions=make("positions"),
            out_cache_loc=make("out_cache_loc"),
            out_cache_loc_swa=make("out_cache_loc_swa") if is_hybrid_swa else None,
            logits=torch.zeros((max_bs, vocab_size), dtype=logits_dtype, device=device),
        )

    @property
    def max_bs(self) -> int:
        return self.input_ids.numel()

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every static tensor by name: what a captured graph reads and writes."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def view(self, bs: int, kv_len: int | None = None) -> DecodeInputs:
        return DecodeInputs(**{name: _prefix(getattr(self, name), bs) for name in INPUT_FIELDS}, kv_len=kv_len)

    def populate(self, batch: DecodeBatchLike, bs: int) -> None:
        """Copy ``batch`` into rows ``[0, raw_bs)`` and pad rows ``[raw_bs, bs)`` per the policy."""
        raw_bs = batch.batch_size
        if not 0 < raw_bs <= bs <= self.max_bs:
            raise ValueError(f"cannot place a batch of {raw_bs} into bucket {bs} (buffers hold {self.max_bs})")
        for name in INPUT_FIELDS:
            dst = getattr(self, name)
            if dst is None:
                continue
            src = getattr(batch, name)
            if src is None:
                raise ValueError(f"the decode graph reads {name}, but the batch does not carry it")
            if src.dtype != dst.dtype:
                raise IndexContractError(f"batch.{name} has dtype {src.dtype}, the graph buffer {dst.dtype}")
            if src.numel() != raw_bs:
                raise ValueError(f"batch.{name} has {src.numel()} entries for a batch of {raw_bs}")
            dst[:raw_bs].copy_(src)
        self.pad(raw_bs, bs)

    def pad(self, start: int, end: int) -> None:
        if start >= end:
            return
        for name, fill in self.pad_policy.items():
            buf = getattr(self, name)
            if buf is not None:
                buf[start:end].fill_(fill)


def _prefix(t: torch.Tensor | None, n: int) -> torch.Tensor | None:
    return None if t is None else t[:n]
