"""The one runner: any plan, nightly or CPU, as launch -> lm-eval -> judge -> history -> render.

Per run (a model on an arm) the arm's engine starts a server (``harness.servers``; an external arm's
URL is only read), its identity is read, and lm-eval scores the run's tasks against it, fully offline
on CPU, with per-sample logs; the samples become ``RunResult``s saved under the run's folder, so
``swa-harness report`` can judge them again. Runs go ``plan.parallel`` at a time (two servers side by side
on a CPU box, one at a time on one GPU); each comparison pairs its arms item by item, gets its own
HTML report, and a plan with an overview gets the front page too.

Nothing is retried. A server that does not come up or dies, or an lm-eval that fails, makes the
affected runs INCOMPLETE with a one-line reason naming the failed part and its log; the job then exits
2 with "no verdict", never 1 (RED is a measured accuracy difference, not a crash). The job owns its
servers and lm-eval runs: none of them outlives it, whatever ends it (see ``run_plan``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.servers.base import ServerNotInstalled
from harness.servers.guard import CHILDREN, ChildProcesses
from harness.servers.identity import Identity, ServerUnreachable, server_identity
from harness.servers.lifecycle import Command, ServerLaunchError, ServerProcess
from harness.servers.registry import get_server_kind
from harness.fingerprint import tokenizer_fingerprint, weights_fingerprint
from harness.evals.compare import ItemMismatchError, Thresholds, Tokenize, compare_runs, summarize
from harness.evals.history import make_entry
from harness.evals.history import record as record_history
from harness.evals.history import trend as history_trend
from harness.evals.results import ItemResult, RunRecord, RunResult, ServedIdentity, Summary, TaskComparison, Verdict
from harness.evals.samples import find_samples, parse_samples
from harness.evals.tasks import TaskSpec
from harness.jobs.cache import response_cache
from harness.jobs.plan import ArmRun, Comparison, EvalStep, Plan
from harness.jobs.progress import Progress
from harness.jobs.provenance import comparison_provenance, job_provenance
from harness.paths import DEFAULT_FAULT_EFFECTS, DEFAULT_KILL_MATRIX, DEFAULT_RELEASE_MATRIX, REPO, shown
from harness.report import render_report
from harness.report.inputs import load_fault_effects, load_kill_matrices, load_release_matrix
from harness.report.overview import OverviewComparison, OverviewModel, write_overview


class RunFailure(RuntimeError):
    """A run could not produce results; the message is one line naming the failed part."""


class LmEvalTimeout(RuntimeError):
    """lm-eval ran past its time limit (and was killed)."""


class JobInterrupted(BaseException):
    """SIGTERM, SIGINT or SIGHUP reached the job; its children are already being stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class RunOptions:
    """How to run a plan (not what: that is the plan)."""

    server_timeout: float = 600
    eval_timeout: float = 3600
    resume: bool = False  # reuse the responses an interrupted run of exactly this configuration cached
    thresholds: Thresholds = field(default_factory=Thresholds)
    kill_matrix: Path | None = DEFAULT_KILL_MATRIX
    fault_effects: Path | None = DEFAULT_FAULT_EFFECTS
    release_matrix: Path | None = DEFAULT_RELEASE_MATRIX
    history: Path | None = None  # JSON-lines record of every judged comparison, read for the trend (None: neither)
    check_args: bool = True  # parse each launched arm's flags with its engine's own parser first, where it has one
    argv: tuple[str, ...] = ()  # the command line, recorded in the provenance
    command: str = "swa-harness eval"
    device: str = "cpu"
    python: str = sys.executable
    name: str = "swa-harness eval"  # how the job names itself on stderr
    allow_different_models: bool = False  # judge arms that serve different weights anyway (the report says so)

    @property
    def command_line(self) -> str:
        return " ".join((self.command, *self.argv))


