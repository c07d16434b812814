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

Its rooms, one job each: this module checks a plan (``check_plan``, every check before the job starts) and runs it
(``run_plan``); ``harness.jobs.session`` is one run (start the server, score each lm-eval step, stop it);
``harness.jobs.summary.finish`` then has every comparison judged (``harness.jobs.judging``: its verdict too, none where
its arms' servers reported different models, by the rule ``Comparison.served_differences`` that ``check_plan`` applies
before the start), its provenance gathered, recorded and rendered (``harness.jobs.recording``), and writes the front
page and decides the exit code. ``RunOptions`` (``harness.jobs.options``) says how to run a plan.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from harness.evals.results import ServedIdentity
from harness.jobs.options import RunOptions
from harness.jobs.plan import ArmRun, Plan
from harness.jobs.progress import Progress
from harness.jobs.recording import job_provenance
from harness.jobs.session import run_arm
from harness.jobs.summary import finish
from harness.reuse import tokenizer_fingerprint, weights_fingerprint
from harness.servers.guard import ChildProcesses
from harness.servers.identity import ServerUnreachable


class JobInterrupted(BaseException):
    """SIGTERM, SIGINT or SIGHUP reached the job; its children are already being stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# -- the job ---------------------------------------------------------------------------------------------


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


# -- the checks before a start ---------------------------------------------------------------------------


def check_plan(plan: Plan, options: RunOptions) -> list[str]:
    """What stops the plan before anything starts: ``--resume`` against an untrusted external server, an engine not
    installed here or whose imports fail (a server that would die at start-up, read as a run that failed), flags its
    parser refuses, two arms of one comparison that will serve different weights (unless allowed). Each server kind
    answers for its own engine (``ServerKind.cannot_start``, ``ServerKind.refused_flags``)."""
    problems = []
    if options.resume:
        problems += [
            refused for run in plan.runs if (refused := run.arm.resume_refused(trust_url=options.resume_trusting_url))
        ]
    launched = [run for run in plan.runs if run.launched]
    problems += [reason for kind in dict.fromkeys(run.arm.kind for run in launched) if (reason := kind.cannot_start())]
    if not problems and options.check_args:
        problems += [
            f"{run.label}: {refused}"
            for run in launched
            if (refused := run.arm.kind.refused_flags(run.spec, run.arm.expect))
        ]
    if not problems and not options.allow_different_models:
        problems += models_known_to_differ(plan)
    return problems


def _model_before_start(run: ArmRun) -> tuple[ServedIdentity, str] | None:
    """The weights and tokenizer an arm will serve, where that is known before it runs (what an external server
    reports, or the digests of a launched arm's local checkpoint, which the harness server reports too), and a
    description."""
    if not run.launched:
        try:
            identity = run.arm.kind.identity(run.url or "", run.spec)
        except ServerUnreachable:
            return None  # its run fails with its own reason
        where = f"{run.url} serves {identity.model}"
    else:
        local = run.model.checkpoint
        if not local.is_dir():
            return None
        identity = ServedIdentity(
            engine=run.arm.engine,
            version="",
            model=run.spec.model,
            weights=weights_fingerprint(local),
            tokenizer=tokenizer_fingerprint(local),
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
    serves = {key: identity for key, (identity, _) in known.items()}
    where = {key: text for key, (_, text) in known.items()}
    return [
        f"{c.model.name} {c.name}: the arms serve different models ({c.treatment}: "
        f"{where[c.model.slug, c.treatment]}; {c.reference}: {where[c.model.slug, c.reference]}); "
        "--allow-different-models judges them anyway"
        for c in plan.comparisons
        if c.served_differences(serves)
    ]


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
