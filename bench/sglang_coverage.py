"""Line and branch coverage of SGLang's SWA memory code under the suites that target it (issue 28's measure-first step).

    python -m bench.sglang_coverage                 # in the venv of `nox -s sglang` (coverage is a test extra)

Runs the pool, scenario, differential and registry suites against the installed SGLang (``--target sglang``, at
``SGLANG_INVARIANT_CHECK=0``, in one process: coverage of an xdist run needs a plugin) with coverage limited to
the files below, then writes the per-file table into docs/BENCHMARKS.md. What a suite never drives shows up here
as a low number and as the missing line ranges the JSON keeps (``reports/sglang-coverage.json``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import markdown_table, write_section

FILES = ("mem_cache/swa_memory_pool.py", "mem_cache/allocator/swa.py", "mem_cache/kv_loc_plan.py",
         "mem_cache/kv_index_translator.py", "model_executor/cuda_graph_buffer_registry.py")
SUITES = ("suites/pool", "suites/scenarios", "suites/differential", "suites/sglang")
REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "reports" / "sglang-coverage.json"


def srt_dir() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("sglang is not installed here: run this in the venv of `nox -s sglang`")
    return Path(next(iter(spec.submodule_search_locations))) / "srt"


def measure(srt: Path, data: Path) -> float:
    """Run the suites under coverage; their wall time. A failing suite is an error here, not a number."""
    include = ",".join(str(srt / f) for f in FILES)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "coverage", "run", "--branch", f"--include={include}", "-m", "pytest",
                           "-q", "-p", "no:cacheprovider", *SUITES, "--target", "sglang"],
                          env={**os.environ, "SGLANG_INVARIANT_CHECK": "0", "COVERAGE_FILE": str(data)}, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"the suites failed (exit {done.returncode}): no coverage is reported for a red run")
    return time.perf_counter() - start


def rows(srt: Path, data: Path) -> list[dict]:
    report = data.parent / "sglang-coverage-raw.json"  # not ".<data>.json": coverage would read that as data
    subprocess.run([sys.executable, "-m", "coverage", "json", "-o", str(report), "-q"],
                   env={**os.environ, "COVERAGE_FILE": str(data)}, check=True)
    files = json.loads(report.read_text())["files"]
    out = []
    for name in FILES:
        entry = next((v for k, v in files.items() if k.endswith(f"sglang/srt/{name}")), None)  # keys may be relative
        if entry is None:
            out.append({"file": name, "statements": None})
            continue
        s = entry["summary"]
        out.append({"file": name, "statements": s["num_statements"], "lines_run": s["covered_lines"],
                    "branches": s["num_branches"], "branches_taken": s["covered_branches"],
                    "missing_lines": entry["missing_lines"]})
    return out


def main() -> None:
    import sglang

    srt = srt_dir()
    data = REPO / "reports" / ".sglang-coverage"
    data.parent.mkdir(parents=True, exist_ok=True)
    wall = measure(srt, data)
    table = rows(srt, data)
    OUT.write_text(json.dumps({"sglang": sglang.__version__, "suites": SUITES, "files": table}, indent=1) + "\n")

    def pct(a: int, b: int) -> str:
        return f"{100 * a / b:.1f} % ({a}/{b})" if b else "—"

    body = markdown_table(("file (sglang/srt/)", "lines run", "branches taken"),
                          [(f"`{r['file']}`", pct(r["lines_run"], r["statements"]), pct(r["branches_taken"], r["branches"]))
                           if r["statements"] else (f"`{r['file']}`", "not imported", "—") for r in table])
    write_section("sglang-coverage", f"SGLang {sglang.__version__}'s SWA memory code under the suites (coverage)",
                  "python -m bench.sglang_coverage",
                  f"Suites {', '.join(SUITES)} with `--target sglang`, `SGLANG_INVARIANT_CHECK=0`, one process, "
                  f"{wall:.0f} s under coverage. Missing line ranges per file: `reports/sglang-coverage.json`.\n\n{body}")
    print(body)


if __name__ == "__main__":
    main()
