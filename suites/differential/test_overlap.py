"""Overlap (one step ahead) scheduling against sync scheduling, on any target: the same requests give the same
outputs (``harness/engine/overlap.py``). Teacher-forced logits are compared bit for bit where both schedules run
the same batches and to ``TOLERANCE`` where they do not (waiting requests are admitted a step later, as in
SGLang and vLLM); greedy generations that stop on tokens the scheduler cannot foresee (a request that finishes
while it is in the next step runs a void row) are compared token for token. Prefix cache on and off, a roomy pool
and a tight one (requests wait, the tree evicts), pages 1 and 4; the window sweep of a step's commit runs while
the next step, already launched, still reads the window."""

from __future__ import annotations

import random

import pytest
import torch

from fixtures.checkpoints import untied_checkpoint
from harness.engine.overlap import Schedule
from harness.engine.request import SamplingParams
from suites.differential.test_graph_vs_eager import TOLERANCE

pytestmark = pytest.mark.usefixtures("swa_write_spy", "free_swa_watch")

SCHEDULES = [s.value for s in Schedule]  # the suites that drive the engine run both ways

POOLS = {  # roomy: every request runs at once; tight: four at a time in a full pool that makes them wait
    "roomy": dict(max_running_requests=8, chunk_size=10, max_prefill_tokens=24, max_context_len=128),
    "tight": dict(
        max_running_requests=4, chunk_size=10, max_prefill_tokens=24, max_context_len=128, full_pool_size=192
    ),
}


def sequences(vocab: int, seed: int) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    stem = [rng.randrange(1, vocab) for _ in range(24)]  # shared: the prefix cache hits once the first finishes
    return [
        (
            (stem if i % 2 else []) + [rng.randrange(1, vocab) for _ in range(9 + 6 * i)],
            [rng.randrange(1, vocab) for _ in range(16)],
        )
        for i in range(6)
    ]


def run(engine, seqs, stop: tuple[int, ...]) -> tuple[list[torch.Tensor], list[list[int]]]:
    logits = engine.teacher_forced_logits(seqs)
    outputs = engine.generate([p for p, _ in seqs], SamplingParams(max_new_tokens=20, stop_token_ids=stop))
    assert engine.pools_idle(), "a request did not give back everything it held"
    return logits, [o.output_ids for o in outputs]


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("pool", sorted(POOLS))
@pytest.mark.parametrize("prefix_cache", [False, True], ids=["cache-off", "cache-on"])
def test_overlap_scheduling_gives_the_outputs_of_sync_scheduling(target, prefix_cache, pool, page_size):
    checkpoint = untied_checkpoint("gemma2")
    config = dict(graphs="off", page_size=page_size, prefix_cache=prefix_cache, **POOLS[pool])
    sync = target.make_engine(checkpoint, schedule="sync", **config)
    overlap = target.make_engine(checkpoint, schedule="overlap", **config)
    seqs = sequences(sync.model_config.vocab_size, seed=page_size)
    stop: tuple[int, ...] = ()
    for first in (True, False):  # the second round stops on tokens the first met, over the tree the first left
        expected_logits, expected = run(sync, seqs, stop)
        got_logits, got = run(overlap, seqs, stop)
        for i, (g, e) in enumerate(zip(got_logits, expected_logits)):
            diff = (g - e).abs().max().item()
            assert diff <= TOLERANCE, f"{pool} pool, request {i}: overlap vs sync logits differ by {diff:.3g}"
            if pool == "roomy" and first:  # no request stopped yet: no void row, the same batches
                assert torch.equal(g, e), (
                    f"request {i}: the same batches, yet overlap vs sync logits differ by {diff:.3g}"
                )
        assert got == expected, f"{pool} pool, stop tokens {stop}: overlap generated {got}, sync {expected}"
        stop = tuple(sorted({out[3] for out in expected if len(out) > 3}))  # met by sync decoding: requests stop
    assert any(len(out) < 20 for out in expected), "no request stopped early: the void rows were never exercised"
