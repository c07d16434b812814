"""Line and branch coverage of SGLang's SWA memory code under the suites that target it (issue 28's measure-first step).

    python -m bench.sglang_coverage                 # in the venv of `nox -s sglang` (coverage is a test extra)

Runs the pool, scenario, differential and SGLang suites against the installed SGLang (``--target sglang``, in the
strict configuration of ``nox -s sglang``'s second pass: ``SGLANG_INVARIANT_CHECK=2`` and SGLang's memory-pool debug
checks; one process: coverage of an xdist run needs a plugin) with coverage limited to
the files below, then writes the per-file table into docs/BENCHMARKS.md, beside the baseline measured before
issue 28's suites (docs/sglang-coverage-before.json). What a suite never drives shows up as a low number, as the
missing line ranges the JSON keeps (``reports/sglang-coverage.json``) and as the public functions no suite calls
(whose first statement never ran).

The prefix cache (issue 38): SGLang's ``UnifiedRadixCache``, its SWA component, the Python tree core and the SWA
functions of ``common.py`` (only those are counted there: the rest of that file is other caches' code). The suites run
SGLang's default Rust tree core; ``suites/prefix`` then runs again on the Python one
(``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python``), appending to the same data, as ``nox -s sglang`` runs them.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import markdown_table, write_section

FILES = (
    "mem_cache/swa_memory_pool.py",
    "mem_cache/allocator/swa.py",
    "mem_cache/kv_loc_plan.py",
    "mem_cache/kv_index_translator.py",
    "model_executor/cuda_graph_buffer_registry.py",
    "mem_cache/unified_radix_cache.py",
    "mem_cache/unified_cache/components/swa.py",
    "mem_cache/unified_cache/unified_tree_core.py",
    "mem_cache/common.py",
)
# Files of which only some functions are SWA memory code: only their lines and branches count.
FUNCTIONS = {"mem_cache/common.py": ("free_swa_out_of_window_slots", "free_kv_row_segments")}
SUITES = ("suites/pool", "suites/scenarios", "suites/differential", "suites/sglang", "suites/prefix")
PYTHON_CORE_SUITES = ("suites/prefix",)  # again on SGLang's Python tree core (the first run takes its default, Rust)
TREE_CORE_ENV = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"
REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "reports" / "sglang-coverage.json"
BEFORE = REPO / "docs" / "sglang-coverage-before.json"
STRICT = {"SGLANG_INVARIANT_CHECK": "2", "SGLANG_DEBUG_MEMORY_POOL": "1"}  # nox -s sglang's second pass


def srt_dir() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("sglang is not installed here: run this in the venv of `nox -s sglang`")
    return Path(next(iter(spec.submodule_search_locations))) / "srt"


def measure(srt: Path, data: Path) -> float:
    """Run the suites under coverage (Rust tree core), then the prefix suite on the Python one; their wall time.
    A failing suite is an error here, not a number."""
    include = ",".join(str(srt / f) for f in FILES)
    start = time.perf_counter()
    for append, core, suites in (([], "rust", SUITES), (["--append"], "python", PYTHON_CORE_SUITES)):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "coverage",
                "run",
                *append,
                "--branch",
                f"--include={include}",
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                *suites,
                "--target",
                "sglang",
            ],
            env={**os.environ, **STRICT, TREE_CORE_ENV: core, "COVERAGE_FILE": str(data)},
            cwd=REPO,
        )
        if done.returncode != 0:
            raise SystemExit(f"the suites failed (exit {done.returncode}): no coverage is reported for a red run")
    return time.perf_counter() - start


def rows(srt: Path, data: Path) -> list[dict]:
    report = data.parent / "sglang-coverage-raw.json"  # not ".<data>.json": coverage would read that as data
    subprocess.run(
        [sys.executable, "-m", "coverage", "json", "-o", str(report), "-q"],
        env={**os.environ, "COVERAGE_FILE": str(data)},
        check=True,
    )
    files = json.loads(report.read_text())["files"]
    out = []
    for name in FILES:
        entry = next((v for k, v in files.items() if k.endswith(f"sglang/srt/{name}")), None)  # keys may be relative
        if entry is None:
            out.append({"file": name, "statements": None})
            continue
        spans = function_spans(srt / name, FUNCTIONS.get(name))
        inside = (lambda line: any(lo <= line <= hi for lo, hi in spans)) if spans else (lambda line: True)
        run = [n for n in entry["executed_lines"] if inside(n)]
        missing = [n for n in entry["missing_lines"] if inside(n)]
        taken = [b for b in entry.get("executed_branches", []) if inside(b[0])]
        not_taken = [b for b in entry.get("missing_branches", []) if inside(b[0])]
        called, never = public_functions(srt / name, set(run), FUNCTIONS.get(name))
        out.append(
            {
                "file": name,
                "functions": list(FUNCTIONS.get(name, ())),
                "statements": len(run) + len(missing),
                "lines_run": len(run),
                "branches": len(taken) + len(not_taken),
                "branches_taken": len(taken),
                "public_called": called,
                "public_never_called": never,
                "missing_lines": missing,
            }
        )
    return out


def function_spans(path: Path, names: tuple[str, ...] | None) -> list[tuple[int, int]]:
    """The first and last line of each top-level function ``names`` of ``path`` (none: the whole file counts)."""
    if not names:
        return []
    tree = ast.parse(path.read_text())
    spans = [(f.lineno, f.end_lineno) for f in tree.body if isinstance(f, ast.FunctionDef) and f.name in names]
    if len(spans) != len(names):
        raise SystemExit(f"{path.name} no longer defines all of {', '.join(names)}")
    return spans


def public_functions(path: Path, executed: set[int], only: tuple[str, ...] | None = None) -> tuple[int, list[str]]:
    """How many public functions and methods of ``path`` (of ``only``, where given) ran (their first statement
    executed), and the names of those that never did."""
    called, never = 0, []

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{owner}{child.name}.")
            elif (
                isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                and not child.name.startswith("_")
                and (only is None or child.name in only)
            ):
                body = child.body[1:] if ast.get_docstring(child) and len(child.body) > 1 else child.body
                nonlocal called
                if body[0].lineno in executed:
                    called += 1
                else:
                    never.append(f"{owner}{child.name}")

    visit(ast.parse(path.read_text()), "")
    return called, never


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

    baseline = json.loads(BEFORE.read_text()) if BEFORE.is_file() else {"files": [], "measured_at": "—"}
    before = {r["file"]: r for r in baseline["files"]}

    def label(r: dict) -> str:
        return f"`{r['file']}`" + (f" ({', '.join(f'`{n}`' for n in r['functions'])})" if r.get("functions") else "")

    body = markdown_table(
        (
            "file (sglang/srt/)",
            "lines run (before)",
            "lines run",
            "branches taken (before)",
            "branches taken",
            "public functions called",
        ),
        [
            (
                label(r),
                pct(before[r["file"]]["lines_run"], before[r["file"]]["statements"]) if r["file"] in before else "—",
                pct(r["lines_run"], r["statements"]),
                pct(before[r["file"]]["branches_taken"], before[r["file"]]["branches"]) if r["file"] in before else "—",
                pct(r["branches_taken"], r["branches"]),
                pct(r["public_called"], r["public_called"] + len(r["public_never_called"])),
            )
            if r["statements"]
            else (label(r), "—", "not imported", "—", "—", "—")
            for r in table
        ],
    )
    never = "\n".join(
        f"- `{r['file']}`: {', '.join(f'`{n}`' for n in r['public_never_called']) or 'none'}"
        for r in table
        if r["statements"]
    )
    write_section(
        "sglang-coverage",
        f"SGLang {sglang.__version__}'s SWA memory code under the suites (coverage)",
        "python -m bench.sglang_coverage",
        f"Suites {', '.join(SUITES)} with `--target sglang`, `SGLANG_INVARIANT_CHECK=2 SGLANG_DEBUG_MEMORY_POOL=1` "
        f"(the before column of the first five files: `SGLANG_INVARIANT_CHECK=0`) on SGLang's default tree core (Rust), then "
        f"{', '.join(PYTHON_CORE_SUITES)} on the Python one (`{TREE_CORE_ENV}=python`), one process each, "
        f'{wall:.0f} s under coverage. "Before": {baseline["measured_at"]}; for the prefix cache\'s files '
        f"(issue 38): {baseline.get('prefix_cache_measured_at', '—')}. "
        f"Missing line ranges per file: `reports/sglang-coverage.json`; why each range is left (accelerator, another memory class, no caller): "
        f"docs/SGLANG_MEMORY_COVERAGE.md.\n\n{body}\n\nPublic functions no suite calls:\n\n{never}",
    )
    print(body)
    print(never)


if __name__ == "__main__":
    main()
