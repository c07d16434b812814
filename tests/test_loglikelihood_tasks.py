"""A loglikelihood task in a plan (issue 54, item 3): lm-eval's multiple-choice samples read back as items with their
choices' scores, the arms paired on per-choice loglikelihoods (``compare_choices``), and the plan's lm-eval run asked
with the tokenizer it needs. No server: the end-to-end run is ``nox -s choice_accuracy`` (suites/plans/cpu-choice.yaml)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.evals.compare import logprob_axis
from harness.evals.logprobs import LogprobLimits, LogprobThresholds, compare_choices
from harness.evals.results import ChoiceScore, ItemResult, RunRecord, RunResult, ServedIdentity, Verdict
from harness.evals.samples import parse_samples
from harness.evals.tasks import LOGLIKELIHOOD_TASKS, frozen_spec
from harness.jobs.plan_file import plan_from_mapping

SPEC = LOGLIKELIHOOD_TASKS["choice_style"]
CONTEXT = "Question: Ethan picks 19 plums. How many bags?\nAnswer:"


def _sample(doc_id: int, lls: list[float], target: int, filt: str = "none") -> dict:
    """One record as lm-eval 0.4.13 logs a multiple-choice item (its numbers and booleans as strings)."""
    choices = [" 1", " 2", " 7", " 15"]
    return {
        "doc_id": doc_id,
        "target": str(target),
        "arguments": {f"gen_args_{c}": {"arg_0": CONTEXT, "arg_1": choices[c]} for c in range(4)},
        "resps": [[[str(ll), str(c == 0)]] for c, ll in enumerate(lls)],
        "filtered_resps": [[str(ll), str(c == 0)] for c, ll in enumerate(lls)],
        "filter": filt,
        "acc": float(max(range(4), key=lambda c: lls[c]) == target),
    }


def test_multiple_choice_samples_become_items_with_each_choices_score(tmp_path: Path) -> None:
    path = tmp_path / "samples_swa_choice_style_x.jsonl"
    rows = [_sample(1, [-3.0, -1.0, -2.0, -9.0], 1), _sample(0, [-1.5, -4.0, -2.0, -3.0], 2)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    items = parse_samples(path, SPEC, lambda context, continuation: len(continuation.split()) + 1)
    assert [i.item_id for i in items] == ["choice_style/0", "choice_style/1"]
    first, second = items
    assert first.prompt == CONTEXT and first.gold == "2" and first.extracted == "0" and first.response == " 1"
    assert not first.correct and second.correct and second.extracted == "1"
    assert [c.loglikelihood for c in second.choices] == [-3.0, -1.0, -2.0, -9.0]
    assert [c.greedy for c in second.choices] == [True, False, False, False] and second.choices[0].tokens == 2
    again = ItemResult.from_dict(json.loads(json.dumps(second.to_dict())))  # the run's JSON keeps them
    assert again.choices == second.choices


def test_a_multiple_choice_record_with_fewer_scores_than_choices_names_the_item(tmp_path: Path) -> None:
    row = _sample(3, [-1.0, -2.0, -3.0, -4.0], 0)
    row["resps"] = row["resps"][:3]
    path = tmp_path / "samples_swa_choice_style_x.jsonl"
    path.write_text(json.dumps(row))
    with pytest.raises(ValueError, match="item 3: 3 scores for 4 choices"):
        parse_samples(path, SPEC)


def _choices(lls: list[float], tokens: int = 10) -> tuple[ChoiceScore, ...]:
    return tuple(ChoiceScore(ll, False, tokens) for ll in lls)


def test_choices_are_compared_per_token_their_distribution_by_kl_and_a_changed_pick_parts() -> None:
    off = _choices([-10.0, -12.0, -15.0, -11.0])
    same = compare_choices("i", off, off)
    assert (same.max_abs_delta, same.max_kl, same.parted_at, same.compared) == (0.0, 0.0, None, 4)
    moved = compare_choices("i", _choices([-10.0, -12.0, -15.0, -9.0]), off)  # choice 3 gains 2 nats over 10 tokens
    assert moved.max_abs_delta == pytest.approx(0.2) and moved.parted_at == 0  # the pick went from 0 to 3
    p = [math.exp(x) for x in (-10.0, -12.0, -15.0, -11.0)]
    q = [math.exp(x) for x in (-10.0, -12.0, -15.0, -9.0)]
    p, q = [x / sum(p) for x in p], [x / sum(q) for x in q]
    assert moved.max_kl == pytest.approx(sum(a * math.log(a / b) for a, b in zip(p, q)))
    unknown = compare_choices("i", _choices([-9.0, -12.0, -15.0, -11.0], 0), _choices([-10.0, -12.0, -15.0, -11.0], 0))
    assert unknown.max_abs_delta == pytest.approx(1.0)  # no token count: the whole sum, held to per-token limits
    with pytest.raises(ValueError, match="3 choices scored in one arm, 4 in the other"):
        compare_choices("i", off[:3], off)


def _run(arm: str, items: list[ItemResult]) -> RunResult:
    identity = ServedIdentity("harness", "x", "m", flags={"dtype": "float32"})
    return RunResult(
        "choice_style", arm, "m", True, None, items, 1.0, RunRecord(arm, served_by="harness", identity=identity)
    )


def test_the_logprob_axis_of_a_loglikelihood_task_judges_the_per_token_change_not_the_kl() -> None:
    limits = LogprobThresholds("harness/float32", LogprobLimits(1e-4, 1e-12), LogprobLimits(1e-2, 1e-10), seeds=20)
    base = ItemResult("choice_style/0", CONTEXT, "0", " 1", "0", True, choices=_choices([-1.0, -3.0, -4.0, -5.0]))
    noise = ItemResult("choice_style/0", CONTEXT, "0", " 1", "0", True, choices=_choices([-1.0, -3.0 + 1e-4, -4, -5]))
    wrong = ItemResult("choice_style/0", CONTEXT, "0", " 2", "1", False, choices=_choices([-1.0, -0.5, -4.0, -5.0]))
    key = {"harness/float32": limits}
    clean = logprob_axis([(noise, base)], _run("on", [noise]), key)
    assert clean is not None and clean.kl.max > limits.red.max_kl  # a four-way KL a next-token limit would flag
    assert clean.verdict is Verdict.GREEN and "not judged" in clean.reason, clean
    broken = logprob_axis([(wrong, base)], _run("on", [wrong]), key)
    assert broken is not None and broken.verdict is Verdict.RED and broken.parted == 1, broken


def test_a_plan_runs_a_loglikelihood_task_in_its_own_lm_eval_step_with_the_tokenizer() -> None:
    plan = plan_from_mapping(
        {
            "models": [{"name": "fixtures/models/gemma2-tiny-swa", "served": "m"}],
            "arms": [{"name": "on", "purpose": "p", "role": "baseline"}, {"name": "off", "purpose": "q"}],
            "tasks": ["gsm_style", "choice_style"],
            "limit": 4,
            "one_step_per_arm": True,
            "out": "/tmp/x",
        }
    )
    generated, scored = plan.runs[0].evals
    assert [t.name for t in generated.tasks] == ["gsm_style"] and generated.out.name == "all"
    assert [t.name for t in scored.tasks] == ["choice_style"] and scored.out.name == "choice_style"
    gen_args = generated.command("http://h").argv[generated.command("http://h").argv.index("--model_args") + 1]
    args = scored.command("http://h").argv[scored.command("http://h").argv.index("--model_args") + 1]
    assert "tokenized_requests=False" in gen_args and "tokenizer_backend=None" in gen_args
    assert "tokenized_requests=True,tokenizer_backend=huggingface,tokenizer=fixtures/models/gemma2-tiny-swa" in args
    assert frozen_spec("choice_style").output == "multiple_choice"


def test_a_chat_model_cannot_take_a_loglikelihood_task() -> None:
    with pytest.raises(ValueError, match="choice_style are scored by loglikelihood.*chat model\\(s\\) chatty"):
        plan_from_mapping(
            {
                "models": [{"name": "chatty", "chat": True}],
                "arms": [{"name": "on", "purpose": "p", "role": "baseline"}, {"name": "off", "purpose": "q"}],
                "tasks": ["choice_style"],
            }
        )
