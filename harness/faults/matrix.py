"""The kill matrix: run the suites on the clean build and once per catalog fault.

Each (fault, suite) pair is a pytest subprocess with ``SWA_HARNESS_FAULT=<id>`` (empty for the clean
build); runs go in parallel, one single-threaded process per core. A suite *kills* a fault when one
of its tests fails on an assertion (``assert``, ``torch.testing.assert_close``, ``pytest.raises``);
a fault run stops there (``stop_on_kill``), the clean build runs every test. Failures that are only
other exceptions are reported as *error*, passing suites as *survived*.
The matrix is printed and written as JSON for the HTML report; the exit status is non-zero when the
clean build fails or any fault survives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from harness.faults import FAULT_ENV, FAULTS
from harness.faults.stop_on_kill import ASSERTION_PREFIXES

REPO = Path(__file__).resolve().parents[2]
SUITES: dict[str, str] = {"scenarios": "suites/scenarios", "differential": "suites/differential"}


@dataclass
class SuiteOutcome:
    passed: int = 0
    assertion_failures: list[str] = field(default_factory=list)
    other_failures: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.assertion_failures or self.other_failures)

    def fault_status(self) -> dict[str, str | None]:
        if self.assertion_failures:
            return {"status": "killed", "first_failure": self.assertion_failures[0]}
        if self.other_failures:
            return {"status": "error", "first_failure": self.other_failures[0]}
        return {"status": "survived", "first_failure": None}

    def clean_status(self) -> dict[str, str]:
        if self.failed:
            return {"status": "failed", "detail": (self.assertion_failures + self.other_failures)[0]}
        return {"status": "passed", "detail": f"{self.passed} tests passed"}


def _suite_of(classname: str) -> str | None:
    for suite, path in SUITES.items():
        if classname.startswith(path.replace("/", ".")):
            return suite
    return None


def parse_junit(path: Path) -> dict[str, SuiteOutcome]:
    outcomes = {suite: SuiteOutcome() for suite in SUITES}
    for case in ET.parse(path).getroot().iter("testcase"):
        suite = _suite_of(case.get("classname", ""))
        if suite is None:
            continue
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if problem is None:
            if case.find("skipped") is None:
                outcomes[suite].passed += 1
            continue
        message = (problem.get("message") or "").strip().replace("\n", " ")
        where = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        entry = f"{where}: {message[:300]}"
        is_assertion = problem.tag == "failure" and message.startswith(ASSERTION_PREFIXES)
        (outcomes[suite].assertion_failures if is_assertion else outcomes[suite].other_failures).append(entry)
    return outcomes


def run_suite(fault_id: str | None, suite: str, workdir: Path, timeout_s: float) -> tuple[SuiteOutcome, float]:
    junit = workdir / f"{fault_id or 'clean'}-{suite}.xml"
    env = {**os.environ, FAULT_ENV: fault_id or "", "SWA_HARNESS_HYPOTHESIS": "matrix", "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "pytest", SUITES[suite], "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
           f"--junitxml={junit}", "-o", "junit_family=xunit2"]
    if fault_id is not None:
        cmd += ["-p", "harness.faults.stop_on_kill"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
    wall = time.perf_counter() - start
    # 0: passed, 1: some failed, 2: stopped by stop_on_kill (fault runs only); anything else means
    # pytest itself broke (e.g. 5: nothing collected), which must never pass for a verdict.
    expected = (0, 1, 2) if fault_id is not None else (0, 1)
    if proc.returncode not in expected or not junit.exists():
        raise RuntimeError(f"pytest exited {proc.returncode} for {fault_id or 'clean'}/{suite}:\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return parse_junit(junit)[suite], wall


def build_matrix(fault_ids: list[str], *, jobs: int = 2, timeout_s: float = 900) -> dict:
    start = time.perf_counter()
    runs = [(fid, suite) for fid in [None, *fault_ids] for suite in SUITES]
    with tempfile.TemporaryDirectory(prefix="swa-kill-matrix-") as tmp, ThreadPoolExecutor(jobs) as pool:
        futures = {run: pool.submit(run_suite, *run, Path(tmp), timeout_s) for run in runs}
        results = {run: f.result() for run, f in futures.items()}
    return {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.perf_counter() - start, 1),
        "jobs": jobs,
        "suites": list(SUITES),
        "clean": {suite: results[None, suite][0].clean_status() for suite in SUITES},
        "faults": [
            {**FAULTS[fid].to_dict(),
             "run_s": round(sum(results[fid, suite][1] for suite in SUITES), 1),
             "suites": {suite: results[fid, suite][0].fault_status() for suite in SUITES}}
            for fid in fault_ids
        ],
    }


def verdict(matrix: dict) -> tuple[bool, list[str]]:
    problems = [f"clean build: {suite} {r['detail']}" for suite, r in matrix["clean"].items() if r["status"] != "passed"]
    for fault in matrix["faults"]:
        if not any(s["status"] == "killed" for s in fault["suites"].values()):
            problems.append(f"fault {fault['id']} survived every suite")
    return not problems, problems


def format_matrix(matrix: dict) -> str:
    suites = matrix["suites"]
    width = max(len(f["id"]) for f in matrix["faults"]) if matrix["faults"] else 10
    lines = [f"{'':{width}}  " + "  ".join(f"{s:>12}" for s in suites)]
    lines.append(f"{'(clean build)':{width}}  " + "  ".join(f"{matrix['clean'][s]['status']:>12}" for s in suites))
    for fault in matrix["faults"]:
        lines.append(f"{fault['id']:{width}}  " + "  ".join(f"{fault['suites'][s]['status']:>12}" for s in suites))
    lines.append("")
    for fault in matrix["faults"]:
        first = next((s["first_failure"] for s in fault["suites"].values() if s["status"] == "killed"), None)
        lines.append(f"{fault['id']} [{fault['seed']}]: {first or 'NOT KILLED'}")
    lines.append(f"\nwall time {matrix['wall_s']} s with {matrix['jobs']} parallel runs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="swa-harness faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="fault ids (default: the whole catalog)")
    parser.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument("--out", default=str(REPO / "reports" / "kill-matrix.json"))
    parser.add_argument("--list", action="store_true", help="list the catalog and exit")
    args = parser.parse_args(argv)
    if args.list:
        for fault in FAULTS.values():
            print(f"{fault.id:34} {fault.seed:18} {fault.breaks}")
        return 0
    unknown = [f for f in args.only or [] if f not in FAULTS]
    if unknown:
        parser.error(f"unknown fault ids {unknown}; known: {', '.join(FAULTS)}")
    matrix = build_matrix(args.only if args.only is not None else list(FAULTS), jobs=args.jobs)
    out = Path(args.out)
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
