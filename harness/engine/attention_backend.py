"""Attention over the hybrid pool: a readable torch reference kernel for extend and decode.

Each layer first writes the new tokens' K/V through ``pool.set_kv_buffer`` (full layers at
``out_cache_loc``; sliding layers at the SWA slots pre-translated for this forward), then reads:
full layers every earlier token through ``req_to_token``, sliding layers only the window, whose
full slots are translated to SWA slots once per forward in ``init_forward_metadata``.

Decode runs eagerly or inside a captured graph. For graphs the index metadata lives in static
buffers filled outside the graph (``prepare_graph_metadata``), and everything computed from
``seq_lens`` (the visibility masks) is computed inside the forward (``begin_forward``), so that
it is recorded into the graph rather than frozen from the warm-up run.

Extend runs eagerly or inside a piecewise graph (``prepare_extend_graph``): there the K/V write and
the ragged attention are a ``graph_break`` between the captured pieces, over the bucket's padded
tokens, with the per-request metadata of the real batch computed on the host before every replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from harness.engine.forward_batch import ForwardBatch
from harness.engine.kv_indices import (
    decode_kv_indices,
    decode_window_full_indices,
    decode_window_positions,
)
from harness.graph.buffers import DecodeInputs
from harness.graph.extend_buffers import ExtendInputs
from harness.graph.piecewise import graph_break
from harness.mem import ReqToTokenPool, SWAKVPool
from harness.mem.index import LOC_DTYPE
from harness.model.attention_api import AttentionLayerSpec
from harness.model.window import window_start
from harness.seams import seam


@dataclass
class DecodeMetadata:
    """Per-row slots to read: full slots of positions ``0 .. L-1`` and SWA slots of each window."""

    kv_indices: torch.Tensor  # int32 [bs, L]
    window_indices: dict[int, torch.Tensor]  # window -> int32 [bs, W]
    visible: torch.Tensor | None = None  # [bs, L] bool, set by begin_forward
    window_visible: dict[int, torch.Tensor] = field(default_factory=dict)


@dataclass
class ExtendRequestMetadata:
    """One request of an extend batch: its new-token rows and the keys each layer kind reads."""

    rows: slice  # rows of the flat batch holding this request's new tokens
    full_slots: torch.Tensor  # int32 [S]: positions 0 .. S-1
    full_visible: torch.Tensor  # [n, S]
    window_slots: dict[int, torch.Tensor]  # window -> int32 SWA slots of positions a_W .. S-1
    window_visible: dict[int, torch.Tensor]  # window -> [n, S - a_W]


def attend_over_cache(
    layer: AttentionLayerSpec,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    visible: torch.Tensor,
) -> torch.Tensor:
    """``q [B, n, H, D]`` attends over the cached rows ``slots [B, L]`` where ``visible [B, n, L]``.

    Keys are gathered per KV head with ``index_select`` into contiguous ``[B, L, D]`` blocks, so both
    products are plain batched matmuls with no layout copies (on CPU this is ~5x faster than
    advanced indexing followed by permuted matmuls). Query head ``h`` reads KV head ``h // group``.
    Written independently of the dense reference on purpose: the two are compared, not shared.
    """
    b, n, h, d = q.shape
    kvh = layer.num_kv_heads
    group = h // kvh
    length = slots.shape[1]
    flat = slots.reshape(-1)
    q_groups = q.reshape(b, n, kvh, group, d)
    keys = [k_cache[:, j].index_select(0, flat).view(b, length, d).to(q.dtype) for j in range(kvh)]
    scores = torch.stack(
        [torch.bmm(q_groups[:, :, j].reshape(b, n * group, d), keys[j].transpose(1, 2)) for j in range(kvh)], 1
    ) * layer.scaling  # [B, KVH, n * g, L]
    if layer.logit_softcap is not None:
        scores = torch.tanh(scores / layer.logit_softcap) * layer.logit_softcap
    scores = scores.view(b, kvh, n, group, length).masked_fill(~visible[:, None, :, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype).view(b, kvh, n * group, length)
    outs = [
        torch.bmm(probs[:, j], v_cache[:, j].index_select(0, flat).view(b, length, d).to(q.dtype)).view(b, n, group, d)
        for j in range(kvh)
    ]
    return torch.cat(outs, dim=2)  # [B, n, KVH * g = H, D]


class PoolAttentionBackend:
    """``AttentionBackend`` over a hybrid pool + ``ReqToTokenPool`` (the implementation under test)."""

    def __init__(
        self,
        pool: SWAKVPool,
        req_to_token_pool: ReqToTokenPool,
        layer_specs: Sequence[AttentionLayerSpec],
        *,
        max_bs: int,
    ) -> None:
        self.pool = pool
        self.req_to_token_pool = req_to_token_pool
        self.windows = sorted({spec.sliding_window for spec in layer_specs if spec.sliding_window is not None})
        self.max_context_len = req_to_token_pool.max_context_len
        device = pool.device
        self.graph_kv_indices = torch.zeros((max_bs, self.max_context_len), dtype=LOC_DTYPE, device=device)
        self.graph_window_indices = {w: torch.zeros((max_bs, w), dtype=LOC_DTYPE, device=device) for w in self.windows}
        self.positions = torch.arange(self.max_context_len, device=device)
        self.decode: DecodeMetadata | None = None
        self.extend: list[ExtendRequestMetadata] | None = None
        self.piecewise = False  # inside an extend graph: attention is a graph break

    # -- metadata (eager, outside any graph) ---------------------------------------------------

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        if batch.forward_mode.is_decode():
            kv_len = max(batch.seq_lens_cpu)
            self.decode = self._decode_metadata(batch.req_pool_indices, batch.seq_lens, kv_len,
                                                self.graph_kv_indices.new_empty((batch.batch_size, kv_len)),
                                                {w: self.graph_kv_indices.new_empty((batch.batch_size, w)) for w in self.windows})
            self.extend = None
        else:
            self.extend = self._extend_metadata(batch)
            self.decode = None
        self.piecewise = False

    def prepare_graph_metadata(self, inputs: DecodeInputs) -> None:
        """Fill the static index buffers a captured decode graph reads (capture and every replay)."""
        kv_len = inputs.kv_len or self.max_context_len
        self.decode = self._decode_metadata(inputs.req_pool_indices, inputs.seq_lens, kv_len,
                                            self.graph_kv_indices, self.graph_window_indices)
        self.extend = None
        self.piecewise = False

    def prepare_extend_graph(self, inputs: ExtendInputs) -> None:
        """The real batch's per-request metadata for the eager attention between an extend graph's
        pieces (none while capturing on an all-padding batch)."""
        self.extend = self._extend_metadata(inputs.batch) if inputs.batch is not None else []
        self.decode = None
        self.piecewise = True

    def _decode_metadata(self, req_pool_indices, seq_lens, kv_len, kv_out, window_out) -> DecodeMetadata:
        rt = self.req_to_token_pool.req_to_token
        bs = req_pool_indices.numel()
        decode_kv_indices(rt, req_pool_indices, kv_len, kv_out)
        for w, out in window_out.items():
            full = decode_window_full_indices(rt, req_pool_indices, seq_lens, w)
            out[:bs].copy_(self.pool.translate_fresh_loc(full.reshape(-1)).view(bs, w))
        return DecodeMetadata(kv_out[:bs, :kv_len], {w: out[:bs] for w, out in window_out.items()})

    def _extend_metadata(self, batch: ForwardBatch) -> list[ExtendRequestMetadata]:
        rt = self.req_to_token_pool.req_to_token
        metas, window_full, start = [], [], 0
        for req, seq_len, new in zip(batch.req_pool_indices.tolist(), batch.seq_lens_cpu, batch.extend_lens):
            prefix = seq_len - new
            q_pos = torch.arange(prefix, seq_len, device=rt.device)[:, None]
            k_pos = self.positions[:seq_len][None, :]
            meta = ExtendRequestMetadata(slice(start, start + new), rt[req, :seq_len], k_pos <= q_pos, {}, {})
            for w in self.windows:
                first = int(window_start(prefix, w))
                window_full.append(rt[req, first:seq_len])
                meta.window_visible[w] = (k_pos[:, first:] <= q_pos) & (k_pos[:, first:] >= window_start(q_pos, w))
            metas.append(meta)
            start += new
        if window_full:
            swa = self.pool.translate_fresh_loc(torch.cat(window_full))  # one translation for all requests
            pieces = iter(swa.split([t.numel() for t in window_full]))
            for meta in metas:
                for w in self.windows:
                    meta.window_slots[w] = next(pieces)
        return metas

    # -- forward (inside the graph for decode replays) -----------------------------------------

    def begin_forward(self, batch: ForwardBatch | DecodeInputs) -> None:
        """Per-forward tensors derived from ``seq_lens``; runs inside the captured body."""
        if self.decode is None:
            return
        kv_len = self.decode.kv_indices.shape[1]
        self.decode.visible = self.positions[:kv_len][None, :] < batch.seq_lens[:, None]
        self.decode.window_visible = {w: decode_window_positions(batch.seq_lens, w) >= 0 for w in self.windows}

    def forward(self, layer: AttentionLayerSpec, q, k, v, batch: ForwardBatch | DecodeInputs | ExtendInputs) -> torch.Tensor:
        if self.piecewise:
            return graph_break(lambda: self._write_and_attend(layer, q, k, v, batch))
        return self._write_and_attend(layer, q, k, v, batch)

    def _write_and_attend(self, layer: AttentionLayerSpec, q, k, v, batch) -> torch.Tensor:
        self.pool.set_kv_buffer(layer.layer_id, batch.out_cache_loc, k, v, swa_loc=self._swa_write_loc(layer, batch))
        k_cache = self.pool.get_key_buffer(layer.layer_id)
        v_cache = self.pool.get_value_buffer(layer.layer_id)
        if self.decode is not None:
            return self._decode_forward(layer, q, k_cache, v_cache)
        return self._extend_forward(layer, q, k_cache, v_cache)

    @seam("prefill-ignores-precomputed-loc", "stale-pool-attribute-loc")
    def _swa_write_loc(self, layer: AttentionLayerSpec, batch: ForwardBatch | DecodeInputs) -> torch.Tensor | None:
        """Sliding layers write at the SWA slots computed once for this batch (#24138)."""
        return batch.out_cache_loc_swa if layer.is_sliding else None

    def _decode_forward(self, layer, q, k_cache, v_cache) -> torch.Tensor:
        meta = self.decode
        if layer.is_sliding:
            slots, visible = meta.window_indices[layer.sliding_window], meta.window_visible[layer.sliding_window]
        else:
            slots, visible = meta.kv_indices, meta.visible
        return attend_over_cache(layer, q[:, None], k_cache, v_cache, slots, visible[:, None, :])[:, 0]

    def _extend_forward(self, layer, q, k_cache, v_cache) -> torch.Tensor:
        outs = []
        for meta in self.extend:
            if layer.is_sliding:
                slots, visible = meta.window_slots[layer.sliding_window], meta.window_visible[layer.sliding_window]
            else:
                slots, visible = meta.full_slots, meta.full_visible
            outs.append(attend_over_cache(layer, q[meta.rows][None], k_cache, v_cache, slots[None], visible[None])[0])
        real = sum(o.shape[0] for o in outs)
        if real < q.shape[0]:  # an extend graph's padded tokens belong to no request: they attend to nothing
            outs.append(q.new_zeros((q.shape[0] - real, *q.shape[1:])))
        return torch.cat(outs)
