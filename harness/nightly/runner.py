"""Run a nightly plan: per model and arm an SGLang server, lm-eval per task against it, then the comparisons.

Servers run one at a time (one GPU), each in its own process group, stopped as a group when its
tasks are done. Nothing is retried: a server that does not come up, dies, or an lm-eval that fails
makes that arm's runs INCOMPLETE (with the reason and the log), and an incomplete run turns its
comparisons RED. The runs are saved as ``RunResult`` JSON under ``<out>/<model>/<arm>/runs/``, so
``--report-only`` can judge them again.

Judging reuses the eval job's parts: ``compare_runs`` pairs a treatment arm ("ON") with its reference
("OFF") item by item, ``summarize`` gives the worst verdict over the tasks, ``render_report`` writes
the same HTML report per comparison; :mod:`harness.nightly.overview` adds the page with one column
per arm. The exit code is 0 only when every comparison meets its expectation: not RED, except the
fault demo, which must be RED.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.evals.compare import ItemMismatchError, Thresholds, compare_runs, summarize
from harness.evals.lmeval import find_samples, parse_samples
from harness.evals.paths import DEFAULT_KILL_MATRIX, REPO
from harness.evals.results import ItemResult, RunResult, SuiteComparison, Summary, Verdict
from harness.evals.suites import SuiteSpec
from harness.nightly.plan import ArmRun, Command, Comparison, EvalStep, NightlyPlan


class ArmFailed(RuntimeError):
    """The arm's server did not come up or died; every task of the arm is INCOMPLETE with this reason."""


def resolve_argv(command: Command, python: str = sys.executable) -> list[str]:
    """The plan says ``python``; run this interpreter (the one that has SGLang, lm-eval and the harness)."""
    argv = list(command.argv)
    return [python if i == 0 and a == "python" else a for i, a in enumerate(argv)]


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class Server:
    proc: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace: float = 60.0) -> None:
        """SIGTERM to the server's process group (it started it: start_new_session), SIGKILL after ``grace``."""
        if self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