@dataclass(frozen=True)
class Outcome:
    """One comparison judged: its tasks, the worst verdict, the report, and whether that was expected.

    ``to_dict`` is its entry in ``summary.json``, whose keys (``"suites"`` for the tasks) stay as they were."""

    comparison: Comparison
    tasks: list[TaskComparison]
    summary: Summary
    report: Path | None

    @property
    def ok(self) -> bool:
        verdict = self.summary.verdict
        return verdict is Verdict.RED if self.comparison.expect_red else verdict in (Verdict.GREEN, Verdict.AMBER)

    def to_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {"model": c.model.name, "comparison": c.name, "treatment": c.treatment, "reference": c.reference,
                "verdict": self.summary.verdict.value, "expected": c.expectation, "as expected": self.ok,
                "reason": self.summary.reason, "report": str(self.report) if self.report else None,
                "suites": {t.task: {"verdict": t.verdict.value, "difference": t.difference.value if t.difference else None,
                                    "n": t.n, "reason": t.reason} for t in self.tasks}}


# -- one run: a server and lm-eval against it ------------------------------------------------------------


def run_arm(run: ArmRun, options: RunOptions, progress: Progress, children: ChildProcesses = CHILDREN,
            label: str | None = None) -> list[RunResult]:
    """The run's server (unless external), each lm-eval step, the server stopped; one RunResult per task, saved.

    A server that fails makes every task INCOMPLETE; a failed lm-eval step only its own tasks, unless it took
    the server down with it. ``label`` names the run in the live progress (default: model and arm).
    """
    engine = get_server_kind(run.arm.engine)
    spec = run.spec
    label = label or run.key
    part = f"server ({run.arm.name})"
    record = RunRecord(arm=run.arm.name, served_by=engine.name, graphs=run.arm.graphs, fault=run.arm.fault,
                       base_url=run.arm.url)
    results: dict[str, RunResult] = {}
    server: ServerProcess | None = None
    arm_error: str | None = None
    identity: Identity | None = None
    url = run.url or ""
    start = time.perf_counter()
    try:
        if run.launched:
            t0 = time.perf_counter()
            progress.starting(label, run.dir / "server.log")
            try:
                server = engine.start(spec, log_path=run.dir / "server.log", timeout=options.server_timeout,
                                      python=options.python, children=children)
            except ServerLaunchError as exc:
                raise RunFailure(f"{part} {exc.reason}; see {shown(run.dir / 'server.log')}") from exc
            finally:
                progress.started(label, ok=server is not None)
            record = replace(record, start_s=round(time.perf_counter() - t0, 2))
            url = server.base_url
        else:
            part = f"{part} at {url}"
        try:
            identity = engine.identity(url, spec)
        except ServerUnreachable as exc:
            raise RunFailure(f"{part} does not answer: {exc}") from exc
        record = replace(record, identity=served_identity(identity),
                         graphs=identity.raw.get("graph_mode") or run.arm.graphs)  # "auto" resolved by the server
    except RunFailure as exc:
        arm_error = str(exc)
    except (RuntimeError, OSError, ValueError) as exc:  # a harness bug or an unforeseen failure: still one line
        arm_error = f"{part} failed: {type(exc).__name__}: {_one_line(str(exc))}"
    try:
        for step in run.evals:
            error, items = arm_error, {}
            if error is None:
                try:
                    items = _run_step(run, step, url, identity, options, progress, server, part, children,
                                      label)
                except RunFailure as exc:
                    error = str(exc)
                except (RuntimeError, OSError, ValueError) as exc:
                    error = f"lm-eval ({run.arm.name}) failed: {type(exc).__name__}: {_one_line(str(exc))}"
                if error is not None and server is not None and not server.alive():
                    arm_error = error  # no later step can run on a dead server
            if server is not None and server.alive():
                record = replace(record, counters=engine.stats(url))  # what it did: forwards per path, tokens, preemptions
            for task in step.tasks:
                results[task.name] = RunResult(
                    task=task.name, graphs=str(record.graphs), model=run.model.slug, complete=error is None,
                    error=error, items=items.get(task.name, []) if error is None else [],
                    wall_s=round(time.perf_counter() - start, 2), record=record)
                results[task.name].save(run.dir / "runs" / f"{task.name}.json")
    finally:
        if server is not None:
            server.stop()
    return list(results.values())


