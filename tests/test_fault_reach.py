"""The fault-effect table's reach readings (``bench.fault_reach``, ``bench.fault_effects``): a generation counts as
moved only where it differs from the clean one, a move within float noise is never called a fault's effect, and a
fault the job harms is never sent to look for an arm."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bench.fault_effects import CLEAN, EvalOutcome, reading
from bench.fault_reach import Cell, LogitReach, logit_reach, max_delta, noise, unreached_faults
from harness.evals.results import TokenLogprobs
from harness.evals.results import ItemResult


def _item(item_id: str, chosen: float, response: str = "42") -> ItemResult:
    lp = TokenLogprobs(("4", "2"), (chosen, -0.1), ((("4", chosen), ("5", -3.0)), (("2", -0.1), ("3", -4.0))))
    return ItemResult(item_id, "Q", "42", response, "42", True, logprobs=lp)


def test_only_generations_that_differ_count_and_their_largest_move_is_kept() -> None:
    clean = {"gsm_style": {"a": _item("a", -0.5), "b": _item("b", -0.5)}}
    fault = {"gsm_style": {"a": _item("a", -0.5), "b": _item("b", -0.5 + 2e-6)}}
    reach = logit_reach(fault, clean, "gsm_style")
    assert reach is not None and (reach.changed, reach.compared, reach.missing) == (1, 2, 0)
    assert reach.max_delta == pytest.approx(2e-6, rel=1e-3)
    assert logit_reach(clean, clean, "gsm_style") == LogitReach(0, 2, 0)
    assert logit_reach(fault, clean, "aime_style") is None  # a task neither eval ran is not "unreached"


def test_a_move_within_float_noise_is_read_as_noise_and_one_beyond_it_as_missed(tmp_path: Path) -> None:
    """An eval whose generations moved by 2e-6 is noise (below the AMBER limit); by 3 nats with the axis GREEN it
    is a miss the table must show, never 'not reached'."""
    (tmp_path / CLEAN).mkdir()
    green = SimpleNamespace(task="gsm_style", logprobs=SimpleNamespace(verdict=SimpleNamespace(name="GREEN")))
    out = EvalOutcome("ckpt", "some-fault", 0, 1.0, [], tmp_path / "some-fault", False, comparisons=[green])
    out.reach = {"gsm_style": LogitReach(3, 700, 0, max_delta=2e-6, max_kl=1e-13)}
    assert reading(out).startswith("moves logits by float noise only")
    out.reach = {"gsm_style": LogitReach(3, 700, 0, max_delta=3.0, max_kl=2.0)}
    assert "missed" in reading(out)
    out.reach = {"gsm_style": LogitReach(0, 700, 0)}
    assert reading(out).startswith("changes no logit")


def test_a_cell_is_reached_beyond_noise_or_when_the_engine_stopped() -> None:
    assert not Cell(17, 96, max_delta=2.4e-5).reached and noise() > 2.4e-5
    assert Cell(45, 96, max_delta=30.0).reached
    assert Cell(None, 96, stopped_by="DoubleFreeError: free_swa: ...").reached


def test_max_delta_reads_the_shared_positions_and_the_first_parted_one() -> None:
    logits = torch.zeros(3, 4)
    a = SimpleNamespace(output_ids=[1, 2, 3], logits=logits)
    parted = logits.clone()
    parted[1, 2] = 5.0  # the position where the tokens part: its context is still shared
    parted[2, 0] = 50.0  # past it: another context, not compared
    b = SimpleNamespace(output_ids=[1, 0, 3], logits=parted)  # the tokens part at position 1
    moved = float((torch.log_softmax(parted[1].double(), -1) - torch.log_softmax(logits[1].double(), -1)).abs().max())
    assert max_delta(a, b) == pytest.approx(moved)
    b.output_ids = [1, 2, 3]  # never parted: every position's context is shared, the 50 at position 2 counts
    assert max_delta(a, b) > 45


def test_only_faults_the_job_never_harmed_are_sent_to_look_for_an_arm(tmp_path: Path) -> None:
    rows = [
        {"fault": "clean", "verdict": "GREEN", "logprob_verdict": "GREEN"},
        {"fault": "harmless", "verdict": "GREEN", "logprob_verdict": "GREEN"},
        {"fault": "harmless", "verdict": "GREEN", "logprob_verdict": "AMBER"},
        {"fault": "loud", "verdict": "GREEN", "logprob_verdict": "RED"},
        {"fault": "refused", "verdict": "ERROR", "logprob_verdict": None},
    ]
    path = tmp_path / "fault-effects.json"
    path.write_text(json.dumps(rows))
    assert unreached_faults(path) == ["harmless"]


def test_a_second_turn_repeats_its_first_turns_prompt_and_answer_whole() -> None:
    """The chat arm's point is that a second prompt holds a finished request's whole key (prompt and answer): each
    second turn starts with its own first turn's ids, then the follow-up, and the outputs come back in prompt order."""
    from bench.fault_reach import Config, generate
    from harness.engine import SamplingParams

    texts = ["Question: 1 + 1?\nAnswer:", "Question: 2 + 3?\nAnswer:", "Question: 7 - 4?\nAnswer:"]
    params = SamplingParams(max_new_tokens=4, ignore_eos=True)
    config = Config("two turns", {"graphs": "off", "page_size": 16}, "turns")
    out = generate(config, texts, params)
    assert len(out) == 2 * len(texts)
    first, second = out[: len(texts)], out[len(texts) :]
    assert [o.output_ids for o in first] == [
        o.output_ids for o in generate(Config("one", config.engine), texts, params)
    ]
    for a, b in zip(first, second):
        assert b.prompt_ids[: len(a.prompt_ids) + len(a.output_ids)] == a.prompt_ids + a.output_ids
        assert len(b.prompt_ids) > len(a.prompt_ids) + len(a.output_ids)  # and a follow-up after them
