"""Seed #24743 replayed on the releases that shipped it: 0.5.11's decode graph buffers leave the SWA write ids of a
previous, larger replay in the padded rows; 0.5.12 zeroes them (the padding slot).

The path is SGLang's own, on CPU: ``DecodeInputBuffers.create`` (hybrid SWA) and ``populate_from_forward_batch`` place
a batch into its bucket as ``CudaGraphRunner.replay_prepare`` does; the model runner hands the buffers' SWA ids to the
pool (``set_swa_loc``) and every sliding layer writes through ``SWAKVPool.set_kv_buffer``. Checked, behaviour first:
a padded replay writes no slot its batch does not own, so the K/V of a live request that sits this step out is intact.

Releases from 0.5.13 on place decode batches with the buffer registry (suites/sglang/test_decode_registry.py); here
they skip, naming what they lack. Seeds that cannot be replayed, and why: docs/COMPATIBILITY.md.
"""

from __future__ import annotations

import inspect
import types

import pytest
import torch

from harness.targets.target import PoolSpec
from harness.targets.sglang.capabilities import first, lacks

MAX_BS = 8
SWA_LAYER = 0
HEAD_NUM, HEAD_DIM = 2, 4


@pytest.fixture(scope="module")
def buffers_class(target):
    if target.name != "sglang":
        pytest.skip("replays an SGLang release's own decode buffers: run with --target sglang (nox -s sglang_matrix)")
    buffers = first(("sglang.srt.model_executor.cuda_graph_runner", "DecodeInputBuffers"))
    if not hasattr(buffers, "populate_from_forward_batch"):
        raise lacks(
            "DecodeInputBuffers.populate_from_forward_batch (the decode buffers #24743 patched, before the "
            "buffer registry)"
        )
    return buffers


def create_buffers(buffers_class):
    wanted = dict(
        device=torch.device("cpu"),
        max_bs=MAX_BS,
        max_num_token=MAX_BS,
        hidden_size=16,
        vocab_size=32,
        dtype=torch.float32,
        dp_size=1,
        pp_size=1,
        is_encoder_decoder=False,
        require_mlp_tp_gather=False,
        seq_len_fill_value=1,
        encoder_len_fill_value=0,
        num_tokens_per_bs=1,
        cache_loc_dtype=torch.int64,
        enable_mamba_track=False,
        is_hybrid_swa=True,
    )
    accepted = inspect.signature(buffers_class.create).parameters
    return buffers_class.create(**{k: v for k, v in wanted.items() if k in accepted})


def decode_batch(pool, loc: torch.Tensor, seq_lens: torch.Tensor) -> types.SimpleNamespace:
    """The ForwardBatch fields ``populate_from_forward_batch`` reads, for one decode step of ``loc.numel()`` requests;
    its SWA write ids are the pool's translation, as ``ForwardBatch.init_new`` computes them."""
    n = loc.numel()
    return types.SimpleNamespace(
        input_ids=loc + 100,
        req_pool_indices=torch.arange(n),
        seq_lens=seq_lens.to(torch.int32),
        seq_lens_cpu=seq_lens.to(torch.int32),
        out_cache_loc=loc,
        positions=seq_lens - 1,
        out_cache_loc_swa=pool.translate_loc_from_full_to_swa(loc),
        mrope_positions=None,
        encoder_lens=None,
        mamba_track_indices=None,
        mamba_track_mask=None,
        num_token_non_padded=torch.tensor([n], dtype=torch.int32),
        ngram_embedding_info=None,
    )


def replay(pool, buffers, batch, raw_bs: int, bs: int, step: int) -> None:
    """``replay_prepare`` then the sliding layer's write: the batch padded to ``bs`` rows, each row's K/V a value of
    its own, ``100 * step + row`` (padded rows included: a graph computes them too)."""
    accepted = inspect.signature(buffers.populate_from_forward_batch).parameters
    args = dict(
        forward_batch=batch,
        raw_bs=raw_bs,
        raw_num_token=raw_bs,
        bs=bs,
        seq_len_fill_value=1,
        require_gathered_buffer=False,
        num_tokens_per_bs=1,
        nsa_enable_prefill_cp=False,
        enable_num_token_non_padded_flag=False,
    )
    buffers.populate_from_forward_batch(**{k: v for k, v in args.items() if k in accepted})
    pool.set_swa_loc(buffers.out_cache_loc_swa[:bs])  # the model runner: forward_batch.out_cache_loc_swa
    rows = (
        torch.arange(100 * step, 100 * step + bs, dtype=torch.float32)
        .view(bs, 1, 1)
        .expand(bs, HEAD_NUM, HEAD_DIM)
        .contiguous()
    )
    pool.set_kv_buffer(types.SimpleNamespace(layer_id=SWA_LAYER), buffers.out_cache_loc[:bs], rows, -rows)


def test_a_padded_replay_writes_no_live_requests_swa_slot(target, buffers_class) -> None:
    handle = target.build_pool(
        PoolSpec(size=64, size_swa=48, max_requests=MAX_BS, head_num=HEAD_NUM, head_dim=HEAD_DIM)
    )
    pool = handle.pool.sglang
    buffers = create_buffers(buffers_class)
    # A full-width replay: 8 requests decode, their SWA slots now hold their keys.
    wide = handle.allocator.alloc(MAX_BS).long()
    replay(pool, buffers, decode_batch(pool, wide, torch.full((MAX_BS,), 9)), raw_bs=MAX_BS, bs=MAX_BS, step=1)
    keys = pool.get_key_buffer(SWA_LAYER)
    wide_swa = pool.translate_loc_from_full_to_swa(wide)
    before = keys[wide_swa].clone()
    # Next step: 3 new requests decode, padded into the bucket of 4; the 8 earlier requests sit it out.
    narrow = handle.allocator.alloc(3).long()
    replay(pool, buffers, decode_batch(pool, narrow, torch.full((3,), 5)), raw_bs=3, bs=4, step=2)
    pad_ids = buffers.out_cache_loc_swa[3:4].tolist()
    overwritten = [int(wide[i]) for i in range(MAX_BS) if not torch.equal(keys[wide_swa[i]], before[i])]
    assert not overwritten, (
        f"the padded row wrote its K/V into the SWA slots of live requests {overwritten} (full ids; padded SWA write "
        f"id {pad_ids}, left from the previous, larger replay): #24743"
    )
