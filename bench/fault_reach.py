"""Which engine configuration makes a catalog fault change a logit on the main job's prompts.

``bench.fault_effects`` finds the faults the main job never harms: their graphs-on generations are bit-identical to
the clean job's, or moved by float noise only. Each such fault is tried here in-process, clean engine against faulty engine, under the
configurations real deployments use and the job's arms do not: pages of 4 and 16 slots, prefill in chunks of 32, pools
sized to the running requests' windows (eviction and tombstones), overlap scheduling with and without the prefix cache,
and requests arriving while others decode (32 in flight) as well as lm-eval's batches of 32. The workload is the job's:
the first ``--items`` GSM-style contexts exactly as lm-eval builds them (the task's exemplars, stop strings and token
budget), greedy.

Per (fault, configuration): the generations whose tokens or logits (every generated position, all of the vocabulary)
differ from the clean engine's, bit for bit; or the engine's own invariant check that stopped the run (a server
answers such a request with an error, and the eval ends without a verdict: ERROR, not a logit). A configuration that
changes logits is one the job could add as an arm; ``REACH_PLANS`` names the plan that carries it through the server
and lm-eval for each fault found so (``suites/plans/cpu-overlap.yaml``, ``cpu-concurrent.yaml``), run here after the
in-process matrix.

Writes ``docs/fault-reach.json``, which ``bench.fault_effects`` renders into docs/FAULT_EFFECTS.md.

    python -m bench.fault_reach                                  # every fault the last fault-effects run found unreached
    python -m bench.fault_reach --faults async-sweep-counts-in-flight --items 32
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Sequence

from harness.paths import REPO

REACH_JSON = REPO / "docs" / "fault-reach.json"
TASKS = ("gsm_style", "aime_style")
FAULT_EFFECTS_JSON = REPO / "docs" / "fault-effects.json"
MODEL = "fixtures/models/gemma2-tiny-swa"
Arrival = Literal["batches", "stream", "turns"]


@dataclass(frozen=True)
class Config:
    """One engine configuration and how requests arrive: ``batches`` of 32 as lm-eval sends them (one batch admitted
    after the last finished), ``stream``: 32 in flight, a new one admitted as each finishes, or ``turns``: streamed
    twice, as a chat's two turns (the second prompt is the first, its own answer and a follow-up question, so it
    repeats the key of a finished request whole, which no prompt of the job does)."""

    name: str
    engine: dict[str, Any]
    arrival: Arrival = "stream"


WINDOWED = {"full_pool_size": 8192, "swa_pool_size": 4096}  # 32 x (16-token window) + the prefill budget, and room
CONFIGS = (
    Config("graphs on, batches of 32 (the job's, in task order)", {"graphs": "tape"}, "batches"),
    Config("graphs off, batches of 32", {"graphs": "off"}, "batches"),
    Config("graphs on, 32 in flight", {"graphs": "tape"}),
    Config("graphs off, 32 in flight", {"graphs": "off"}),
    Config("page 4, chunks of 32, tight pools", {"graphs": "tape", "page_size": 4, "chunk_size": 32, **WINDOWED}),
    Config("same, graphs off", {"graphs": "off", "page_size": 4, "chunk_size": 32, **WINDOWED}),
    Config("page 16", {"graphs": "tape", "page_size": 16}),
    Config("page 16, two turns of chat", {"graphs": "tape", "page_size": 16}, "turns"),
    Config("tight pools (one window per request)", {"graphs": "tape", "full_pool_size": 4096, "swa_pool_size": 1536}),
    Config("overlap scheduling", {"graphs": "tape", "schedule": "overlap"}),
    Config("overlap scheduling, prefix cache off", {"graphs": "tape", "schedule": "overlap", "prefix_cache": False}),
    Config(
        "overlap, page 4, chunks of 32, tight pools",
        {"graphs": "tape", "schedule": "overlap", "page_size": 4, "chunk_size": 32, **WINDOWED},
    ),
)
_MEMO = (
    "every forward starts from an empty memo (`ModelRunner._begin_forward`) and translates its new slots once; the "
    "mapping changes only between forwards, and every step's allocation flushes the memo again (`alloc_extend` ends in "
    "`on_mapping_changed('alloc')`)"
)
# Why no configuration of the engine reaches a fault, where bench.fault_reach found none that did: the engine's own
# structure, read in the code; the scenarios suites reach these faults by calling the pool directly.
NO_ARM_WHY = {
    "storage-ptr-cache-key": f"{_MEMO}: one memo lifetime sees one loc tensor, so no two views of a storage ever meet "
    "under one key; `test_stale_cache` translates two views directly",
    **{
        f"no-invalidate-on-{m}": f"{_MEMO}: a flush this fault drops is always followed by another before the next "
        "translation; `test_stale_cache` translates between a mutation and the next forward directly"
        for m in ("mutation", "alloc", "free", "clear", "set-mapping", "register-mapping")
    },
    "invalidate-after-graph-check": f"{_MEMO}: the forward-start flush this fault moves onto the eager path is "
    "covered by the allocation's; `test_stale_cache` refills a loc buffer between forwards without allocating",
    "swa-frontier-tombstones-last-leaf": "it changes where hits end, not what they read: a checkpointed leaf whose last "
    "window is not live cannot end a match, so sharers prefill those tokens again (or, with the tree evicting "
    "differently after that, hit elsewhere), and a token prefilled instead of served holds the same K/V; the changed "
    "generations above moved by float noise (the prefill split differently), and the prefix state machine kills it "
    "on the match length itself",
    "swa-lock-release-skipped": "it changes capacity, not values: a lock that stays on SWA KV no window sees keeps "
    "the tree from evicting it, so other nodes go first and later prompts hit a little less; no request reads a "
    "wrong slot (float noise above), and the prefix state machine kills it on the lock accounting (the tree "
    "protects SWA KV no live window needs)",
    "paged-free-swa-keeps-page-mapping": "the engine's window slide frees whole pages only (`Scheduler._slide_windows` "
    "rounds the kept range down to a page boundary), so no page keeps a token that was not passed; "
    "`test_paged_frees` frees part of a page directly",
}
# Why a fault an arm reaches has no plan through the server, and why the job does not reach it.
NO_PLAN_WHY = {
    "swa-frontier-reaches-insert-boundary": "the live node it makes over SWA slots already freed is the tail of a "
    "finished request, its own question and answer, and no prompt of the job repeats that whole; the chat arm's "
    "second turn does (turn one, its answer, a follow-up): at page 16 (the window's size) a later `free_swa` of "
    "those slots finds them released already and the engine's own check stops the run (`DoubleFreeError`; an engine "
    "without that check would put them on the free list twice). lm-eval's tasks are single-turn, so no plan "
    "through the server carries it; the differential suite kills it at page 16 "
    "(`test_paged_engine_matches_dense_reference`)",
}
# The plan that carries a reaching configuration through the server and lm-eval, per fault found reachable.
REACH_PLANS = {
    "stale-pool-attribute-loc": "suites/plans/cpu-concurrent.yaml",
    "async-sweep-counts-in-flight": "suites/plans/cpu-overlap.yaml",
}


@functools.cache
def noise() -> float:
    """|delta logprob| below which a change is float noise: the logprob axis's AMBER limit for the job's engine and
    dtype (10x the worst of 20 clean seeds, ``harness/evals/logprob_thresholds.json``)."""
    from harness.evals.logprobs import load_thresholds, threshold_key

    return load_thresholds()[threshold_key("harness", "float32")].amber.max_abs_delta


@dataclass(frozen=True)
class Cell:
    """One fault under one configuration: generations changed, or the engine check that stopped the run."""

    changed: int | None
    items: int
    stopped_by: str | None = None  # "<ExceptionType>: <first line>" when the engine's own check raised
    max_delta: float = 0.0  # the largest |delta logprob| over the vocabulary, on the positions both runs share

    @property
    def reached(self) -> bool:
        """Reached in effect: the engine stopped, or a logprob moved beyond float noise (``NOISE``)."""
        return self.stopped_by is not None or self.max_delta > noise()

    def text(self) -> str:
        if self.stopped_by:
            return f"stopped: {self.stopped_by.split(':', 1)[0]}"
        return f"{self.changed} of {self.items}" + (f" (max |dlp| {self.max_delta:.2g})" if self.changed else "")


@dataclass
class Run:
    items: int
    started: str
    faults: list[str]
    configs: list[str] = field(default_factory=lambda: [c.name for c in CONFIGS])
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)  # fault -> config -> cell
    plans: list[PlanResult] = field(default_factory=list)
    wall_s: float = 0.0


def prompts(items: int) -> tuple[list[str], Any]:
    """The job's first ``items`` GSM-style contexts, as lm-eval builds them, and their sampling parameters."""
    from fixtures.data.prompts import build_fewshot_prompt, select_fewshot, spec
    from harness.engine.request import SamplingParams

    s = spec("gsm_style")
    read = lambda p: [json.loads(line) for line in p.read_text().splitlines() if line.strip()]  # noqa: E731
    test, pool = read(s.test_path), read(s.fewshot_path)
    shots = select_fewshot(pool, s.num_fewshot)
    params = SamplingParams(max_new_tokens=s.max_gen_toks, stop=tuple(s.until))
    return [build_fewshot_prompt("gsm_style", doc, shots) for doc in test[:items]], params


