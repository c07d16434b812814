"""The nightly GPU job without a GPU: its plan (arms, env, commands, tasks, comparisons), the dry run, the
lm-eval command lines through lm-eval's own parser, the workflow and nox session, the judging of saved
runs (the fault demo must be RED) and the server lifecycle against a stub server.

SGLang's own parser over every arm's flags is suites/sglang/test_nightly_server_args.py (``--target sglang``).
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from harness.env import SGLANG_FAULT_ENV as FAULT_ENV
from harness.evals.compare import Thresholds
from harness.evals.results import ItemResult, RunRecord, RunResult, ServedIdentity
from harness.jobs import runner
from harness.jobs.judging import judge, load_runs
from harness.jobs.nightly import ARM_NAMES, DEFAULT_FAULT, TASKS
from harness.jobs.nightly import build_nightly_plan as build_plan
from harness.jobs.nightly_cli import main as nightly_main
from harness.jobs.options import RunOptions
from harness.jobs.plan_text import render
from harness.jobs.progress import Progress
from harness.jobs.session import run_arm
from harness.jobs.summary import finish
from harness.paths import REPO
from harness.servers import lifecycle
from harness.servers.lifecycle import Command, ServerLaunchError
from harness.servers.registry import get_server_kind
from harness.servers.sglang_server import GRAPHS_OFF_FLAGS, PATCHED_LAUNCH, SGLANG_LAUNCH, SGLangServer, sglang_args
from harness.targets.preflight import Needs
from tests.waits import SERVER_START_S, scaled

WORKFLOW = REPO / ".github" / "workflows" / "nightly-gpu.yml"


@pytest.fixture(scope="module")
def plan():
    return build_plan()


def _value_after(argv, flag):
    return argv[list(argv).index(flag) + 1]


def _arm_flags(arm):
    """What the arm adds to SGLang's command line: its own flags, then its graph mode's."""
    return (*arm.flags, *get_server_kind(arm.engine).graph_flags(arm.graphs))


def _options(**kw):
    """The nightly's run options (no fault-effects table, as ``nightly_cli`` sets)."""
    return RunOptions(fault_effects=None, command="swa-harness nightly", device="cuda", name="nightly", **kw)


# ------------------------------------------------------------------ the plan


def test_default_plan_models_arms_tasks(plan):
    assert [m.name for m in plan.models] == ["openai/gpt-oss-20b", "google/gemma-4-E2B-it"]
    assert all(m.chat for m in plan.models)
    assert (
        [a.name for a in plan.arms]
        == list(ARM_NAMES)
        == ["on", "off", "no-graph-padding", "swa-ratio-0.1", "invariant-check", "fault-demo"]
    )
    arms = {a.name: a for a in plan.arms}
    assert all(a.engine == "sglang" for a in plan.arms)
    assert _arm_flags(arms["on"]) == () and not arms["on"].env and arms["on"].role == "baseline"
    assert arms["off"].graphs == "off" and arms["off"].role == "reference"
    assert (
        _arm_flags(arms["off"])
        == GRAPHS_OFF_FLAGS
        == ("--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled")
    )
    assert all(a.graphs == "on" for a in plan.arms if a.name != "off")
    assert arms["no-graph-padding"].flags == ("--disable-cuda-graph-padding",)
    assert arms["swa-ratio-0.1"].flags == ("--swa-full-tokens-ratio", "0.1")
    assert dict(arms["invariant-check"].env) == {"SGLANG_INVARIANT_CHECK": "2"} and arms["invariant-check"].flags == ()
    assert arms["fault-demo"].fault == DEFAULT_FAULT and dict(arms["fault-demo"].env) == {FAULT_ENV: DEFAULT_FAULT}
    assert [a.name for a in plan.arms if a.expect_red] == ["fault-demo"]
    assert [t.name for t in plan.tasks] == ["gsm8k", "aime25", "gsm_style", "aime_style"]
    assert [t.lm_eval_task for t in plan.tasks] == ["gsm8k", "aime25", "swa_gsm_style", "swa_aime_style"]
    assert [t.items for t in plan.tasks] == [1319, 30, 500, 200]
    assert len(plan.runs) == 12 and sum(len(r.evals) for r in plan.runs) == 48


