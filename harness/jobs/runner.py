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

Its parts: ``ArmSession`` is one run (start the server, score each lm-eval step, stop it); ``finish`` judges
(``judge``, ``comparison_verdict``), records (``record_in_history``), renders (``render_comparison``, the
overview) and decides the exit code (``exit_code``); ``arms_that_differ`` is the one check that two arms of
a comparison serve the same model, before the job starts and again on what the servers reported.
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
from harness.servers.identity import ServerUnreachable, server_identity
from harness.servers.lifecycle import Command, ServerLaunchError, ServerProcess
from harness.servers.registry import get_server_kind
from harness.fingerprint import tokenizer_fingerprint, weights_fingerprint
from harness.evals.compare import ItemMismatchError, Thresholds, Tokenize, compare_runs, summarize
from harness.evals.history import Trend, make_entry
from harness.evals.history import record as record_history
from harness.evals.history import trend as history_trend
from harness.evals.results import ItemResult, RunRecord, RunResult, ServedIdentity, Summary, TaskComparison, Verdict
from harness.evals.samples import find_samples, parse_samples
from harness.evals.tasks import TaskSpec
from harness.reuse.tokenizer_memo import load_tokenizer
from harness.jobs.cache import response_cache, untrusted_resume
from harness.jobs.logprob_proxy import LogprobRecorder, load_records, prompt_key
from harness.jobs.plan import ArmRun, Comparison, EvalStep, Plan, Task
from harness.jobs.progress import Progress
from harness.jobs.provenance import comparison_provenance, job_provenance
from harness.targets.preflight import SERVERS, unimportable
from harness.paths import DEFAULT_FAULT_EFFECTS, DEFAULT_KILL_MATRIX, DEFAULT_RELEASE_MATRIX, REPO, shown
from harness.report import render_report
from harness.report.inputs import (
    FaultEffects,
    KillMatrixFile,
    ReleaseMatrix,
    load_fault_effects,
    load_kill_matrices,
    load_release_matrix,
)
from harness.report.overview import OverviewComparison, OverviewModel, write_overview


LOGPROB_ENGINES = frozenset({"harness"})  # the engines whose arms record logprobs (ArmSession._logprobs)


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
    resume_trusting_url: bool = False  # resume against external servers too (they cannot say what they run)
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
    logprobs: bool = True  # record every generation's top-k logprobs (a proxy before each server): the logprob axis

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
        return {
            "model": c.model.name,
            "comparison": c.name,
            "treatment": c.treatment,
            "reference": c.reference,
            "verdict": self.summary.verdict.value,
            "expected": c.expectation,
            "as expected": self.ok,
            "reason": self.summary.reason,
            "logprobs": self.logprob_verdict.value if self.logprob_verdict else None,
            "report": str(self.report) if self.report else None,
            "suites": {
                t.task: {
                    "verdict": t.verdict.value,
                    "difference": t.difference.value if t.difference else None,
                    "n": t.n,
                    "reason": t.reason,
                    "logprobs": t.logprobs.to_dict(items=False) if t.logprobs else None,
                }
                for t in self.tasks
            },
        }

    @property
    def logprob_verdict(self) -> Verdict | None:
        """The worst task's logprob verdict (None: no task has the axis). Shown beside the accuracy verdict; the
        exit code is accuracy's alone."""
        return logprob_verdict(self.tasks)


def logprob_verdict(tasks: Sequence[TaskComparison]) -> Verdict | None:
    """The worst logprob verdict over the tasks that have the axis (None: none has)."""
    axes = [t.logprobs for t in tasks if t.logprobs is not None]
    return Verdict.worst(a.verdict for a in axes) if axes else None


# -- one run: a server and lm-eval against it ------------------------------------------------------------


