"""Invariant 2: padded rows of a graph batch write only to the padding slot, and the padded tail of
every static buffer holds its fill value — also right after a larger replay with other slots."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from fixtures.checkpoints import untied_checkpoint
from fixtures.scenarios.padding import (
    MixedBatch,
    PaddingCase,
    bucket_boundary_cases,
    mixed_batch_cases,
    mixed_batches,
    padding_cases,
)
from harness.engine import Engine, SamplingParams
from harness.graph.runner import capture_bs_for
from suites.checks import expect_structure
from suites.conftest import ENGINE_LIMITS, examples
from suites.hooks import changed_rows, kv_buffers, on_every_forward, recovering

MAX_BS = ENGINE_LIMITS["max_running_requests"]
BUCKETS = capture_bs_for(MAX_BS)
WINDOW = 6  # the gemma2 test checkpoint's sliding_window
# Written out here, not read from the policy under test: padded rows attend over one token of the
# padding request and write to padding slot 0 only.
EXPECTED_FILL = {
    "input_ids": 0,
    "req_pool_indices": 0,
    "seq_lens": 1,
    "positions": 0,
    "out_cache_loc": 0,
    "out_cache_loc_swa": 0,
}


class PaddingAudit:
    """Checks every graph replay of one engine; counts the replays that actually padded."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.padded_replays = 0
        on_every_forward(engine, self.before, self.after)

    def before(self, batch, uses_graph):
        return [t.clone() for _, t in kv_buffers(self.engine)] if uses_graph else None

    def after(self, batch, uses_graph, snapshot) -> None:
        if not uses_graph:
            return
        runner = self.engine.runner.graph_runner
        raw_bs = batch.batch_size
        bs = runner.bucket_for(raw_bs)
        self.padded_replays += bs > raw_bs
        mapping = self.engine.runner.allocator.full_to_swa_index_mapping
        allowed = {
            "full": set(batch.out_cache_loc.tolist()) | {0},
            "swa": set(mapping[batch.out_cache_loc].tolist()) | {0},
        }
        for (kind, now), was in zip(kv_buffers(self.engine), snapshot):
            stray = changed_rows(was, now) - allowed[kind]
            assert not stray, (
                f"a replay of {raw_bs} rows in bucket {bs} wrote {kind} slots {sorted(stray)} it does not own"
            )
        for name, fill in EXPECTED_FILL.items():
            tail = runner.buffers.inputs[name][raw_bs:bs]
            expect_structure(
                torch.all(tail == fill),
                f"padded tail of {name} is {tail.tolist()}, expected {fill} (raw_bs={raw_bs}, bs={bs})",
            )


@pytest.fixture(scope="module")
def audited(target) -> PaddingAudit:
    engine = target.make_engine(untied_checkpoint("gemma2"), graphs="tape", **ENGINE_LIMITS)
    return PaddingAudit(engine)


def run_case(audit: PaddingAudit, case: PaddingCase) -> None:
    wide = [[(7 * i + j) % 120 + 1 for j in range(3 + i % 5)] for i in range(case.previous_bs)]
    narrow = [[(5 * i + j) % 120 + 1 for j in range(2 + i % 9)] for i in range(case.raw_bs)]
    with recovering(audit.engine) as engine:
        engine.generate(wide, SamplingParams(max_new_tokens=3, ignore_eos=True))  # every row holds live slots
        engine.generate(narrow, SamplingParams(max_new_tokens=4, ignore_eos=True))
    assert engine.pools_idle()


@pytest.mark.parametrize("case", bucket_boundary_cases(BUCKETS, MAX_BS), ids=lambda c: c.name)
def test_bucket_boundaries_after_a_full_width_replay(audited, case):
    before = audited.padded_replays
    run_case(audited, case)
    if case.raw_bs != case.bucket:
        assert audited.padded_replays > before, "the case never replayed a padded batch"


@settings(max_examples=examples(4))
@given(case=padding_cases(BUCKETS, MAX_BS))
def test_generated_padding_cases(audited, case):
    run_case(audited, case)


def run_mixed(engine: Engine, case: MixedBatch) -> None:
    prompts = [[(3 * i + j) % 120 + 1 for j in range(n)] for i, n in enumerate(case.prompt_lens)]
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in case.new_tokens]
    with recovering(engine):
        engine.generate(prompts, params)
    assert engine.pools_idle()


@pytest.mark.parametrize("case", mixed_batch_cases(WINDOW), ids=lambda c: c.name)
def test_mixed_batches_around_the_window_edge(audited, case):
    run_mixed(audited.engine, case)


@settings(max_examples=examples(3))
@given(case=mixed_batches(WINDOW))
def test_generated_mixed_batches(audited, case):
    run_mixed(audited.engine, case)