def test_every_server_command_and_env(plan):
    ports = {}
    for run in plan.runs:
        argv, env = run.server.argv, dict(run.server.env)
        if run.arm.name == "fault-demo":
            assert argv[: len(PATCHED_LAUNCH)] == PATCHED_LAUNCH
            assert argv[len(PATCHED_LAUNCH) : len(PATCHED_LAUNCH) + 3] == ("--fault", DEFAULT_FAULT, "--")
            assert env == {FAULT_ENV: DEFAULT_FAULT}  # inherited by every process the server spawns
        else:
            assert argv[: len(SGLANG_LAUNCH)] == SGLANG_LAUNCH
            assert env == dict(run.arm.env)
        sglang = argv[argv.index("--") + 1 :] if "--" in argv else argv[len(SGLANG_LAUNCH) :]
        assert tuple(sglang) == sglang_args(run.spec)
        assert _value_after(sglang, "--model-path") == run.model.name
        assert _value_after(sglang, "--port") == str(run.port) and run.url == f"http://127.0.0.1:{run.port}"
        flags = _arm_flags(run.arm)
        assert tuple(sglang[len(sglang) - len(flags) :]) == flags  # the arm's flags (graph mode's last) come last
        assert (
            tuple(sglang[-len(flags) - len(run.model.server_args) :][: len(run.model.server_args)])
            == run.model.server_args
        )
        ports.setdefault(run.model.name, []).append(run.port)
    assert all(len(set(p)) == len(p) for p in ports.values())  # a lingering server never blocks the next arm


def test_every_lm_eval_command(plan):
    for run in plan.runs:
        for step in run.evals:
            (task,) = step.tasks  # the nightly runs lm-eval once per task
            argv = step.command(run.url).argv
            assert argv[:4] == ("python", "-m", "lm_eval", "run")
            assert _value_after(argv, "--model") == "local-chat-completions"  # both default models are chat models
            assert "--apply_chat_template" in argv
            assert f"base_url={run.url}/v1/chat/completions" in _value_after(argv, "--model_args")
            assert _value_after(argv, "--tasks") == task.lm_eval_task
            assert ("--include_path" in argv) == task.frozen
            assert "--limit" not in argv and "--samples" not in argv and dict(step.items) == {task.name: task.items}
            assert Path(_value_after(argv, "--output_path")) == step.out and step.out.is_relative_to(run.dir)
            assert dict(step.filters) == {task.name: task.chat_filter}
            budget = run.model.max_gen_toks.get(task.name)
            assert ("--gen_kwargs" in argv) == (budget is not None)


def test_completions_model_and_limit():
    plan = build_plan(models=["some/base-model"], arms=["on", "off"], tasks=["gsm8k", "aime25"], limit=50)
    for run in plan.runs:
        for step in run.evals:
            (task,) = step.tasks
            argv = step.command(run.url).argv
            assert _value_after(argv, "--model") == "local-completions" and "--apply_chat_template" not in argv
            assert f"base_url={run.url}/v1/completions" in _value_after(argv, "--model_args")
            assert _value_after(argv, "--limit") == str(min(50, task.items))  # aime25 has 30: the plan caps it
            assert step.items[task.name] == min(50, task.items) and step.filters[task.name] == task.filter
    assert [c.name for c in plan.comparisons] == ["on-vs-off"]


