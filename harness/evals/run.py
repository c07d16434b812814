"""``swa-harness eval``: accuracy suites with graphs ON and OFF on the same items, compared paired.

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

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from harness.evals.compare import Thresholds, compare_runs, summarize
from harness.evals.results import ItemResult, RunResult

REPO = Path(__file__).resolve().parents[2]
TASKS_DIR = REPO / "suites" / "accuracy"
DEFAULT_MODEL = REPO / "fixtures" / "models" / "gemma2-tiny-swa"
OFFLINE_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


# Defaults score the whole frozen test sets: at N = 100 a clean AIME-style run cannot vouch for a drop
# under 5 pp (MDE 5.4 pp with no discordant pairs: AMBER), at N = 200 it can (2.7 pp).
@dataclass(frozen=True)
class SuiteSpec:
    name: str
    task: str  # the lm-eval task name in suites/accuracy
    primary_filter: str  # the filter whose exact match decides correctness
    default_limit: int


SUITES = {
    "gsm_style": SuiteSpec("gsm_style", "swa_gsm_style", "strict-match", 500),
    "aime_style": SuiteSpec("aime_style", "swa_aime_style", "strict-match", 200),
}


@dataclass
class ModeSpec:
    label: str  # "on" | "off"
    graphs: str  # graph mode of the launched server
    base_url: str | None = None  # an external server instead of launching one
    fault: str | None = None  # catalog fault injected into this server only


# -- one mode: server + lm-eval -------------------------------------------------------------------


def lm_eval_command(base_url: str, suites: list[SuiteSpec], limits: dict[str, int], out: Path, model_name: str,
                    batch_size: int, cache: Path | None = None) -> list[str]:
    samples = {s.task: list(range(limits[s.name])) for s in suites}
    model_args = (f"model={model_name},base_url={base_url.rstrip('/')}/v1/completions,tokenizer_backend=None,"
                  f"tokenized_requests=False,num_concurrent=1,max_retries=1,timeout=1800")
    return [sys.executable, "-m", "lm_eval", "run", "--model", "local-completions", "--model_args", model_args,
            "--tasks", ",".join(s.task for s in suites), "--include_path", str(TASKS_DIR),
            "--samples", json.dumps(samples), "--batch_size", str(batch_size), "--log_samples",
            "--output_path", str(out), "--seed", "0,0,0,0", *(["--use_cache", str(cache)] if cache else [])]


def parse_samples(path: Path, suite: SuiteSpec) -> list[ItemResult]:
    items = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("filter") != suite.primary_filter:
            continue
        args = record["arguments"]
        prompt = (args.get("gen_args_0") or next(iter(args.values())))["arg_0"] if isinstance(args, dict) else args[0][0]
        response = record["resps"][0][0]
        extracted = record["filtered_resps"][0]
        items.append(ItemResult(
            item_id=f"{suite.name}/{record['doc_id']}",
            prompt=prompt,
            gold=str(record["target"]),
            response=response,
            extracted=None if extracted in ("[invalid]", None) else str(extracted),
            correct=bool(record["exact_match"]),
        ))
    return sorted(items, key=lambda i: int(i.item_id.rsplit("/", 1)[1]))


def find_samples(out: Path, task: str) -> Path | None:
    found = sorted(out.rglob(f"samples_{task}_*.jsonl"))
    return found[-1] if found else None


def run_mode(mode: ModeSpec, suites: list[SuiteSpec], limits: dict[str, int], args: argparse.Namespace,
             out_dir: Path, progress: "Progress") -> list[RunResult]:
    from harness.server.launch import ServerLaunchError, launch_server

    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    timings: dict[str, float] = {}
    server = None
    error: str | None = None
    graphs = mode.graphs
    items: dict[str, list[ItemResult]] = {}
    try:
        base_url = mode.base_url
        if base_url is None:
            env = {**OFFLINE_ENV, "SWA_HARNESS_FAULT": mode.fault or ""}
            t0 = time.perf_counter()
            server = launch_server(args.model, mode.graphs, max_running=args.max_running, num_threads=args.threads,
                                   served_model_name="swa-harness", env=env, log_path=logs / f"server-{mode.label}.log",
                                   timeout=args.server_timeout, extra_args=["--device", getattr(args, "device", "cpu")])
            timings["server_start_s"] = round(time.perf_counter() - t0, 2)
            base_url = server.base_url
        graphs = _health(base_url).get("graph_mode") or mode.graphs  # "auto" resolved by the server
        progress.watch(mode.label, base_url, sum(limits[s.name] for s in suites))
        raw = out_dir / "lm_eval" / mode.label
        shutil.rmtree(raw, ignore_errors=True)
        cache = response_cache(out_dir, mode, suites, limits, args)
        cmd = lm_eval_command(base_url, suites, limits, raw, "swa-harness", args.batch_size, cache)
        t0 = time.perf_counter()
        with open(logs / f"lm_eval-{mode.label}.log", "w") as log:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, **OFFLINE_ENV}, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=args.lm_eval_timeout)
        timings["lm_eval_s"] = round(time.perf_counter() - t0, 2)
        if proc.returncode != 0:
            raise RuntimeError(f"lm-eval exited with code {proc.returncode}; see {logs / f'lm_eval-{mode.label}.log'}")
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
            timings["engine"] = _health(base_url).get("stats", {})
    except (ServerLaunchError, RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        progress.unwatch(mode.label)
        if server is not None:
            server.stop()
    wall = round(time.perf_counter() - start, 2)
    meta = {"mode": mode.label, "graphs": graphs, "fault": mode.fault, "base_url": mode.base_url, **timings}
    return [RunResult(suite=s.name, graphs=graphs, model=str(args.model_name),
                      complete=error is None, error=error, items=items.get(s.name, []) if error is None else [],
                      wall_s=wall, meta=meta) for s in suites]


def response_cache(out_dir: Path, mode: ModeSpec, suites: list[SuiteSpec], limits: dict[str, int],
                   args: argparse.Namespace) -> Path:
    """Where lm-eval keeps every completed response of this exact run (sqlite, written as it goes).

    A crashed run therefore loses nothing; ``--resume`` reuses the responses. The file name is keyed
    by everything that decides a response — checkpoint bytes, code (commit and uncommitted diff),
    graph mode, fault, items, batching — so a resumed run can never mix in another build's answers.
    Without ``--resume`` the cache is cleared first.
    """
    weights = Path(args.model) / "model.safetensors"
    code = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    code += subprocess.run(["git", "diff", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    key = json.dumps([hashlib.sha256(weights.read_bytes()).hexdigest() if weights.is_file() else str(args.model),
                      hashlib.sha256(code.encode()).hexdigest(), mode.label, mode.graphs, mode.fault, mode.base_url,
                      [s.task for s in suites], limits, args.batch_size, args.max_running, getattr(args, "device", "cpu")])
    path = out_dir / "cache" / f"{mode.label}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not getattr(args, "resume", False):
        for old in path.parent.glob(f"{path.name}*"):
            old.unlink()
    return path


# -- progress --------------------------------------------------------------------------------------


def _health(base_url: str) -> dict:
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/health", timeout=2) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return {}


class Progress:
    """Prints how many items each server has finished, every few seconds, while lm-eval runs."""

    def __init__(self, interval_s: float = 5.0) -> None:
        self.interval_s = interval_s
        self.targets: dict[str, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._start = time.perf_counter()

    def watch(self, label: str, base_url: str, total: int) -> None:
        self.targets[label] = (base_url, total)

    def unwatch(self, label: str) -> None:
        self.targets.pop(label, None)

    def __enter__(self) -> "Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            parts = []
            for label, (url, total) in list(self.targets.items()):
                stats = _health(url).get("stats", {})
                done = stats.get("requests_served", "?")
                parts.append(f"graphs {label}: {done}/{total} items, {stats.get('generated_tokens', '?')} tokens")
            if parts:
                print(f"[{time.perf_counter() - self._start:6.0f}s] " + " | ".join(parts), file=sys.stderr, flush=True)


# -- provenance and the whole job ------------------------------------------------------------------


def provenance(args: argparse.Namespace, modes: list[ModeSpec], limits: dict[str, int]) -> dict[str, str]:
    def version(module: str) -> str:
        try:
            return __import__(module).__version__
        except Exception:  # noqa: BLE001 - provenance must not fail the run
            return "not installed"

    def git(*cmd: str) -> str:
        try:
            return subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        except OSError:
            return "unknown"

    weights = Path(args.model) / "model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:16] if weights.is_file() else "n/a"
    dirty = " (uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    return {
        "commit": (git("rev-parse", "--short", "HEAD") or "unknown") + dirty,
        "checkpoint": str(args.model),
        "checkpoint sha256[:16]": digest,
        "graphs on": next(m.graphs for m in modes if m.label == "on"),
        "fault injected (graphs on)": next(m.fault for m in modes if m.label == "on") or "none",
        "items": ", ".join(f"{k}={v}" for k, v in limits.items()),
        "decoding": "greedy (temperature 0), lm-eval seed 0",
        "lm-eval batch": f"{args.batch_size} prompts per request, no concurrency",
        "device": getattr(args, "device", "cpu"),
        "python": platform.python_version(),
        "torch": version("torch"),
        "lm-eval": version("lm_eval"),
        "platform": platform.platform(),
        "command": "swa-harness eval " + " ".join(args.argv),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swa-harness eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="HF-format checkpoint (default: the shipped tiny model)")
    parser.add_argument("--suites", default="gsm_style,aime_style")
    for name, spec in SUITES.items():
        parser.add_argument(f"--limit-{name.replace('_', '-')}", type=int, default=spec.default_limit,
                            help=f"items of {name} (default {spec.default_limit})")
    parser.add_argument("--graphs-on", default="auto", choices=("tape", "cuda", "auto", "eager"))
    parser.add_argument("--fault", default=None, help="catalog fault to inject into the graphs-on server")
    parser.add_argument("--on-url", default=None, help="use this running server as graphs ON instead of launching one")
    parser.add_argument("--off-url", default=None, help="use this running server as graphs OFF")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "latest")
    parser.add_argument("--kill-matrix", type=Path, default=REPO / "reports" / "kill-matrix.json")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-running", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per server")
    parser.add_argument("--device", default="cpu", help="device of both servers (cuda on a GPU machine)")
    parser.add_argument("--sequential", action="store_true", help="run OFF after ON instead of side by side")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the responses a previous, interrupted run of exactly this configuration cached")
    parser.add_argument("--server-timeout", type=float, default=600)
    parser.add_argument("--lm-eval-timeout", type=float, default=3600)
    Thresholds.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    names = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        parser.error(f"unknown suites {unknown}; known: {', '.join(SUITES)}")
    if args.fault:
        from harness.faults import get_fault

        get_fault(args.fault)  # a clear error before anything starts
    if not (args.on_url and args.off_url) and not (Path(args.model) / "config.json").is_file():
        parser.error(f"no HF checkpoint at {args.model} (config.json missing)")
    args.model_name = Path(args.model).name
    suites = [SUITES[n] for n in names]
    limits = {s.name: getattr(args, f"limit_{s.name}") for s in suites}
    thresholds = Thresholds.from_args(args)
    modes = [ModeSpec("on", args.graphs_on, args.on_url, args.fault), ModeSpec("off", "off", args.off_url)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"swa-harness eval: {args.model_name}, suites {limits}, graphs on={args.graphs_on} vs off"
          + (f", fault {args.fault} injected into graphs on" if args.fault else ""), file=sys.stderr, flush=True)
    start = time.perf_counter()
    with Progress() as progress, ThreadPoolExecutor(1 if args.sequential else 2) as pool:
        futures = [pool.submit(run_mode, mode, suites, limits, args, out, progress) for mode in modes]
        runs = [run for f in futures for run in f.result()]
    wall = time.perf_counter() - start
    runs_dir = out / "runs"
    runs_dir.mkdir(exist_ok=True)
    for run in runs:
        run.save(runs_dir / f"{run.suite}-{run.meta['mode']}.json")
    prov = provenance(args, modes, limits) | {"wall time": f"{wall:.0f} s"}
    (out / "provenance.json").write_text(json.dumps(prov, indent=2))
    return finish(runs, out, args, thresholds, prov)


def finish(runs: list[RunResult], out: Path, args: argparse.Namespace, thresholds: Thresholds, prov: dict) -> int:
    """Compare, report, print the summary; exit 1 on a RED verdict."""
    from harness.model import Tokenizer
    from harness.report import render_report

    tokenize = None
    if (Path(args.model) / "tokenizer.json").is_file():
        tok = Tokenizer.from_dir(args.model)
        tokenize = lambda text: [tok.decode([i]) for i in tok.tokenizer.encode(text, add_special_tokens=False).ids]  # noqa: E731
    by_suite: dict[str, dict[str, RunResult]] = {}
    for run in runs:
        by_suite.setdefault(run.suite, {})["on" if run.meta.get("mode") == "on" else "off"] = run
    comparisons = [compare_runs(pair["on"], pair["off"], thresholds=thresholds, tokenize=tokenize)
                   for pair in by_suite.values()]
    summary = summarize(comparisons)
    kill_matrix = json.loads(args.kill_matrix.read_text()) if args.kill_matrix and args.kill_matrix.is_file() else None
    report = render_report(comparisons, runs, kill_matrix=kill_matrix, provenance=prov, out_dir=out)
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
    print(f"report: {report}")
    return 1 if summary.verdict.name == "RED" else 0


if __name__ == "__main__":
    raise SystemExit(main())
