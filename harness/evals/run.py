"""The eval job: accuracy suites with graphs ON and OFF on the same items, compared paired.

For each graph mode a server is launched over the checkpoint (or an external OpenAI-compatible
server is used: e.g. a real SGLang server on a GPU box), lm-eval's ``local-completions`` runs the
task YAMLs of ``suites/accuracy`` against it, fully offline, with per-sample logs; the samples
become ``RunResult``s; ON and OFF are compared item by item; the HTML report is written.

Determinism: greedy decoding, and lm-eval sends each batch of ``--batch-size`` prompts in one
request with no concurrency, so the engine always sees the same batches in the same order.
Nothing is retried: a server that dies or an lm-eval that fails makes that run INCOMPLETE, and it
is reported as such, never as an accuracy. Every log is kept under the output folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.evals.cache import response_cache
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
from harness.server.launch import ServerLaunchError, launch_server


def run_mode(config: EvalConfig, mode: ModeSpec, progress: Progress) -> list[RunResult]:
    """One side of the comparison, one RunResult per suite; any failure makes every suite INCOMPLETE."""
    suites, limits = config.suites, config.limits
    logs = Path(config.out) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    timings: dict[str, Any] = {}
    server = None
    error: str | None = None
    graphs = mode.graphs
    items: dict[str, list[ItemResult]] = {}
    try:
        base_url = mode.base_url
        if base_url is None:
            env = {**OFFLINE_ENV, "SWA_HARNESS_FAULT": mode.fault or ""}
            t0 = time.perf_counter()
            server = launch_server(config.model, mode.graphs, max_running=config.max_running,
                                   num_threads=config.threads, served_model_name="swa-harness", env=env,
                                   log_path=logs / f"server-{mode.label}.log", timeout=config.server_timeout,
                                   extra_args=["--device", config.device])
            timings["server_start_s"] = round(time.perf_counter() - t0, 2)
            base_url = server.base_url
        graphs = health(base_url).get("graph_mode") or mode.graphs  # "auto" resolved by the server
        progress.watch(mode.label, base_url, sum(limits[s.name] for s in suites))
        raw = Path(config.out) / "lm_eval" / mode.label
        shutil.rmtree(raw, ignore_errors=True)
        cmd = lm_eval_command(base_url, suites, limits, raw, "swa-harness", config.batch_size,
                              response_cache(config, mode))
        t0 = time.perf_counter()
        lm_eval_log = logs / f"lm_eval-{mode.label}.log"
        returncode = _run_lm_eval(cmd, lm_eval_log, config.lm_eval_timeout)
        timings["lm_eval_s"] = round(time.perf_counter() - t0, 2)
        if returncode != 0:
            raise RuntimeError(f"lm-eval exited with code {returncode}; see {lm_eval_log}")
        if server is not None and not server.alive:
            raise RuntimeError(f"the server died during the run; see {server.log_path}")
        for suite in suites:
            path = find_samples(raw, suite.task)
            if path is None:
                raise RuntimeError(f"lm-eval wrote no samples for {suite.task}")
            items[suite.name] = parse_samples(path, suite)
            if len(items[suite.name]) != limits[suite.name]:
                raise RuntimeError(f"{suite.task}: {len(items[suite.name])} samples for {limits[suite.name]} items")
        if server is not None:
            timings["engine"] = health(base_url).get("stats", {})
    except (ServerLaunchError, RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        progress.unwatch(mode.label)
        if server is not None:
            server.stop()
    wall = round(time.perf_counter() - start, 2)
    meta = {"mode": mode.label, "graphs": graphs, "fault": mode.fault, "base_url": mode.base_url, **timings}
    return [RunResult(suite=s.name, graphs=graphs, model=config.model_name,
                      complete=error is None, error=error, items=items.get(s.name, []) if error is None else [],
                      wall_s=wall, meta=meta) for s in suites]


def _run_lm_eval(cmd: list[str], log_path: Path, timeout: float) -> int:
    """Run lm-eval once (never retried) with its whole output kept in ``log_path``; its exit code."""
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        return subprocess.run(cmd, cwd=REPO, env={**os.environ, **OFFLINE_ENV}, stdout=log, stderr=subprocess.STDOUT,
                              timeout=timeout).returncode


def run_eval(config: EvalConfig) -> int:
    """The whole job: both modes (side by side unless sequential), saved runs, provenance, report."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"swa-harness eval: {config.model_name}, suites {dict(config.limits)}, graphs on={config.graphs_on} vs off"
          + (f", fault {config.fault} injected into graphs on" if config.fault else ""), file=sys.stderr, flush=True)
    start = time.perf_counter()
    with Progress() as progress, ThreadPoolExecutor(1 if config.sequential else 2) as pool:
        futures = [pool.submit(run_mode, config, mode, progress) for mode in config.modes]
        runs = [run for f in futures for run in f.result()]
    wall = time.perf_counter() - start
    runs_dir = out / "runs"
    runs_dir.mkdir(exist_ok=True)
    for run in runs:
        run.save(runs_dir / f"{run.suite}-{run.meta['mode']}.json")
    prov = provenance(config) | {"wall time": f"{wall:.0f} s"}
    (out / "provenance.json").write_text(json.dumps(prov, indent=2))
    return finish(runs, out, model=config.model, thresholds=config.thresholds, kill_matrix=config.kill_matrix,
                  provenance=prov)


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
