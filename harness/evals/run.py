"""The eval job: accuracy suites with graphs ON and OFF on the same items, compared paired.

For each graph mode a server is launched over the checkpoint (or an external OpenAI-compatible
server is used: e.g. a real SGLang server on a GPU box), lm-eval's ``local-completions`` runs the
task YAMLs of ``suites/accuracy`` against it, fully offline, with per-sample logs; the samples
become ``RunResult``s; ON and OFF are compared item by item; the HTML report is written.

Determinism: greedy decoding, and lm-eval sends each batch of ``--batch-size`` prompts in one
request with no concurrency, so the engine always sees the same batches in the same order.
Nothing is retried: a server that dies or an lm-eval that fails makes that run INCOMPLETE, and it
is reported as such, never as an accuracy, with a one-line reason naming the failed part; the job
then exits 2, not 1 (RED). Every log is kept under the output folder. The job owns its servers and
lm-eval runs: none of them outlives it, whatever ends it (see ``run_eval``).
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
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.evals.cache import ServerUnreachable, response_cache, server_identity
from harness.evals.compare import Thresholds, Tokenize, compare_runs, summarize
from harness.evals.config import EvalConfig, ModeSpec
from harness.evals.history import DEFAULT_HISTORY, make_entry
from harness.evals.history import record as record_history
from harness.evals.history import trend as history_trend
from harness.evals.lmeval import OFFLINE_ENV, find_samples, lm_eval_command, parse_samples
from harness.evals.paths import REPO
from harness.evals.progress import Progress, health
from harness.evals.provenance import provenance
from harness.evals.results import ItemResult, RunResult, SuiteComparison, Summary
from harness.report import render_report
from harness.report.inputs import DEFAULT_FAULT_EFFECTS, load_fault_effects, load_kill_matrices
from harness.server.guard import CHILDREN, ChildProcesses
from harness.server.launch import ServerLaunchError, ServerProcess, launch_server


class RunFailure(RuntimeError):
    """One side of the eval could not produce results; the message is one line naming the failed part."""


class LmEvalTimeout(RuntimeError):
    """lm-eval ran past its time limit (and was killed)."""


class EvalInterrupted(BaseException):
    """SIGTERM, SIGINT or SIGHUP reached the eval; its children are already being stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run_mode(config: EvalConfig, mode: ModeSpec, progress: Progress,
             children: ChildProcesses = CHILDREN) -> list[RunResult]:
    """One side of the comparison, one RunResult per suite; any failure makes every suite INCOMPLETE,
    with a one-line error naming what failed (the server, lm-eval, its samples) and its log."""
    suites, limits = config.suites, config.limits
    logs = Path(config.out) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    timings: dict[str, Any] = {}
    server = None
    error: str | None = None
    graphs = mode.graphs
    identity: dict[str, Any] = {}
    items: dict[str, list[ItemResult]] = {}
    part = f"server (graphs {mode.label})"
    try:
        base_url = mode.base_url
        if base_url is None:
            env = {**OFFLINE_ENV, "SWA_HARNESS_FAULT": mode.fault or ""}
            server_log = logs / f"server-{mode.label}.log"
            t0 = time.perf_counter()
            try:
                server = launch_server(config.model, mode.graphs, max_running=config.max_running,
                                       num_threads=config.threads, served_model_name="swa-harness", env=env,
                                       log_path=server_log, timeout=config.server_timeout,
                                       extra_args=["--device", config.device], children=children)
            except ServerLaunchError as exc:
                raise RunFailure(f"{part} {exc.reason}; see {server_log}") from exc
            timings["server_start_s"] = round(time.perf_counter() - t0, 2)
            base_url = server.base_url
        else:
            part = f"server (graphs {mode.label}) at {base_url}"
        try:
            identity = server_identity(base_url)
        except ServerUnreachable as exc:
            raise RunFailure(f"{part} does not answer: {exc}") from exc
        graphs = identity.get("graph_mode") or mode.graphs  # "auto" resolved by the server
        progress.watch(mode.label, base_url, {s.name: limits[s.name] for s in suites})  # lm-eval runs them in order
        raw = Path(config.out) / "lm_eval" / mode.label
        shutil.rmtree(raw, ignore_errors=True)
        cmd = lm_eval_command(base_url, suites, limits, raw, "swa-harness", config.batch_size,
                              response_cache(config, mode, identity))
        t0 = time.perf_counter()
        lm_eval_log = logs / f"lm_eval-{mode.label}.log"
        try:
            returncode = _run_lm_eval(cmd, lm_eval_log, config.lm_eval_timeout, children=children)
        except LmEvalTimeout as exc:
            raise RunFailure(f"lm-eval (graphs {mode.label}) {exc}; see {lm_eval_log}") from exc
        timings["lm_eval_s"] = round(time.perf_counter() - t0, 2)
        _check_server_survived(server, base_url, part)  # a dead server is the cause, not lm-eval's exit code
        if returncode != 0:
            raise RunFailure(f"lm-eval (graphs {mode.label}) exited with code {returncode}; see {lm_eval_log}")
        for suite in suites:
            path = find_samples(raw, suite.task)
            if path is None:
                raise RunFailure(f"lm-eval (graphs {mode.label}) wrote no samples for {suite.task}; see {lm_eval_log}")
            items[suite.name] = parse_samples(path, suite)
            if len(items[suite.name]) != limits[suite.name]:
                raise RunFailure(f"lm-eval (graphs {mode.label}) wrote {len(items[suite.name])} samples of "
                                 f"{suite.task} for {limits[suite.name]} items; see {lm_eval_log}")
        if server is not None:
            timings["engine"] = health(base_url).get("stats", {})
    except RunFailure as exc:
        error = str(exc)
    except (RuntimeError, OSError, ValueError) as exc:  # a harness bug or an unforeseen failure: still one line
        error = f"eval (graphs {mode.label}) failed: {type(exc).__name__}: {_one_line(str(exc))}"
    finally:
        progress.unwatch(mode.label)
        if server is not None:
            server.stop()
    wall = round(time.perf_counter() - start, 2)
    meta = {"mode": mode.label, "graphs": graphs, "fault": mode.fault, "base_url": mode.base_url,
            "server": identity, **timings}
    return [RunResult(suite=s.name, graphs=graphs, model=config.model_name,
                      complete=error is None, error=error, items=items.get(s.name, []) if error is None else [],
                      wall_s=wall, meta=meta) for s in suites]


