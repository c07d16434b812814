"""Graph vs eager on every graph the runner captured, not only those a workload happens to reach.

For every decode batch-size bucket, a batch of exactly that many requests decodes from sequence
length 63 to 128, crossing every KV-length bucket edge (b - 1, b, b + 1 around 64 and 96, up to the
largest, 128), with teacher-forced logits compared against graphs off; extend graphs are covered
by prompts whose first chunk fills each token bucket. The last test checks that every captured
(bs, kv_len) decode graph and every extend graph was replayed at least once.
"""

from __future__ import annotations

import pytest

from fixtures.checkpoints import untied_checkpoint
from harness.graph.runner import capture_bs_for
from suites.conftest import ENGINE_LIMITS
from suites.differential.test_graph_vs_eager import TOLERANCE
from suites.hooks import on_every_forward

PROMPT, CONTEXT = 62, ENGINE_LIMITS["max_context_len"]
BS_BUCKETS = capture_bs_for(ENGINE_LIMITS["max_running_requests"])


class Replays:
    def __init__(self, engine) -> None:
        self.engine, self.decode, self.extend = engine, set(), set()
        on_every_forward(engine, self.before)

    def before(self, batch, uses_graph):
        runner = self.engine.runner
        if uses_graph:
            self.decode.add(
                (runner.graph_runner.bucket_for(batch.batch_size), runner.graph_runner.kv_bucket_for(batch))
            )
        elif runner.extend_graph_runner is not None and runner.extend_graph_runner.can_run(batch):
            self.extend.add(runner.extend_graph_runner.bucket_for(batch.input_ids.numel()))


@pytest.fixture(scope="module")
def engines(target):
    graph = target.make_engine(untied_checkpoint("gemma2"), graphs="tape", **ENGINE_LIMITS)
    return Replays(graph), target.make_engine(untied_checkpoint("gemma2"), graphs="off", **ENGINE_LIMITS)


def _compare(engines, sequences, what: str) -> None:
    replays, eager = engines
    got = replays.engine.teacher_forced_logits(sequences)
    expected = eager.teacher_forced_logits(sequences)
    for i, (g, e) in enumerate(zip(got, expected)):
        bad = (g - e).abs().amax(-1)
        assert float(bad.max()) <= TOLERANCE, (
            f"{what}, request {i}: graph vs eager differ by {float(bad.max()):.3g} at decode step "
            f"{int(bad.gt(TOLERANCE).nonzero()[0])} (sequence length {len(sequences[i][0]) + int(bad.gt(TOLERANCE).nonzero()[0])})"
        )
    assert replays.engine.pools_idle() and eager.pools_idle()


def test_every_captured_graph_matches_eager(engines):
    """One test, so that the coverage check sees every replay (xdist spreads separate tests over workers)."""
    replays = engines[0]
    for bs in BS_BUCKETS:
        sequences = [
            (
                [(11 * i + j) % 120 + 1 for j in range(PROMPT)],
                [(5 * i + 3 * j) % 120 + 1 for j in range(CONTEXT - PROMPT)],
            )
            for i in range(bs)
        ]
        _compare(engines, sequences, f"batch of {bs}")
    runner = replays.engine.runner.extend_graph_runner
    chunk = ENGINE_LIMITS["chunk_size"]
    for tokens in runner.capture_tokens:
        lengths = [chunk] * (tokens // chunk) + ([tokens % chunk] if tokens % chunk else [])
        _compare(
            engines,
            [([(3 * i + j) % 120 + 1 for j in range(n)], [7, 8, 9]) for i, n in enumerate(lengths)],
            f"extend of {tokens} tokens",
        )
    missing_decode = sorted(set(replays.engine.runner.graph_runner.graphs) - replays.decode, key=str)
    missing_extend = sorted(set(runner.graphs) - replays.extend)
    assert not missing_decode and not missing_extend, (
        f"captured but never compared against eager: decode {missing_decode}, extend {missing_extend}"
    )