def _run_step(run: ArmRun, step: EvalStep, url: str, identity: Identity | None, options: RunOptions,
              progress: Progress, server: ServerProcess | None, part: str, children: ChildProcesses,
              label: str) -> dict[str, list[ItemResult]]:
    shutil.rmtree(step.out, ignore_errors=True)
    cache = None
    if step.client.samples:  # the CPU job: every response kept as it comes, for --resume
        cache = response_cache(run, step, identity.raw if identity else {}, cache_dir=run.dir / "cache",
                               resume=options.resume)
    command = step.command(url, cache)
    log = run.dir / step.log_name
    progress.watch(label, url, dict(step.items), get_server_kind(run.arm.engine).counters)
    try:
        try:
            code = run_lm_eval(command, log, options.eval_timeout, python=options.python, children=children)
        except LmEvalTimeout as exc:
            raise RunFailure(f"lm-eval ({run.arm.name}) {exc}; see {shown(log)}") from exc
    finally:
        progress.unwatch(label)
    _check_server_survived(server, url, part)  # a dead server is the cause, not lm-eval's exit code
    if code != 0:
        raise RunFailure(f"lm-eval ({run.arm.name}) exited with code {code}; see {shown(log)}")
    items = {}
    for task in step.tasks:
        samples = find_samples(step.out, task.lm_eval_task)
        if samples is None:
            raise RunFailure(f"lm-eval ({run.arm.name}) wrote no samples for {task.lm_eval_task}; see {shown(log)}")
        parsed = parse_samples(samples, TaskSpec(task.name, task.lm_eval_task, step.filters[task.name],
                                                  step.items[task.name]))
        if len(parsed) != step.items[task.name]:
            raise RunFailure(f"lm-eval ({run.arm.name}) wrote {len(parsed)} samples of {task.lm_eval_task} "
                             f"(filter {step.filters[task.name]}) for {step.items[task.name]} items; see {shown(log)}")
        items[task.name] = parsed
    return items


def _check_server_survived(server: ServerProcess | None, url: str, part: str) -> None:
    if server is not None:
        if not server.alive():
            raise RunFailure(f"{part} died during the run (exit code {server.proc.returncode}); "
                             f"see {shown(server.log_path)}")
    else:
        try:
            server_identity(url, timeout=5)
        except ServerUnreachable as exc:
            raise RunFailure(f"{part} stopped answering during the run: {exc}") from exc


