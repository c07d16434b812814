"""One run of a plan: its arm's server for the length of a ``with`` block, and the lm-eval steps scored against it.

``ArmSession`` starts the server (an external one is only read), reads what it says it is, runs each lm-eval step
(``run_lm_eval``: never retried, killed past its time limit) and saves a ``RunResult`` per task; whatever goes wrong
is one line naming the failed part. ``run_arm`` is the whole of one run, as ``harness.jobs.runner`` calls it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from harness.evals.logprobs import THRESHOLDS_FILE, load_thresholds
from harness.evals.results import ItemResult, RunRecord, RunResult
from harness.evals.samples import CountTokens, find_samples, parse_samples
from harness.evals.tasks import TaskSpec
from harness.jobs.cache import response_cache
from harness.jobs.logprob_proxy import LogprobRecorder, load_records, prompt_key
from harness.jobs.options import RunOptions
from harness.jobs.plan import ArmRun, EvalStep, Task
from harness.jobs.progress import Progress
from harness.paths import REPO, shown
from harness.reuse import memoized_tokenize
from harness.servers.guard import CHILDREN, ChildProcesses
from harness.servers.identity import ServerUnreachable, server_identity
from harness.servers.lifecycle import Command, ServerLaunchError, ServerProcess


def logprob_engines(thresholds: Path = THRESHOLDS_FILE) -> frozenset[str]:
    """The engines whose arms record logprobs (``ArmSession._logprobs``): those with thresholds calibrated for some
    dtype in ``harness/evals/logprob_thresholds.json`` (an engine without them would only read NO VERDICT)."""
    return frozenset(key.split("/", 1)[0] for key in load_thresholds(thresholds))


class RunFailure(RuntimeError):
    """A run could not produce results; the message is one line naming the failed part."""


class LmEvalTimeout(RuntimeError):
    """lm-eval ran past its time limit (and was killed)."""


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
        self.kind = run.arm.kind
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
        """Whether this arm's generations carry their logprobs: asked for, and on an engine with calibrated thresholds
        (``logprob_engines``; an external server has none)."""
        return self.options.logprobs and self.run.arm.engine in logprob_engines()

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
        spec = TaskSpec(name=task.name, lm_eval_task=name, primary_filter=flt, default_limit=items, output=task.output)
        parsed = parse_samples(samples, spec, _choice_tokens(step) if task.output == "multiple_choice" else None)
        if len(parsed) != items:
            raise RunFailure(
                f"lm-eval ({self.run.arm.name}) wrote {len(parsed)} samples of {name} "
                f"(filter {flt}) for {items} items; see {shown(log)}"
            )
        if self._logprobs and task.output != "multiple_choice":  # each generation's logprobs, joined by its prompt
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
            task=task.name,
            graphs=str(self.record.graphs),
            model=self.run.model.slug,
            complete=error is None,
            error=error,
            items=items if error is None else [],
            wall_s=round(time.perf_counter() - self.started, 2),
            record=self.record,
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
    with ArmSession(run=run, options=options, progress=progress, children=children, label=label) as session:
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


def _choice_tokens(step: EvalStep) -> CountTokens | None:
    """How many tokens of a choice follow its context, split as lm-eval splits them (the whole text encoded, less the
    context's tokens) with the checkpoint's tokenizer; None for a model without a local tokenizer.json."""
    path = step.model.checkpoint
    if not (path / "tokenizer.json").is_file():
        return None
    tokenize = memoized_tokenize(str(path))
    return lambda context, continuation: len(tokenize(context + continuation)) - len(tokenize(context))
