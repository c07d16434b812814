"""Overlap scheduling's own edges (``harness/engine/overlap.py``): the options it refuses, the SWA pool it sizes, a
cancel of a request in the step in flight, and placeholders resolved before the forward that reads them."""

from __future__ import annotations

import pytest

from harness.engine import EngineConfig, SamplingParams
from harness.engine.forward_batch import ForwardMode
from harness.engine.overlap import FUTURE_TOKEN, Schedule
from harness.engine.scheduler import swa_slots_needed
from tests.engine_helpers import make_engine

LIMITS = dict(max_running_requests=4, chunk_size=8, max_prefill_tokens=16, max_context_len=96)
PROMPTS = [[3 + i, 9, 27, 4 + i, 11, 5, 8 + i] * (2 + i) for i in range(3)]


def test_the_schedule_is_checked_and_overlap_refuses_drafts():
    with pytest.raises(ValueError, match="schedule must be one of"):
        EngineConfig(model_path="m", schedule="eager")
    with pytest.raises(ValueError, match="needs speculative_tokens 0"):
        EngineConfig(model_path="m", schedule="overlap", speculative_tokens=2)
    assert EngineConfig(model_path="m", schedule="overlap").schedule is Schedule.OVERLAP


@pytest.mark.parametrize("page_size", [1, 4])
def test_two_steps_in_flight_hold_a_page_per_request_and_a_prefill_more(page_size):
    sizes = {
        steps: swa_slots_needed(
            max_running=4, window=8, max_prefill_tokens=16, page_size=page_size, steps_in_flight=steps
        )
        for steps in (1, 2)
    }
    assert sizes[2] - sizes[1] == 4 * page_size + 16 + (-16 % page_size), sizes


def test_a_decode_input_is_a_placeholder_until_the_step_before_has_sampled():
    engine = make_engine("gemma2", graphs="off", schedule="overlap", **LIMITS)
    req = engine.add_request(PROMPTS[0][:6], SamplingParams(max_new_tokens=4))
    assert engine.step().mode is ForwardMode.EXTEND  # the prefill ran; the first decode was launched before it did
    sched, batch = engine._in_flight
    assert sched.mode is ForwardMode.DECODE and [int(t) for t in batch.input_ids] == [FUTURE_TOKEN]
    assert [(f.req, f.position) for f in sched.futures] == [(req, 6)] and len(req.output_ids) == 1
    assert engine.step().mode is ForwardMode.DECODE  # it ran on the token the prefill sampled
    assert [int(t) for t in batch.input_ids] == req.output_ids[:1]
    engine.run_until_done()
    assert len(req.output_ids) == 4 and engine.pools_idle()


def test_a_cancel_in_flight_runs_the_step_first_and_changes_no_other_answer():
    params = SamplingParams(max_new_tokens=12)
    sync = make_engine("gemma2", graphs="off", **LIMITS).generate(PROMPTS[1:], params)
    engine = make_engine("gemma2", graphs="off", schedule="overlap", **LIMITS)
    reqs = [engine.add_request(p, params) for p in PROMPTS]
    finished = {}
    while engine.has_work():
        out = engine.step()
        finished.update({o.rid: o for o in out.finished})
        if out.mode is ForwardMode.DECODE and reqs[0] in engine.scheduler.running:
            assert reqs[0] in engine._in_flight[0].reqs, "the decode in flight holds every running request"
            assert engine.cancel(reqs[0]), "a running request was not cancelled"
    assert reqs[0].rid not in finished and engine.pools_idle()
    assert [finished[r.rid].output_ids for r in reqs[1:]] == [o.output_ids for o in sync]
