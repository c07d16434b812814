"""The kill matrix: run the suites on the clean build and once per catalog fault, per target.

Every run is a pytest subprocess with the fault switched on through the target's environment
variable (none for the clean build); runs go in parallel, one single-threaded process per core.
``harness.faults.verdicts`` classifies every failure: a *kill* is a test's own assertion on a real
computation (*behavioural*) or on a design property (*structural*, marked tests and
``expect_structure``); any other failure, asserts inside harness or SGLang code included, is an
*error*; a suite with neither *survived*. The clean build must pass, and run at least ``min_tests``
tests per suite (a suite that collected nothing proves nothing). The matrix is printed and written as
JSON for the HTML report. Exit 0 when every fault is killed on a clean build that passes; 1 (FAIL) when the clean
build fails an assertion or a fault survives; 2 (NO VERDICT) when the rest is errors only: a fault no suite could
judge, or a clean build that crashed; and 2 at once when the python running the matrix cannot import what the
target's suites import (``harness/targets/preflight.py``: one line naming the nox session that builds it).

Two modes, with the same verdicts (``--compare`` checks two matrices fault by fault):

* ``impact`` (default): the clean build's runs also record which tests reach each fault's code
  (``harness.faults.impact``). A fault then runs only those tests, suite after suite, the tests that
  killed it last time first (from the previous matrix at ``--out``), and stops at its first behavioural
  kill; later suites are *not run*. A fault whose code no test reaches is *unreached*, with that code,
  never *survived* after zero tests. A fault that runs under its own settings (an SGLang fault's
  ``env``) has its tests recorded on a clean build under the same settings, which must pass too.
* ``full``: every fault through every whole suite, one (fault, suite) run each.

    swa-harness faults                     # the harness's own twins (harness/faults/catalog)
    swa-harness faults --target sglang     # source patches into real SGLang (in the `nox -s sglang` venv)
    swa-harness faults --target vllm       # source patches into real vLLM (in the `nox -s vllm` venv)
    swa-harness faults --mode full         # every fault through every suite
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
from typing import Literal

from harness.env import (
    FAULT_ENV,
    HYPOTHESIS_ENV,
    IMPACT_ENV,
    SELECT_ENV,
    SGLANG_FAULT_ENV,
    STOP_ON_KILL_ENV,
    VERDICTS_ENV,
    VLLM_FAULT_ENV,
)
from harness.faults.impact import Impact
from harness.paths import REPO
from harness.targets.preflight import SGLANG_SUITES, VLLM_SUITES, Needs, unimportable

Mode = Literal["impact", "full"]


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
    needs: Needs | None = None  # what its suites import from a real engine, checked before any run


def _harness_catalog() -> dict[str, dict]:
    from harness.faults import FAULTS

    return {fid: f.to_dict() for fid, f in FAULTS.items()}


def _vllm_catalog() -> dict[str, dict]:
    from harness.targets.vllm.faults.catalog import VLLM_FAULTS

    return {fid: f.to_dict() for fid, f in VLLM_FAULTS.items()}


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
        SGLANG_SUITES,
    ),
    # vLLM's own code, driven without a model (in the `nox -s vllm` venv): its KV-cache manager and its worker's
    # block tables, slot mappings and padded KV writes.
    "vllm": MatrixTarget(
        "vllm",
        {"manager": "suites/vllm/test_kv_cache_manager.py", "worker": "suites/vllm/test_block_table.py"},
        {"manager": 3, "worker": 1},
        VLLM_FAULT_ENV,
        _vllm_catalog,
        (),
        REPO / "reports" / "kill-matrix-vllm.json",
        VLLM_SUITES,
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

    @property
    def ran(self) -> int:
        return self.passed + len(self.kills) + len(self.errors)

    @property
    def killed_behaviourally(self) -> bool:
        return any(k["kill_class"] == "behavioural" for k in self.kills)

    def fault_status(self) -> dict[str, str | int | None]:
        if self.kills:
            best = next((k for k in self.kills if k["kill_class"] == "behavioural"), self.kills[0])
            status = {"status": "killed", "kill_class": best["kill_class"], "first_failure": _describe(best)}
            return {**status, "killer": best["nodeid"], "tests_run": self.ran}
        if self.errors:
            return {
                "status": "error",
                "kill_class": None,
                "first_failure": _describe(self.errors[0]),
                "tests_run": self.ran,
            }
        return {"status": "survived", "kill_class": None, "first_failure": None, "tests_run": self.ran}

    def clean_status(self, min_tests: int) -> dict[str, str | int]:
        failures = self.kills + self.errors
        if failures:  # "error": only crashes, no assertion failed (no verdict on the clean build)
            status = "failed" if self.kills else "error"
            return {"status": status, "tests": self.passed, "detail": _describe(failures[0])}
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
    target: MatrixTarget,
    fault_id: str | None,
    suite: str,
    workdir: Path,
    timeout_s: float,
    *,
    select: list[str] | None = None,
    record: Path | None = None,
    settings: tuple[tuple[str, str], ...] = (),
) -> tuple[SuiteOutcome, float]:
    """One pytest run of ``suite``: with ``select``, only those tests in that order; with ``record``, the
    impact recording written there; ``settings``: environment the run needs beyond the fault's switch."""
    run_id = f"{fault_id or 'clean'}{'-'.join(['', *(v for _, v in settings)])}-{suite}"
    verdicts = workdir / f"{run_id}.jsonl"
    env = {
        **os.environ,
        **dict(settings),
        target.fault_env: fault_id or "",
        HYPOTHESIS_ENV: "matrix",
        "PYTHONHASHSEED": "0",
        VERDICTS_ENV: str(verdicts),
        STOP_ON_KILL_ENV: "1" if fault_id else "0",
    }
    env.pop(IMPACT_ENV, None)
    env.pop(SELECT_ENV, None)
    if record is not None:
        env[IMPACT_ENV] = f"{target.name}:{record}"
    if select is not None:
        selection = workdir / f"{run_id}.select.json"
        selection.write_text(json.dumps(select))
        env[SELECT_ENV] = str(selection)
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
        "-p",
        "harness.faults.impact",
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


