"""ForwardBatch: everything one model forward needs, as tensors plus a few host-side lists."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch


class ForwardMode(enum.Enum):
    EXTEND = "extend"  # prefill (possibly a chunk of it) on top of whatever the request already cached
    DECODE = "decode"  # one new token per request
    TARGET_VERIFY = "target_verify"  # each request's last token and its drafts, every position's logits (extend path)

    def is_decode(self) -> bool:
        return self is ForwardMode.DECODE


@dataclass
class ForwardBatch:
    """A flat ragged batch: tokens of all requests concatenated (``T`` tokens, ``B`` requests).

    ``seq_lens`` counts each request's tokens *with* KV after this forward (prefix + new tokens).
    ``out_cache_loc`` holds the full KV slots of the ``T`` new tokens; ``out_cache_loc_swa`` their
    SWA slots, translated once per forward by the model runner (int32, the pool's index dtype).
    """

    forward_mode: ForwardMode
    input_ids: torch.Tensor  # int64 [T]
    positions: torch.Tensor  # int64 [T]
    req_pool_indices: torch.Tensor  # int32 [B]
    seq_lens: torch.Tensor  # int32 [B]
    out_cache_loc: torch.Tensor  # int32 [T]
    seq_lens_cpu: list[int]
    extend_lens: list[int] | None = None  # new tokens per request (extend only)
    logits_indices: torch.Tensor | None = None  # rows of T whose logits are wanted; None: every row
    out_cache_loc_swa: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens_cpu)