def _check_server_survived(server: ServerProcess | None, base_url: str, part: str) -> None:
    if server is not None:
        if not server.alive():
            raise RunFailure(f"{part} died during the run (exit code {server.proc.returncode}); "
                             f"see {server.log_path}")
    else:
        try:
            server_identity(base_url, timeout=5)
        except ServerUnreachable as exc:
            raise RunFailure(f"{part} stopped answering during the run: {exc}") from exc


def _one_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit] + "..."


def _run_lm_eval(cmd: list[str], log_path: Path, timeout: float, *, children: ChildProcesses = CHILDREN) -> int:
    """Run lm-eval once (never retried) in its own process group, owned by ``children``, with its whole
    output kept in ``log_path``; its exit code. Past ``timeout`` seconds it is killed (LmEvalTimeout)."""
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = children.spawn(cmd, cwd=REPO, env={**os.environ, **OFFLINE_ENV}, stdout=log, stderr=subprocess.STDOUT)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise LmEvalTimeout(f"timed out after {timeout:g} s (killed)") from None
        finally:
            children.stop(proc)


def run_eval(config: EvalConfig) -> int:
    """The whole job: both modes (side by side unless sequential), saved runs, provenance, report.

    Exit code: 0 green, 1 RED (a regression), 2 when a server or lm-eval failed (a one-line reason on
    stderr names the part), 128 + N when signal N interrupted it. The servers and lm-eval runs are
    this process's children, each in its own process group: they are stopped on any exit, on
    SIGTERM/SIGINT/SIGHUP, and die by themselves if the eval is SIGKILLed (harness.server.guard).
    """
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"swa-harness eval: {config.model_name}, suites {dict(config.limits)}, graphs on={config.graphs_on} vs off"
          + (f", fault {config.fault} injected into graphs on" if config.fault else ""), file=sys.stderr, flush=True)
    children = ChildProcesses()
    try:
        with _stop_children_on_signals(children):
            start = time.perf_counter()
            with Progress() as progress, ThreadPoolExecutor(1 if config.sequential else 2) as pool:
                futures = [pool.submit(run_mode, config, mode, progress, children) for mode in config.modes]
                runs = [run for f in futures for run in f.result()]
    except EvalInterrupted as exc:
        print(f"swa-harness eval: interrupted by {exc}; its servers and lm-eval runs were stopped", file=sys.stderr,
              flush=True)
        return 128 + exc.signum
    wall = time.perf_counter() - start
    runs_dir = out / "runs"
    runs_dir.mkdir(exist_ok=True)
    for run in runs:
        run.save(runs_dir / f"{run.suite}-{run.meta['mode']}.json")
    prov = provenance(config) | {"wall time": f"{wall:.0f} s"}
    (out / "provenance.json").write_text(json.dumps(prov, indent=2))
    code = finish(runs, out, model=config.model, thresholds=config.thresholds, kill_matrix=config.kill_matrix,
                  provenance=prov, history=config.history_file)
    failures = list(dict.fromkeys(run.error for run in runs if not run.complete and run.error))
    if failures:
        print(f"swa-harness eval: FAILED (exit 2, not a verdict): {' | '.join(failures)}", file=sys.stderr, flush=True)
        return 2
    return code


