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

import functools
from collections.abc import Callable, Sequence
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
    """Per-row slots to read: full slots of positions ``0 .. L-1`` and SWA slots of each window.

    ``begin_forward`` derives, once per forward for all layers of a kind, the cache rows to gather
    (``kv_head_rows``) and the additive visibility masks (``additive_mask``).
    """

    kv_indices: torch.Tensor  # int32 [bs, L]
    window_indices: dict[int, torch.Tensor]  # window -> int32 [bs, W]
    rows: torch.Tensor | None = None  # int32 [bs * KVH * L], set by begin_forward
    mask: torch.Tensor | None = None  # float32 [bs, L]: 0 visible, -inf past seq_len; set by begin_forward
    window_rows: dict[int, torch.Tensor] = field(default_factory=dict)
    window_mask: dict[int, torch.Tensor] = field(default_factory=dict)


@dataclass
class ExtendRequestMetadata:
    """One request of an extend batch: its new-token rows and the keys each layer kind reads."""

    rows: slice  # rows of the flat batch holding this request's new tokens
    full_slots: torch.Tensor  # int32 [S]: positions 0 .. S-1
    full_visible: torch.Tensor  # [n, S]
    window_slots: dict[int, torch.Tensor]  # window -> int32 SWA slots of positions a_W .. S-1
    window_visible: dict[int, torch.Tensor]  # window -> [n, S - a_W]


def kv_head_rows(slots: torch.Tensor, kv_heads: torch.Tensor) -> torch.Tensor:
    """Rows of a K/V cache viewed as ``[slots * KVH, D]`` that hold every KV head of ``slots [B, L]``.

    ``kv_heads`` is ``arange(KVH)``; the rows come out ordered ``(b, head, l)``, so one ``index_select``
    gathers all heads of all rows as contiguous ``[B * KVH, L, D]`` blocks: row ``slot * KVH + head``.
    """
    return torch.add(kv_heads[:, None], slots[:, None, :], alpha=kv_heads.numel()).view(-1)


def additive_mask(hidden: torch.Tensor) -> torch.Tensor:
    """float32 mask, ``-inf`` where ``hidden`` and 0 elsewhere: added to the scores before the softmax."""
    return torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device).masked_fill(hidden, float("-inf"))


@functools.cache
def _scalar(value: float, device: torch.device) -> torch.Tensor:
    """A 0-dim fp32 tensor holding ``value``: multiplies like the Python float (whose fp32 value it is),
    without boxing it into a new tensor on every call."""
    return torch.tensor(value, dtype=torch.float32, device=device)


def attend_over_rows(
    layer: AttentionLayerSpec,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    rows: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """``q [B, n, H, D]`` attends over the cache rows ``rows`` (``kv_head_rows`` of ``[B, L]`` slots) with
    the additive ``mask [B, n, L]``; returns ``[B, n, H, D]``.

    One ``index_select`` per cache gathers every KV head (``[B * KVH, L, D]`` blocks) and queries are
    grouped by the KV head they read (query head ``h`` reads KV head ``h // group``), so both products
    are single batched matmuls; the mask is one add. Scores are scaled and soft-capped in transformers'
    order and rounding (``tanh(q.k * scaling / cap) * cap``), the last multiply fused with the mask add
    (``cap * t + 0`` rounds as ``t * cap``). For decode (``n == 1``) the output needs no layout copy.
    Written independently of the dense reference on purpose: the two are compared, not shared.
    """
    b, n, h, d = q.shape
    kvh = layer.num_kv_heads
    group = h // kvh
    length = mask.shape[-1]
    keys = k_cache.view(-1, d).index_select(0, rows).view(b * kvh, length, d).to(q.dtype)
    values = v_cache.view(-1, d).index_select(0, rows).view(b * kvh, length, d).to(q.dtype)
    grouped = torch.empty((b, kvh, n, group, d), dtype=q.dtype, device=q.device)
    grouped.copy_(q.view(b, n, kvh, group, d).transpose(1, 2))
    scores = torch.bmm(grouped.view(b * kvh, n * group, d), keys.transpose(1, 2)).view(b, kvh, n, group, length)
    scores = scores * _scalar(layer.scaling, q.device)
    mask = mask.view(b, 1, n, 1, length).to(scores.dtype)
    cap = layer.logit_softcap
    if cap is None:
        scores = scores + mask
    else:
        scores = torch.add(mask, torch.tanh(scores / _scalar(cap, q.device)), alpha=cap)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype).view(b * kvh, n * group, length)
    out = torch.bmm(probs, values).view(b, kvh, n, group, d)
    return out.transpose(1, 2).reshape(b, n, h, d)  # a view for n == 1


def attend_over_cache(
    layer: AttentionLayerSpec,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    visible: torch.Tensor,
) -> torch.Tensor:
    """``q [B, n, H, D]`` attends over the cached rows ``slots [B, L]`` where ``visible [B, n, L]``."""
    kv_heads = torch.arange(layer.num_kv_heads, dtype=slots.dtype, device=slots.device)
    return attend_over_rows(layer, q, k_cache, v_cache, kv_head_rows(slots, kv_heads), additive_mask(~visible))