def generate(config: Config, texts: Sequence[str], params: Any) -> list[Any]:
    """Every prompt through a fresh engine as ``config`` says, with the logits of every generated position (with
    ``turns``, each prompt's first turn and then its second)."""
    from harness.engine.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(model_path=REPO / MODEL, num_threads=1, **config.engine))
    first = [engine.tokenizer.encode(text) for text in texts]
    out = _serve(engine, first, params, stream=config.arrival != "batches")
    if config.arrival != "turns":
        return out
    follow_up = engine.tokenizer.encode(FOLLOW_UP)
    return out + _serve(engine, [p + o.output_ids + follow_up for p, o in zip(first, out)], params, stream=True)


FOLLOW_UP = "\nQuestion: And what is twice that?\nAnswer:"


def _serve(engine: Any, prompts: Sequence[list[int]], params: Any, *, stream: bool) -> list[Any]:
    """32 in flight (``stream``), or batches of 32 each admitted once the engine is idle; outputs in prompt order."""
    queue, live, out = list(enumerate(prompts)), {}, {}
    in_flight = 32
    while queue or engine.has_work():
        if stream or not engine.has_work():
            while queue and len(live) < in_flight:
                i, ids = queue.pop(0)
                live[engine.add_request(ids, params, return_logits=True).rid] = i
        for o in engine.step().finished:
            out[live.pop(o.rid)] = o
    return [out[i] for i in range(len(prompts))]