def launch(run: ArmRun, timeout: float, python: str = sys.executable, poll: float = 5.0) -> Server:
    """Start the arm's server and wait until ``/health`` answers 200; ArmFailed with the log's tail otherwise."""
    assert run.server is not None
    run.dir.mkdir(parents=True, exist_ok=True)
    log_path = run.dir / "server.log"
    argv = resolve_argv(run.server, python)
    with open(log_path, "w") as log:
        log.write("$ " + run.server.shell() + "\n")
        log.flush()
        proc = subprocess.Popen(argv, cwd=REPO, env={**os.environ, **run.server.env}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(proc, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise ArmFailed(f"server exited with code {proc.returncode} before it was ready; {log_path}:\n"
                            + _tail(log_path))
        try:
            with urllib.request.urlopen(run.url + "/health", timeout=10) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(poll)
    server.stop()
    raise ArmFailed(f"server not ready after {timeout:.0f} s; {log_path}:\n" + _tail(log_path))


def run_eval(step: EvalStep, run: ArmRun, timeout: float, python: str = sys.executable) -> list[ItemResult]:
    """One lm-eval run, its log kept beside its output; its items, or RuntimeError saying what went wrong."""
    log_path = run.dir / f"lm_eval-{step.task.name}.log"
    step.out.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write("$ " + step.command.shell() + "\n")
        log.flush()
        code = subprocess.run(resolve_argv(step.command, python), cwd=REPO, env={**os.environ, **step.command.env},
                              stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
    if code != 0:
        raise RuntimeError(f"lm-eval exited with code {code}; see {log_path}")
    samples = find_samples(step.out, step.task.lm_eval_task)
    if samples is None:
        raise RuntimeError(f"lm-eval wrote no samples for {step.task.lm_eval_task}; see {log_path}")
    items = parse_samples(samples, SuiteSpec(step.task.name, step.task.lm_eval_task, step.primary_filter, step.items))
    if len(items) != step.items:
        raise RuntimeError(f"{step.task.lm_eval_task}: {len(items)} samples (filter {step.primary_filter}) for "
                           f"{step.items} items; see {samples}")
    return items


def _server_version(url: str) -> str:
    from harness.evals.provenance import server_version

    return server_version(url)


def run_arm(run: ArmRun, *, server_timeout: float, eval_timeout: float, python: str = sys.executable) -> list[RunResult]:
    """The arm's server (unless external), each task, the server stopped; one RunResult per task, saved."""
    meta: dict[str, Any] = {"arm": run.arm.name, "fault": run.arm.fault, "url": run.url,
                            "server command": run.server.shell() if run.server else f"external: {run.url}"}
    results: list[RunResult] = []
    server = None
    arm_error = None
    print(f"nightly: {run.label}", file=sys.stderr, flush=True)
    try:
        if run.server is not None:
            t0 = time.perf_counter()
            server = launch(run, server_timeout, python)
            meta["server_start_s"] = round(time.perf_counter() - t0, 1)
        meta["server version"] = _server_version(run.url)
    except ArmFailed as exc:
        arm_error = f"ArmFailed: {exc}"
    try:
        for step in run.evals:
            t0 = time.perf_counter()
            error, items = arm_error, []
            if error is None:
                try:
                    items = run_eval(step, run, eval_timeout, python)
                    if server is not None and not server.alive():
                        raise RuntimeError(f"the server died during the run; see {server.log}")
                except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError, KeyError) as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    if server is not None and not server.alive():
                        arm_error = error  # no later task can run on a dead server
            result = RunResult(suite=step.task.name, graphs=run.arm.name, model=run.model.name,
                               complete=error is None, error=error, items=items if error is None else [],
                               wall_s=round(time.perf_counter() - t0, 2), meta=dict(meta))
            result.save(run.dir / "runs" / f"{step.task.name}.json")
            results.append(result)
            print(f"  {step.task.name}: " + (f"{sum(i.correct for i in items)}/{len(items)} correct"
                                               if error is None else f"INCOMPLETE — {error.splitlines()[0]}"),
                  file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.stop()
    return results


def load_runs(plan: NightlyPlan) -> list[RunResult]:
    """The saved runs of a plan (``--report-only``); a missing one becomes an INCOMPLETE run saying so."""
    runs = []
    for run in plan.runs:
        for step in run.evals:
            path = run.dir / "runs" / f"{step.task.name}.json"
            if path.is_file():
                runs.append(RunResult.load(path))
            else:
                runs.append(RunResult(step.task.name, run.arm.name, run.model.name, False, f"no saved run at {path}",
                                      [], 0.0, {"arm": run.arm.name}))
    return runs


@dataclass
class ComparisonOutcome:
    comparison: Comparison
    suites: list[SuiteComparison]
    summary: Summary
    report: Path | None

    @property
    def ok(self) -> bool:
        red = self.summary.verdict is Verdict.RED
        return red if self.comparison.expect_red else not red

    def to_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {"model": c.model.name, "comparison": c.name, "treatment": c.treatment, "reference": c.reference,
                "verdict": self.summary.verdict.value, "expected": c.expectation, "as expected": self.ok,
                "reason": self.summary.reason, "report": str(self.report) if self.report else None,
                "suites": {s.suite: {"verdict": s.verdict.value, "difference": s.difference.value if s.difference else None,
                                     "n": s.n, "reason": s.reason} for s in self.suites}}


def _as_mode(run: RunResult, mode: str) -> RunResult:
    return replace(run, meta={**run.meta, "mode": mode})


def _incomplete_comparison(on: RunResult, off: RunResult, error: str, thresholds: Thresholds) -> SuiteComparison:
    bad = replace(on, complete=False, error=error, items=[])
    return compare_runs(bad, off, thresholds=thresholds)


def judge(plan: NightlyPlan, runs: Sequence[RunResult], thresholds: Thresholds = Thresholds(),
          provenance: Mapping[str, Any] | None = None, render: bool = True) -> list[ComparisonOutcome]:
    """Every comparison of the plan over ``runs`` (paired per task), with its HTML report when ``render``."""
    by_key = {(r.model, r.graphs, r.suite): r for r in runs}
    outcomes = []
    for comparison in plan.comparisons:
        suites, pair_runs = [], []
        for task in plan.tasks:
            key = (comparison.model.name, comparison.treatment, task.name)
            ref_key = (comparison.model.name, comparison.reference, task.name)
            on = _as_mode(by_key[key], "on")
            off = _as_mode(by_key[ref_key], "off")
            task_thresholds = thresholds if task.max_drop is None else replace(thresholds, max_drop=task.max_drop)
            try:
                suites.append(compare_runs(on, off, thresholds=task_thresholds))
            except ItemMismatchError as exc:  # lm-eval scored other items in one arm: no pairing, RED
                suites.append(_incomplete_comparison(on, off, f"ItemMismatchError: {exc}", task_thresholds))
            pair_runs += [on, off]
        summary = summarize(suites)
        report = None
        if render:
            from harness.report import render_report
            from harness.report.inputs import load_kill_matrices

            prov = comparison_provenance(plan, comparison, runs, provenance or {})
            report = render_report(suites, pair_runs, summary=summary, provenance=prov, out_dir=comparison.dir,
                                   kill_matrices=load_kill_matrices(DEFAULT_KILL_MATRIX))
        outcomes.append(ComparisonOutcome(comparison, suites, summary, report))
    return outcomes


def _arm_provenance(plan: NightlyPlan, comparison: Comparison, arm: str, runs: Sequence[RunResult]) -> dict[str, Any]:
    run = plan.run_for(comparison.model, arm)
    seen = next((r.meta for r in runs if r.model == comparison.model.name and r.graphs == arm), {})
    out: dict[str, Any] = {"graphs": arm, "purpose": run.arm.purpose, "fault": run.arm.fault or "none",
                           "server command": run.server.shell() if run.server else f"external: {run.url}",
                           "env": dict(run.arm.env) or "-", "server version": seen.get("server version", "unknown")}
    for step in run.evals:
        out[f"lm-eval {step.task.name}"] = step.command.shell()
    return out


def comparison_provenance(plan: NightlyPlan, comparison: Comparison, runs: Sequence[RunResult],
                          base: Mapping[str, Any]) -> dict[str, Any]:
    versions = sorted({str(r.meta.get("server version")) for r in runs
                       if r.model == comparison.model.name and r.meta.get("server version") not in (None, "unknown")})
    return {
        **base,
        "engine under test": {"summary": " / ".join(versions) or "SGLang (version unknown)",
                              "kind": "SGLang servers launched by the nightly job", **dict(base.get("engine under test", {}))},
        "model": {"name": comparison.model.name, "source": "hub", "chat": comparison.model.chat},
        "arms": {"on": _arm_provenance(plan, comparison, comparison.treatment, runs),
                 "off": _arm_provenance(plan, comparison, comparison.reference, runs)},
    }


def job_provenance(plan: NightlyPlan, argv: Sequence[str], device: str = "cuda") -> dict[str, Any]:
    from harness.evals.provenance import checkout_state, hardware

    now = datetime.now(timezone.utc)
    harness = checkout_state()

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "run": {"id": f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}", "recorded at": now.isoformat(timespec="seconds"),
                "command": "python -m harness.nightly " + " ".join(argv),
                "items": "whole test sets" if plan.limit is None else f"first {plan.limit} per task",
                "decoding": "greedy (the tasks' temperature 0), lm-eval seed 0",
                "lm-eval requests": f"{plan.concurrency} concurrent per server"},
        "engine under test": {"harness (orchestration)": harness["commit"][:10] + (" (dirty)" if harness["dirty"] else "")},
        "hardware": hardware(device),
        "software": {"python": sys.version.split()[0], "sglang": version("sglang"), "torch": version("torch"),
                     "lm-eval": version("lm_eval")},
    }


def finish(plan: NightlyPlan, runs: Sequence[RunResult], *, thresholds: Thresholds = Thresholds(),
           provenance: Mapping[str, Any] | None = None) -> int:
    """Judge, write every report, the overview and ``summary.json``, print the verdicts; the exit code."""
    from harness.nightly.overview import write_overview

    outcomes = judge(plan, runs, thresholds, provenance)
    plan.out.mkdir(parents=True, exist_ok=True)
    ok = all(o.ok for o in outcomes)
    summary = {"as expected": ok, "comparisons": [o.to_dict() for o in outcomes],
               "runs": [{"model": r.model, "arm": r.graphs, "task": r.suite, "complete": r.complete, "error": r.error,
                         "correct": sum(i.correct for i in r.items), "n": len(r.items)} for r in runs]}
    (plan.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (plan.out / "plan.json").write_text(plan.to_json())
    overview = write_overview(plan, runs, outcomes, thresholds)
    for o in outcomes:
        mark = "ok " if o.ok else "UNEXPECTED"
        print(f"{mark} {o.comparison.model.name} {o.comparison.name}: {o.summary.verdict.value} "
              f"(expected {o.comparison.expectation}) — {o.summary.reason}")
    print(f"overview: {overview}")
    return 0 if ok else 1


def preflight(plan: NightlyPlan) -> list[str]:
    """Every launched arm's flags through SGLang's own parser; the problems found (empty: all parse)."""
    from harness.nightly.sglang_args import InvalidServerArgs, check_arm, sglang_parser

    parser = sglang_parser()
    problems = []
    for run in plan.runs:
        if run.server is None:
            continue
        try:
            check_arm(run.sglang_args, run.arm.expect, parser)
        except InvalidServerArgs as exc:
            problems.append(f"{run.label}: {exc}")
    return problems


def run_plan(plan: NightlyPlan, *, argv: Sequence[str] = (), server_timeout: float = 1800,
             eval_timeout: float = 6 * 3600, thresholds: Thresholds = Thresholds(), check_args: bool = True) -> int:
    """The whole job; exit code 0 (all as expected), 1 (a comparison not as expected), 2 (flags refused)."""
    if check_args and any(r.server is not None for r in plan.runs):
        problems = preflight(plan)
        if problems:
            print("nightly: SGLang's parser refused arm flags:\n  " + "\n  ".join(problems), file=sys.stderr)
            return 2
    plan.out.mkdir(parents=True, exist_ok=True)
    (plan.out / "plan.json").write_text(plan.to_json())
    runs: list[RunResult] = []
    for run in plan.runs:
        runs += run_arm(run, server_timeout=server_timeout, eval_timeout=eval_timeout)
    return finish(plan, runs, thresholds=thresholds, provenance=job_provenance(plan, argv))