@contextmanager
def _stop_children_on_signals(children: ChildProcesses) -> Iterator[None]:
    """While the job runs, SIGTERM/SIGINT/SIGHUP stop every child at once and raise EvalInterrupted in
    the main thread; whatever way the block is left, every child is stopped before it returns."""
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.getsignal(sig) for sig in signals} if main else {}
    interrupted: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        children.terminate_all()  # the worker threads waiting on them return now
        if not interrupted:  # a second signal only repeats the SIGTERM
            interrupted.append(signum)
            raise EvalInterrupted(signum)

    for sig in previous:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        children.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def finish(runs: Sequence[RunResult], out: Path, *, model: Path, thresholds: Thresholds, kill_matrix: Path | None,
           provenance: Mapping[str, Any], history: Path | None = DEFAULT_HISTORY,
           fault_effects: Path | None = DEFAULT_FAULT_EFFECTS) -> int:
    """Compare, record in the history, report, print the summary; exit 1 on a RED verdict.

    ``model`` only provides the tokenizer that splits flips into tokens; without one they split by character.
    ``history`` is the JSON-lines file the eval is recorded in and the trend is read from (None: neither);
    re-judging the same runs replaces their record. ``kill_matrix`` brings its per-target siblings along;
    ``fault_effects`` is shown when the file exists.
    """
    tokenize = _token_splitter(model)
    comparisons = compare_all(runs, thresholds, tokenize)
    summary = summarize(comparisons)
    trend = None
    if history is not None:
        entry = make_entry(comparisons, summary, runs, provenance)
        trend = history_trend(record_history(Path(history), entry), entry)
    report = render_report(comparisons, runs, summary=summary, provenance=provenance, out_dir=out, trend=trend,
                           kill_matrices=load_kill_matrices(kill_matrix), fault_effects=load_fault_effects(fault_effects),
                           tokenize=tokenize)
    _print_summary(comparisons, summary)
    if trend is not None:
        since = f"; verdict since run #{trend.since.index}" if trend.since else ""
        print(f"history: {history} ({trend.runs} run(s) of {trend.series}{since})")
    print(f"report: {report}")
    return 1 if summary.verdict.name == "RED" else 0


def compare_all(runs: Sequence[RunResult], thresholds: Thresholds, tokenize: Tokenize | None) -> list[SuiteComparison]:
    """Pair each suite's ON run with its OFF run (runs carry their mode in ``meta``)."""
    by_suite: dict[str, dict[str, RunResult]] = {}
    for run in runs:
        by_suite.setdefault(run.suite, {})["on" if run.meta.get("mode") == "on" else "off"] = run
    return [compare_runs(pair["on"], pair["off"], thresholds=thresholds, tokenize=tokenize)
            for pair in by_suite.values()]


def _token_splitter(model: Path) -> Tokenize | None:
    if not (Path(model) / "tokenizer.json").is_file():
        return None
    from harness.model import Tokenizer  # imported here: harness.model pulls in torch, needed only for this

    tok = Tokenizer.from_dir(model)
    return lambda text: [tok.decode([i]) for i in tok.tokenizer.encode(text, add_special_tokens=False).ids]


def _print_summary(comparisons: Sequence[SuiteComparison], summary: Summary) -> None:
    for c in comparisons:
        if not c.complete:
            print(f"{c.suite}: INCOMPLETE — {'; '.join(c.errors)}")
            continue
        on, off, diff = c.on_accuracy, c.off_accuracy, c.difference
        print(f"{c.suite}: N={c.n} on {on.value:.1%} [{on.low:.1%}, {on.high:.1%}] "
              f"off {off.value:.1%} [{off.low:.1%}, {off.high:.1%}] "
              f"diff {diff.value:+.1%} [{diff.low:+.1%}, {diff.high:+.1%}] McNemar p={c.mcnemar_p:.3g} "
              f"MDE {c.mde:.1%} flips {len(c.flips)} -> {c.verdict.name}")
    print(f"verdict: {summary.verdict.name} — {summary.reason}")
