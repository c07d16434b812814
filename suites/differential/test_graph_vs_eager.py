"""Invariant 1: graph replay equals eager execution — teacher-forced logits over whole generations.

The same continuations are fed through an engine with graphs off and one with the CPU graph tape,
in phases of shrinking batches (20, then 7, then 3 requests), so replays pad up to a bucket right
after larger replays left live slots in every row. Numerical drift is ~1e-6; corruption is O(1).
"""

from __future__ import annotations

import pytest

from fixtures.checkpoints import untied_checkpoint
from suites.conftest import ENGINE_LIMITS, TRAINED_CHECKPOINTS

TOLERANCE = 1e-4  # fp32


def phases(vocab: int) -> list[list[tuple[list[int], list[int]]]]:
    def seqs(n: int, offset: int) -> list[tuple[list[int], list[int]]]:
        return [
            (
                [(offset + 7 * i + j) % (vocab - 1) + 1 for j in range(3 + (11 * i) % 37)],
                [(offset + 5 * i + 3 * j) % (vocab - 1) + 1 for j in range(24 + (3 * i) % 17)],
            )
            for i in range(n)
        ]

    return [seqs(20, 0), seqs(7, 101), seqs(3, 57)]


def graph_vs_eager(target, checkpoint) -> None:
    eager = target.make_engine(checkpoint, graphs="off", **ENGINE_LIMITS)
    graph = target.make_engine(checkpoint, graphs="tape", **ENGINE_LIMITS)
    for phase, sequences in enumerate(phases(eager.model_config.vocab_size)):
        expected = eager.teacher_forced_logits(sequences)
        got = graph.teacher_forced_logits(sequences)
        for i, (e, g) in enumerate(zip(expected, got)):
            diff = (e - g).abs().max().item()
            assert diff <= TOLERANCE, (
                f"phase {phase} ({len(sequences)} requests), request {i}: graph vs eager logits differ by {diff:.3g} "
                f"(first bad step {int((e - g).abs().amax(-1).gt(TOLERANCE).nonzero()[0])})"
            )
    assert graph.pools_idle() and eager.pools_idle()


@pytest.mark.parametrize("arch", ["gemma2", "gemma3_text", "qwen3"])
def test_graph_equals_eager_on_random_checkpoints(target, arch):
    graph_vs_eager(target, untied_checkpoint(arch))


@pytest.mark.parametrize("name", sorted(TRAINED_CHECKPOINTS))
def test_graph_equals_eager_on_the_trained_checkpoint(target, name):
    graph_vs_eager(target, TRAINED_CHECKPOINTS[name])