def build_matrix(
    target: MatrixTarget,
    fault_ids: list[str],
    *,
    jobs: int = 2,
    timeout_s: float = 900,
    mode: Mode = "impact",
    previous: dict | None = None,
) -> dict:
    catalog = target.catalog()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="swa-kill-matrix-") as tmp, ThreadPoolExecutor(jobs) as pool:
        workdir = Path(tmp)
        if mode == "full":
            runs = [(fid, suite) for fid in [None, *fault_ids] for suite in target.suites]
            futures = {run: pool.submit(run_suite, target, *run, workdir, timeout_s) for run in runs}
            results = {run: f.result() for run, f in futures.items()}
            clean = {s: results[None, s][0] for s in target.suites}
            faults = [
                {
                    **catalog[fid],
                    "run_s": round(sum(results[fid, s][1] for s in target.suites), 1),
                    "suites": {s: results[fid, s][0].fault_status() for s in target.suites},
                }
                for fid in fault_ids
            ]
            extra: dict = {}
        else:
            clean, faults, extra = _impact_runs(target, catalog, fault_ids, pool, workdir, timeout_s, previous)
    return {
        "target": target.name,
        "mode": mode,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.perf_counter() - start, 1),
        "jobs": jobs,
        "suites": list(target.suites),
        "clean": {s: clean[s].clean_status(target.min_tests[s]) for s in target.suites},
        **extra,
        "faults": faults,
    }


Settings = tuple[tuple[str, str], ...]


def _settings(record: dict) -> Settings:
    """A fault's own settings (an SGLang fault's ``env``, "K=V K2=V2" in its record)."""
    return tuple(tuple(pair.split("=", 1)) for pair in (record.get("env") or "").split())  # type: ignore[misc]