class ArmSession:
    """One run's server for the length of a ``with`` block, and the lm-eval steps scored against it.

    Entering starts the server (an external one is only read) and reads what it says it is; leaving stops it.
    Whatever goes wrong is one line naming the failed part: ``failure`` when no step can run any more (the
    server did not start, does not answer, or died), a step's own error when only that step failed. ``record``
    is what every RunResult of the run carries; its counters are read again after each step.
    """

    def __init__(
        self,
        run: ArmRun,
        options: RunOptions,
        progress: Progress,
        children: ChildProcesses = CHILDREN,
        label: str | None = None,
    ) -> None:
        self.run, self.options, self.progress, self.children = run, options, progress, children
        self.label = label or run.key
        self.kind = get_server_kind(run.arm.engine)
        self.record = RunRecord(
            arm=run.arm.name, served_by=self.kind.name, graphs=run.arm.graphs, fault=run.arm.fault, base_url=run.arm.url
        )
        self.server: ServerProcess | None = None
        self.failure: str | None = None
        self.started = time.perf_counter()  # each RunResult's wall_s counts from here

    @property
    def url(self) -> str:
        return self.server.base_url if self.server is not None else self.run.url or ""

    @property
    def part(self) -> str:
        """The server, as failures name it."""
        name = f"server ({self.run.arm.name})"
        return name if self.run.launched else f"{name} at {self.url}"

    def __enter__(self) -> ArmSession:
        try:
            if self.run.launched:
                self._launch()
            self._read_identity()
        except RunFailure as exc:
            self.failure = str(exc)
        except (RuntimeError, OSError, ValueError) as exc:  # a harness bug or an unforeseen failure: still one line
            self.failure = f"{self.part} failed: {type(exc).__name__}: {_one_line(str(exc))}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.stop()

    def step(self, step: EvalStep) -> list[RunResult]:
        """Score one lm-eval step (unless no step can run) and save a RunResult per task of it."""
        error, items = self.failure, {}
        if error is None:
            error, items = self._score(step)
        if self.server is not None and self.server.alive():
            self.record = replace(self.record, counters=self.kind.stats(self.url))  # forwards per path, tokens, ...
        return [self._save(task, error, items.get(task.name, [])) for task in step.tasks]

    def _launch(self) -> None:
        log = self.run.dir / "server.log"
        t0 = time.perf_counter()
        self.progress.starting(self.label, log)
        try:
            self.server = self.kind.start(
                self.run.spec,
                log_path=log,
                timeout=self.options.server_timeout,
                python=self.options.python,
                children=self.children,
            )
        except ServerLaunchError as exc:
            raise RunFailure(f"{self.part} {exc.reason}; see {shown(log)}") from exc
        finally:
            self.progress.started(self.label, ok=self.server is not None)
        self.record = replace(self.record, start_s=round(time.perf_counter() - t0, 2))

    def _read_identity(self) -> None:
        try:
            identity = self.kind.identity(self.url, self.run.spec)
        except ServerUnreachable as exc:
            raise RunFailure(f"{self.part} does not answer: {exc}") from exc
        graphs = identity.raw.get("graph_mode") or self.run.arm.graphs  # "auto" resolved by the server
        self.record = replace(self.record, graphs=graphs, identity=identity)

    def _score(self, step: EvalStep) -> tuple[str | None, dict[str, list[ItemResult]]]:
        """The step's items per task, or the one line saying why there are none."""
        try:
            return None, self._lm_eval(step)
        except RunFailure as exc:
            error = str(exc)
        except (RuntimeError, OSError, ValueError) as exc:
            error = f"lm-eval ({self.run.arm.name}) failed: {type(exc).__name__}: {_one_line(str(exc))}"
        if self.server is not None and not self.server.alive():
            self.failure = error  # no later step can run on a dead server
        return error, {}

    def _lm_eval(self, step: EvalStep) -> dict[str, list[ItemResult]]:
        """lm-eval against the server, then its samples read back per task; RunFailure naming what failed."""
        shutil.rmtree(step.out, ignore_errors=True)
        cache = None
        if step.client.samples:  # the CPU job: every response kept as it comes, for --resume
            cache = response_cache(
                self.run,
                step,
                self.record.identity,
                cache_dir=self.run.dir / "cache",
                resume=self.options.resume,
                trust_url=self.options.resume_trusting_url,
            )
        log = self.run.dir / step.log_name
        self.progress.watch(self.label, self.url, dict(step.items), self.kind.counters)
        try:
            with self._recorder(step) as proxy:
                code = run_lm_eval(
                    step.command(proxy.url if proxy else self.url, cache),
                    log,
                    self.options.eval_timeout,
                    python=self.options.python,
                    children=self.children,
                )
        except LmEvalTimeout as exc:
            raise RunFailure(f"lm-eval ({self.run.arm.name}) {exc}; see {shown(log)}") from exc
        finally:
            self.progress.unwatch(self.label)
        self._check_alive()  # a dead server is the cause, not lm-eval's exit code
        if code != 0:
            raise RunFailure(f"lm-eval ({self.run.arm.name}) exited with code {code}; see {shown(log)}")
        return {task.name: self._samples(step, task, log) for task in step.tasks}

    def _records(self, step: EvalStep) -> Path:
        return self.run.dir / "logprobs" / f"{step.out.name}.jsonl"

    @property
    def _logprobs(self) -> bool:
        """Whether this arm's generations carry their logprobs: asked for, and on an engine the proxy was tried on and
        thresholds exist for (the harness's, ``harness/evals/logprob_thresholds.json``); SGLang's and vLLM's arms
        join when they are calibrated, until then their axis would be NO VERDICT anyway."""
        return self.options.logprobs and self.run.arm.engine in LOGPROB_ENGINES

    @contextmanager
    def _recorder(self, step: EvalStep) -> Iterator[LogprobRecorder | None]:
        """The logprob proxy in front of the server for one lm-eval run (None when the job records no logprobs)."""
        if not self._logprobs:
            yield None
            return
        with LogprobRecorder(self.url, self._records(step), keep=self.options.resume) as proxy:
            yield proxy

    def _samples(self, step: EvalStep, task: Task, log: Path) -> list[ItemResult]:
        name, items, flt = task.lm_eval_task, step.items[task.name], step.filters[task.name]
        samples = find_samples(step.out, name)
        if samples is None:
            raise RunFailure(f"lm-eval ({self.run.arm.name}) wrote no samples for {name}; see {shown(log)}")
        parsed = parse_samples(samples, TaskSpec(task.name, name, flt, items))
        if len(parsed) != items:
            raise RunFailure(
                f"lm-eval ({self.run.arm.name}) wrote {len(parsed)} samples of {name} "
                f"(filter {flt}) for {items} items; see {shown(log)}"
            )
        if self._logprobs:  # each item's generation's logprobs, joined by its prompt
            records = load_records(self._records(step))
            parsed = [replace(i, logprobs=records.get(prompt_key(i.prompt))) for i in parsed]
        return parsed

    def _check_alive(self) -> None:
        if self.server is not None:
            if not self.server.alive():
                raise RunFailure(
                    f"{self.part} died during the run (exit code {self.server.proc.returncode}); "
                    f"see {shown(self.server.log_path)}"
                )
            return
        try:
            server_identity(self.url, timeout=5)
        except ServerUnreachable as exc:
            raise RunFailure(f"{self.part} stopped answering during the run: {exc}") from exc

    def _save(self, task: Task, error: str | None, items: list[ItemResult]) -> RunResult:
        result = RunResult(
            task.name,
            str(self.record.graphs),
            self.run.model.slug,
            error is None,
            error,
            items if error is None else [],
            round(time.perf_counter() - self.started, 2),
            self.record,
        )
        result.save(self.run.dir / "runs" / f"{task.name}.json")
        return result


