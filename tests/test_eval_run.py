"""swa-harness eval: the lm-eval command, sample parsing, incomplete runs, and end-to-end runs on the
shipped checkpoint (clean: no significant difference, graphs on vs off nor cache off vs on; a fault injected into
graphs-on: RED)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.evals.compare import compare_runs
from harness.evals.results import RunRecord, ServedIdentity
from harness.evals.samples import parse_samples
from harness.evals.tasks import FROZEN_TASKS
from harness.jobs.cpu import EvalConfig, cpu_plan
from harness.jobs.eval_cli import main
from harness.jobs.options import RunOptions
from harness.jobs.progress import Progress
from harness.jobs.session import run_arm
from harness.paths import DEFAULT_MODEL
from tests.waits import SERVER_START_S, scaled


def runs_of(out: Path) -> dict[str, dict]:
    """The saved runs of a CPU job as ``{"<suite>-<arm>": run}``."""
    return {f"{p.stem}-{p.parent.parent.name}": json.loads(p.read_text()) for p in out.glob("*/*/runs/*.json")}


def test_lm_eval_command_is_offline_deterministic_and_selects_items_per_task(tmp_path):
    plan = cpu_plan(EvalConfig(limits={"gsm_style": 5, "aime_style": 2}, out=tmp_path))
    [step] = plan.runs[0].evals  # every suite in one lm-eval run: the same batches in the same order
    command = step.command("http://127.0.0.1:9")
    cmd = command.argv
    args = dict(zip(cmd, cmd[1:]))
    assert command.env["HF_DATASETS_OFFLINE"] == "1" and command.env["HF_HUB_OFFLINE"] == "1"
    assert args["--batch_size"] == "32" and args["--seed"] == "0,0,0,0"
    assert args["--model"] == "local-completions"
    assert "tokenizer_backend=None" in args["--model_args"] and "tokenized_requests=False" in args["--model_args"]
    assert "num_concurrent=1" in args["--model_args"] and "max_retries=1" in args["--model_args"]
    assert json.loads(args["--samples"]) == {"swa_gsm_style": [0, 1, 2, 3, 4], "swa_aime_style": [0, 1]}
    assert "--log_samples" in cmd and args["--include_path"].endswith("suites/accuracy")


def test_parse_samples_reads_the_primary_filter_of_lm_eval_sample_logs(tmp_path):
    lines = []
    for doc_id, (resp, filtered, em) in enumerate(
        [("A.\n#### 72", "72", 1.0), ("B.\n#### 7", "7", 0.0), ("no answer", "[invalid]", 0.0)]
    ):
        for flt in ("strict-match", "flexible-extract"):
            lines.append(
                json.dumps(
                    {
                        "doc_id": doc_id,
                        "target": "A.\n#### 72" if doc_id == 0 else "x\n#### 9",
                        "arguments": {"gen_args_0": {"arg_0": f"Question {doc_id}\nAnswer:", "arg_1": {}}},
                        "resps": [[resp]],
                        "filtered_resps": [filtered],
                        "filter": flt,
                        "exact_match": em,
                    }
                )
            )
    path = tmp_path / "samples_swa_gsm_style_x.jsonl"
    path.write_text("\n".join(lines))
    items = parse_samples(path, FROZEN_TASKS["gsm_style"])
    assert [i.item_id for i in items] == ["gsm_style/0", "gsm_style/1", "gsm_style/2"]
    assert [i.correct for i in items] == [True, False, False]
    assert items[0].prompt == "Question 0\nAnswer:" and items[1].response == "B.\n#### 7"
    assert items[2].extracted is None


def test_a_run_whose_server_never_starts_is_incomplete_and_never_scored(tmp_path):
    config = EvalConfig(
        model=tmp_path / "missing",
        limits={"gsm_style": 2},
        out=tmp_path,
        max_running=4,
        threads=1,
        batch_size=4,
        graphs_on="tape",
    )
    plan = cpu_plan(config)
    with Progress(interval_s=60) as progress:
        on = run_arm(
            plan.runs[0], RunOptions(server_timeout=scaled(SERVER_START_S), eval_timeout=scaled(300)), progress
        )[0]
    assert not on.complete and on.items == [] and "\n" not in on.error
    assert on.error.startswith("server (on) exited with code") and "on/server.log" in on.error, on.error
    off = on.__class__(
        task="gsm_style",
        graphs="off",
        model="missing",
        complete=True,
        error=None,
        items=[],
        wall_s=0.0,
        record=RunRecord("off"),
    )
    comparison = compare_runs(on, off)
    assert comparison.verdict.name == "NONE" and not comparison.complete


def test_clean_build_shows_no_significant_difference_end_to_end(tmp_path, capsys):
    code = main(
        [
            "--limit-gsm-style",
            "24",
            "--limit-aime-style",
            "6",
            "--out",
            str(tmp_path),
            "--batch-size",
            "16",
            "--kill-matrix",
            str(tmp_path / "none.json"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    runs = runs_of(tmp_path)
    assert set(runs) == {f"{task}-{arm}" for task in ("gsm_style", "aime_style") for arm in ("on", "off", "cache-off")}
    assert all(r["complete"] for r in runs.values()) and len(runs["gsm_style-on"]["items"]) == 24
    assert runs["gsm_style-on"]["graphs"] == runs["gsm_style-cache-off"]["graphs"] == "tape"
    cache_on, cache_off = runs["gsm_style-on"]["meta"]["engine"], runs["gsm_style-cache-off"]["meta"]["engine"]
    assert cache_on["prefix_cache_hit_tokens"] > 0 and cache_off["prefix_cache_query_tokens"] == 0  # on, and off
    for task in ("gsm_style", "aime_style"):  # the cache changes no answer: the same text, item by item
        assert [i["response"] for i in runs[f"{task}-cache-off"]["items"]] == [
            i["response"] for i in runs[f"{task}-on"]["items"]
        ]
    model = str(DEFAULT_MODEL)  # each comparison as expected: not RED (at N = 24 and 6, AMBER: underpowered)
    assert f"ok  {model} on-vs-off: " in out and f"ok  {model} cache-off-vs-on: " in out, out
    assert "UNEXPECTED" not in out and "-> RED" not in out, out
    # the logprob axis beside accuracy: every task GREEN on the clean build, on the line and in summary.json
    assert out.count("| logprobs: GREEN (N=") == 4 and out.count("; logprobs GREEN (expected") == 2, out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [c["logprobs"] for c in summary["comparisons"]] == ["GREEN", "GREEN"]
    assert summary["comparisons"][0]["suites"]["gsm_style"]["logprobs"]["key"] == "harness/float32"
    html = (tmp_path / "index.html").read_text()  # the overview: every arm's accuracy, both comparisons
    assert "gsm_style" in html and "aime_style" in html and "cache-off vs on" in html and "on vs off" in html
    for name in ("on-vs-off", "cache-off-vs-on"):
        assert "gsm_style" in (tmp_path / "gemma2-tiny-swa" / "compare" / name / "index.html").read_text()


@pytest.mark.parametrize("fault", ["capture-after-warm-cache", "pad-swa-loc-not-zeroed"])
def test_an_injected_fault_gives_a_significant_drop_and_a_red_verdict(tmp_path, capsys, fault):
    code = main(
        [
            "--tasks",
            "gsm_style",
            "--limit-gsm-style",
            "64",
            "--out",
            str(tmp_path),
            "--fault",
            fault,
            "--no-cache-off",  # the comparison judged here is on vs off; the cache-off arm's fault: tests/test_jobs.py
            "--kill-matrix",
            str(tmp_path / "none.json"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    [line] = [line for line in out.splitlines() if line.startswith("gsm_style:")]  # one comparison: on vs off
    assert "-> RED" in line, line
    assert "verdict: RED; logprobs RED" in out and "| logprobs: RED (N=64" in line, out
    runs = runs_of(tmp_path)
    assert set(runs) == {"gsm_style-on", "gsm_style-off"}
    on, off = runs["gsm_style-on"], runs["gsm_style-off"]
    assert on["meta"]["fault"] == fault and off["meta"]["fault"] is None
    assert sum(i["correct"] for i in on["items"]) < sum(i["correct"] for i in off["items"])
    assert "flip" in (tmp_path / "index.html").read_text().lower()  # one comparison: its report is the page
    assert 'data-verdict="RED"' in (tmp_path / "index.html").read_text().split('id="logprobs"')[1]


def test_response_cache_is_keyed_by_configuration_and_cleared_unless_resuming(tmp_path):
    from harness.jobs.cache import response_cache

    def cache(resume: bool = False, **overrides):
        config = EvalConfig(
            **{
                "model": tmp_path,
                "limits": {"gsm_style": 4},
                "out": tmp_path,
                "batch_size": 8,
                "max_running": 8,
                "device": "cpu",
                "graphs_on": "tape",
                **overrides,
            }
        )
        run = cpu_plan(config).runs[0]
        return response_cache(run, run.evals[0], server, cache_dir=tmp_path / "cache", resume=resume)

    raw = {"model": "swa-harness", "graph_mode": "tape", "build": {"code": "abc"}}
    server = ServedIdentity("harness", "abc", "swa-harness", flags={"graphs": "tape"}, raw=raw)
    clean = cache()
    faulty = cache(fault="pad-swa-loc-not-zeroed")
    more = cache(limits={"gsm_style": 5})
    assert len({clean, faulty, more}) == 3
    (cached := clean.with_name(clean.name + "_rank0.db")).write_text("responses")
    assert cache(resume=True) == clean and cached.exists()
    cache(resume=False)
    assert not cached.exists()