def _impact_runs(
    target: MatrixTarget,
    catalog: dict[str, dict],
    fault_ids: list[str],
    pool: ThreadPoolExecutor,
    workdir: Path,
    timeout_s: float,
    previous: dict | None,
) -> tuple[dict[str, SuiteOutcome], list[dict], dict]:
    """Record on the clean build (and under each fault's own settings), then run each fault on its tests."""
    settings = sorted({_settings(catalog[fid]) for fid in fault_ids} | {()})  # () : the clean build as it ships
    start = time.perf_counter()
    recordings = {
        (st, suite): workdir / f"impact-{i}-{suite}.json" for i, st in enumerate(settings) for suite in target.suites
    }
    clean_runs = {
        key: pool.submit(run_suite, target, None, key[1], workdir, timeout_s, record=path, settings=key[0])
        for key, path in recordings.items()
    }
    outcomes = {key: f.result()[0] for key, f in clean_runs.items()}
    impacts = {key: Impact.load(path) for key, path in recordings.items()}
    recorded_s = round(time.perf_counter() - start, 1)
    killers = previous_killers(previous)
    code = next(iter(impacts.values())).code  # fault id -> the functions it changes, the same in every recording

    def one_fault(fid: str) -> dict:
        st = _settings(catalog[fid])
        reach = {suite: impacts[st, suite].reaching(fid) for suite in target.suites}
        first = [s for s in target.suites if any(_is(t, k) for k in killers.get(fid, ()) for t in reach[s])]
        cells: dict[str, dict] = {}
        wall, killed = 0.0, False
        for suite in [*first, *(s for s in target.suites if s not in first)]:
            tests = reach[suite]
            if not tests:
                cells[suite] = {"status": "unreached", "kill_class": None, "first_failure": None, "tests_run": 0}
                continue
            if killed:
                cells[suite] = {"status": "not run", "kill_class": None, "first_failure": None, "tests_run": 0}
                continue
            known = [t for t in tests if any(_is(t, k) for k in killers.get(fid, ()))]
            outcome, seconds = run_suite(
                target,
                fid,
                suite,
                workdir,
                timeout_s,
                select=[*known, *(t for t in tests if t not in known)],
                settings=st,
            )
            wall += seconds
            cells[suite] = outcome.fault_status()
            killed = outcome.killed_behaviourally
        for suite in target.suites:
            cells[suite]["reaching"] = len(reach[suite])
        record = {**catalog[fid], "run_s": round(wall, 1), "suites": {s: cells[s] for s in target.suites}}
        record["code"] = list(code.get(fid, ()))
        record["tests_reaching"] = sum(len(r) for r in reach.values())
        record["tests_run"] = sum(int(c.get("tests_run") or 0) for c in cells.values())
        return record

    faults = [f.result() for f in [pool.submit(one_fault, fid) for fid in fault_ids]]
    clean = {suite: outcomes[(), suite] for suite in target.suites}
    under = {
        " ".join(f"{k}={v}" for k, v in st): {
            s: outcomes[st, s].clean_status(target.min_tests[s]) for s in target.suites
        }
        for st in settings
        if st
    }
    return clean, faults, {"clean_under_settings": under, "clean_and_recording_s": recorded_s}


def _is(nodeid: str, killer: str) -> bool:
    """A recorded killer names a test by its node id, or (matrices before test impact) by its file's part of it."""
    return nodeid == killer or nodeid.endswith("/" + killer)


def previous_killers(matrix: dict | None) -> dict[str, list[str]]:
    """Fault id -> the tests that killed it behaviourally in an earlier matrix."""
    out: dict[str, list[str]] = {}
    for fault in (matrix or {}).get("faults", []):
        for cell in fault.get("suites", {}).values():
            if cell.get("status") == "killed" and cell.get("kill_class") == "behavioural":
                killer = cell.get("killer") or str(cell.get("first_failure") or "").split(" [", 1)[0]
                if killer:
                    out.setdefault(fault["id"], []).append(killer)
    return out


def fault_verdict(fault: dict) -> str:
    """One fault's verdict over all suites: ``killed: behavioural`` / ``killed: structural``, ``unreached`` (no test
    runs its code), ``error`` (a suite could not judge it) or ``survived``."""
    cells = list(fault["suites"].values())
    classes = {c["kill_class"] for c in cells if c["status"] == "killed"}
    if classes:
        return "killed: behavioural" if "behavioural" in classes else "killed: structural"
    if cells and all(c["status"] == "unreached" for c in cells):
        return "unreached"
    return "error" if any(c["status"] == "error" for c in cells) else "survived"


NO_VERDICT = "NO VERDICT: "  # a problem that is no verdict (errors only), not a failure


def verdict(matrix: dict) -> tuple[bool, list[str]]:
    """Whether the matrix holds, and every problem in one line; a problem that is only errors starts NO_VERDICT."""

    def clean(label: str, suites: dict) -> list[str]:
        return [
            f"{NO_VERDICT if r['status'] == 'error' else ''}{label}: {s} {r['detail']}"
            for s, r in suites.items()
            if r["status"] != "passed"
        ]

    problems = clean("clean build", matrix["clean"])
    for settings, suites in matrix.get("clean_under_settings", {}).items():
        problems += clean(f"clean build under {settings}", suites)
    for fault in matrix["faults"]:
        outcome = fault_verdict(fault)
        if outcome == "unreached":
            problems.append(f"fault {fault['id']}: no test reaches its code ({', '.join(fault.get('code', []))})")
        elif outcome == "error":
            problems.append(f"{NO_VERDICT}fault {fault['id']}: no suite killed it and one errored: {_errored(fault)}")
        elif not outcome.startswith("killed"):
            problems.append(f"fault {fault['id']} survived every suite")
        elif fault.get("expected_kill", "behavioural") == "behavioural" and outcome != "killed: behavioural":
            problems.append(f"fault {fault['id']} changes computed outputs but was only killed structurally")
    return not problems, problems


def _errored(fault: dict) -> str:
    return next(c["first_failure"] for c in fault["suites"].values() if c["status"] == "error")