def run_arm(
    run: ArmRun, options: RunOptions, progress: Progress, children: ChildProcesses = CHILDREN, label: str | None = None
) -> list[RunResult]:
    """The run's server (unless external), each lm-eval step, the server stopped; one RunResult per task, saved.

    A server that fails makes every task INCOMPLETE; a failed lm-eval step only its own tasks, unless it took
    the server down with it. ``label`` names the run in the live progress (default: model and arm).
    """
    with ArmSession(run, options, progress, children, label) as session:
        return [result for step in run.evals for result in session.step(step)]


def run_lm_eval(
    command: Command,
    log_path: Path,
    timeout: float,
    *,
    python: str = sys.executable,
    children: ChildProcesses = CHILDREN,
) -> int:
    """Run lm-eval once (never retried) in its own process group, owned by ``children``, with its whole
    output kept in ``log_path``; its exit code. Past ``timeout`` seconds it is killed (LmEvalTimeout)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write("$ " + command.shell() + "\n")
        log.flush()
        proc = children.spawn(
            command.resolved(python), cwd=REPO, env={**os.environ, **command.env}, stdout=log, stderr=subprocess.STDOUT
        )
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
    """What stops the plan before anything starts: ``--resume`` against an untrusted external server, an engine not
    installed here or whose imports fail (a server that would die at start-up, read as a run that failed), flags its
    parser refuses, two arms of one comparison that will serve different weights (unless allowed)."""
    problems = []
    problems += [
        refused
        for run in plan.runs
        if (refused := untrusted_resume(run, resume=options.resume, trust_url=options.resume_trusting_url))
    ]
    for name in dict.fromkeys(r.arm.engine for r in plan.runs if r.launched):
        try:
            get_server_kind(name).check_installed()
        except ServerNotInstalled as exc:
            problems.append(str(exc))
            continue
        if (needs := SERVERS.get(name)) and (reason := unimportable(needs)):
            problems.append(reason)
    if not problems and options.check_args:
        problems += _preflight(plan)
    if not problems and not options.allow_different_models:
        problems += models_known_to_differ(plan)
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
        print(
            f"{options.name}: interrupted by {exc}; its servers and lm-eval runs were stopped",
            file=sys.stderr,
            flush=True,
        )
        return 128 + exc.signum
    base = job_provenance(plan, options.command_line, options.device) | {
        "wall time": f"{time.perf_counter() - start:.0f} s"
    }
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


@dataclass(frozen=True)
class Judged:
    """One comparison paired task by task: its task comparisons and its runs as judged (their sides set)."""

    comparison: Comparison
    tasks: list[TaskComparison]
    runs: list[RunResult]


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
                    runs.append(
                        RunResult(
                            task.name,
                            run.arm.graphs,
                            run.model.slug,
                            False,
                            f"no saved run at {shown(path)}",
                            [],
                            0.0,
                            RunRecord(run.arm.name),
                        )
                    )
    return runs


def _as_side(run: RunResult, side: str) -> RunResult:
    return replace(run, record=replace(run.record, side=side))


def judge(plan: Plan, runs: Sequence[RunResult], thresholds: Thresholds) -> list[Judged]:
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
        judged.append(Judged(comparison, tasks, pair_runs))
    return judged


def comparison_verdict(tasks: Sequence[TaskComparison], differ: str | None, allow_different_models: bool) -> Summary:
    """The comparison's overall verdict; arms that served different models (``differ`` says how) give none, unless
    allowed, and then the reason says so first."""
    summary = summarize(tasks)
    if not differ:
        return summary
    if allow_different_models:
        return replace(summary, reason=f"judged although {differ} (--allow-different-models); " + summary.reason)
    return replace(summary, verdict=Verdict.NONE, reason=f"no verdict: {differ}")


def record_in_history(
    history: Path | None, judged: Judged, summary: Summary, provenance: Mapping[str, Any], several: bool = False
) -> Trend | None:
    """The comparison's line in the history, and the trend it is now part of (None: no history kept).

    The comparisons of one job share its run id; with ``several`` each line's id names its comparison too, so that
    one comparison's line does not replace another's (and judging the same runs again replaces each its own)."""
    if history is None:
        return None
    entry = make_entry(judged.tasks, summary, judged.runs, provenance)
    if several:
        c = judged.comparison
        entry = replace(entry, run_id=f"{entry.run_id} {c.model.slug}/{c.name}")
    return history_trend(record_history(Path(history), entry), entry)


@dataclass(frozen=True)
class SideInputs:
    """What the report shows beside the comparison, read from other jobs' files once per ``finish``."""

    kill_matrices: list[KillMatrixFile]
    fault_effects: FaultEffects | None
    release_matrix: ReleaseMatrix | None

    @classmethod
    def read(cls, options: RunOptions) -> SideInputs:
        return cls(
            load_kill_matrices(options.kill_matrix),
            load_fault_effects(options.fault_effects),
            load_release_matrix(options.release_matrix),
        )


