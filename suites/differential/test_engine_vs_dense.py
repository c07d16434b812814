"""The engine (pool, chunked prefill, window eviction, graph replays) against the dense no-cache
reference, which recomputes every sequence from scratch with explicit masks."""

from __future__ import annotations

import pytest

from fixtures.checkpoints import untied_checkpoint
from harness.model import reference_logits
from suites.conftest import ENGINE_LIMITS, TRAINED_CHECKPOINTS
from suites.differential.test_graph_vs_eager import TOLERANCE, phases


def engine_vs_dense(target, checkpoint) -> None:
    engine = target.make_engine(checkpoint, graphs="tape", **ENGINE_LIMITS)
    sequences = phases(engine.model_config.vocab_size)[0]
    got = engine.teacher_forced_logits(sequences)
    dense = reference_logits(engine.model, [p + c for p, c in sequences])
    for i, ((prompt, cont), g, d) in enumerate(zip(sequences, got, dense)):
        expected = d[len(prompt) - 1 : len(prompt) - 1 + len(cont)]
        diff = (g - expected).abs().max().item()
        assert diff <= TOLERANCE, f"request {i}: engine vs dense reference logits differ by {diff:.3g}"


@pytest.mark.parametrize("arch", ["gemma2", "gemma3_text", "qwen3"])
def test_engine_matches_dense_reference_on_random_checkpoints(target, arch):
    engine_vs_dense(target, untied_checkpoint(arch))


@pytest.mark.parametrize("name", sorted(TRAINED_CHECKPOINTS))
def test_engine_matches_dense_reference_on_the_trained_checkpoint(target, name):
    engine_vs_dense(target, TRAINED_CHECKPOINTS[name])
