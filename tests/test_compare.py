"""Pairing, flips, verdicts and records of harness.evals.compare / harness.evals.results."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.evals import stats
from harness.evals.compare import (
    ItemMismatchError,
    Thresholds,
    common_prefix_chars,
    compare_runs,
    first_divergence,
    pair_items,
    summarize,
)
from harness.evals.formats import pp
from harness.evals.results import ItemDiff, ItemResult, RunRecord, RunResult, TaskComparison, Summary, Verdict
from harness.jobs.options import add_threshold_options, thresholds_from_options


def _item(i: int, correct: bool, response: str | None = None, suite: str = "gsm") -> ItemResult:
    text = response if response is not None else f"{i} + 1 = {i + 1}\n#### {i + 1 if correct else 0}"
    return ItemResult(f"{suite}/{i}", f"Question {i}", str(i + 1), text, str(i + 1) if correct else "0", correct)


def _runs(
    flags_on: list[bool], flags_off: list[bool], *, suite: str = "gsm", graphs: str = "tape"
) -> tuple[RunResult, RunResult]:
    """ON/OFF runs; an item whose correctness differs also gets a different response."""
    on_items, off_items = [], []
    for i, (a, b) in enumerate(zip(flags_on, flags_off)):
        off_items.append(_item(i, b, suite=suite))
        on_items.append(_item(i, a, suite=suite) if a != b else off_items[-1])
    on = RunResult(suite, graphs, "tiny", True, None, on_items, 1.0, RunRecord(graphs))
    off = RunResult(suite, "off", "tiny", True, None, off_items, 1.0, RunRecord("off"))
    return on, off


def _flags(n: int, b: int, c: int, acc: float = 0.6) -> tuple[list[bool], list[bool]]:
    """n items with b ON-only-right and c OFF-only-right items; the rest agree."""
    on, off = [], []
    for i in range(n):
        if i < b:
            on.append(True), off.append(False)
        elif i < b + c:
            on.append(False), off.append(True)
        else:
            same = (i % 10) < acc * 10
            on.append(same), off.append(same)
    return on, off


# ------------------------------------------------------------------ pairing


def test_pairs_by_item_id_regardless_of_order() -> None:
    on, off = _runs(*_flags(30, 2, 5))
    shuffled = RunResult(off.task, off.graphs, off.model, True, None, list(reversed(off.items)), 1.0, off.record)
    comp = compare_runs(on, shuffled)
    assert comp == compare_runs(on, off)
    assert comp.n == 30 and (comp.on_better, comp.off_better) == (2, 5)
    assert [a.item_id for a, _ in pair_items(on, shuffled)][:3] == ["gsm/0", "gsm/1", "gsm/2"]
    ids = [a.item_id for a, _ in pair_items(on, off)]
    assert ids.index("gsm/2") < ids.index("gsm/10")  # natural order


def test_mismatched_item_sets_name_the_missing_ids() -> None:
    on, off = _runs(*_flags(10, 0, 0))
    off = replace(off, items=off.items[:7] + [_item(99, True)])
    with pytest.raises(ItemMismatchError) as info:
        compare_runs(on, off)
    message = str(info.value)
    assert "missing from OFF: gsm/7, gsm/8, gsm/9" in message
    assert "missing from ON: gsm/99" in message


def test_a_job_reads_a_mismatch_as_no_verdict_on_an_incomplete_on_run() -> None:
    """What a job records for a mismatch: the comparison of an ON run that is incomplete with the mismatch as its
    error (what the job built by hand before compare_runs could say it)."""
    on, off = _runs(*_flags(10, 0, 0))
    off = replace(off, items=off.items[:7] + [_item(99, True)])
    judged = compare_runs(on, off, mismatch_is_no_verdict=True)
    with pytest.raises(ItemMismatchError) as info:
        compare_runs(on, off)
    incomplete = replace(on, complete=False, error=f"ItemMismatchError: {info.value}", items=[])
    assert judged == compare_runs(incomplete, off)
    assert judged.verdict is Verdict.NONE and judged.errors[0].startswith("ON run (graphs=tape) incomplete: ItemMis")


def test_duplicate_and_inconsistent_items_are_errors() -> None:
    on, off = _runs(*_flags(5, 0, 0))
    off.items.append(off.items[0])
    with pytest.raises(ItemMismatchError, match="twice: gsm/0"):
        compare_runs(on, off)
    on, off = _runs(*_flags(5, 0, 0))
    off.items[3] = ItemResult("gsm/3", "another question", "4", "r", None, False)
    with pytest.raises(ItemMismatchError, match="different prompt or gold: gsm/3"):
        compare_runs(on, off)


def test_different_suites_or_models_are_errors() -> None:
    on, off = _runs(*_flags(5, 0, 0))
    with pytest.raises(ValueError, match="different tasks"):
        compare_runs(on, RunResult("aime", "off", "tiny", True, None, off.items, 1.0, RunRecord("off")))
    with pytest.raises(ValueError, match="different models"):
        compare_runs(on, RunResult("gsm", "off", "other", True, None, off.items, 1.0, RunRecord("off")))


# ------------------------------------------------------------------ statistics wiring


def test_statistics_match_the_stats_module() -> None:
    flags_on, flags_off = _flags(200, 3, 9)
    on, off = _runs(flags_on, flags_off)
    t = Thresholds(seed=3, resamples=2000)
    comp = compare_runs(on, off, thresholds=t)
    assert comp.on_accuracy == stats.accuracy(flags_on)
    assert comp.off_accuracy == stats.accuracy(flags_off)
    assert comp.difference == stats.paired_bootstrap_diff(flags_on, flags_off, resamples=2000, seed=3)
    assert comp.difference.value == pytest.approx(comp.on_accuracy.value - comp.off_accuracy.value)
    assert comp.mcnemar_p == stats.mcnemar_exact(3, 9)
    assert comp.mde == stats.minimum_detectable_effect(200, 12)
    assert comp.thresholds == t.to_dict()


def test_swapping_on_and_off_mirrors_the_comparison() -> None:
    on, off = _runs(*_flags(120, 4, 9))
    forward = compare_runs(on, off)
    backward = compare_runs(off, on)
    assert (backward.on_better, backward.off_better) == (forward.off_better, forward.on_better)
    assert backward.mcnemar_p == forward.mcnemar_p and backward.mde == forward.mde
    assert backward.difference.value == pytest.approx(-forward.difference.value)
    assert (backward.difference.low, backward.difference.high) == pytest.approx(
        (-forward.difference.high, -forward.difference.low)
    )


@given(pairs=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=80))
def test_comparison_invariants(pairs) -> None:
    on, off = _runs([a for a, _ in pairs], [b for _, b in pairs])
    comp = compare_runs(on, off, thresholds=Thresholds(resamples=300))
    assert comp.complete and comp.n == len(pairs)
    assert comp.difference.low <= comp.difference.value <= comp.difference.high
    assert 0.0 <= comp.mcnemar_p <= 1.0
    assert len(comp.flips) == comp.on_better + comp.off_better
    assert comp.verdict in Verdict and comp.reasons
    swapped = compare_runs(off, on, thresholds=Thresholds(resamples=300))
    assert swapped.mcnemar_p == comp.mcnemar_p
    assert swapped.difference.value == pytest.approx(-comp.difference.value)


# ------------------------------------------------------------------ flips and divergence


def test_first_divergence_by_characters_and_tokens() -> None:
    assert first_divergence("abc", "abc") is None
    assert first_divergence("abcd", "abXd") == 2
    assert first_divergence("abc", "abcdef") == 3
    assert first_divergence("x = 12 so 5", "x = 12 so 7", str.split) == 4
    assert first_divergence("a b", "a b c", str.split) == 2
    assert first_divergence("a  b", "a b", str.split) == 2  # lossy tokenizer: texts differ, tokens don't
    assert common_prefix_chars("x = 12 so 5", "x = 12 so 7") == 10
    assert common_prefix_chars("abc", "abc") == 3
    assert common_prefix_chars("", "abc") == 0


def test_flips_and_text_diffs_are_recorded() -> None:
    on, off = _runs(*_flags(20, 1, 2))
    # item 10: different text, same correctness; item 11: identical.
    on.items[10] = ItemResult("gsm/10", "Question 10", "11", "10 + 1 = 11\nso #### 11", "11", off.items[10].correct)
    off.items[10] = ItemResult("gsm/10", "Question 10", "11", "10 + 1 = 11\n#### 11", "11", off.items[10].correct)
    comp = compare_runs(on, off, tokenize=str.split)
    assert [f.item_id for f in comp.flips] == ["gsm/0", "gsm/1", "gsm/2"]
    assert [f.direction for f in comp.flips] == ["ON fixed", "ON broke", "ON broke"]
    flip = comp.flips[0]
    assert (flip.on_response, flip.off_response) == (on.items[0].response, off.items[0].response)
    assert (flip.on_extracted, flip.off_extracted, flip.gold) == ("1", "0", "1")
    assert flip.prefix_chars == common_prefix_chars(flip.on_response, flip.off_response)
    assert flip.first_diff_token == first_divergence(flip.on_response, flip.off_response, str.split)
    assert [d.item_id for d in comp.text_diffs] == ["gsm/10"]
    diff = comp.text_diffs[0]
    assert not diff.flipped and diff.direction == "same"
    assert diff.first_diff_token == 5 and diff.prefix_chars == len("10 + 1 = 11\n")
    assert comp.n_divergent == 4
    by_chars = compare_runs(on, off)
    assert by_chars.text_diffs[0].first_diff_token == len("10 + 1 = 11\n")


# ------------------------------------------------------------------ verdicts


def test_clean_large_run_is_green() -> None:
    comp = compare_runs(*_runs(*_flags(500, 0, 0)))
    assert comp.verdict is Verdict.GREEN
    assert comp.difference == stats.Estimate(0.0, 0.0, 0.0) and comp.mcnemar_p == 1.0
    assert 0 < comp.mde < 0.05
    assert comp.reason.startswith("no significant difference")


def test_shipped_suite_sizes_clean_are_green_but_aime_size_is_amber_from_three_flips() -> None:
    # The shipped suites: GSM-style N = 500, AIME-style N = 200. With no flip the exact-test MDE
    # (1.6 pp, 3.9 pp) is under max_mde = 5 pp; at N = 200 three discordant pairs lift it to 5.2 pp.
    gsm = compare_runs(*_runs(*_flags(500, 0, 0)))
    aime = compare_runs(*_runs(*_flags(200, 0, 0)))
    assert gsm.verdict is Verdict.GREEN and gsm.mde == pytest.approx(0.016, abs=5e-4)
    assert aime.verdict is Verdict.GREEN and aime.mde == pytest.approx(0.039, abs=5e-4)
    assert compare_runs(*_runs(*_flags(200, 1, 1))).verdict is Verdict.GREEN
    noisy = compare_runs(*_runs(*_flags(200, 2, 1)))  # +0.5 pp, p = 1: no difference, but MDE 5.2 pp
    assert noisy.verdict is Verdict.AMBER and noisy.reason.startswith("underpowered")


def test_noise_both_ways_is_green() -> None:
    comp = compare_runs(*_runs(*_flags(500, 6, 8)))
    assert comp.verdict is Verdict.GREEN, comp.reasons


def test_significant_drop_is_red() -> None:
    comp = compare_runs(*_runs(*_flags(500, 0, 8)))  # -1.6 pp, p = 0.0078: within max_drop, but significant
    assert comp.mcnemar_p < 0.05 and comp.difference.value > -0.02
    assert comp.verdict is Verdict.RED
    assert comp.reason.startswith("ON significantly worse")


def test_drop_beyond_tolerance_is_red_without_significance() -> None:
    comp = compare_runs(*_runs(*_flags(100, 0, 3)))  # -3 pp, p = 0.25
    assert comp.mcnemar_p > 0.05
    assert comp.verdict is Verdict.RED
    assert any("beyond the tolerated 2.0 pp" in r for r in comp.reasons)
    loose = compare_runs(*_runs(*_flags(100, 0, 3)), thresholds=Thresholds(max_drop=0.05, max_mde=0.2))
    assert loose.verdict is Verdict.GREEN


def test_drop_exactly_at_tolerance_is_not_red() -> None:
    comp = compare_runs(*_runs(*_flags(200, 1, 5)), thresholds=Thresholds(max_mde=0.2))  # -2.0 pp, p = 0.22
    assert comp.difference.value == pytest.approx(-0.02)
    assert comp.verdict is Verdict.GREEN, comp.reasons


def test_significant_gain_is_amber() -> None:
    comp = compare_runs(*_runs(*_flags(500, 9, 0)))
    assert comp.verdict is Verdict.AMBER
    assert comp.reason.startswith("ON significantly better")


def test_small_suite_is_amber_underpowered() -> None:
    comp = compare_runs(*_runs(*_flags(60, 0, 0)))
    assert comp.mde > 0.05
    assert comp.verdict is Verdict.AMBER
    assert comp.reason.startswith("underpowered")


def test_red_reasons_come_before_amber_reasons() -> None:
    comp = compare_runs(*_runs(*_flags(60, 0, 6)))
    assert comp.verdict is Verdict.RED
    assert comp.reasons[0].startswith("ON significantly worse")
    assert any(r.startswith("underpowered") for r in comp.reasons)


def test_text_divergence_gate_is_optional() -> None:
    on, off = _runs(*_flags(500, 0, 0))
    for i in range(30):
        on.items[i] = ItemResult(
            on.items[i].item_id,
            on.items[i].prompt,
            on.items[i].gold,
            "changed " + on.items[i].response,
            on.items[i].extracted,
            on.items[i].correct,
        )
    assert compare_runs(on, off).verdict is Verdict.GREEN
    gated = compare_runs(on, off, thresholds=Thresholds(max_divergent=0.05))
    assert gated.verdict is Verdict.AMBER and "generations differ on 30/500" in gated.reason


@pytest.mark.parametrize("side", ["on", "off"])
def test_incomplete_run_has_no_verdict_and_no_numbers(side: str) -> None:
    on, off = _runs(*_flags(50, 0, 0))
    graphs = "tape" if side == "on" else "off"
    broken = RunResult("gsm", graphs, "tiny", False, "server died (exit -9)", on.items[:3], 4.0, RunRecord(graphs))
    comp = compare_runs(broken, off) if side == "on" else compare_runs(on, broken)
    assert comp.verdict is Verdict.NONE and comp.verdict.text == "NO VERDICT" and not comp.complete
    assert comp.reason.startswith("no verdict: ")
    assert comp.on_accuracy is None and comp.off_accuracy is None and comp.difference is None
    assert comp.mcnemar_p is None and comp.mde is None and comp.n == 0 and comp.flips == []
    assert f"{side.upper()} run" in comp.reason and "server died (exit -9)" in comp.reason


def test_complete_runs_without_items_have_no_verdict() -> None:
    on = RunResult("gsm", "tape", "tiny", True, None, [], 0.1, RunRecord("tape"))
    off = RunResult("gsm", "off", "tiny", True, None, [], 0.1, RunRecord("off"))
    comp = compare_runs(on, off)
    assert comp.verdict is Verdict.NONE and comp.on_accuracy is None and "no items" in comp.reason


def test_run_result_must_be_unambiguous() -> None:
    with pytest.raises(ValueError, match="must say why"):
        RunResult("gsm", "tape", "tiny", False, None, [], 1.0, RunRecord("tape"))
    with pytest.raises(ValueError, match="marked complete"):
        RunResult("gsm", "tape", "tiny", True, "boom", [], 1.0, RunRecord("tape"))


def test_summarize_takes_the_worst_verdict() -> None:
    green = compare_runs(*_runs(*_flags(500, 0, 0), suite="gsm"))
    amber = compare_runs(*_runs(*_flags(60, 0, 0), suite="aime"))
    red = compare_runs(*_runs(*_flags(500, 0, 20), suite="hard"))
    assert summarize([green]).verdict is Verdict.GREEN
    assert "all 1 tasks GREEN" in summarize([green]).reason
    assert summarize([green, amber]).verdict is Verdict.AMBER
    overall = summarize([green, amber, red])
    assert overall.verdict is Verdict.RED
    assert overall.reason.startswith("hard: ON significantly worse")
    assert overall.counts == {"GREEN": 1, "AMBER": 1, "NO-VERDICT": 0, "RED": 1}
    assert summarize([]).verdict is Verdict.NONE
    broken = RunResult("gsm", "tape", "tiny", False, "server died", [], 1.0, RunRecord("tape"))
    missing = compare_runs(broken, _runs(*_flags(50, 0, 0))[1])
    assert summarize([green, missing]).verdict is Verdict.NONE  # nothing measured there: no colour claimed
    assert summarize([red, missing]).verdict is Verdict.RED  # a measured RED is not hidden by a missing suite


# ------------------------------------------------------------------ thresholds and records


def test_thresholds_from_dict_and_cli() -> None:
    t = Thresholds.from_dict({"alpha": "0.01", "max_drop": 0.03, "resamples": "2000", "max_divergent": "none"})
    assert (t.alpha, t.max_drop, t.resamples, t.max_divergent) == (0.01, 0.03, 2000, None)
    assert t.confidence == pytest.approx(0.99)
    with pytest.raises(ValueError, match="unknown threshold"):
        Thresholds.from_dict({"max_dorp": 0.1})
    with pytest.raises(ValueError):
        Thresholds.from_dict({"alpha": 1.5})
    with pytest.raises(ValueError):
        Thresholds.from_dict({"alpha": None})
    parser = argparse.ArgumentParser()
    add_threshold_options(parser)
    args = parser.parse_args(["--max-drop", "0.01", "--seed", "4", "--max-divergent", "0.1"])
    assert thresholds_from_options(vars(args)) == Thresholds(max_drop=0.01, seed=4, max_divergent=0.1)
    assert thresholds_from_options(vars(parser.parse_args([])), base=t) == t


def test_records_round_trip_through_json(tmp_path) -> None:
    on, off = _runs(*_flags(40, 2, 3))
    path = on.save(tmp_path / "runs" / "on.json")
    assert RunResult.load(path) == on
    broken = RunResult("gsm", "cuda", "tiny", False, "lm-eval failed", on.items[:2], 2.0, RunRecord("cuda"))
    assert RunResult.from_dict(json.loads(json.dumps(broken.to_dict()))) == broken
    for comp in (compare_runs(on, off), compare_runs(broken, off)):
        again = TaskComparison.from_dict(json.loads(json.dumps(comp.to_dict())))
        assert again == comp
    summary = summarize([compare_runs(on, off)])
    assert Summary.from_dict(json.loads(json.dumps(summary.to_dict()))) == summary
    flip = compare_runs(on, off).flips[0]
    assert ItemDiff.from_dict(flip.to_dict()) == flip
    with pytest.raises(ValueError, match="missing correct"):
        ItemResult.from_dict({"item_id": "x", "prompt": "", "gold": "", "response": "", "extracted": None})


def test_comparison_is_deterministic() -> None:
    on, off = _runs(*_flags(300, 5, 11))
    assert compare_runs(on, off).to_dict() == compare_runs(on, off).to_dict()


def test_a_difference_reads_the_same_in_the_reasons_and_on_every_page() -> None:
    """One spelling of percentage points: signed, one decimal, and zero without a sign (it read "+0.0 pp" in the
    reasons and "0.0 pp" in the report)."""
    assert [pp(x) for x in (-0.025, 0.0, -0.0004, 0.0004, 0.0151)] == [
        "-2.5 pp",
        "0.0 pp",
        "0.0 pp",
        "0.0 pp",
        "+1.5 pp",
    ]
    green = compare_runs(*_runs(*_flags(500, 0, 0)))
    assert green.reason.startswith("no significant difference: 0.0 pp (CI 0.0 pp .. 0.0 pp)"), green.reason
