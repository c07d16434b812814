"""GraphRunner: buckets, padding policy, graph == eager over the real pool, dtype contract, CUDA parity."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fixtures.toy_decode import ToyWorld
from harness.graph.backends import make_backend, resolve_mode
from harness.graph.buffers import DECODE_FIELDS, DecodeInputs
from harness.graph.runner import DEFAULT_CAPTURE_BS, GraphRunner, capture_bs_for
from harness.mem import IndexContractError
from harness.mem.index import LOC_DTYPE

MAX_BS = 32
BUCKETS = capture_bs_for(MAX_BS)


def make_runner(world: ToyWorld, backend: str = "tape", max_bs: int = MAX_BS) -> GraphRunner:
    runner = GraphRunner(
        world.target, make_backend(backend), max_bs=max_bs, vocab_size=32, is_hybrid_swa=True, device=world.pool.device
    )
    runner.capture()
    return runner


def test_default_buckets_match_sglang_and_are_cut_at_max_bs():
    assert DEFAULT_CAPTURE_BS[:6] == (1, 2, 4, 8, 12, 16) and DEFAULT_CAPTURE_BS[-1] == 256
    assert capture_bs_for(20) == [1, 2, 4, 8, 12, 16]
    with pytest.raises(ValueError):
        capture_bs_for(0)


@pytest.mark.parametrize(
    "raw_bs, bucket",
    [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (9, 12), (12, 12), (13, 16), (17, 24), (24, 24), (25, 32), (32, 32)],
)
def test_bucket_is_the_first_at_least_raw_bs(raw_bs, bucket):
    runner = GraphRunner(ToyWorld.build([2]).target, make_backend("eager"), max_bs=MAX_BS, vocab_size=32)
    assert runner.bucket_for(raw_bs) == bucket


def test_can_run_is_false_above_the_largest_bucket_and_for_non_decode():
    world = ToyWorld.build([2] * 20)
    runner = make_runner(world, max_bs=20)  # buckets stop at 16
    assert runner.max_bs == 16
    assert runner.can_run(world.next_decode_batch(range(16)))
    assert not runner.can_run(world.next_decode_batch(range(17)))
    assert not runner.can_run(world.next_decode_batch(range(2)), is_decode=False)
    with pytest.raises(ValueError, match="no bucket"):
        runner.bucket_for(17)


def test_every_location_buffer_has_the_pool_index_dtype():
    runner = make_runner(ToyWorld.build([2]))
    for name in ("req_pool_indices", "seq_lens", "out_cache_loc", "out_cache_loc_swa"):
        assert runner.buffers.inputs[name].dtype == LOC_DTYPE, name


def test_populate_refuses_a_batch_whose_index_dtype_differs():
    world = ToyWorld.build([2, 3])
    runner = make_runner(world)
    batch = world.next_decode_batch([0, 1])
    batch.out_cache_loc_swa = batch.out_cache_loc_swa.long()
    with pytest.raises(IndexContractError, match="out_cache_loc_swa has dtype torch.int64"):
        runner.replay(batch)


def _changed_slots(before: list[torch.Tensor], after: list[torch.Tensor]) -> list[set[int]]:
    return [set(torch.nonzero((a != b).flatten(1).any(1)).flatten().tolist()) for a, b in zip(after, before)]


# Written out here rather than read from the policy under test: padded rows attend over one token of
# the padding request and write only to padding slot 0.
EXPECTED_FILL = {
    "input_ids": 0,
    "req_pool_indices": 0,
    "seq_lens": 1,
    "positions": 0,
    "out_cache_loc": 0,
    "out_cache_loc_swa": 0,
}
CASES = sorted({(b, raw) for b in BUCKETS for raw in (b - 1, b, b + 1) if 1 <= raw <= MAX_BS})


@pytest.mark.parametrize("bucket, raw_bs", CASES)
def test_padded_tail_holds_its_fill_and_writes_only_the_padding_slot(bucket, raw_bs):
    world = ToyWorld.build([3 + i % 5 for i in range(MAX_BS)])
    runner = make_runner(world)
    runner.replay(world.next_decode_batch(range(MAX_BS), token_seed=1))  # fills every row with live slots
    rows = list(range(MAX_BS - raw_bs, MAX_BS))[::-1]  # other requests, other slots
    batch = world.next_decode_batch(rows, token_seed=2)
    before = world.kv_snapshot()
    runner.replay(batch)
    bs = runner.bucket_for(raw_bs)
    for name, fill in EXPECTED_FILL.items():
        tail = runner.buffers.inputs[name][raw_bs:bs]
        assert torch.all(tail == fill), f"{name} tail {tail.tolist()} != {fill}"
    # Only this batch's slots (and the padding slot 0) may change in any K/V buffer.
    n_full = 2 * len(world.pool.full_kv_pool.k_buffer)
    allowed_full = set(batch.out_cache_loc.tolist()) | {0}
    allowed_swa = set(batch.out_cache_loc_swa.tolist()) | {0}
    for i, changed in enumerate(_changed_slots(before, world.kv_snapshot())):
        allowed = allowed_full if i < n_full else allowed_swa
        assert changed <= allowed, f"buffer {i}: padding wrote live slots {sorted(changed - allowed)}"


@pytest.mark.parametrize("backend", ["tape", "eager"])
@pytest.mark.parametrize("raw_bs", [1, 3, 8, 13, 30])
def test_replay_equals_eager_over_the_real_pool(backend, raw_bs):
    world = ToyWorld.build([2 + (7 * i) % 11 for i in range(MAX_BS)], seed=raw_bs)
    runner = make_runner(world, backend)
    for step in range(3):  # several steps: windows slide, SWA slots get freed and reused
        batch = world.next_decode_batch(range(raw_bs), token_seed=step)
        before = world.kv_snapshot()
        graph_logits = runner.replay(batch).clone()
        graph_kv = world.kv_snapshot()
        world.restore(before)
        world.target.prepare_graph_metadata(batch)
        eager_logits = world.target.graph_forward(batch)
        torch.testing.assert_close(graph_logits, eager_logits, rtol=0, atol=1e-6)
        # Every slot but the padding slot holds the same K/V. Not bitwise: the padded batch runs its
        # projections at the bucket's shape, and BLAS may block (and round) a 4-row matmul unlike a
        # 3-row one (seen on AMD EPYC: 6e-7). A wrong slot or stale value is off by O(1).
        for g, e in zip(graph_kv, world.kv_snapshot()):
            torch.testing.assert_close(g[1:], e[1:], rtol=0, atol=1e-6)


def test_several_buckets_each_replay_their_own_graph():
    world = ToyWorld.build([4] * 16)
    runner = make_runner(world, max_bs=16)
    assert sorted(bs for bs, _ in runner.graphs) == [1, 2, 4, 8, 12, 16]
    for raw_bs in (16, 1, 5, 12, 2):
        batch = world.next_decode_batch(range(raw_bs), token_seed=raw_bs)
        before = world.kv_snapshot()
        got = runner.replay(batch).clone()
        world.restore(before)
        world.target.prepare_graph_metadata(batch)
        torch.testing.assert_close(got, world.target.graph_forward(batch), rtol=0, atol=1e-6)


def test_graph_modes_resolve():
    assert resolve_mode("auto", "cpu") == "tape"
    assert resolve_mode("off") == "off"
    with pytest.raises(ValueError, match="graph mode"):
        resolve_mode("sometimes")
    with pytest.raises(ValueError, match="CUDA device"):
        resolve_mode("cuda", "cpu")


def test_decode_inputs_carry_exactly_the_fields_of_the_table():
    declared = [f.name for f in dataclasses.fields(DecodeInputs) if f.name != "kv_len"]
    assert declared == list(DECODE_FIELDS)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("raw_bs", [1, 3, 13])
def test_cuda_graph_replay_equals_eager(raw_bs):
    world = ToyWorld.build([2 + i % 7 for i in range(16)], device="cuda")
    runner = make_runner(world, "cuda", max_bs=16)
    batch = world.next_decode_batch(range(raw_bs))
    before = world.kv_snapshot()
    got = runner.replay(batch).clone()
    world.restore(before)
    world.target.prepare_graph_metadata(batch)
    torch.testing.assert_close(got, world.target.graph_forward(batch), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@needs_cuda
def test_cuda_padded_tail_holds_its_fill():
    world = ToyWorld.build([3] * 16, device="cuda")
    runner = make_runner(world, "cuda", max_bs=16)
    runner.replay(world.next_decode_batch(range(16)))
    runner.replay(world.next_decode_batch([15, 14, 13]))
    for name, fill in EXPECTED_FILL.items():
        assert torch.all(runner.buffers.inputs[name][3:4] == fill), name


def test_kv_len_buckets_key_the_graphs_and_bound_can_run():
    world = ToyWorld.build([3, 9, 20, 30], max_context_len=48)
    runner = GraphRunner(
        world.target, make_backend("tape"), max_bs=4, vocab_size=32, is_hybrid_swa=True, kv_len_buckets=[16, 32]
    )
    runner.capture()
    assert sorted(runner.graphs) == [(bs, kv) for bs in (1, 2, 4) for kv in (16, 32)]
    short = world.next_decode_batch([0, 1])  # seq_lens 4, 10
    assert runner.kv_bucket_for(short) == 16
    long = world.next_decode_batch([2, 3])  # seq_lens 21, 31
    assert runner.kv_bucket_for(long) == 32 and runner.can_run(long)
    before = world.kv_snapshot()
    got = runner.replay(long).clone()
    world.restore(before)
    world.target.prepare_graph_metadata(long)
    torch.testing.assert_close(got, world.target.graph_forward(long), rtol=0, atol=1e-6)
    while world.seq_lens[3] < 32:
        world.next_decode_batch([3])
    too_long = world.next_decode_batch([3])  # seq_len 34 > 32
    assert not runner.can_run(too_long)
    with pytest.raises(ValueError, match="exceeds the largest KV bucket"):
        runner.kv_bucket_for(too_long)


def test_engine_kv_len_buckets_are_few_and_end_at_the_context():
    from harness.engine.model_runner import kv_len_buckets

    assert kv_len_buckets(192) == [64, 128, 192]
    assert kv_len_buckets(1024) == [64, 128, 256, 512, 1024]
    assert kv_len_buckets(4096) == [64, 128, 256, 512, 1024, 2048, 4096]
    assert kv_len_buckets(4100) == [64, 128, 256, 512, 1024, 2048, 4100]  # not 4096 and 4100
    assert len(kv_len_buckets(32768)) == 10  # was 19 with 1.5x steps: x 8 batch buckets
    for context in (50, 64, 100, 128, 1500, 4100, 32768):
        buckets = kv_len_buckets(context)
        assert buckets[-1] == context and buckets == sorted(set(buckets))
        assert all(b / a <= 2 for a, b in zip(buckets, buckets[1:-1]))
        assert len(buckets) == 1 or 1.25 <= buckets[-1] / buckets[-2] < 2.5


@pytest.mark.parametrize("raw_bs", [1, 2, 3, 5, 8, 12, 16])
def test_a_target_translating_through_the_memo_in_its_body_replays_equal_to_eager_at_every_bucket(raw_bs):
    """Issue 31: the memo is flushed before every bucket's warm-up and capture, not only the first. Here the body
    itself translates the write loc through the pool's memo (no pre-set SWA loc): a memo left from the warm-up, or
    from the bucket captured before, would freeze that run's translation into the graph."""
    world = ToyWorld.build([2 + (5 * i) % 9 for i in range(16)], seed=raw_bs, max_bs=16)
    world.target.translate_in_body = True
    runner = make_runner(world, max_bs=16)  # buckets 16, 12, 8, 4, 2, 1: captured largest first
    for step in range(3):
        batch = world.next_decode_batch(range(raw_bs), token_seed=step)
        before = world.kv_snapshot()
        graph_logits = runner.replay(batch).clone()
        graph_kv = world.kv_snapshot()
        world.restore(before)
        world.pool.invalidate_loc_cache()
        world.target.prepare_graph_metadata(batch)
        eager_logits = world.target.graph_forward(batch)
        torch.testing.assert_close(graph_logits, eager_logits, rtol=0, atol=1e-6)
        for g, e in zip(graph_kv, world.kv_snapshot()):
            torch.testing.assert_close(g[1:], e[1:], rtol=0, atol=1e-6)
