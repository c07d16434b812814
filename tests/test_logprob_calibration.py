"""The logprob axis's calibration of a real engine's plan (``bench.logprob_thresholds --plan``) and the table of SGLang's
faults through its server (``bench.sglang_fault_effects``): what each picks, keeps and renders, without a server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import sglang_fault_effects as sfe
from bench.logprob_thresholds import KL_RED_CAP, derive, source_of, write
from harness.jobs.session import logprob_engines
from harness.paths import REPO

SGLANG_PLAN = Path("suites/plans/sglang-cpu.yaml")
ITEMS = {"gsm_style": 8, "aime_style": 4}


def test_a_plan_source_starts_the_named_arms_and_keeps_the_comparisons_among_them(tmp_path: Path) -> None:
    source = source_of(SGLANG_PLAN, ["on", "off", "cache-off"], None, ITEMS, 32, tmp_path)
    assert [r.arm.name for r in source.runs] == ["on", "off", "cache-off"]
    assert [c.name for c in source.comparisons] == ["on-vs-off", "cache-off-vs-on"]
    assert source.label == "suites/plans/sglang-cpu.yaml: on, off, cache-off"
    other = source_of(Path("suites/plans/vllm-cpu.yaml"), ["on", "off"], "gemma3-tiny-swa", ITEMS, 32, tmp_path)
    assert other.name == "suites/plans/vllm-cpu.yaml (gemma3-tiny-swa)"  # its rows are not the first model's
    assert {r.model.slug for r in other.runs} == {"gemma3-tiny-swa"}


@pytest.mark.parametrize(
    ("arms", "words"),
    [
        (["on", "fault-demo"], "fault-demo carry a fault or are expected RED"),
        (["on", "swa-pool-reuse"], "swa-pool-reuse carry a fault or are expected RED"),
        (["on", "nope"], "nope not in suites/plans/sglang-cpu.yaml"),
        (["off", "invariant-check"], "no comparison"),  # both judged against "on", which is not started
    ],
)
def test_a_calibration_refuses_arms_it_cannot_use_by_name(arms: list[str], words: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=words):
        source_of(SGLANG_PLAN, arms, None, ITEMS, 32, tmp_path)


def _rows(source: str, seeds: int, worst: float) -> list[dict]:
    return [
        {"seed": s, "source": source, "comparison": "on-vs-off", "task": "gsm_style", "n": 8}
        | {"max_abs_delta": worst * (s + 1) / seeds, "max_kl": (worst * (s + 1) / seeds) ** 2}
        for s in range(seeds)
    ]


def test_a_source_replaces_its_own_rows_and_keeps_another_sources_rows(tmp_path: Path) -> None:
    path = tmp_path / "thresholds.json"
    write("sglang/float32", _rows("a.yaml", 20, 1e-3), ITEMS, "a.yaml: on, off", path)
    write("sglang/float32", _rows("b.yaml", 20, 1e-5), ITEMS, "b.yaml: x, y", path)
    again = write("sglang/float32", _rows("b.yaml", 20, 2e-5), ITEMS, "b.yaml: x, y", path)
    rows = json.loads(path.read_text())["data"]["sglang/float32"]
    assert sorted({r["source"] for r in rows}) == ["a.yaml", "b.yaml"] and len(rows) == 40
    assert again["arms"] == {"a.yaml": "on, off", "b.yaml": "x, y"}
    # The clean level is the worst over both sources: a.yaml's 1e-3, not b.yaml's last run.
    assert again["clean"]["max_abs_delta"] == pytest.approx(1e-3)
    assert again["amber"]["max_abs_delta"] == pytest.approx(derive(rows)["amber"]["max_abs_delta"])


def _summary(comparisons: list[tuple[str, float | None, str | None, str]]) -> dict:
    return {
        "comparisons": [
            {
                "treatment": fault,
                "verdict": acc,
                "reason": "r",
                "suites": {
                    task: {
                        "verdict": acc,
                        "difference": diff,
                        "n": 100,
                        "reason": "why",
                        "logprobs": None
                        if lp is None
                        else {"verdict": lp, "delta": {"max": 3.0}, "kl": {"max": 2.5}, "parted": 7},
                    }
                    for task in sfe.TASKS
                },
            }
            for fault, diff, lp, acc in comparisons
        ]
    }


def test_the_fault_table_reads_each_comparison_and_counts_red_and_reach() -> None:
    summary = _summary([("f-red", -0.12, "RED", "RED")])
    reaches = {"f-red": sfe.Reach(2, 1, 1, 1), "f-quiet": sfe.Reach(1, 0, 0, 1)}
    screen = sfe.rows_from(_summary([(sfe.REPEAT, 0.0, "GREEN", "GREEN")]), "roomy", {})
    rows = sfe.rows_from(summary, "roomy", reaches)
    rows += [sfe.unreached_row("f-quiet", "roomy", t, reaches["f-quiet"]) for t in sfe.TASKS]
    assert [(r.fault, r.task, r.delta_pp, r.logprob_verdict) for r in rows][:2] == [
        ("f-red", "gsm_style", pytest.approx(-12.0), "RED"),
        ("f-red", "aime_style", pytest.approx(-12.0), "RED"),
    ]
    meta = {"command": "c", "when": "d", "wall_s": 1.0, "exit": 1, "limit": 100, "sglang": "0.5.23"}
    text = sfe.section([r.__dict__ for r in rows + screen], meta)
    lines = [line for line in text.splitlines() if line.startswith("| `")]
    assert lines[0].startswith(f"| `{sfe.REPEAT}` | accuracy GREEN +0.0 pp; logprobs **GREEN")  # the clean pair first
    assert lines[2].startswith("| `f-quiet` | no arm | no arm |")
    assert "| `f-red` | accuracy RED -12.0 pp; logprobs **RED (KL 2.5, max\\|Δ\\| 3, 7 parted)**" in text
    assert "not reached: none of its 1 edited functions ran in the clean server" in text
    assert "Of 2 faults: **1 RED on the logprob axis**; 1 reached by the workload; 1 never reached" in text


def test_each_configuration_asks_sglang_for_its_pool_and_page() -> None:
    def flags(config: sfe.Config) -> dict[str, str]:
        argv = sfe.plan_mapping(sfe.fault_arms(["f"]), config, 10, 31200)["arm_defaults"]["flags"]
        return dict(zip(argv[::2], argv[1::2]))

    roomy, tight, paged = flags("roomy"), flags("tight"), flags("paged")
    assert "--page-size" not in roomy and "--page-size" not in tight  # SGLang's default page, as the roomy run had
    assert (roomy["--max-total-tokens"], tight["--max-total-tokens"]) == ("262144", "2048")
    # Paged: a page twice the shipped model's window, so the SWA frontier is a page, not a window.
    window = json.loads((REPO / "fixtures/models/mellum-tiny-swa/config.json").read_text())["sliding_window"]
    assert int(paged["--page-size"]) > window and paged["--max-total-tokens"] == roomy["--max-total-tokens"]


def test_the_section_goes_between_its_markers_and_replaces_itself() -> None:
    page = "# Fault effects\n\n## What accuracy alone would miss\n\ntext\n"
    once = sfe.splice(page, "## SGLang\n\nfirst")
    twice = sfe.splice(once, "## SGLang\n\nsecond")
    assert once.index(sfe.MARK[0]) < once.index("## What accuracy alone would miss")
    assert "first" not in twice and twice.count(sfe.MARK[0]) == 1 and "second" in twice


def test_the_kl_red_threshold_is_never_above_the_cap_while_the_logprob_factors_stay() -> None:
    # SGLang's clean arms before REST_FLOOR: KL 6.7e-5 beside a logprob change of 1.3e-5; squared, RED at KL 67.
    t = derive([{"max_abs_delta": 1.3e-5, "max_kl": 6.7e-5}])
    assert t["red"]["max_kl"] == KL_RED_CAP and t["amber"]["max_kl"] == pytest.approx(6.7e-3)
    assert t["red"]["max_abs_delta"] == pytest.approx(1.3e-2)
    # The harness's clean arms (KL the square of the change): far under the cap, the factors as before.
    h = derive([{"max_abs_delta": 1.5e-5, "max_kl": 1.9e-10}])
    assert h["red"]["max_kl"] == pytest.approx(1.9e-4) and h["amber"]["max_kl"] == pytest.approx(1.9e-8)


def test_an_engine_records_logprobs_once_its_thresholds_are_calibrated(tmp_path: Path) -> None:
    """The proxy goes before an arm's server only for engines with calibrated thresholds: the shipped file has the
    harness's, SGLang's and vLLM's (stop 71's calibrations); an engine without any (an external URL) records none."""
    assert logprob_engines() == {"harness", "sglang", "vllm"}
    only = tmp_path / "thresholds.json"
    shipped = json.loads((Path(__file__).parents[1] / "harness/evals/logprob_thresholds.json").read_text())
    shipped["thresholds"] = {k: v for k, v in shipped["thresholds"].items() if k.startswith("harness/")}
    only.write_text(json.dumps(shipped))
    assert logprob_engines(only) == {"harness"}
    assert logprob_engines(tmp_path / "missing.json") == frozenset()


def test_rejudge_reads_the_saved_runs_again_with_todays_axis_and_leaves_accuracy_as_judged(tmp_path: Path) -> None:
    """``--rejudge``: a summary's logprob axis recomputed from the runs saved beside it (no server), by today's KL and
    thresholds; the accuracy verdict and difference stay what the eval judged."""
    from harness.evals.results import TokenLogprobs
    from harness.evals.results import ItemResult, RunRecord, RunResult, ServedIdentity

    identity = ServedIdentity("sglang", "x", "m", flags={"dtype": "float32"})
    top = (("a", -1e-6), ("b", -14.0))
    same = TokenLogprobs(("a",), (-1e-6,), (top,))
    moved = TokenLogprobs(("a",), (-0.7,), ((("a", -0.7), ("b", -1.0)),))
    for arm, lp in (("clean", same), ("f-red", moved)):
        for task in sfe.TASKS:
            items = [ItemResult(f"{task}/0", "p", "1", "a", "1", True, lp)]
            run = RunResult(
                task, "off", "m/mellum", True, None, items, 1.0, RunRecord(arm, served_by="sglang", identity=identity)
            )
            run.save(tmp_path / "mellum" / arm / "runs" / f"{task}.json")
    summary = _summary([("f-red", -0.12, "GREEN", "RED")])  # a stale axis: GREEN where the logprobs moved
    for c in summary["comparisons"]:
        c.update(model="fixtures/models/mellum", reference="clean")
    judged = sfe.rejudge(summary, tmp_path)
    for task in sfe.TASKS:
        suite = judged["comparisons"][0]["suites"][task]
        assert suite["logprobs"]["verdict"] == "RED" and suite["logprobs"]["key"] == "sglang/float32"
        assert suite["logprobs"]["delta"]["max"] == pytest.approx(0.7 - 1e-6)
        assert (suite["verdict"], suite["difference"]) == ("RED", -0.12)


def test_rejudge_without_the_saved_runs_is_no_verdict_in_one_line(tmp_path: Path, capsys) -> None:
    """A summary whose runs were not kept gives exit 2 and names the missing file, never a traceback or a verdict."""
    work = tmp_path / "faults"
    (work / "eval").mkdir(parents=True)
    summary = _summary([("f-red", -0.12, "GREEN", "RED")])
    for c in summary["comparisons"]:
        c.update(model="fixtures/models/mellum", reference="clean")
    (work / "eval" / "summary.json").write_text(json.dumps(summary))
    code, _, judged = sfe._judged_again(work, {"exit": "0, 1", "wall_s": 10.0}, 1)
    assert (code, judged) == (2, None)
    assert "not saved" in capsys.readouterr().err