def _kernel_reads(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether the compiled decode kernel takes these tensors (fp32, caches ``[S, KVH, D]`` contiguous, as
    this engine's pools and SGLang's are); anything else runs ``attend_over_rows``."""
    return (
        q.dtype == k_cache.dtype == v_cache.dtype == torch.float32
        and q.stride(-1) == 1
        and k_cache.dim() == 3
        and k_cache.is_contiguous()
        and v_cache.is_contiguous()
    )


class PoolAttentionBackend:
    """``AttentionBackend`` over a hybrid pool + ``ReqToTokenPool`` (the implementation under test)."""

    def __init__(
        self,
        pool: SWAKVPool,
        req_to_token_pool: ReqToTokenPool,
        layer_specs: Sequence[AttentionLayerSpec],
        *,
        max_bs: int,
        decode_kernel: Callable[..., None] | None = None,
    ) -> None:
        """``decode_kernel``: the compiled decode attention (``cpu_kernels``); None runs ``attend_over_rows``."""
        self.pool = pool
        self.req_to_token_pool = req_to_token_pool
        self.windows = sorted({spec.sliding_window for spec in layer_specs if spec.sliding_window is not None})
        self.max_context_len = req_to_token_pool.max_context_len
        device = pool.device
        self.graph_kv_indices = torch.zeros((max_bs, self.max_context_len), dtype=LOC_DTYPE, device=device)
        self.graph_window_indices = {w: torch.zeros((max_bs, w), dtype=LOC_DTYPE, device=device) for w in self.windows}
        self.positions = torch.arange(self.max_context_len, device=device)
        kv_heads = {spec.num_kv_heads for spec in layer_specs}
        if len(kv_heads) != 1:
            raise ValueError(f"every layer must have the pool's number of KV heads, got {sorted(kv_heads)}")
        self.kv_heads = torch.arange(kv_heads.pop(), dtype=LOC_DTYPE, device=device)
        self.decode_kernel = decode_kernel
        self.decode: DecodeMetadata | None = None
        self.extend: list[ExtendRequestMetadata] | None = None
        self.piecewise = False  # inside an extend graph: attention is a graph break

    # -- metadata (eager, outside any graph) ---------------------------------------------------

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        if batch.forward_mode.is_decode():
            kv_len = max(batch.seq_lens_cpu)
            self.decode = self._decode_metadata(
                batch.req_pool_indices,
                batch.seq_lens,
                kv_len,
                self.graph_kv_indices.new_empty((batch.batch_size, kv_len)),
                {w: self.graph_kv_indices.new_empty((batch.batch_size, w)) for w in self.windows},
            )
            self.extend = None
        else:
            self.extend = self._extend_metadata(batch)
            self.decode = None
        self.piecewise = False

    def prepare_graph_metadata(self, inputs: DecodeInputs) -> None:
        """Fill the static index buffers a captured decode graph reads (capture and every replay)."""
        kv_len = inputs.kv_len or self.max_context_len
        self.decode = self._decode_metadata(
            inputs.req_pool_indices, inputs.seq_lens, kv_len, self.graph_kv_indices, self.graph_window_indices
        )
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
        return DecodeMetadata(kv_out[:bs, :kv_len], window_indices={w: out[:bs] for w, out in window_out.items()})

    def _extend_metadata(self, batch: ForwardBatch) -> list[ExtendRequestMetadata]:
        rt = self.req_to_token_pool.req_to_token
        metas, window_full, start = [], [], 0
        for req, seq_len, new in zip(batch.req_pool_indices.tolist(), batch.seq_lens_cpu, batch.extend_lens):
            prefix = seq_len - new
            q_pos = torch.arange(prefix, seq_len, device=rt.device)[:, None]
            k_pos = self.positions[:seq_len][None, :]
            meta = ExtendRequestMetadata(
                slice(start, start + new),
                full_slots=rt[req, :seq_len],
                full_visible=k_pos <= q_pos,
                window_slots={},
                window_visible={},
            )
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
        """Per-forward tensors derived from ``seq_lens`` and the index buffers, built once for all layers;
        runs inside the captured body."""
        meta = self.decode
        if meta is None:
            return
        kv_len = meta.kv_indices.shape[1]
        meta.rows = kv_head_rows(meta.kv_indices, self.kv_heads)
        meta.mask = additive_mask(self.positions[:kv_len][None, :] >= batch.seq_lens[:, None])
        for w in self.windows:
            meta.window_rows[w] = kv_head_rows(meta.window_indices[w], self.kv_heads)
            meta.window_mask[w] = additive_mask(decode_window_positions(batch.seq_lens, w) < 0)

    def forward(
        self, layer: AttentionLayerSpec, q, k, v, batch: ForwardBatch | DecodeInputs | ExtendInputs
    ) -> torch.Tensor:
        if self.piecewise:
            return graph_break(lambda q, k, v: self._write_and_attend(layer, q, k, v, batch), q, k, v)
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
            rows, mask = meta.window_rows[layer.sliding_window], meta.window_mask[layer.sliding_window]
        else:
            rows, mask = meta.rows, meta.mask
        if self.decode_kernel is not None and _kernel_reads(q, k_cache, v_cache):
            out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
            self.decode_kernel(q, k_cache, v_cache, rows, mask, layer.scaling, layer.logit_softcap, out=out)
            return out
        return attend_over_rows(layer, q[:, None], k_cache, v_cache, rows, mask[:, None, :])[:, 0]

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