def render_comparison(
    judged: Judged, summary: Summary, provenance: Mapping[str, Any], trend: Trend | None, side: SideInputs
) -> Path:
    """The comparison's HTML report."""
    return render_report(
        judged.tasks,
        judged.runs,
        summary=summary,
        provenance=provenance,
        out_dir=judged.comparison.dir,
        trend=trend,
        kill_matrices=side.kill_matrices,
        fault_effects=side.fault_effects,
        release_matrix=side.release_matrix,
        tokenize=_tokenizer(judged.comparison),
    )


def exit_code(
    runs: Sequence[RunResult], outcomes: Sequence[Outcome], differ: Mapping[tuple[str, str], str], options: RunOptions
) -> int:
    """0 when every comparison met its expectation, 1 when one did not; 2, said on stderr with each reason, when a
    run failed or two arms served different models (unless allowed): then nothing was measured."""
    failures = list(dict.fromkeys(r.error.splitlines()[0] for r in runs if not r.complete and r.error))
    if not options.allow_different_models:
        failures += [f"{model} {name}: {diff}" for (model, name), diff in differ.items()]
    if failures:
        print(f"{options.name}: no verdict (exit 2): {' | '.join(failures)}", file=sys.stderr, flush=True)
        return 2
    return 0 if all(o.ok for o in outcomes) else 1