def run_lm_eval(command: Command, log_path: Path, timeout: float, *, python: str = sys.executable,
                children: ChildProcesses = CHILDREN) -> int:
    """Run lm-eval once (never retried) in its own process group, owned by ``children``, with its whole
    output kept in ``log_path``; its exit code. Past ``timeout`` seconds it is killed (LmEvalTimeout)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write("$ " + command.shell() + "\n")
        log.flush()
        proc = children.spawn(command.resolved(python), cwd=REPO, env={**os.environ, **command.env}, stdout=log,
                              stderr=subprocess.STDOUT)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise LmEvalTimeout(f"timed out after {timeout:g} s (killed)") from None
        finally:
            children.stop(proc)


def _one_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit] + "..."


# -- the job ---------------------------------------------------------------------------------------------


def check_plan(plan: Plan, options: RunOptions) -> list[str]:
    """What stops the plan before anything starts: an engine not installed here, flags its parser refuses, two
    arms of one comparison that will serve different weights (unless allowed)."""
    problems = []
    for name in dict.fromkeys(r.arm.engine for r in plan.runs if r.launched):
        try:
            get_server_kind(name).check_installed()
        except ServerNotInstalled as exc:
            problems.append(str(exc))
    if not problems and options.check_args:
        problems += _preflight(plan)
    if not problems and not options.allow_different_models:
        problems += models_known_to_differ(plan)
    return problems


def _model_before_start(run: ArmRun) -> tuple[Identity, str] | None:
    """The weights and tokenizer an arm will serve, where that is known before it runs (what an external server
    reports, or the digests of a launched arm's local checkpoint, which the harness server reports too), and a
    description."""
    if not run.launched:
        try:
            identity = get_server_kind(run.arm.engine).identity(run.url or "", run.spec)
        except ServerUnreachable:
            return None  # its run fails with its own reason
        where = f"{run.url} serves {identity.model}"
    else:
        local = Path(run.spec.model)
        local = local if local.is_absolute() else REPO / local  # servers run in the checkout
        if not local.is_dir():
            return None
        identity = Identity(run.arm.engine, "", run.spec.model, weights_fingerprint(local), tokenizer_fingerprint(local))
        where = run.spec.model
    parts = [f"{what} {digest}" for what, digest in (("weights", identity.weights), ("tokenizer", identity.tokenizer))
             if digest]
    return (identity, f"{where} {', '.join(parts)}") if parts else None


def models_known_to_differ(plan: Plan) -> list[str]:
    """Comparisons whose arms will serve different weights or tokenizers: their difference would be no graph effect."""
    known = {(r.model.slug, r.arm.name): _model_before_start(r) for r in plan.runs}
    problems = []
    for c in plan.comparisons:
        on, off = known.get((c.model.slug, c.treatment)), known.get((c.model.slug, c.reference))
        if on and off and on[0].model_differences(off[0]):
            problems.append(f"{c.model.name} {c.name}: the arms serve different models ({c.treatment}: {on[1]}; "
                            f"{c.reference}: {off[1]}); --allow-different-models judges them anyway")
    return problems


def _preflight(plan: Plan) -> list[str]:
    """Every launched SGLang arm's flags through SGLang's own parser (the nightly's arms check ServerArgs fields)."""
    runs = [r for r in plan.runs if r.launched and r.arm.engine == "sglang"]
    if not runs:
        return []
    from harness.servers.sglang_server import sglang_args
    from harness.servers.sglang_server.server_args import InvalidServerArgs, check_arm, sglang_parser

    parser = sglang_parser()
    problems = []
    for run in runs:
        try:
            check_arm(sglang_args(run.spec), run.arm.expect, parser)
        except InvalidServerArgs as exc:
            problems.append(f"{run.label}: {exc}")
    return problems


def run_plan(plan: Plan, options: RunOptions = RunOptions()) -> int:
    """The whole job: every run, saved; every comparison judged and reported; the exit code.

    0 when every comparison meets its expectation, 1 when one does not (a regression: RED), 2 when the plan
    cannot start or a run failed (no verdict; a one-line reason on stderr names the part), 128 + N when signal
    N interrupted it. The servers and lm-eval runs are this process's children, each in its own process
    group: they are stopped on any exit, on SIGTERM/SIGINT/SIGHUP, and die by themselves if the job is
    SIGKILLed (``harness.servers.guard``).
    """
    problems = check_plan(plan, options)
    if problems:
        print(f"{options.name}: cannot start, no verdict: " + " | ".join(problems), file=sys.stderr, flush=True)
        return 2
    plan.out.mkdir(parents=True, exist_ok=True)
    (plan.out / "plan.json").write_text(plan.to_json())
    children = ChildProcesses()
    start = time.perf_counter()
    try:
        with _stop_children_on_signals(children):
            with Progress() as progress, ThreadPoolExecutor(max(1, plan.parallel)) as pool:
                label = (lambda run: run.arm.name) if len(plan.models) == 1 else (lambda run: run.key)
                futures = [pool.submit(run_arm, run, options, progress, children, label(run)) for run in plan.runs]
                runs = [result for f in futures for result in f.result()]
    except JobInterrupted as exc:
        print(f"{options.name}: interrupted by {exc}; its servers and lm-eval runs were stopped", file=sys.stderr,
              flush=True)
        return 128 + exc.signum
    base = job_provenance(plan, options.command_line, options.device) | {"wall time": f"{time.perf_counter() - start:.0f} s"}
    (plan.out / "provenance.json").write_text(json.dumps(base, indent=2))
    return finish(plan, runs, options, base)


@contextmanager
def _stop_children_on_signals(children: ChildProcesses) -> Iterator[None]:
    """While the job runs, SIGTERM/SIGINT/SIGHUP stop every child at once and raise JobInterrupted in
    the main thread; whatever way the block is left, every child is stopped before it returns."""
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.getsignal(sig) for sig in signals} if main else {}
    interrupted: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        children.terminate_all()  # the worker threads waiting on them return now
        if not interrupted:  # a second signal only repeats the SIGTERM
            interrupted.append(signum)
            raise JobInterrupted(signum)

    for sig in previous:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        children.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -- judging ---------------------------------------------------------------------------------------------


def load_runs(plan: Plan) -> list[RunResult]:
    """The saved runs of a plan (``swa-harness report``, ``--report-only``); a missing one is INCOMPLETE, saying so."""
    runs = []
    for run in plan.runs:
        for step in run.evals:
            for task in step.tasks:
                path = run.dir / "runs" / f"{task.name}.json"
                if path.is_file():
                    runs.append(RunResult.load(path))
                else:
                    runs.append(RunResult(task.name, run.arm.graphs, run.model.slug, False,
                                          f"no saved run at {shown(path)}", [], 0.0, RunRecord(run.arm.name)))
    return runs


def _as_side(run: RunResult, side: str) -> RunResult:
    return replace(run, record=replace(run.record, side=side))


def judge(plan: Plan, runs: Sequence[RunResult], thresholds: Thresholds) -> list[tuple[Comparison, list[TaskComparison],
                                                                                       list[RunResult]]]:
    """Every comparison of the plan over ``runs``, paired per task (the treatment as ON, the reference as OFF)."""
    by_key = {(r.model, r.record.arm, r.task): r for r in runs}
    judged = []
    for comparison in plan.comparisons:
        tasks, pair_runs = [], []
        for task in plan.tasks:
            on = _as_side(by_key[comparison.model.slug, comparison.treatment, task.name], "on")
            off = _as_side(by_key[comparison.model.slug, comparison.reference, task.name], "off")
            task_thresholds = thresholds if task.max_drop is None else replace(thresholds, max_drop=task.max_drop)
            try:
                tasks.append(compare_runs(on, off, thresholds=task_thresholds, tokenize=_tokenizer(comparison)))
            except ItemMismatchError as exc:  # lm-eval scored other items in one arm: no pairing
                bad = replace(on, complete=False, error=f"ItemMismatchError: {exc}", items=[])
                tasks.append(compare_runs(bad, off, thresholds=task_thresholds))
            pair_runs += [on, off]
        judged.append((comparison, tasks, pair_runs))
    return judged


def finish(plan: Plan, runs: Sequence[RunResult], options: RunOptions, base: Mapping[str, Any]) -> int:
    """Judge, record in the history, report (each comparison, and the overview), print; the exit code."""
    outcomes = []
    differ = different_models(plan, runs)
    for comparison, tasks, pair_runs in judge(plan, runs, options.thresholds):
        summary = summarize(tasks)
        if diff := differ.get((comparison.model.name, comparison.name)):  # first on the report, whichever way taken
            summary = (replace(summary, reason=f"judged although {diff} (--allow-different-models); " + summary.reason)
                       if options.allow_different_models else replace(summary, verdict=Verdict.NONE,
                                                                      reason=f"no verdict: {diff}"))
        prov = comparison_provenance(plan, comparison, pair_runs, base)
        trend = None
        if options.history is not None:
            entry = make_entry(tasks, summary, pair_runs, prov)
            trend = history_trend(record_history(Path(options.history), entry), entry)
        report = render_report(tasks, pair_runs, summary=summary, provenance=prov, out_dir=comparison.dir,
                               trend=trend, kill_matrices=load_kill_matrices(options.kill_matrix),
                               fault_effects=load_fault_effects(options.fault_effects),
                               release_matrix=load_release_matrix(options.release_matrix),
                               tokenize=_tokenizer(comparison))
        outcome = Outcome(comparison, tasks, summary, report)
        outcomes.append(outcome)
        _print_outcome(outcome, len(plan.comparisons) > 1)
        if trend is not None:
            since = f"; verdict since run #{trend.since.index}" if trend.since else ""
            print(f"history: {shown(Path(options.history))} ({trend.runs} run(s) of {trend.series}{since})")
    if plan.overview:
        summary_json = {"as expected": all(o.ok for o in outcomes), "comparisons": [o.to_dict() for o in outcomes],
                        "runs": [{"model": r.model, "arm": r.record.arm, "task": r.task,
                                  "complete": r.complete, "error": r.error, "correct": sum(i.correct for i in r.items),
                                  "n": len(r.items)} for r in runs]}
        (plan.out / "summary.json").write_text(json.dumps(summary_json, indent=1) + "\n")
        print(f"overview: {write_overview(plan.out / 'index.html', _overview(plan, runs, outcomes), options.thresholds)}")
    else:
        print(f"report: {outcomes[0].report}")
    failures = list(dict.fromkeys(r.error.splitlines()[0] for r in runs if not r.complete and r.error))
    if not options.allow_different_models:
        failures += [f"{model} {name}: {diff}" for (model, name), diff in differ.items()]
    if failures:
        print(f"{options.name}: no verdict (exit 2): {' | '.join(failures)}", file=sys.stderr, flush=True)
        return 2
    return 0 if all(o.ok for o in outcomes) else 1


def different_models(plan: Plan, runs: Sequence[RunResult]) -> dict[tuple[str, str], str]:
    """(model, comparison) -> how its two arms' servers reported different weights or tokenizers (their difference is
    no graph effect)."""
    reported = {(r.model, r.record.arm): r.record.identity for r in runs if r.record.identity}
    problems = {}
    for c in plan.comparisons:
        on, off = reported.get((c.model.slug, c.treatment)), reported.get((c.model.slug, c.reference))
        if on and off and (diff := _identity(on).model_differences(_identity(off))):
            problems[(c.model.name, c.name)] = f"the arms served different models ({'; '.join(diff)})"
    return problems


def served_identity(identity: Identity) -> ServedIdentity:
    """A server's identity as a run keeps it."""
    return ServedIdentity(identity.engine, identity.version, identity.model, identity.weights, identity.tokenizer,
                          dict(identity.flags), dict(identity.raw))


def _identity(served: ServedIdentity) -> Identity:
    return Identity(served.engine, served.version, served.model, served.weights, served.tokenizer, served.flags,
                    served.raw)


def _overview(plan: Plan, runs: Sequence[RunResult], outcomes: Sequence[Outcome]) -> list[OverviewModel]:
    """The plan and its outcomes as the overview page's plain data (the report floor knows no plans)."""
    by_key = {(r.model, r.record.arm, r.task): r for r in runs}
    models = []
    for model in plan.models:
        arms = [(a.name, " ".join((*a.flags, *get_server_kind(a.engine).graph_flags(a.graphs, a.flags))) or "(defaults)",
                 " ".join(f"{k}={v}" for k, v in a.env.items())) for a in plan.arms]
        cells = {(a.name, t.name): by_key.get((model.slug, a.name, t.name)) for a in plan.arms for t in plan.tasks}
        comparisons = [OverviewComparison(f"{o.comparison.treatment} vs {o.comparison.reference}", o.tasks,
                                          o.summary.verdict.value, o.comparison.expectation, o.ok,
                                          str(Path(o.report).relative_to(plan.out)) if o.report else None)
                       for o in outcomes if o.comparison.model == model]
        models.append(OverviewModel(model.name, arms, [t.name for t in plan.tasks], cells, comparisons))
    return models


def _tokenizer(comparison: Comparison) -> Tokenize | None:
    """Split flips into tokens with the checkpoint's own tokenizer, where the model is a local checkpoint."""
    path = REPO / comparison.model.name
    if not (path / "tokenizer.json").is_file():
        return None
    return _load_tokenizer(str(path))


_TOKENIZERS: dict[str, Tokenize] = {}


def _load_tokenizer(path: str) -> Tokenize:
    if path not in _TOKENIZERS:
        from harness.model import Tokenizer  # imported here: harness.model pulls in torch, needed only for this

        tok = Tokenizer.from_dir(Path(path))
        _TOKENIZERS[path] = lambda text: [tok.decode([i]) for i in tok.tokenizer.encode(text, add_special_tokens=False).ids]
    return _TOKENIZERS[path]


def _print_outcome(outcome: Outcome, several: bool) -> None:
    for c in outcome.tasks:
        if not c.complete:
            print(f"{c.task}: NO VERDICT — {'; '.join(c.errors)}")
            continue
        on, off, diff = c.on_accuracy, c.off_accuracy, c.difference
        print(f"{c.task}: N={c.n} on {on.value:.1%} [{on.low:.1%}, {on.high:.1%}] "
              f"off {off.value:.1%} [{off.low:.1%}, {off.high:.1%}] "
              f"diff {diff.value:+.1%} [{diff.low:+.1%}, {diff.high:+.1%}] McNemar p={c.mcnemar_p:.3g} "
              f"MDE {c.mde:.1%} flips {len(c.flips)} -> {c.verdict.name}")
    s = outcome.summary
    if several:
        c = outcome.comparison
        mark = "ok " if outcome.ok else "UNEXPECTED"
        print(f"{mark} {c.model.name} {c.name}: {s.verdict.text} (expected {c.expectation}) — {s.reason}")
    else:
        print(f"verdict: {s.verdict.text} — {s.reason}")