def differs(a: Any, b: Any) -> bool:
    import torch

    return a.output_ids != b.output_ids or a.error != b.error or not torch.equal(a.logits, b.logits)


def max_delta(a: Any, b: Any) -> float:
    """The largest |delta logprob| over the vocabulary at the positions whose contexts are equal in both runs (up to
    and including the first position where the generated tokens part)."""
    import torch

    same = 0
    while same < min(len(a.output_ids), len(b.output_ids)) and a.output_ids[same] == b.output_ids[same]:
        same += 1
    n = min(same + 1, len(a.logits), len(b.logits))
    if n == 0:
        return 0.0
    return float(
        (torch.log_softmax(a.logits[:n].double(), -1) - torch.log_softmax(b.logits[:n].double(), -1)).abs().max()
    )


def run_matrix(faults: Sequence[str], items: int) -> Run:
    from harness.faults.base import inject
    from harness.mem.errors import PoolError

    texts, params = prompts(items)
    run = Run(items, datetime.now(timezone.utc).isoformat(timespec="seconds"), list(faults))
    start = time.perf_counter()
    for config in CONFIGS:
        clean = generate(config, texts, params)
        for fault in faults:
            try:
                with inject(fault):
                    got = generate(config, texts, params)
                moved = [max_delta(a, b) for a, b in zip(clean, got) if differs(a, b)]
                cell = Cell(len(moved), len(clean), max_delta=max(moved, default=0.0))
            except PoolError as exc:  # the engine's own invariant check stopped the run: recorded, not a logit;
                # anything else (a bug, a missing package) propagates: the bench ends without a table
                cell = Cell(None, len(texts), f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            run.cells.setdefault(fault, {})[config.name] = cell
            print(f"[{time.perf_counter() - start:6.0f}s] {config.name} / {fault}: {cell.text()}", flush=True)
    run.wall_s = round(time.perf_counter() - start, 1)
    return run


@dataclass(frozen=True)
class LogitReach:
    """One task of a fault eval against the clean eval's graphs-on arm: how many generations carry other logprobs."""

    changed: int  # items whose response or recorded top-k logprobs differ in any bit
    compared: int  # items with logprobs on both sides
    missing: int  # items without logprobs on one side (not compared)
    max_delta: float = 0.0  # over the changed items: the largest |delta logprob| of a chosen token (common prefix)
    max_kl: float = 0.0  # and the largest top-k KL there, as the logprob axis measures it


def baseline_items(out: Path) -> dict[str, dict[str, Any]]:
    """The graphs-on (baseline) arm's items of a saved eval, task -> item id -> ItemResult (with logprobs)."""
    from harness.evals.results import RunResult

    from harness.jobs.saved import plan_from_inputs

    plan = plan_from_inputs(json.loads((out / "plan.json").read_text())["inputs"])
    [run] = [r for r in plan.runs if r.arm.role == "baseline"]
    found: dict[str, dict[str, Any]] = {}
    for task in TASKS:
        path = run.dir / "runs" / f"{task}.json"
        if path.is_file():
            found[task] = {i.item_id: i for i in RunResult.load(path).items}
    return found


def logit_reach(fault: dict[str, dict[str, Any]], clean: dict[str, dict[str, Any]], task: str) -> LogitReach | None:
    """``fault``'s graphs-on generations of ``task`` against the clean eval's, item by item (None: a side lacks it)."""
    if task not in fault or task not in clean:
        return None
    from harness.evals.logprobs import compare_item

    changed = compared = missing = 0
    max_delta = max_kl = 0.0
    for item_id, item in fault[task].items():
        other = clean[task].get(item_id)
        if other is None or item.logprobs is None or other.logprobs is None:
            missing += 1
            continue
        compared += 1
        if item.response != other.response or item.logprobs != other.logprobs:
            changed += 1
            diff = compare_item(item_id, item.logprobs, other.logprobs)
            max_delta, max_kl = max(max_delta, diff.max_abs_delta), max(max_kl, diff.max_kl)
    return LogitReach(changed, compared, missing, max_delta, max_kl)


@dataclass(frozen=True)
class PlanResult:
    """A reach plan through the server and lm-eval: the fault arm against the plan's clean baseline, per task."""

    plan: str
    fault: str
    exit_code: int
    wall_s: float
    tasks: dict[str, dict[str, Any]]  # task -> {delta_pp, verdict, logprob_verdict, logprob_max_kl, logits_changed, n}
    error: str | None = None


def run_plan(fault: str, plan_path: str, work: Path) -> PlanResult:
    """``swa-harness eval --plan`` into ``work``; the fault arm's comparison judged again from the saved runs, and its
    generations compared bit for bit with the baseline arm's (the same flags, no fault)."""
    import subprocess

    from harness.evals.compare import Thresholds
    from harness.evals.results import RunResult
    from harness.jobs.judging import judge, load_runs
    from harness.jobs.saved import plan_from_inputs

    out = work / Path(plan_path).stem
    exe = Path(sys.executable).with_name("swa-harness")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "harness.cli"]
    cmd += ["eval", "--plan", plan_path, "--out", str(out), "--no-history"]
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.log", "w") as log:
        code = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = round(time.perf_counter() - start, 1)
    if code not in (0, 1):
        return PlanResult(plan_path, fault, code, wall, {}, error=f"exit {code}: see {out.name}.log")
    plan = plan_from_inputs(json.loads((out / "plan.json").read_text())["inputs"])
    [arm] = [a for a in plan.arms if a.fault == fault]
    [judged] = [j for j in judge(plan, load_runs(plan), Thresholds()) if j.comparison.treatment == arm.name]
    [run] = [r for r in plan.runs if r.arm.name == arm.name]
    mine = {t: {i.item_id: i for i in RunResult.load(run.dir / "runs" / f"{t}.json").items} for t in TASKS}
    clean = baseline_items(out)
    tasks = {}
    for c in judged.tasks:
        reach = logit_reach(mine, clean, c.task)
        tasks[c.task] = {
            "n": c.n,
            "delta_pp": round(100 * c.difference.value, 2) if c.difference else None,
            "verdict": c.verdict.name,
            "logprob_verdict": c.logprobs.verdict.name if c.logprobs else None,
            "logprob_max_kl": float(f"{c.logprobs.kl.max:.3g}") if c.logprobs and c.logprobs.n else None,
            "logits_changed": reach.changed if reach else None,
            "logits_max_delta": float(f"{reach.max_delta:.3g}") if reach else None,
        }
    return PlanResult(plan_path, fault, code, wall, tasks)