def finish(plan: Plan, runs: Sequence[RunResult], options: RunOptions, base: Mapping[str, Any]) -> int:
    """Judge, record in the history, report (each comparison, and the overview), print; the exit code."""
    differ = different_models(plan, runs)
    side = SideInputs.read(options)
    outcomes = [
        _conclude(plan, judged, differ.get((judged.comparison.model.name, judged.comparison.name)), options, base, side)
        for judged in judge(plan, runs, options.thresholds)
    ]
    _front_page(plan, runs, outcomes, options)
    return exit_code(runs, outcomes, differ, options)


def _conclude(
    plan: Plan, judged: Judged, differ: str | None, options: RunOptions, base: Mapping[str, Any], side: SideInputs
) -> Outcome:
    """One comparison: its verdict, its history line, its report, printed."""
    summary = comparison_verdict(judged.tasks, differ, options.allow_different_models)
    provenance = comparison_provenance(plan, judged.comparison, judged.runs, base)
    trend = record_in_history(options.history, judged, summary, provenance, several=len(plan.comparisons) > 1)
    report = render_comparison(judged, summary, provenance, trend, side)
    outcome = Outcome(judged.comparison, judged.tasks, summary, report)
    _print_outcome(outcome, len(plan.comparisons) > 1)
    if trend is not None:
        since = f"; verdict since run #{trend.since.index}" if trend.since else ""
        print(f"history: {shown(Path(options.history))} ({trend.runs} run(s) of {trend.series}{since})")
    return outcome


