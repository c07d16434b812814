"""The logprob axis's thresholds, calibrated on clean runs (``harness/evals/logprob_thresholds.json``), and what the
axis costs the main job (``--cost``: a section of docs/BENCHMARKS.md).

Calibration: the main job's three arms (``cpu_plan``'s servers, flags and model: graphs on, graphs off, prefix
cache off), or a plan's clean arms (``--plan FILE --arms a,b,c``: a real engine's, e.g. SGLang's graphs on, off and
radix cache off), are started once; each seed draws its own items of each frozen task (``random.Random(seed)``),
builds the contexts lm-eval sends (``fixtures.data.prompts.build_fewshot_prompt``, the task YAMLs' own
construction) and asks every arm for them in one batch, greedy, with the tasks' stop strings and budgets and the
top-k logprobs the job's proxy adds; the arms are then compared as the job compares them (``judge_logprobs``) for
both comparisons. lm-eval is not in the loop (it would only build the same payload, at 15 s a start), and the
servers stay warm across seeds, so later seeds also see a prefix cache others filled: both are clean states the
job can meet.

Rows are kept per engine/dtype and per source (``cpu`` for the main job, else the plan file): a run replaces its own
source's rows and keeps the others', so one engine's thresholds can cover the arms of several plans.

Rule, per engine/dtype: ``clean`` = the largest per-item max|dlp| and max KL over every seed, comparison and
task; AMBER above 10 x clean max|dlp| or 100 x clean KL, RED above 1000 x and 10^6 x (KL grows as the square of a
logprob change, so its factors are the squares), the KL's RED never above 1 nat (``KL_RED_CAP``): no float noise moves
a next-token distribution that far, and where an engine's clean KL is not the square of its clean logprob change
the squared factor would put RED out of reach (SGLang's read 6.7e-5 beside 1.3e-5 while the KL took the rest bucket's
float32 rounding for the tail; with ``REST_FLOOR`` its clean KL is 6.5e-9 and the cap does not bind). A zero clean value (bit-exact arms) is replaced by float32 dust
(1e-7 in a logprob, 1e-14 in KL): any real change is far above it. False alarms are shown leave-one-out: each seed
judged against thresholds derived from the other seeds alone.

    python -m bench.logprob_thresholds                # 20 seeds, 8 GSM-style + 4 AIME-style items each
    python -m bench.logprob_thresholds --plan suites/plans/sglang-cpu.yaml --arms on,off,cache-off
    python -m bench.logprob_thresholds --rederive     # thresholds again from the committed data, nothing run
    python -m bench.logprob_thresholds --table        # the 20-seed false-alarm tables (docs/BENCHMARKS.md)
    python -m bench.logprob_thresholds --cost         # the main job (500 + 200 items) with and without the axis
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.evals.logprobs import THRESHOLDS_FILE, TOP_K, judge_logprobs, threshold_key
from harness.evals.results import TokenLogprobs
from harness.jobs.plan import ArmRun, Comparison, Plan

AMBER_FACTOR, RED_FACTOR = 10.0, 1000.0  # on max|dlp|; KL's are their squares
KL_RED_CAP = 1.0  # nats: the KL's RED threshold never lies above it (the rule in the docstring)
DUST = {"max_abs_delta": 1e-7, "max_kl": 1e-14}
TASKS = ("gsm_style", "aime_style")


def derive(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Thresholds from clean rows (one per seed, comparison and task)."""
    clean = {
        "max_abs_delta": max((r["max_abs_delta"] for r in rows), default=0.0),
        "max_kl": max((r["max_kl"] for r in rows), default=0.0),
    }
    base = {k: max(v, DUST[k]) for k, v in clean.items()}
    red_kl = min(RED_FACTOR**2 * base["max_kl"], KL_RED_CAP)
    return {
        "amber": {
            "max_abs_delta": AMBER_FACTOR * base["max_abs_delta"],
            "max_kl": min(AMBER_FACTOR**2 * base["max_kl"], red_kl),
        },
        "red": {"max_abs_delta": RED_FACTOR * base["max_abs_delta"], "max_kl": red_kl},
        "clean": clean,
    }