def exit_code(ok: bool, problems: list[str]) -> int:
    """0 when the matrix holds, 2 when every problem is no verdict, else 1."""
    return 0 if ok else 2 if all(p.startswith(NO_VERDICT) for p in problems) else 1


def compare(a: dict, b: dict) -> list[str]:
    """The faults whose verdict differs between two matrices of one target (and faults only one of them ran)."""
    va = {f["id"]: fault_verdict(f) for f in a["faults"]}
    vb = {f["id"]: fault_verdict(f) for f in b["faults"]}
    return [
        f"{fid}: {va.get(fid, 'not in the first')} vs {vb.get(fid, 'not in the second')}"
        for fid in {**va, **vb}
        if va.get(fid) != vb.get(fid)
    ]


def _cell(result: dict) -> str:
    return f"killed: {result['kill_class']}" if result["status"] == "killed" else result["status"]


def format_matrix(matrix: dict) -> str:
    suites = matrix["suites"]
    width = max([len(f["id"]) for f in matrix["faults"]] + [14])
    lines = [
        f"target: {matrix['target']} ({matrix.get('mode', 'full')})",
        f"{'':{width}}  " + "  ".join(f"{s:>20}" for s in suites),
    ]
    lines.append(f"{'(clean build)':{width}}  " + "  ".join(f"{matrix['clean'][s]['status']:>20}" for s in suites))
    for fault in matrix["faults"]:
        lines.append(f"{fault['id']:{width}}  " + "  ".join(f"{_cell(fault['suites'][s]):>20}" for s in suites))
    lines.append("")
    for fault in matrix["faults"]:
        kills = [s for s in fault["suites"].values() if s["status"] == "killed"]
        best = next((k for k in kills if k["kill_class"] == "behavioural"), kills[0] if kills else None)
        outcome = fault_verdict(fault)
        ran = f" ({fault['tests_run']} of {fault['tests_reaching']} reaching tests run)" if "tests_run" in fault else ""
        lines.append(
            f"{fault['id']} [{fault['seed']}]: "
            + (
                f"{best['kill_class']}: {best['first_failure']}{ran}"
                if best
                else f"UNREACHED: no test runs {', '.join(fault.get('code', []))}"
                if outcome == "unreached"
                else f"NO VERDICT (a suite errored): {_errored(fault)}{ran}"
                if outcome == "error"
                else f"NOT KILLED{ran}"
            )
        )
    lines.append("\nclean build: " + ", ".join(f"{s} {r['tests']} tests" for s, r in matrix["clean"].items()))
    for settings, suites_ in matrix.get("clean_under_settings", {}).items():
        lines.append(f"clean build under {settings}: " + ", ".join(f"{s} {r['status']}" for s, r in suites_.items()))
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
    parser.add_argument("--mode", choices=["impact", "full"], default="impact", help="see the module docstring")
    parser.add_argument(
        "--previous", default=None, help="an earlier matrix whose killers run first (default: the one at --out)"
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar="JSON",
        default=None,
        help="compare two matrices' verdicts fault by fault and exit",
    )
    args = parser.parse_args(argv)
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        differences = compare(a, b)
        for fault in a["faults"]:
            print(f"{fault['id']:44} {fault_verdict(fault)}")
        print(f"{len(a['faults']) - len(differences)} of {len(a['faults'])} faults: the same verdict in both")
        for line in differences:
            print(f"DIFFERS: {line}")
        return 1 if differences else 0
    target = MATRIX_TARGETS[args.target]
    catalog = target.catalog()
    if args.list:
        for fault in catalog.values():
            print(f"{fault['id']:42} {fault['seed']:30} {fault['breaks']}")
        return 0
    if target.needs and (reason := unimportable(target.needs)):
        print(f"{NO_VERDICT}faults --target {target.name}: {reason}", file=sys.stderr)
        return 2
    unknown = [f for f in args.only or [] if f not in catalog]
    if unknown:
        parser.error(f"unknown fault ids {unknown}; known for target {target.name}: {', '.join(catalog)}")
    out = Path(args.out) if args.out else target.out
    previous_path = Path(args.previous) if args.previous else out
    previous = json.loads(previous_path.read_text()) if previous_path.exists() else None
    fault_ids = args.only if args.only is not None else list(catalog)
    matrix = build_matrix(target, fault_ids, jobs=args.jobs, mode=args.mode, previous=previous)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(matrix, indent=2))
    print(format_matrix(matrix))
    ok, problems = verdict(matrix)
    print(f"\nkill matrix written to {out}")
    for problem in problems:
        print(problem if problem.startswith(NO_VERDICT) else f"FAIL: {problem}")
    return exit_code(ok, problems)


if __name__ == "__main__":
    raise SystemExit(main())