def unreached_faults(path: Path = FAULT_EFFECTS_JSON) -> list[str]:
    """The faults the last fault-effects run found harmless to the job: never RED on the logprob axis and never
    stopped by the engine (their generations bit-identical to the clean job's, or moved by float noise only)."""
    rows = json.loads(path.read_text())
    by_fault: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["fault"] != "clean":
            by_fault.setdefault(r["fault"], []).append(r)
    return [
        f
        for f, rs in by_fault.items()
        if all(r["verdict"] != "ERROR" and r.get("logprob_verdict") not in (None, "RED") for r in rs)
    ]


def save(run: Run, path: Path, command: str) -> None:
    data = {
        "command": command,
        "started": run.started,
        "wall_s": run.wall_s,
        "items": run.items,
        "model": MODEL,
        "noise": noise(),
        "configs": [asdict(c) for c in CONFIGS],
        "reach_plans": REACH_PLANS,
        "cells": {f: {c: asdict(cell) for c, cell in cells.items()} for f, cells in run.cells.items()},
        "plans": [asdict(p) for p in run.plans],
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fault_reach", description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", default=None, help="comma list (default: the harmless of docs/fault-effects.json)")
    parser.add_argument("--items", type=int, default=96, help="GSM-style contexts (default 96)")
    parser.add_argument("--json", type=Path, default=REACH_JSON)
    parser.add_argument("--work", type=Path, default=Path("/tmp/swa-fault-reach"), help="where the reach plans write")
    args = parser.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f] if args.faults else unreached_faults()
    if not faults:
        print("fault_reach: no fault to try (none unreached in docs/fault-effects.json)", file=sys.stderr)
        return 2
    command = " ".join(["python -m bench.fault_reach", *(argv if argv is not None else sys.argv[1:])])
    run = run_matrix(faults, args.items)
    for fault, plan in REACH_PLANS.items():
        if fault in faults and any(c.reached for c in run.cells[fault].values()):
            print(f"{fault}: {plan} through the server", flush=True)
            run.plans.append(result := run_plan(fault, plan, args.work))
            print(f"    exit {result.exit_code}, {result.wall_s:.0f} s: {result.tasks or result.error}", flush=True)
    save(run, args.json, command)
    reached = sorted(f for f, cells in run.cells.items() if any(c.reached for c in cells.values()))
    print(f"{len(reached)} of {len(faults)} reached by some configuration: {', '.join(reached) or 'none'}")
    print(f"wrote {args.json} ({run.wall_s / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
