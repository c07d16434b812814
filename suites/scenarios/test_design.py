"""Design properties of the memoised translation, stated as numbers.

Per forward the full -> SWA mapping is read exactly once for the batch's write locations plus once
per distinct sliding window for the read indices — however many SWA layers the model has, on the
eager and the graph path alike (a graph that translates again inside has captured the slow path)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from fixtures.checkpoints import _ROOT, write_checkpoint
from harness.engine import SamplingParams
from harness.opcount import OpCounter
from suites.conftest import ENGINE_LIMITS
from suites.hooks import on_every_forward

pytestmark = pytest.mark.structural  # op counts / log lines: design properties, not outputs

S, F = "sliding_attention", "full_attention"
LAYOUTS = {1: [S, F, F, F, F, F], 2: [S, F, S, F, F, F], 5: [S, S, S, S, S, F]}


@cache
def layout_checkpoint(num_swa: int) -> Path:
    return write_checkpoint(
        "gemma2",
        _ROOT / f"gemma2-{num_swa}swa",
        seed=num_swa,
        num_hidden_layers=6,
        layer_types=LAYOUTS[num_swa],
        tie_word_embeddings=False,
    )


@pytest.mark.parametrize("graphs", ["tape", "off"])
@pytest.mark.parametrize("num_swa", sorted(LAYOUTS))
def test_mapping_is_read_once_for_writes_and_once_per_window_per_forward(target, num_swa, graphs):
    engine = target.make_engine(layout_checkpoint(num_swa), graphs=graphs, **ENGINE_LIMITS)
    mapping = engine.runner.allocator.full_to_swa_index_mapping
    windows = len(engine.runner.attn_backend.windows)
    seen: list[tuple[str, bool, int]] = []

    def count(batch, uses_graph):
        counter = OpCounter(reads={"mapping": mapping})
        counter.__enter__()
        return counter

    def record(batch, uses_graph, counter):
        counter.__exit__(None, None, None)
        seen.append((batch.forward_mode.value, uses_graph, counter.reads["mapping"]))

    on_every_forward(engine, count, record)
    prompts = [[(7 * i + j) % 127 + 1 for j in range(5 + 9 * i)] for i in range(5)]
    engine.generate(prompts, SamplingParams(max_new_tokens=8, ignore_eos=True))
    assert {(mode, graph) for mode, graph, _ in seen} >= ({("extend", False), ("decode", graphs == "tape")})
    wrong = [(mode, "graph" if graph else "eager", reads) for mode, graph, reads in seen if reads != 1 + windows]
    assert not wrong, f"{num_swa} SWA layers: expected {1 + windows} mapping reads per forward, got {wrong[:4]}"
