"""Extend (prefill) batches through piecewise graphs keyed by token-count bucket.

Every extend replay is audited: padded tokens write K/V only to the padding slot (no slot the batch
does not own changes) and the padded tails of the location buffers hold the padding slot. Each
scenario also runs on an engine with graphs off, and teacher-forced logits must agree (invariant 1):
token counts at every bucket boundary (t-1, t, t+1) right after a full-width extend left live values
in every buffer row, prompts whose chunks end around the window edge, and mixed extend batches.
"""

from __future__ import annotations

import pytest

from fixtures.checkpoints import untied_checkpoint
from fixtures.scenarios.padding import mixed_batch_cases
from harness.engine import Engine
from harness.graph.extend_runner import capture_tokens_for
from suites.checks import expect_structure
from suites.conftest import ENGINE_LIMITS
from suites.differential.test_graph_vs_eager import TOLERANCE
from suites.hooks import changed_rows, kv_buffers, on_every_forward, recovering

CHUNK, MAX_TOKENS = ENGINE_LIMITS["chunk_size"], ENGINE_LIMITS["max_prefill_tokens"]
BUCKETS = capture_tokens_for(MAX_TOKENS)
WINDOW = 6  # the gemma2 test checkpoint's sliding_window


class ExtendAudit:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.replays = self.padded = 0
        on_every_forward(engine, self.before, self.after)

    def _graphed(self, batch) -> bool:
        runner = self.engine.runner.extend_graph_runner
        return runner is not None and runner.can_run(batch)

    def before(self, batch, uses_graph):
        return [t.clone() for _, t in kv_buffers(self.engine)] if self._graphed(batch) else None

    def after(self, batch, uses_graph, snapshot) -> None:
        if snapshot is None:
            return
        runner = self.engine.runner.extend_graph_runner
        real = batch.input_ids.numel()
        bucket = runner.bucket_for(real)
        self.replays += 1
        self.padded += bucket > real
        mapping = self.engine.runner.allocator.full_to_swa_index_mapping
        allowed = {
            "full": set(batch.out_cache_loc.tolist()) | {0},
            "swa": set(mapping[batch.out_cache_loc].tolist()) | {0},
        }
        for (kind, now), was in zip(kv_buffers(self.engine), snapshot):
            stray = changed_rows(was, now) - allowed[kind]
            assert not stray, (
                f"an extend of {real} tokens in bucket {bucket} wrote {kind} slots {sorted(stray)} it does not own"
            )
        for name in ("out_cache_loc", "out_cache_loc_swa"):
            tail = runner.buffers.inputs[name][real:bucket]
            expect_structure(bool((tail == 0).all()), f"padded tail of the extend graph's {name} is {tail.tolist()}")


@pytest.fixture(scope="module")
def engines(target) -> tuple[ExtendAudit, Engine]:
    graph = target.make_engine(untied_checkpoint("gemma2"), graphs="tape", **ENGINE_LIMITS)
    assert graph.runner.extend_graph_runner is not None, "graphs on, but no extend graph runner"
    return ExtendAudit(graph), target.make_engine(untied_checkpoint("gemma2"), graphs="off", **ENGINE_LIMITS)


def _sequences(lengths: list[int], seed: int, continuation: int = 6) -> list[tuple[list[int], list[int]]]:
    return [
        (
            [(seed + 7 * i + 3 * j) % 120 + 1 for j in range(n)],
            [(seed + 5 * i + j) % 120 + 1 for j in range(continuation)],
        )
        for i, n in enumerate(lengths)
    ]


def graph_equals_eager(engines, sequences) -> None:
    audit, eager = engines
    with recovering(audit.engine) as graph:
        got = graph.teacher_forced_logits(sequences)
    expected = eager.teacher_forced_logits(sequences)
    for i, (g, e) in enumerate(zip(got, expected)):
        diff = (g - e).abs().max().item()
        assert diff <= TOLERANCE, (
            f"request {i} (prompt {len(sequences[i][0])} tokens): extend graph vs eager logits differ by {diff:.3g}"
        )
    assert audit.engine.pools_idle() and eager.pools_idle()


def _split(total: int) -> list[int]:
    """Prompt lengths whose first extend step holds exactly ``total`` tokens (one chunk per request)."""
    return [CHUNK] * (total // CHUNK) + ([total % CHUNK] if total % CHUNK else [])


BOUNDARY_TOKENS = sorted({n for t in BUCKETS for n in (t - 1, t, t + 1) if 1 <= n <= MAX_TOKENS})


@pytest.mark.parametrize("tokens", BOUNDARY_TOKENS)
def test_token_count_bucket_boundaries_after_a_full_width_extend(engines, tokens):
    audit = engines[0]
    graph_equals_eager(engines, _sequences(_split(MAX_TOKENS), seed=1))  # every buffer row holds live values
    before = audit.padded
    graph_equals_eager(engines, _sequences(_split(tokens), seed=tokens))
    if tokens not in BUCKETS:
        assert audit.padded > before, f"{tokens} tokens never replayed a padded extend graph"


@pytest.mark.parametrize(
    "length",
    sorted(
        {WINDOW - 1, WINDOW, WINDOW + 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK - 1, 2 * CHUNK + WINDOW, 3 * CHUNK + 1}
    ),
)
def test_chunk_boundaries_against_the_window_edge(engines, length):
    graph_equals_eager(engines, _sequences([length, max(1, length - WINDOW)], seed=length, continuation=WINDOW + 2))


@pytest.mark.parametrize("case", mixed_batch_cases(WINDOW), ids=lambda c: c.name)
def test_mixed_extend_batches(engines, case):
    graph_equals_eager(engines, _sequences(list(case.prompt_lens), seed=len(case.prompt_lens)))


def test_extend_graphs_ran(engines):
    audit = engines[0]
    graph_equals_eager(engines, _sequences([5, 9, 30], seed=3))
    assert audit.replays > 0 and audit.engine.runner.paths["extend-graph"] > 0, dict(audit.engine.runner.paths)