def _front_page(plan: Plan, runs: Sequence[RunResult], outcomes: Sequence[Outcome], options: RunOptions) -> None:
    """The overview and ``summary.json`` of a plan with one; else the one comparison's report is the page."""
    if not plan.overview:
        print(f"report: {outcomes[0].report}")
        return
    summary = {
        "as expected": all(o.ok for o in outcomes),
        "comparisons": [o.to_dict() for o in outcomes],
        "runs": [
            {
                "model": r.model,
                "arm": r.record.arm,
                "task": r.task,
                "complete": r.complete,
                "error": r.error,
                "correct": sum(i.correct for i in r.items),
                "n": len(r.items),
            }
            for r in runs
        ],
    }
    (plan.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    page = write_overview(plan.out / "index.html", _overview(plan, runs, outcomes), options.thresholds, plan.title)
    print(f"overview: {page}")


# -- do two arms serve the same model? -------------------------------------------------------------------


def arms_that_differ(
    plan: Plan, serves: Mapping[tuple[str, str], ServedIdentity]
) -> list[tuple[Comparison, list[str]]]:
    """The comparisons whose two arms serve different weights or tokenizers, with how (their difference would be
    no graph effect). ``serves`` maps (model slug, arm) to what that arm serves, where it is known."""
    found = []
    for c in plan.comparisons:
        on, off = serves.get((c.model.slug, c.treatment)), serves.get((c.model.slug, c.reference))
        if on is not None and off is not None and (diff := on.model_differences(off)):
            found.append((c, diff))
    return found


def _model_before_start(run: ArmRun) -> tuple[ServedIdentity, str] | None:
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
        identity = ServedIdentity(
            run.arm.engine, "", run.spec.model, weights_fingerprint(local), tokenizer_fingerprint(local)
        )
        where = run.spec.model
    parts = [
        f"{what} {digest}"
        for what, digest in (("weights", identity.weights), ("tokenizer", identity.tokenizer))
        if digest
    ]
    return (identity, f"{where} {', '.join(parts)}") if parts else None


def models_known_to_differ(plan: Plan) -> list[str]:
    """Before anything starts: comparisons whose arms will serve different models, each as one line."""
    known = {(r.model.slug, r.arm.name): found for r in plan.runs if (found := _model_before_start(r))}
    where = {key: text for key, (_, text) in known.items()}
    return [
        f"{c.model.name} {c.name}: the arms serve different models ({c.treatment}: "
        f"{where[c.model.slug, c.treatment]}; {c.reference}: {where[c.model.slug, c.reference]}); "
        "--allow-different-models judges them anyway"
        for c, _ in arms_that_differ(plan, {key: identity for key, (identity, _) in known.items()})
    ]


def different_models(plan: Plan, runs: Sequence[RunResult]) -> dict[tuple[str, str], str]:
    """After the runs: (model, comparison) -> how its two arms' servers reported different weights or tokenizers."""
    served = {(r.model, r.record.arm): r.record.identity for r in runs if r.record.identity}
    return {
        (c.model.name, c.name): f"the arms served different models ({'; '.join(diff)})"
        for c, diff in arms_that_differ(plan, served)
    }


def _overview(plan: Plan, runs: Sequence[RunResult], outcomes: Sequence[Outcome]) -> list[OverviewModel]:
    """The plan and its outcomes as the overview page's plain data (the report floor knows no plans)."""
    by_key = {(r.model, r.record.arm, r.task): r for r in runs}
    models = []
    for model in plan.models:
        arms = [
            (
                a.name,
                " ".join((*a.flags, *get_server_kind(a.engine).graph_flags(a.graphs, a.flags))) or "(defaults)",
                " ".join(f"{k}={v}" for k, v in a.env.items()),
            )
            for a in plan.arms
        ]
        cells = {(a.name, t.name): by_key.get((model.slug, a.name, t.name)) for a in plan.arms for t in plan.tasks}
        comparisons = [
            OverviewComparison(
                f"{o.comparison.treatment} vs {o.comparison.reference}",
                o.tasks,
                o.summary.verdict.value,
                o.comparison.expectation,
                o.ok,
                str(Path(o.report).relative_to(plan.out)) if o.report else None,
            )
            for o in outcomes
            if o.comparison.model == model
        ]
        models.append(OverviewModel(model.name, arms, [t.name for t in plan.tasks], cells, comparisons))
    return models


def _tokenizer(comparison: Comparison) -> Tokenize | None:
    """Split flips into tokens with the checkpoint's own tokenizer, where the model is a local checkpoint."""
    path = REPO / comparison.model.name
    if not (path / "tokenizer.json").is_file():
        return None
    return load_tokenizer(str(path))


def _print_outcome(outcome: Outcome, several: bool) -> None:
    if several:  # which comparison the task lines below belong to
        pair = outcome.comparison
        print(f"{pair.model.name} {pair.name} ({pair.treatment} as ON, {pair.reference} as OFF):")
    for c in outcome.tasks:
        if not c.complete:
            print(f"{c.task}: NO VERDICT — {'; '.join(c.errors)}")
            continue
        on, off, diff = c.on_accuracy, c.off_accuracy, c.difference
        print(
            f"{c.task}: N={c.n} on {on.value:.1%} [{on.low:.1%}, {on.high:.1%}] "
            f"off {off.value:.1%} [{off.low:.1%}, {off.high:.1%}] "
            f"diff {diff.value:+.1%} [{diff.low:+.1%}, {diff.high:+.1%}] McNemar p={c.mcnemar_p:.3g} "
            f"MDE {c.mde:.1%} flips {len(c.flips)} -> {c.verdict.name}"
            + (f" | {c.logprobs.line}" if c.logprobs else "")
        )
    s = outcome.summary
    lp = outcome.logprob_verdict
    beside = f"; logprobs {lp.text}" if lp else ""
    if several:
        c = outcome.comparison
        mark = "ok " if outcome.ok else "UNEXPECTED"
        print(f"{mark} {c.model.name} {c.name}: {s.verdict.text}{beside} (expected {c.expectation}) — {s.reason}")
    else:
        print(f"verdict: {s.verdict.text}{beside} — {s.reason}")
