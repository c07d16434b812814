"""The kill matrix: run the suites on the clean build and once per catalog fault, per target.

Each (fault, suite) pair is a pytest subprocess with the fault switched on through the target's
environment variable (none for the clean build); runs go in parallel, one single-threaded process
per core. ``harness.faults.verdicts`` classifies every failure: a *kill* is a test's own assertion
on a real computation (*behavioural*) or on a design property (*structural*, marked tests and
``expect_structure``); any other failure, asserts inside harness or SGLang code included, is an
*error*; a suite with neither *survived*. A fault run stops at its first behavioural kill.
The clean build must pass, and run at least ``min_tests`` tests per suite (a suite that collected
nothing proves nothing). The matrix is printed and written as JSON for the HTML report; the exit
status is non-zero when the clean build fails or any fault survives every suite.

    swa-harness faults                     # the harness's own twins (harness/faults/catalog)
    swa-harness faults --target sglang     # source patches into real SGLang (in the `nox -s sglang` venv)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from harness.env import FAULT_ENV, HYPOTHESIS_ENV, SGLANG_FAULT_ENV, STOP_ON_KILL_ENV, VERDICTS_ENV
from harness.paths import REPO


@dataclass(frozen=True)
class MatrixTarget:
    """What differs between targets: suites, how a fault is switched on, which faults exist."""

    name: str
    suites: dict[str, str]  # suite name -> path
    min_tests: dict[str, int]
    fault_env: str
    catalog: Callable[[], dict[str, dict]]  # fault id -> its record (id, seed, breaks, ...)
    pytest_args: tuple[str, ...] = ()
    out: Path = REPO / "reports" / "kill-matrix.json"


def _harness_catalog() -> dict[str, dict]:
    from harness.faults import FAULTS

    return {fid: f.to_dict() for fid, f in FAULTS.items()}


def _sglang_catalog() -> dict[str, dict]:
    from harness.targets.sglang.faults.catalog import SGLANG_FAULTS

    return {fid: f.to_dict() for fid, f in SGLANG_FAULTS.items()}


MATRIX_TARGETS: dict[str, MatrixTarget] = {
    "harness": MatrixTarget(
        "harness",
        {
            "scenarios": "suites/scenarios",
            "differential": "suites/differential",
            "prefix": "suites/prefix",
            "reuse": "suites/reuse",
        },
        {"scenarios": 110, "differential": 15, "prefix": 4, "reuse": 40},
        FAULT_ENV,
        _harness_catalog,
    ),
    "sglang": MatrixTarget(
        "sglang",
        {
            "pool": "suites/pool",
            "scenarios": "suites/scenarios",
            "differential": "suites/differential",
            "registry": "suites/sglang/test_decode_registry.py",
            "plan": "suites/sglang/test_kv_loc_plan.py",
            "retraction": "suites/sglang/test_swa_retraction.py",
            "layouts": "suites/sglang/test_swa_pool_layouts.py",
            "registries": "suites/sglang/test_graph_registries.py",
            "prefix": "suites/prefix",
            "prefix-adapter": "suites/sglang/test_prefix_cache_adapter.py",
        },
        {
            "pool": 7,
            "scenarios": 110,
            "differential": 33,
            "registry": 14,
            "plan": 8,
            "retraction": 5,
            "layouts": 7,
            "registries": 11,
            "prefix": 4,
            "prefix-adapter": 12,
        },
        SGLANG_FAULT_ENV,
        _sglang_catalog,
        ("--target", "sglang"),
        REPO / "reports" / "kill-matrix-sglang.json",
    ),
}


@dataclass
class SuiteOutcome:
    passed: int = 0
    kills: list[dict] = field(default_factory=list)  # verdict records, in order
    errors: list[dict] = field(default_factory=list)

    @classmethod
    def from_verdicts(cls, path: Path) -> SuiteOutcome:
        outcome = cls()
        for line in path.read_text().splitlines() if path.exists() else []:
            record = json.loads(line)
            if record["outcome"] == "passed":
                outcome.passed += 1
            else:
                (outcome.kills if record["outcome"] == "kill" else outcome.errors).append(record)
        return outcome

    def fault_status(self) -> dict[str, str | None]:
        if self.kills:
            best = next((k for k in self.kills if k["kill_class"] == "behavioural"), self.kills[0])
            return {"status": "killed", "kill_class": best["kill_class"], "first_failure": _describe(best)}
        if self.errors:
            return {"status": "error", "kill_class": None, "first_failure": _describe(self.errors[0])}
        return {"status": "survived", "kill_class": None, "first_failure": None}

    def clean_status(self, min_tests: int) -> dict[str, str | int]:
        failures = self.kills + self.errors
        if failures:
            return {"status": "failed", "tests": self.passed, "detail": _describe(failures[0])}
        if self.passed < min_tests:
            return {
                "status": "failed",
                "tests": self.passed,
                "detail": f"only {self.passed} tests passed; the suite must run at least {min_tests}",
            }
        return {"status": "passed", "tests": self.passed, "detail": f"{self.passed} tests passed"}


def _describe(record: dict) -> str:
    test = record["nodeid"].split("/")[-1]
    return f"{test} [{record.get('where')}]: {record['message']}"


def run_suite(
    target: MatrixTarget, fault_id: str | None, suite: str, workdir: Path, timeout_s: float
) -> tuple[SuiteOutcome, float]:
    verdicts = workdir / f"{fault_id or 'clean'}-{suite}.jsonl"
    env = {
        **os.environ,
        target.fault_env: fault_id or "",
        HYPOTHESIS_ENV: "matrix",
        "PYTHONHASHSEED": "0",
        VERDICTS_ENV: str(verdicts),
        STOP_ON_KILL_ENV: "1" if fault_id else "0",
    }
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        target.suites[suite],
        *target.pytest_args,
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-p",
        "harness.faults.verdicts",
        "--timeout",
        "300",
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
    wall = time.perf_counter() - start
    # 0: passed, 1: some failed, 2: stopped at a kill (fault runs only); anything else (e.g. 5:
    # nothing collected, 3/4: pytest itself broke) must never pass for a verdict.
    expected = (0, 1, 2) if fault_id is not None else (0, 1)
    if proc.returncode not in expected:
        raise RuntimeError(
            f"pytest exited {proc.returncode} for {target.name}:{fault_id or 'clean'}/{suite}:\n"
            f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return SuiteOutcome.from_verdicts(verdicts), wall


def build_matrix(target: MatrixTarget, fault_ids: list[str], *, jobs: int = 2, timeout_s: float = 900) -> dict:
    catalog = target.catalog()
    start = time.perf_counter()
    runs = [(fid, suite) for fid in [None, *fault_ids] for suite in target.suites]
    with tempfile.TemporaryDirectory(prefix="swa-kill-matrix-") as tmp, ThreadPoolExecutor(jobs) as pool:
        futures = {run: pool.submit(run_suite, target, *run, Path(tmp), timeout_s) for run in runs}
        results = {run: f.result() for run, f in futures.items()}
    return {
        "target": target.name,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.perf_counter() - start, 1),
        "jobs": jobs,
        "suites": list(target.suites),
        "clean": {s: results[None, s][0].clean_status(target.min_tests[s]) for s in target.suites},
        "faults": [
            {
                **catalog[fid],
                "run_s": round(sum(results[fid, s][1] for s in target.suites), 1),
                "suites": {s: results[fid, s][0].fault_status() for s in target.suites},
            }
            for fid in fault_ids
        ],
    }


def verdict(matrix: dict) -> tuple[bool, list[str]]:
    problems = [
        f"clean build: {suite} {r['detail']}" for suite, r in matrix["clean"].items() if r["status"] != "passed"
    ]
    for fault in matrix["faults"]:
        classes = {s["kill_class"] for s in fault["suites"].values() if s["status"] == "killed"}
        if not classes:
            problems.append(f"fault {fault['id']} survived every suite")
        elif fault.get("expected_kill", "behavioural") == "behavioural" and "behavioural" not in classes:
            problems.append(f"fault {fault['id']} changes computed outputs but was only killed structurally")
    return not problems, problems


def _cell(result: dict) -> str:
    return f"killed: {result['kill_class']}" if result["status"] == "killed" else result["status"]


def format_matrix(matrix: dict) -> str:
    suites = matrix["suites"]
    width = max([len(f["id"]) for f in matrix["faults"]] + [14])
    lines = [f"target: {matrix['target']}", f"{'':{width}}  " + "  ".join(f"{s:>20}" for s in suites)]
    lines.append(f"{'(clean build)':{width}}  " + "  ".join(f"{matrix['clean'][s]['status']:>20}" for s in suites))
    for fault in matrix["faults"]:
        lines.append(f"{fault['id']:{width}}  " + "  ".join(f"{_cell(fault['suites'][s]):>20}" for s in suites))
    lines.append("")
    for fault in matrix["faults"]:
        kills = [s for s in fault["suites"].values() if s["status"] == "killed"]
        best = next((k for k in kills if k["kill_class"] == "behavioural"), kills[0] if kills else None)
        lines.append(
            f"{fault['id']} [{fault['seed']}]: "
            + (f"{best['kill_class']}: {best['first_failure']}" if best else "NOT KILLED")
        )
    lines.append("\nclean build: " + ", ".join(f"{s} {r['tests']} tests" for s, r in matrix["clean"].items()))
    lines.append(f"wall time {matrix['wall_s']} s with {matrix['jobs']} parallel runs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="swa-harness faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=sorted(MATRIX_TARGETS), default="harness")
    parser.add_argument("--only", nargs="*", default=None, help="fault ids (default: the target's whole catalog)")
    parser.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument("--out", default=None, help="JSON path (default: reports/kill-matrix[-<target>].json)")
    parser.add_argument("--list", action="store_true", help="list the catalog and exit")
    args = parser.parse_args(argv)
    target = MATRIX_TARGETS[args.target]
    catalog = target.catalog()
    if args.list:
        for fault in catalog.values():
            print(f"{fault['id']:42} {fault['seed']:30} {fault['breaks']}")
        return 0
    unknown = [f for f in args.only or [] if f not in catalog]
    if unknown:
        parser.error(f"unknown fault ids {unknown}; known for target {target.name}: {', '.join(catalog)}")
    matrix = build_matrix(target, args.only if args.only is not None else list(catalog), jobs=args.jobs)
    out = Path(args.out) if args.out else target.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(matrix, indent=2))
    print(format_matrix(matrix))
    ok, problems = verdict(matrix)
    print(f"\nkill matrix written to {out}")
    for problem in problems:
        print(f"FAIL: {problem}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
