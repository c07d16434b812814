"""SGLang's catalog faults through a real SGLang CPU server: accuracy and the logprob axis (issue 54, item 4).

One ``swa-harness eval --plan`` over a plan this module writes: a clean baseline arm and one arm per catalog fault
(``fault: ID``: the regression written into every server process's SGLang), each judged against the baseline as any
plan judges a treatment: accuracy paired, and the logprob axis with SGLang's thresholds (``sglang/float32`` in
``harness/evals/logprob_thresholds.json``, from ``bench.logprob_thresholds --plan``). The configuration is
``suites/plans/sglang-cpu-prefix.yaml``'s (eager, prefill in chunks of 32 through the radix cache, FINDINGS #4's
candidate fix patched in so a wrong SWA slot shows, a roomy pool), ``--config tight`` (a pool of 2,048 slots: the
tree evicts all run long, freed slots are handed out again) or ``--config paged`` (the roomy pool in pages of 32 tokens,
twice mellum-tiny-swa's window of 16: the SWA frontier is kept a whole page, not a window).

Two evals, so that a fault whose code the workload never runs costs no server: first the clean arm twice, the first
traced (``SWA_HARNESS_SGLANG_TRACE``: coverage in every server process), the second judged against it (clean against
clean: SGLang's thresholds must keep it GREEN in this configuration too); then the clean baseline and one arm per fault
whose edited statements ran in the traced server. A fault none of whose edited statements ran serving the workload is
"not reached": the faulty server runs the clean server's code, so no answer and no logprob can move; it gets no arm.

    python -m bench.sglang_fault_effects [--config roomy|tight|paged] [--limit 100] [--faults a,b] [--render-only]

in the venv of ``nox -s sglang_server``. Writes ``docs/fault-effects-sglang.json`` (one row per fault, config and
task) and the section of ``docs/FAULT_EFFECTS.md`` between its markers (``bench.fault_effects`` renders the same
section from the JSON when it writes the whole page). Evals go under ``--work`` (``/tmp/swa-sglang-fault-effects``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

from harness.paths import REPO

Config = Literal["roomy", "tight", "paged"]
CONFIGS: tuple[Config, ...] = ("roomy", "tight", "paged")
DOCS_JSON = REPO / "docs" / "fault-effects-sglang.json"
DOCS_MD = REPO / "docs" / "FAULT_EFFECTS.md"
MARK = ("<!-- sglang-server-effects -->", "<!-- /sglang-server-effects -->")
BASELINE = "clean"
REPEAT = "clean-again"
TASKS = ("gsm_style", "aime_style")
LABEL = {"gsm_style": "GSM-style", "aime_style": "AIME-style"}
POOL: dict[Config, str] = {"roomy": "262144", "tight": "2048", "paged": "262144"}
PAGE: dict[Config, int] = {"roomy": 1, "tight": 1, "paged": 32}  # SGLang's default page is one token
ABOUT: dict[Config, str] = {
    "roomy": "roomy: 262,144 slots in pages of one token",
    "tight": "tight: 2,048 slots (the tree evicts all run long, freed slots are handed out again)",
    "paged": "paged: 262,144 slots in pages of 32 tokens (twice the window)",
}
PATCH = "suites/plans/patches/finding-4-swa-reads.yaml"


@dataclass(frozen=True)
class Reach:
    """Whether a fault's edited lines ran in the clean server: how many of them are statements, how many ran."""

    statements: int
    ran: int
    functions_ran: int  # of the edited functions, how many ran at all
    functions: int

    @property
    def reached(self) -> bool:
        return self.ran > 0

    @property
    def line(self) -> str:
        if self.reached:
            return f"reached: {self.ran} of its {self.statements} edited statements ran in the clean server"
        if self.functions_ran:
            return (
                f"not reached: {self.functions_ran} of its {self.functions} edited functions ran in the clean server, "
                f"none of its {self.statements} edited statements"
            )
        return f"not reached: none of its {self.functions} edited functions ran in the clean server"


@dataclass(frozen=True)
class Row:
    """One fault (or the clean baseline) on one task in one configuration, as the eval judged it."""

    fault: str
    config: str
    task: str
    n: int
    accuracy_verdict: str
    delta_pp: float | None
    logprob_verdict: str | None
    max_abs_delta: float | None
    max_kl: float | None
    parted: int | None
    reason: str
    reach: str