def test_comparisons(plan):
    for model in plan.models:
        mine = [c for c in plan.comparisons if c.model == model]
        assert [(c.treatment, c.reference, c.expect_red) for c in mine] == [
            ("on", "off", False),
            ("no-graph-padding", "on", False),
            ("swa-ratio-0.1", "on", False),
            ("invariant-check", "on", False),
            ("fault-demo", "on", True),
        ]
        assert all(c.dir.parent == plan.out / model.slug / "compare" for c in mine)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(arms=["on", "graphs-sideways"]), "unknown arm"),
        (dict(tasks=["gsm8k", "mmlu"]), "unknown task"),
        (dict(arms=["off", "no-graph-padding"]), "baseline"),
        (dict(arms=["on", "on"]), "listed twice"),
        (dict(limit=0), "limit"),
        (dict(urls={"off": "http://x"}, arms=["on"]), "not in the plan"),
        (dict(urls={"on": "http://x"}), "one model"),
        (dict(fault="no-such-fault"), "unknown SGLang fault"),
    ],
)
def test_plan_refuses(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_plan(**kwargs)


def test_external_url_is_not_launched():
    plan = build_plan(models=["some/base-model"], arms=["on", "off"], tasks=["gsm_style"], urls={"off": "http://h:9/"})
    on, off = plan.runs
    assert on.server is not None and off.server is None and off.url == "http://h:9"
    assert "base_url=http://h:9/v1/completions" in _value_after(off.evals[0].command(off.url).argv, "--model_args")


# ------------------------------------------------------------------ the dry run


def test_dry_run_prints_the_whole_plan(plan, capsys):
    assert nightly_main(["--dry-run"]) == 0
    first = capsys.readouterr().out
    assert nightly_main(["--dry-run"]) == 0
    assert capsys.readouterr().out == first == render(plan)  # deterministic
    for arm in plan.arms:
        assert f"  {arm.name} " in first
    for task in plan.tasks:
        assert f"  {task.name} " in first and task.source in first
    for run in plan.runs:
        assert run.server.shell() in first
        assert all(step.command(run.url).shell() in first for step in run.evals)
    for comparison in plan.comparisons:
        assert str(comparison.dir / "index.html") in first
    assert (
        "SWA_HARNESS_SGLANG_FAULT=sglang-registry-out-cache-loc-not-zeroed "
        "python -m harness.servers.sglang_server.patched_server"
        in first
        and "SGLANG_INVARIANT_CHECK=2 python -m sglang.launch_server" in first
    )
    assert str(sys.executable) not in first  # commands say `python`, so the output is the same on every machine


def test_dry_run_json_and_exit_codes(plan, capsys):
    assert nightly_main(["--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == json.loads(plan.to_json())
    assert [(r["model"], r["arm"]) for r in data["runs"]] == [(r.model.name, r.arm.name) for r in plan.runs]
    assert all(shlex.split(shlex.join(r["server"]["argv"])) == r["server"]["argv"] for r in data["runs"])
    assert nightly_main(["--dry-run", "--arms", "off"]) == 2  # no baseline: refused before anything runs
    assert "baseline" in capsys.readouterr().err


def test_dry_run_as_a_process():
    """The command the workflow runs first: exit code 0, the plan on stdout, no GPU or SGLang needed."""
    for module in ("harness.jobs.nightly_cli", "harness.cli"):
        argv = [
            sys.executable,
            "-m",
            module,
            *(["nightly"] if module == "harness.cli" else []),
            "--dry-run",
            "--limit",
            "20",
        ]
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == render(build_plan(limit=20))


# ------------------------------------------------------------------ lm-eval's parser, the tasks


def _lm_eval_parser():
    from lm_eval._cli import HarnessCLI

    return HarnessCLI()._parser


def test_every_lm_eval_command_parses_with_lm_eval(plan):
    parser = _lm_eval_parser()
    for run, step in ((r, s) for r in build_plan(limit=7).runs for s in r.evals):
        argv = step.command(run.url).argv
        args = parser.parse_args(list(argv[3:]))
        assert args.command == "run" and args.tasks == [t.lm_eval_task for t in step.tasks] and args.limit == 7
        assert args.apply_chat_template is True and args.fewshot_as_multiturn is True and args.log_samples
        assert args.output_path == str(step.out)
        budget = argv[argv.index("--gen_kwargs") + 1] if "--gen_kwargs" in argv else None
        assert (args.gen_kwargs is not None) == (budget is not None)
    with pytest.raises(SystemExit):  # the parser is strict: a misspelt flag would not pass this test
        parser.parse_args(["run", "--model", "local-completions", "--chat_template_apply"])


def test_tasks_exist():
    import lm_eval

    tasks_dir = Path(lm_eval.__file__).parent / "tasks"
    for task in TASKS.values():
        files = (
            [REPO / "suites" / "accuracy" / f"{task.name}.yaml"]
            if task.frozen
            else list(tasks_dir.rglob(f"{task.lm_eval_task}.yaml"))
        )
        text = next((t for t in (f.read_text() for f in files) if f"task: {task.lm_eval_task}\n" in t), None)
        assert text is not None, f"no lm-eval task {task.lm_eval_task} in {files}"
        if task.filter != "none":
            assert f'name: "{task.filter}"' in text and f'name: "{task.chat_filter}"' in text
        else:
            assert "filter_list" not in text  # lm-eval then names the only filter "none"


# ------------------------------------------------------------------ the workflow and the nox session


def test_workflow_is_valid():
    data = yaml.safe_load(WORKFLOW.read_text())
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` key as True
    crons = [entry["cron"] for entry in triggers["schedule"]]
    assert crons and all(len(c.split()) == 5 for c in crons)
    assert "workflow_dispatch" in triggers
    job = data["jobs"]["sglang"]
    labels = job["runs-on"] if isinstance(job["runs-on"], list) else [job["runs-on"]]
    assert "gpu" in labels and "self-hosted" in labels
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert any(r.startswith("nox -s gpu_nightly -- --dry-run") for r in runs)
    assert any(r.startswith("nox -s gpu_nightly") and "--dry-run" not in r for r in runs)
    uploads = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["if"] == "always()" and "reports/nightly" in uploads[0]["with"]["path"]
    assert job["timeout-minutes"] >= 240


def test_nox_session_exists():
    tree = ast.parse((REPO / "noxfile.py").read_text())
    sessions = {
        f.name: f
        for f in tree.body
        if isinstance(f, ast.FunctionDef) and any("session" in ast.unparse(d) for d in f.decorator_list)
    }
    assert "gpu_nightly" in sessions
    body = ast.unparse(sessions["gpu_nightly"])
    assert "'harness.jobs.nightly_cli'" in body and "--dry-run" in body


# ------------------------------------------------------------------ judging saved runs


def _runs(plan, wrong: dict[str, int], incomplete: tuple[str, ...] = (), n: int = 80):
    """Synthetic runs, keyed as the runner saves them (model slug, ``record.arm``): every arm answers like
    ``on`` except ``wrong[arm]`` items it gets wrong."""
    runs = []
    for run in plan.runs:
        record = RunRecord(run.arm.name, served_by="sglang", graphs=run.arm.graphs, fault=run.arm.fault)
        for step in run.evals:
            for task in step.tasks:
                if run.arm.name in incomplete:
                    runs.append(
                        RunResult(
                            task.name,
                            run.arm.graphs,
                            run.model.slug,
                            False,
                            f"server ({run.arm.name}) exited with code 1 before it was ready",
                            [],
                            1.0,
                            record,
                        )
                    )
                    continue
                items = []
                for i in range(n):
                    right = i % 4 != 0 and not (i % 4 == 1 and i // 4 < wrong.get(run.arm.name, 0))
                    items.append(
                        ItemResult(
                            f"{task.name}/{i}",
                            f"Question {i}",
                            str(i),
                            f"#### {i if right else -1}",
                            str(i if right else -1),
                            right,
                        )
                    )
                identity = ServedIdentity("sglang", "sglang 0.5.23", run.model.name, flags={"graphs": run.arm.graphs})
                runs.append(
                    RunResult(
                        task.name,
                        run.arm.graphs,
                        run.model.slug,
                        True,
                        None,
                        items,
                        1.0,
                        replace(record, identity=identity),
                    )
                )
    return runs


@pytest.fixture
def small_plan(tmp_path):
    return build_plan(models=["some/base-model"], tasks=["gsm_style"], out=tmp_path / "nightly")


def test_fault_demo_must_be_red(small_plan, capsys):
    # the fault demo loses 15 of 60 right answers: RED, as expected; everything else matches `on`: exit 0
    assert finish(small_plan, _runs(small_plan, {"fault-demo": 15}), _options(), {}) == 0
    out = capsys.readouterr().out
    assert "ok  some/base-model fault-demo-vs-on: RED (expected RED" in out
    summary = json.loads((small_plan.out / "summary.json").read_text())
    assert summary["as expected"] is True
    verdicts = {c["comparison"]: c["verdict"] for c in summary["comparisons"]}
    assert verdicts["fault-demo-vs-on"] == "RED" and verdicts["on-vs-off"] != "RED"
    for c in small_plan.comparisons:
        assert (c.dir / "index.html").is_file()
    page = (small_plan.out / "index.html").read_text()
    assert page.count("<th>fault-demo<div") == 1 and all(f"<th>{a.name}<div" in page for a in small_plan.arms)
    assert "every comparison as expected" in page  # plan.json beside it: run_plan writes it (test_preflight_...)


def test_fault_demo_not_red_fails_the_job(small_plan, capsys):
    assert finish(small_plan, _runs(small_plan, {}), _options(), {}) == 1
    assert "UNEXPECTED some/base-model fault-demo-vs-on" in capsys.readouterr().out
    assert "not as expected: some/base-model fault-demo vs on" in (small_plan.out / "index.html").read_text()


def test_aime25_tolerates_a_few_unproven_flips(tmp_path):
    plan = build_plan(models=["some/base-model"], arms=["on", "off"], tasks=["aime25", "gsm_style"], out=tmp_path)
    runs = _runs(plan, {"on": 2}, n=30)  # on loses 2 of 30 (-6.7 pp), not significant
    [judged] = judge(plan, runs, Thresholds())
    assert judged.comparison.name == "on-vs-off"
    verdicts = {t.task: t.verdict.value for t in judged.tasks}
    assert verdicts == {"aime25": "AMBER", "gsm_style": "RED"}  # gsm_style keeps the default 2 pp


def test_a_red_stress_arm_or_an_incomplete_arm_fails_the_job(small_plan, capsys):
    assert finish(small_plan, _runs(small_plan, {"fault-demo": 15, "swa-ratio-0.1": 15}), _options(), {}) == 1
    assert "UNEXPECTED some/base-model swa-ratio-0.1-vs-on: RED" in capsys.readouterr().out
    runs = _runs(small_plan, {"fault-demo": 15}, incomplete=("invariant-check",))
    assert finish(small_plan, runs, _options(), {}) == 2  # an incomplete arm: no verdict (exit 2), not 1
    captured = capsys.readouterr()
    assert (
        "UNEXPECTED some/base-model invariant-check-vs-on: NO VERDICT" in captured.out and "incomplete" in captured.out
    )
    assert "no verdict (exit 2): server (invariant-check) exited with code 1" in captured.err


def test_report_only_reads_the_saved_runs(small_plan, capsys):
    for run in _runs(small_plan, {"fault-demo": 15}):
        run.save(small_plan.run_for(small_plan.models[0], run.record.arm).dir / "runs" / f"{run.task}.json")
    loaded = load_runs(small_plan)
    assert all(r.complete for r in loaded) and len(loaded) == len(small_plan.arms)
    argv = ["--model", "some/base-model", "--tasks", "gsm_style", "--out", str(small_plan.out), "--report-only"]
    assert nightly_main(argv) == 0
    (small_plan.run_for(small_plan.models[0], "off").dir / "runs" / "gsm_style.json").unlink()
    assert nightly_main(argv) == 2  # a missing run is INCOMPLETE, its comparison has no verdict (exit 2)
    captured = capsys.readouterr()
    assert "no saved run" in captured.out and "UNEXPECTED some/base-model on-vs-off: NO VERDICT" in captured.out
    assert "no verdict" in captured.err


# ------------------------------------------------------------------ the server lifecycle (stub server)

_STUB = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
print("stub up", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stub_run(tmp_path, monkeypatch, argv):
    """The plan's ``on`` arm on a free port, its SGLang engine launching ``argv`` (PORT filled in) instead."""
    plan = build_plan(models=["some/base-model"], arms=["on"], tasks=["gsm_style"], out=tmp_path)
    port = _free_port()
    command = Command(tuple(a.replace("PORT", str(port)) for a in argv), {"STUB": "1"})
    monkeypatch.setattr(SGLangServer, "command", lambda self, spec: command)
    run = replace(plan.runs[0], port=port, url=f"http://127.0.0.1:{port}", dir=tmp_path / "on")
    assert run.server == command and get_server_kind(run.arm.engine).url(run.spec) == run.url
    return run


def _launch(run, timeout=scaled(SERVER_START_S)):
    return lifecycle.launch(run.server, log_path=run.dir / "server.log", timeout=timeout, url=run.url)


def test_launch_waits_for_health_and_stops_the_process_group(tmp_path, monkeypatch):
    run = _stub_run(tmp_path, monkeypatch, ("python", "-c", _STUB, "PORT"))
    server = _launch(run)
    try:
        assert server.alive() and os.getpgid(server.proc.pid) == server.proc.pid  # its own process group
        assert server.base_url == run.url and lifecycle.answers(run.url)
    finally:
        server.stop(timeout=10)
    assert not server.alive()
    with pytest.raises(ProcessLookupError):
        os.killpg(server.proc.pid, 0)
    log = (run.dir / "server.log").read_text()
    assert log.startswith("$ STUB=1 python -c") and "stub up" in log


def test_a_server_that_dies_makes_every_task_incomplete(tmp_path, monkeypatch):
    run = _stub_run(tmp_path, monkeypatch, ("python", "-c", "import sys; print('no GPU here'); sys.exit(3)"))
    with pytest.raises(ServerLaunchError, match="(?s)code 3.*no GPU here"):
        _launch(run)
    results = run_arm(
        run, RunOptions(server_timeout=scaled(SERVER_START_S), eval_timeout=scaled(300)), Progress(live=False)
    )
    # the run's error is one line naming the failed part and its log; the log holds the server's output
    assert [r.complete for r in results] == [False] and "code 3" in results[0].error
    assert "server (on)" in results[0].error and "server.log" in results[0].error
    assert "\n" not in results[0].error and "no GPU here" in (run.dir / "server.log").read_text()
    assert RunResult.load(run.dir / "runs" / "gsm_style.json").error == results[0].error


def test_preflight_is_skipped_for_external_servers(monkeypatch, tmp_path):
    plan = build_plan(
        models=["some/base-model"], arms=["on"], tasks=["gsm_style"], urls={"on": "http://127.0.0.1:9"}, out=tmp_path
    )
    from harness.servers.sglang_server import kind

    monkeypatch.setattr(kind, "sglang_parser", lambda: pytest.fail("preflight needs SGLang; no server is launched"))
    monkeypatch.setattr(SGLangServer, "required_modules", ("swa_harness_no_such_module",))  # not installed here
    monkeypatch.setattr(runner, "run_arm", lambda run, *a, **kw: _runs(plan, {}))
    assert runner.run_plan(plan, _options(check_args=True)) == 0
    assert json.loads((plan.out / "plan.json").read_text()) == json.loads(plan.to_json())  # beside index.html
    assert (plan.out / "index.html").is_file() and (plan.out / "summary.json").is_file()


def test_a_plan_that_cannot_start_has_no_verdict(monkeypatch, tmp_path, capsys):
    """SGLang's server not installed: exit 2 before anything runs, saying what is missing."""
    plan = build_plan(models=["some/base-model"], arms=["on", "off"], tasks=["gsm_style"], out=tmp_path)
    monkeypatch.setattr(SGLangServer, "required_modules", ("swa_harness_no_such_module",))
    monkeypatch.setattr(runner, "run_arm", lambda *a, **kw: pytest.fail("nothing may run"))
    assert runner.run_plan(plan, _options()) == 2
    err = capsys.readouterr().err
    assert "cannot start, no verdict" in err and "engine sglang is not installed" in err
    assert not (tmp_path / "plan.json").exists()


def test_a_server_kind_whose_start_up_imports_fail_cannot_start(monkeypatch, tmp_path, capsys):
    """Installed, but what its server imports at start-up does not import (``start_imports``, tried in a subprocess):
    exit 2 before anything runs, naming the import and the nox session that builds it."""
    plan = build_plan(models=["some/base-model"], arms=["on", "off"], tasks=["gsm_style"], out=tmp_path)
    broken = Needs("an SGLang server", package="json", modules=("swa_harness_no_such_module",), builds="nox -s x")
    monkeypatch.setattr(SGLangServer, "required_modules", ())
    monkeypatch.setattr(SGLangServer, "start_imports", broken)
    monkeypatch.setattr(runner, "run_arm", lambda *a, **kw: pytest.fail("nothing may run"))
    assert runner.run_plan(plan, _options()) == 2
    err = capsys.readouterr().err
    assert "cannot start, no verdict" in err and "swa_harness_no_such_module" in err and "nox -s x" in err, err