def leave_one_out(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each seed judged by thresholds from the other seeds: how many would not have been GREEN."""
    seeds = sorted({r["seed"] for r in rows})
    amber = red = 0
    for seed in seeds:
        t = derive([r for r in rows if r["seed"] != seed])
        mine = [r for r in rows if r["seed"] == seed]
        over = lambda level: any(r[k] > t[level][k] for r in mine for k in ("max_abs_delta", "max_kl"))  # noqa: E731
        red += over("red")
        amber += over("amber") and not over("red")
    return {"seeds": len(seeds), "amber": amber, "red": red}


def _docs(task: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    from fixtures.data.prompts import spec

    s = spec(task)
    read = lambda p: [json.loads(line) for line in p.read_text().splitlines() if line.strip()]  # noqa: E731
    return read(s.test_path), read(s.fewshot_path)


def _ask(url: str, model: str, task: str, prompts: list[str]) -> list[TokenLogprobs]:
    """One batch as lm-eval's local-completions sends it, with the logprobs the job's proxy adds."""
    from fixtures.data.prompts import spec

    s = spec(task)
    body = {
        "model": model,
        "prompt": prompts,
        "max_tokens": s.max_gen_toks,
        "temperature": 0,
        "stop": list(s.until),
        "seed": 0,
        "logprobs": TOP_K,
    }
    request = urllib.request.Request(
        f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=3600) as response:
        choices = sorted(json.load(response)["choices"], key=lambda c: c["index"])
    return [TokenLogprobs.from_openai(c["logprobs"]) for c in choices]


@dataclass(frozen=True)
class Source:
    """The clean arms one calibration run starts: the main job's (``cpu``) or a plan file's chosen arms."""

    name: str  # ``cpu`` or the plan file as given
    plan: Plan
    runs: tuple[ArmRun, ...]
    comparisons: tuple[Comparison, ...]

    @property
    def label(self) -> str:
        return f"{self.name}: {', '.join(r.arm.name for r in self.runs)}"


def source_of(
    plan_file: Path | None, arms: Sequence[str], model: str | None, items: dict[str, int], batch: int, work: Path
) -> Source:
    """The arms to start and the plan's comparisons among them (servers' logs into ``work``); an arm the plan lacks,
    or one that carries a fault or is expected RED, is refused by name (a calibration is of clean arms only)."""
    from harness.jobs.cpu import EvalConfig, cpu_plan
    from harness.jobs.plan_file import plan_from_file

    if plan_file is None:
        plan, name = cpu_plan(EvalConfig(limits=items, out=work, batch_size=batch)), "cpu"
    else:
        plan, name = plan_from_file(plan_file, out=work), str(plan_file)
    slug = model or plan.models[0].slug
    if slug not in {m.slug for m in plan.models}:
        raise ValueError(f"--model: {slug!r} is not in {name} ({', '.join(m.slug for m in plan.models)})")
    wanted = set(arms) or {r.arm.name for r in plan.runs if r.model.slug == slug}
    runs = tuple(r for r in plan.runs if r.model.slug == slug and r.arm.name in wanted)
    if missing := sorted(wanted - {r.arm.name for r in runs}):
        raise ValueError(f"--arms: {', '.join(missing)} not in {name} ({', '.join(a.name for a in plan.arms)})")
    if dirty := [r.arm.name for r in runs if r.arm.fault or r.arm.expect_red]:
        raise ValueError(f"--arms: {', '.join(dirty)} carry a fault or are expected RED: not clean arms")
    comparisons = tuple(
        c for c in plan.comparisons if c.model.slug == slug and {c.treatment, c.reference} <= {r.arm.name for r in runs}
    )
    if not comparisons:
        raise ValueError(f"--arms: no comparison of {name} has both its arms among {', '.join(sorted(wanted))}")
    if slug != plan.models[0].slug:  # another model of the same plan is a source of its own
        name = f"{name} ({slug})"
    return Source(name=name, plan=plan, runs=runs, comparisons=comparisons)


def calibrate(source: Source, seeds: int, items: dict[str, int]) -> dict[str, Any]:
    from fixtures.data.prompts import build_fewshot_prompt
    from harness.evals.compare import identity_dtype
    from harness.servers.registry import get_server_kind

    docs = {task: _docs(task) for task in items}
    servers, urls = [], {}
    work = source.plan.out
    work.mkdir(parents=True, exist_ok=True)
    try:
        for run in source.runs:  # one at a time: two CPU cores
            kind = get_server_kind(run.arm.engine)
            t0 = time.perf_counter()
            server = kind.start(run.spec, log_path=work / f"{run.arm.name}.log", timeout=900)
            servers.append(server)
            urls[run.arm.name] = server.base_url
            identity = kind.identity(server.base_url, run.spec)
            print(f"{run.arm.name}: up in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        key = threshold_key(kind.name, identity_dtype(identity))
        served = source.runs[0].model.served_name
        rows = []
        for seed in range(seeds):
            t0 = time.perf_counter()
            rng = random.Random(seed)
            prompts = {}
            for task, n in items.items():
                test, pool = docs[task]
                shots = pool[: {"gsm_style": 2, "aime_style": 1}[task]]
                picked = sorted(rng.sample(range(len(test)), n))
                prompts[task] = (picked, [build_fewshot_prompt(task, test[i], shots) for i in picked])
            with ThreadPoolExecutor(len(urls)) as pool_:
                answers = {
                    arm: {task: pool_.submit(_ask, url, served, task, p) for task, (_, p) in prompts.items()}
                    for arm, url in urls.items()
                }
                got = {arm: {task: f.result() for task, f in tasks.items()} for arm, tasks in answers.items()}
            for c in source.comparisons:
                for task, (picked, _) in prompts.items():
                    pairs = [
                        (f"{task}/{i}", a, b) for i, a, b in zip(picked, got[c.treatment][task], got[c.reference][task])
                    ]
                    axis = judge_logprobs(pairs, None, key)
                    rows.append(
                        {
                            "seed": seed,
                            "source": source.name,
                            "comparison": c.name,
                            "task": task,
                            "n": axis.n,
                            "max_abs_delta": axis.delta.max,
                            "max_kl": axis.kl.max,
                            "p90_abs_delta": axis.delta.p90,
                            "parted": axis.parted,
                        }
                    )
            worst = max(r["max_abs_delta"] for r in rows if r["seed"] == seed)
            took = time.perf_counter() - t0
            print(f"seed {seed}: worst max|dlp| {worst:.3g} ({took:.0f} s)", file=sys.stderr, flush=True)
        return {"key": key, "rows": rows, "items": items, "label": source.label}
    finally:
        for server in servers:
            server.stop()


def write(
    key: str,
    rows: list[dict[str, Any]],
    items: dict[str, int],
    label: str | None = None,
    path: Path = THRESHOLDS_FILE,
) -> dict[str, Any]:
    """The key's thresholds from its rows: ``rows`` replace the committed rows of their own source (a row without
    one is the main job's, ``cpu``) and join the other sources' rows; ``label`` names the arms this source started."""
    data = json.loads(path.read_text()) if path.is_file() else {}
    data.setdefault(
        "about",
        "Thresholds of the logprob axis per engine/dtype (harness/evals/logprobs.py), derived from the clean rows under "
        "'data' by bench/logprob_thresholds.py (its docstring: the rule).",
    )
    data["command"] = "python -m bench.logprob_thresholds"
    data.setdefault("thresholds", {})
    data.setdefault("data", {})
    source = lambda r: r.get("source", "cpu")  # noqa: E731
    mine = {source(r) for r in rows}
    kept = [r for r in data["data"].get(key, []) if source(r) not in mine]
    rows = kept + list(rows)
    arms = dict(data["thresholds"].get(key, {}).get("arms", {}))
    if label is not None:
        name, _, started = label.partition(": ")
        arms[name] = started
    t = derive(rows)
    data["thresholds"][key] = {
        **t,
        "seeds": len({r["seed"] for r in rows}),
        "items_per_seed": items,
        **({"arms": arms} if arms else {}),
        "false_alarms_leave_one_out": leave_one_out(rows),
    }
    data["data"][key] = rows
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data["thresholds"][key]


def false_alarm_table(key: str, path: Path = THRESHOLDS_FILE) -> str:
    """Per seed of the committed calibration: its worst clean values, and its verdict under thresholds derived from
    the other seeds alone (a false alarm is any seed not GREEN there); then the thresholds the job uses."""
    from bench.common import markdown_table

    data = json.loads(path.read_text())
    rows, t = data["data"][key], data["thresholds"][key]
    table = []
    for seed in sorted({r["seed"] for r in rows}):
        mine = [r for r in rows if r["seed"] == seed]
        others = derive([r for r in rows if r["seed"] != seed])
        worst = {k: max(r[k] for r in mine) for k in ("max_abs_delta", "max_kl")}
        level = next((lv for lv in ("red", "amber") if any(worst[k] > others[lv][k] for k in worst)), "green")
        table.append(
            (
                str(seed),
                str(sum(r["n"] for r in mine)),
                f"{worst['max_abs_delta']:.2g}",
                f"{worst['max_kl']:.2g}",
                f"{others['amber']['max_abs_delta']:.2g} / {others['amber']['max_kl']:.2g}",
                level.upper(),
            )
        )
    alarms = t["false_alarms_leave_one_out"]
    arms = t.get("arms") or {"cpu": "the main job's arms (graphs on, graphs off, prefix cache off)"}
    started = "; ".join(f"`{name}`: {a}" if name != "cpu" else f"the main job's arms: {a}" for name, a in arms.items())
    return (
        f"Engine/dtype `{key}`: {t['seeds']} clean seeds of {started} (items per seed {t['items_per_seed']}), every "
        "comparison among those arms and both tasks per seed. Each seed is judged by thresholds derived from the other "
        f"{t['seeds'] - 1} alone (the rule in this module's docstring).\n\n"
        + markdown_table(
            ("seed", "item pairs", "worst max\\|Δlogprob\\|", "worst KL", "AMBER without it (\\|Δ\\| / KL)", "verdict"),
            table,
        )
        + f"\n\nFalse alarms, leave one out: **{alarms['amber']} AMBER and {alarms['red']} RED of {alarms['seeds']}** "
        f"(the budget: 1 in 20). The thresholds the job uses, from all {t['seeds']}: AMBER above "
        f"{t['amber']['max_abs_delta']:.2g} in \\|Δlogprob\\| or {t['amber']['max_kl']:.2g} in KL, RED above "
        f"{t['red']['max_abs_delta']:.2g} or {t['red']['max_kl']:.2g}.\n"
        + (
            f"\nHere the clean KL ({t['clean']['max_kl']:.2g}) is not the square of the clean logprob change "
            f"({t['clean']['max_abs_delta']:.2g}, squared {t['clean']['max_abs_delta'] ** 2:.2g}): the KL over the top "
            f"{TOP_K} and the rest moves more than the chosen tokens do, so RED in KL is capped at {KL_RED_CAP:g} nat "
            "and the logprob change carries the RED.\n"
            if t["red"]["max_kl"] >= KL_RED_CAP
            else ""
        )
    )


def _timed_eval(gsm: int, aime: int, logprobs: bool) -> tuple[float, int, str]:
    """One main job in its own process: wall seconds, exit code and its verdict line."""
    import os
    import subprocess

    out = Path(tempfile.mkdtemp(prefix=f"logprob-cost-{'with' if logprobs else 'without'}-"))
    exe = Path(sys.executable).with_name("swa-harness")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "harness.cli"]
    cmd += ["eval", "--limit-gsm-style", str(gsm), "--limit-aime-style", str(aime), "--out", str(out)]
    cmd += ["--no-history", "--kill-matrix", str(out / "none.json")] + ([] if logprobs else ["--no-logprobs"])
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - t0
    try:
        comparisons = json.loads((out / "summary.json").read_text())["comparisons"]
        verdict = ", ".join(f"{c['comparison']} {c['verdict']} (logprobs {c['logprobs'] or '—'})" for c in comparisons)
    except (OSError, ValueError, KeyError) as exc:
        verdict = f"no summary.json verdicts ({exc})"
    return wall, done.returncode, verdict


def cost(gsm: int, aime: int, repeats: int) -> int:
    """The main job with and without the logprob axis, side by side: each pair of runs back to back, the order
    flipped every other pair (drift between runs falls on both sides), medians and the median of the pair ratios."""
    import os
    import statistics

    from bench.common import markdown_table, write_section

    load_before = os.getloadavg()[0]
    runs: list[dict[str, Any]] = []
    for i in range(repeats):
        for logprobs in (False, True) if i % 2 == 0 else (True, False):
            wall, code, verdict = _timed_eval(gsm, aime, logprobs)
            runs.append({"pair": i, "with": logprobs, "wall": wall, "exit": code, "verdict": verdict})
            print(f"pair {i} {'with' if logprobs else 'without'}: exit {code}, {wall:.1f} s; {verdict}", flush=True)
    failed = [r for r in runs if r["exit"] != 0]
    walls = {side: [r["wall"] for r in runs if r["with"] is side] for side in (False, True)}
    pair_ratio = [
        next(r["wall"] for r in runs if r["pair"] == i and r["with"])
        / next(r["wall"] for r in runs if r["pair"] == i and not r["with"])
        for i in range(repeats)
    ]
    median = {side: statistics.median(v) for side, v in walls.items()}
    rows = [
        (
            "with the axis" if side else "`--no-logprobs`",
            ", ".join(f"{x:.1f}" for x in walls[side]),
            f"{median[side]:.1f}",
        )
        for side in (False, True)
    ]
    verdicts = sorted({r["verdict"] for r in runs})
    body = (
        f"The main job as a newcomer runs it (`swa-harness eval --limit-gsm-style {gsm} --limit-aime-style {aime}`: "
        f"the shipped model, three arms, two servers side by side) with the logprob axis (a recording proxy before "
        f"each server asking the top-{TOP_K} logprobs of every generated token, the comparison beside accuracy) and "
        f"with `--no-logprobs`: {repeats} pairs, each pair back to back, the order flipped every other pair. "
        f"1-minute load average {load_before:.2f} at the start, {os.getloadavg()[0]:.2f} at the end.\n\n"
        + markdown_table(("job", "wall s per run", "median s"), rows)
        + f"\n\nWith / without, medians: **{median[True] / median[False]:.3f}**; per pair: "
        + ", ".join(f"{r:.3f}" for r in pair_ratio)
        + f" (median {statistics.median(pair_ratio):.3f}). The budget: 1.15.\n\n"
        + "Every run's verdict line: "
        + "; ".join(f"`{v}`" for v in verdicts)
        + (f"\n\n**{len(failed)} run(s) did not exit 0.**" if failed else " (every run exited 0).")
        + "\n"
    )
    command = f"python -m bench.logprob_thresholds --cost --gsm {gsm} --aime {aime} --repeats {repeats}"
    write_section("logprob-cost", "Logprob axis: cost in the main job", command, body)
    print(body)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.logprob_thresholds", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--gsm", type=int, default=None, help="GSM-style items per seed (8; --cost: the job's 500)")
    parser.add_argument("--aime", type=int, default=None, help="AIME-style items per seed (4; --cost: the job's 200)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rederive", action="store_true", help="thresholds from the committed data; nothing runs")
    parser.add_argument("--cost", action="store_true", help="time the main job with and without the axis")
    parser.add_argument("--table", action="store_true", help="the false-alarm table from the committed data")
    parser.add_argument("--repeats", type=int, default=4, help="--cost: pairs of runs (default 4)")
    parser.add_argument("--plan", type=Path, default=None, help="calibrate a plan's clean arms (default: the main job)")
    parser.add_argument("--arms", default="", help="--plan: the clean arms to start, comma-separated (default: all)")
    parser.add_argument("--model", default=None, help="--plan: the model's slug (default: the plan's first)")
    args = parser.parse_args(argv)
    if args.cost:
        from harness.evals.tasks import FROZEN_TASKS

        gsm = args.gsm if args.gsm is not None else FROZEN_TASKS["gsm_style"].default_limit
        aime = args.aime if args.aime is not None else FROZEN_TASKS["aime_style"].default_limit
        return cost(gsm, aime, args.repeats)
    if args.table:
        from bench.common import write_section

        keys = json.loads(THRESHOLDS_FILE.read_text())["thresholds"]
        body = "\n".join(false_alarm_table(key) for key in keys)
        command = "python -m bench.logprob_thresholds --table"
        write_section("logprob-false-alarms", "Logprob axis: 20 clean seeds, false alarms", command, body)
        print(body)
        return 0
    if args.rederive:
        data = json.loads(THRESHOLDS_FILE.read_text())
        for key, rows in data["data"].items():
            print(key, write(key, rows, data["thresholds"][key]["items_per_seed"]))
        return 0
    items = {"gsm_style": 8 if args.gsm is None else args.gsm, "aime_style": 4 if args.aime is None else args.aime}
    try:
        arms = [a for a in args.arms.split(",") if a]
        work = Path(tempfile.mkdtemp(prefix="logprob-calibration-"))
        source = source_of(args.plan, arms, args.model, items, args.batch_size, work)
    except ValueError as exc:
        print(f"python -m bench.logprob_thresholds: {exc}", file=sys.stderr)
        return 2
    found = calibrate(source, args.seeds, items)
    print(found["key"], json.dumps(write(found["key"], found["rows"], found["items"], found["label"]), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