def plan_mapping(arms: Sequence[dict[str, Any]], config: Config, limit: int, port: int) -> dict[str, Any]:
    """A plan: the prefix plan's arm defaults in ``config``'s pool, ``arms`` (the first the baseline)."""
    return {
        "title": f"SGLang catalog faults through the server ({config} pool)",
        "models": [{"name": "fixtures/models/mellum-tiny-swa", "served": "swa-harness"}],
        "arm_defaults": {
            "engine": "sglang",
            "graphs": "off",
            "env": {"SWA_HARNESS_SGLANG_PATCH": PATCH, "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "0"},
            "flags": [
                *("--device", "cpu", "--attention-backend", "torch_native", "--sampling-backend", "pytorch"),
                *("--dtype", "float32", "--max-running-requests", "32", "--swa-full-tokens-ratio", "1.0"),
                *("--max-total-tokens", POOL[config], "--chunked-prefill-size", "32"),
                *(("--page-size", str(PAGE[config])) if PAGE[config] > 1 else ()),
            ],
        },
        "arms": [{**arms[0], "role": "baseline"}, *arms[1:]],
        "tasks": list(TASKS),
        "limit": limit,
        "client": {
            "batch_size": 32,
            "concurrency": 1,
            "max_retries": 1,
            "timeout_s": 1800,
            "samples": True,
            "env": {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        },
        "port": port,
        "parallel": 1,
        "one_step_per_arm": True,
    }


def screen_arms(trace: Path) -> list[dict[str, Any]]:
    """The first eval: the clean arm traced, and again untraced (judged against the first)."""
    return [
        {"name": BASELINE, "purpose": "no fault; traced", "env": {"SWA_HARNESS_SGLANG_TRACE": str(trace)}},
        {"name": REPEAT, "purpose": "no fault, again: clean against clean"},
    ]


def fault_arms(faults: Sequence[str]) -> list[dict[str, Any]]:
    """The second eval: the clean baseline and one arm per reached fault."""
    return [
        {"name": BASELINE, "purpose": "no fault"},
        *({"name": f, "purpose": f"catalog fault {f}", "fault": f} for f in faults),
    ]


def _function_source(target: str) -> tuple[list[str], int, str]:
    """The installed SGLang function ``target``: its source lines, first line number and file."""
    from harness.targets.sglang.faults import resolve

    fn = resolve(target)
    fn = getattr(fn, "__func__", fn)
    lines, first = inspect.getsourcelines(fn)
    return lines, first, str(Path(inspect.getsourcefile(fn)).resolve())


def _edited_lines(target: str, match: str) -> tuple[str, list[int]]:
    """The file (inside the ``sglang`` package) and line numbers of ``match`` in the installed function ``target``,
    matched line by line with whitespace stripped, as SGLang's source patcher matches."""
    lines, first, source = _function_source(target)
    want = [w.strip() for w in match.strip("\n").splitlines()]
    have = [h.strip() for h in lines]
    for i in range(len(have) - len(want) + 1):
        if have[i : i + len(want)] == want:
            path = source.rsplit("/sglang/", 1)[1]
            return path, list(range(first + i, first + i + len(want)))
    raise LookupError(f"{target}: the fault's match is not in the installed source")


def _statements(path: Path) -> set[int]:
    """Lines where a statement starts (what coverage counts)."""
    import ast

    return {n.lineno for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.stmt)}


def reach(fault_id: str, ran: dict[str, set[int]]) -> Reach:
    """A fault's edited lines against the lines the clean server ran (``ran``: path inside ``sglang`` -> lines)."""
    import sglang

    from harness.servers.sglang_server.patched_server import install_cpu_stand_ins
    from harness.targets.sglang.faults.by_id import get_fault

    install_cpu_stand_ins()  # SGLang's modules import as the server's processes import them
    root = Path(sglang.__file__).resolve().parent
    fault = get_fault(fault_id)
    statements = hit = 0
    functions: dict[str, bool] = {}
    for edit in fault.edits:
        path, lines = _edited_lines(edit.target, edit.match)
        done = ran.get(path, set())
        fn = resolve_function_lines(edit.target)
        functions[edit.target] = functions.get(edit.target, False) or bool(done & fn)
        starts = _statements(root / path) & set(lines)
        # A match inside one multi-line statement starts none: the statement holding its first line counts.
        starts = starts or {max((s for s in _statements(root / path) if s <= lines[0]), default=lines[0])}
        statements += len(starts)
        hit += len(starts & done)
    return Reach(statements=statements, ran=hit, functions_ran=sum(functions.values()), functions=len(functions))


def resolve_function_lines(target: str) -> set[int]:
    lines, first, _ = _function_source(target)
    return set(range(first + 1, first + len(lines)))  # the body: the ``def`` line runs at import


def run_eval(plan: dict[str, Any], work: Path) -> tuple[int, float, dict[str, Any] | None]:
    """The eval in its own process, its output into ``work/eval.log``; exit code, wall seconds, its summary."""
    import yaml

    work.mkdir(parents=True, exist_ok=True)
    plan_file = work / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan, sort_keys=False))
    exe = Path(sys.executable).with_name("swa-harness")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "harness.cli"]
    cmd += ["eval", "--plan", str(plan_file), "--out", str(work / "eval"), "--no-history"]
    cmd += ["--kill-matrix", str(work / "none.json")]
    t0 = time.perf_counter()
    with (work / "eval.log").open("w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - t0
    summary = work / "eval" / "summary.json"
    print(f"{work.name}: exit {code.returncode} in {wall:.0f} s", file=sys.stderr, flush=True)
    return code.returncode, wall, json.loads(summary.read_text()) if summary.is_file() else None


def rejudge(summary: dict[str, Any], eval_dir: Path) -> dict[str, Any]:
    """The summary's logprob axis judged again from the runs saved under ``eval_dir`` with today's code and
    thresholds (a change to the KL or a new calibration needs no server); accuracy is left as judged."""
    from harness.evals.compare import logprob_axis
    from harness.evals.results import RunResult

    def run(model: str, arm: str, task: str) -> RunResult:
        return RunResult.load(eval_dir / Path(model).name / arm / "runs" / f"{task}.json")

    for c in summary["comparisons"]:
        for task, t in c["suites"].items():
            on, off = run(c["model"], c["treatment"], task), run(c["model"], c["reference"], task)
            by_id = {i.item_id: i for i in off.items}
            pairs = [(i, by_id[i.item_id]) for i in on.items if i.item_id in by_id]
            axis = logprob_axis(pairs, on)
            t["logprobs"] = axis.to_dict(items=False) if axis else None
    return summary


def _judged_again(work: Path, before: dict[str, Any], which: int) -> tuple[int, float, dict[str, Any] | None]:
    """An earlier eval under ``work`` judged again (``rejudge``), with the exit code it had; its wall goes on the
    first of the two (the JSON keeps their sum)."""
    summary = work / "eval" / "summary.json"
    if not summary.is_file():
        return 2, 0.0, None
    code = int(str(before["exit"]).split(",")[which])
    try:
        judged = rejudge(json.loads(summary.read_text()), work / "eval")
    except FileNotFoundError as missing:  # a summary without its saved runs: nothing to judge, no verdict
        print(f"--rejudge: a run the summary names is not saved: {missing.filename}", file=sys.stderr)
        return 2, 0.0, None
    return code, float(before["wall_s"]) if which == 0 else 0.0, judged


def rows_from(summary: dict[str, Any], config: str, reaches: dict[str, Reach]) -> list[Row]:
    rows = []
    for c in summary["comparisons"]:
        fault = c["treatment"]
        for task in TASKS:
            t = c["suites"].get(task) or {}
            lp = t.get("logprobs") or {}
            diff = t.get("difference")
            rows.append(
                Row(
                    fault=fault,
                    config=config,
                    task=task,
                    n=int(t.get("n") or 0),
                    accuracy_verdict=str(t.get("verdict") or c["verdict"]),
                    delta_pp=_pp(diff),
                    logprob_verdict=lp.get("verdict"),
                    max_abs_delta=(lp.get("delta") or {}).get("max"),
                    max_kl=(lp.get("kl") or {}).get("max"),
                    parted=lp.get("parted"),
                    reason=str(t.get("reason") or c.get("reason") or ""),
                    reach=reaches[fault].line if fault in reaches else "",
                )
            )
    return rows


def unreached_row(fault: str, config: str, task: str, r: Reach) -> Row:
    """A fault whose edited statements never ran in the traced clean server: no arm, nothing to judge."""
    return Row(fault, config, task, 0, "not run", None, None, None, None, None, "not reached", r.line)


def _pp(difference: Any) -> float | None:
    """ON - OFF in percentage points, from the summary's difference (a fraction; None for an incomplete run)."""
    return None if difference is None else 100.0 * float(difference)


def section(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The FAULT_EFFECTS section, from the JSON's rows (so ``bench.fault_effects`` can render it too)."""
    if not rows:
        return ""

    def cell(r: dict[str, Any]) -> str:
        if r["accuracy_verdict"] == "not run":
            return "no arm"
        if r["logprob_verdict"] in (None, "NO VERDICT") and r["accuracy_verdict"] not in ("GREEN", "AMBER", "RED"):
            return f"no verdict ({r['reason'][:90]})"
        acc = f"{r['accuracy_verdict']} {r['delta_pp']:+.1f} pp" if r["delta_pp"] is not None else r["accuracy_verdict"]
        lp = r["logprob_verdict"] or "—"
        if r["max_kl"] is not None:
            lp += f" (KL {r['max_kl']:.2g}, max\\|Δ\\| {r['max_abs_delta']:.2g}, {r['parted']} parted)"
        return f"accuracy {acc}; logprobs **{lp}**"

    out = [
        "## SGLang's catalog faults through its server",
        "",
        f"`{meta['command']}` ({meta['when']}, {meta['wall_s']:.0f} s, exits {meta['exit']}): real SGLang "
        f"{meta['sglang']} on CPU (eager, prefill in chunks of 32 through the radix cache, FINDINGS #4's candidate fix "
        f"patched in), {meta['limit']} items per task, each fault written into every server process and judged "
        "against the clean baseline on accuracy (paired) and on the logprob axis (SGLang's thresholds, "
        "`sglang/float32`). Reach: the clean arm ran once traced, and each fault's edited statements were looked up in "
        "what its server ran; a fault none of whose statements ran gets no arm (its server would run the clean code). "
        f"`{REPEAT}` is the clean arm again, judged against the traced one. Configurations: "
        + "; ".join(ABOUT[c] for c in CONFIGS if c in meta.get("configs", ("roomy",)))
        + "."
        + (
            f" The logprob axis of the {meta['judged_again']} judged again from the saved runs (`--rejudge`: no "
            "server), with the KL and thresholds of that day."
            if meta.get("judged_again")
            else ""
        ),
        "",
    ]
    present = {r["config"] for r in rows}
    configs = [c for c in CONFIGS if c in present] + sorted(present - set(CONFIGS))
    head = [f"{c}: {LABEL[t]}" for c in configs for t in TASKS] + [f"{c}: reach" for c in configs]
    out += ["| fault | " + " | ".join(head) + " |", "|---" * (1 + len(head)) + "|"]
    faults = list(dict.fromkeys(r["fault"] for r in rows))
    for f in sorted(faults, key=lambda f: f != REPEAT):
        mine = {(r["config"], r["task"]): r for r in rows if r["fault"] == f}
        cells = [cell(mine[c, t]) if (c, t) in mine else "not run" for c in configs for t in TASKS]
        cells += [next((mine[c, t]["reach"] for t in TASKS if (c, t) in mine), "") or "—" for c in configs]
        out.append(f"| `{f}` | " + " | ".join(cells) + " |")
    faults = [f for f in faults if f != REPEAT]
    red = {r["fault"] for r in rows if r["logprob_verdict"] == "RED" and r["fault"] != REPEAT}
    reached = {r["fault"] for r in rows if r["reach"].startswith("reached")}
    green_reached = sorted(reached - red)
    out += [
        "",
        f"Of {len(faults)} faults: **{len(red)} RED on the logprob axis**; {len(reached)} reached by the workload"
        + (
            f" ({len(green_reached)} of those not RED: {', '.join(f'`{f}`' for f in green_reached)})"
            if green_reached
            else ""
        )
        + f"; {len(set(faults) - reached)} never reached (their edited statements never ran serving it).",
        "",
    ]
    return "\n".join(out)


def splice(md: str, body: str) -> str:
    block = f"{MARK[0]}\n{body.rstrip()}\n{MARK[1]}"
    pattern = re.compile(re.escape(MARK[0]) + r".*?" + re.escape(MARK[1]), re.S)
    if pattern.search(md):
        return pattern.sub(lambda _: block, md)
    anchor = "## What accuracy alone would miss"
    return md.replace(anchor, block + "\n\n" + anchor, 1) if anchor in md else md.rstrip() + "\n\n" + block + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sglang_fault_effects", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=CONFIGS, default="roomy")
    parser.add_argument("--limit", type=int, default=100, help="items per task (default 100, the SGLang plans')")
    parser.add_argument("--faults", default=None, help="comma-separated fault ids (default: the whole catalog)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/swa-sglang-fault-effects"))
    parser.add_argument("--port", type=int, default=31200)
    parser.add_argument("--render-only", action="store_true", help="re-write the section from the committed JSON")
    parser.add_argument(
        "--rejudge", action="store_true", help="no server: the logprob axis judged again over the runs under --work"
    )
    args = parser.parse_args(argv)
    data = json.loads(DOCS_JSON.read_text()) if DOCS_JSON.is_file() else {"runs": {}, "rows": []}
    if not args.render_only:
        import sglang

        from harness.servers.sglang_server.trace import lines_run
        from harness.targets.sglang.faults.by_id import SGLANG_FAULTS

        faults = args.faults.split(",") if args.faults else list(SGLANG_FAULTS)
        if unknown := [f for f in faults if f not in SGLANG_FAULTS]:
            print(f"--faults: not in the SGLang catalog: {', '.join(unknown)}", file=sys.stderr)
            return 2
        work = args.work / args.config
        trace = work / "screen" / "trace"
        before = data["runs"].get(args.config) or {}
        if args.rejudge and not before:
            print(f"--rejudge: docs/fault-effects-sglang.json has no {args.config} run to judge again", file=sys.stderr)
            return 2
        if args.rejudge:  # the runs of an earlier invocation, judged again: its walls, exit codes and date kept
            code1, wall1, screened = _judged_again(work / "screen", before, 0)
        else:
            plan = plan_mapping(screen_arms(trace), args.config, args.limit, args.port)
            code1, wall1, screened = run_eval(plan, work / "screen")
        ran = {p.rsplit("/sglang/", 1)[1]: lines for p, lines in lines_run(trace).items()} if trace.is_dir() else {}
        if screened is None or not ran:
            print(f"the clean screen gave no summary or no trace; see {work / 'screen' / 'eval.log'}", file=sys.stderr)
            return 2
        reaches = {f: reach(f, ran) for f in faults}
        reached = [f for f in faults if reaches[f].reached]
        if args.rejudge:
            code2, wall2, judged = _judged_again(work / "faults", before, 1)
        else:
            code2, wall2, judged = run_eval(
                plan_mapping(fault_arms(reached), args.config, args.limit, args.port), work / "faults"
            )
        if judged is None and reached:
            print(f"the fault eval gave no summary.json; see {work / 'faults' / 'eval.log'}", file=sys.stderr)
            return 2
        rows = rows_from(screened, args.config, {}) + rows_from(judged or {"comparisons": []}, args.config, reaches)
        rows += [unreached_row(f, args.config, t, reaches[f]) for f in faults if not reaches[f].reached for t in TASKS]
        data["rows"] = [r for r in data["rows"] if not (r["config"] == args.config and r["fault"] in {*faults, REPEAT})]
        data["rows"] += [asdict(r) for r in rows]
        command = "python -m bench.sglang_fault_effects" + (
            f" --config {args.config}" if args.config != "roomy" else ""
        )
        today = time.strftime("%Y-%m-%d", time.gmtime())
        data["runs"][args.config] = {
            "command": command + (f" --faults {args.faults}" if args.faults else ""),
            "when": before["when"] if args.rejudge else today,
            "wall_s": wall1 + wall2,
            "exit": f"{code1}, {code2}",
            "limit": args.limit,
            "sglang": sglang.__version__,
            "judged_again": today if args.rejudge else None,
        }
        DOCS_JSON.write_text(json.dumps(data, indent=1) + "\n")
    body = render_section(data)
    DOCS_MD.write_text(splice(DOCS_MD.read_text(), body))
    print(body)
    return 0


def render_section(data: dict[str, Any]) -> str:
    """The section from the JSON (every configuration run), for this module and ``bench.fault_effects``."""
    runs = data.get("runs") or {}
    if not runs:
        return ""
    first = runs[sorted(runs)[0]]
    meta = {
        "command": "; ".join(r["command"] for r in runs.values()),
        "when": ", ".join(sorted({r["when"] for r in runs.values()})),
        "wall_s": sum(r["wall_s"] for r in runs.values()),
        "exit": ", ".join(str(r["exit"]) for r in runs.values()),
        "limit": first["limit"],
        "sglang": first["sglang"],
        "judged_again": ", ".join(
            f"{c} run on {r['judged_again']}" for c, r in sorted(runs.items()) if r.get("judged_again")
        ),
        "configs": tuple(runs),
    }
    return section(data["rows"], meta)


if __name__ == "__main__":
    raise SystemExit(main())
