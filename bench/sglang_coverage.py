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

Inside the server too (issue 53): the SGLang server suite's radix-cache tests (``SERVER_TESTS``) then run in the venv
of ``nox -s sglang_server`` with ``SWA_HARNESS_SGLANG_TRACE`` set, so every process of each server they start writes
its own coverage data (``harness/servers/sglang_server/trace.py``); coverage's own ``combine`` joins it with the
suites' data per file (``[paths]`` maps the server venv's SGLang onto this one's: the same release). For the unified
cache's four files (``bench/sglang_scope.py``) the second table counts only the lines a CPU server without HiCache,
sessions or PD can run; a line excluded there that a server ran fails the run. ``--no-server`` skips the servers
(the suites' numbers only).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import sglang_scope
from bench.common import markdown_table, write_section
from bench.coverage_common import lines_ran, pct, uncovered_ranges

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
SCOPE_BEFORE = REPO / "docs" / "sglang-scope-before.json"  # the four files' lines run before issue 53's work
SERVER_PYTHON = REPO / ".nox" / "sglang_server" / "bin" / "python"
SERVER_SUITE = "suites/servers/test_sglang_server.py"
# The server suite's radix-cache tests (every parametrization): the cache-hit protocol on a roomy pool and on tight
# ones (Rust core, Python core, page 16), finding #10's sharer, and the eager out-of-window free switched off.
SERVER_TESTS = tuple(
    f"{SERVER_SUITE}::{name}"
    for name in (
        "test_a_warm_radix_cache_answers_as_a_fresh_one_and_transformers",
        "test_a_prompt_sharing_part_of_a_finished_prompt_is_served_from_the_cache",
        "test_keeping_the_prompts_swa_kv_lets_the_first_sharer_hit",
    )
)


def srt_dir() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("sglang is not installed here: run this in the venv of `nox -s sglang`")
    return Path(next(iter(spec.submodule_search_locations))) / "srt"


def include_of(srt: Path) -> str:
    """coverage's ``--include`` for the measured files."""
    return ",".join(str(srt / f) for f in FILES)


def measure(srt: Path, data: Path) -> float:
    """Run the suites under coverage (Rust tree core), then the prefix suite on the Python one; their wall time.
    A failing suite is an error here, not a number."""
    include = include_of(srt)
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


def measure_servers(folder: Path) -> float:
    """The server suite's radix-cache tests with every server process traced into ``folder``; their wall time. A
    failing test is an error here, as in ``measure``."""
    if not SERVER_PYTHON.is_file():
        raise SystemExit(f"no {SERVER_PYTHON}: build it with `nox -s sglang_server` (or pass --no-server)")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    start = time.perf_counter()
    done = subprocess.run(
        [str(SERVER_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rxX", *SERVER_TESTS],
        env={**os.environ, "SWA_HARNESS_SGLANG_SERVER": "require", "SWA_HARNESS_SGLANG_TRACE": str(folder)},
        cwd=REPO,
    )
    if done.returncode != 0:
        raise SystemExit(f"the server suite failed (exit {done.returncode}): no coverage is reported for a red run")
    return time.perf_counter() - start


def combine(srt: Path, suites: Path, server: Path | None, out: Path) -> None:
    """The suites' data and every traced server process's, joined per file by ``coverage combine`` into ``out``;
    ``[paths]`` maps any venv's ``site-packages/sglang`` onto this one's."""
    work = out.parent / ".sglang-coverage-combine"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    parts = [suites, *(sorted(server.glob(".coverage.*")) if server else ())]
    for i, part in enumerate(parts):
        shutil.copy(part, work / f"{out.name}.part{i}")  # combine reads a folder's <data file>.* files
    rc = work / "coveragerc"
    rc.write_text(f"[paths]\nsglang =\n    {srt.parent}/\n    */site-packages/sglang/\n")
    out.unlink(missing_ok=True)
    subprocess.run(
        [sys.executable, "-m", "coverage", "combine", f"--rcfile={rc}", "-q", str(work)],
        env={**os.environ, "COVERAGE_FILE": str(out)},
        cwd=work,
        check=True,
    )
    shutil.rmtree(work)


def server_lines(folder: Path) -> dict[str, set[int]]:
    """The lines of each scope file that any traced server process ran."""
    return lines_ran(folder.glob(".coverage.*"), "sglang/srt", sglang_scope.SCOPE_FILES)


def scope_rows(srt: Path, table: list[dict], server: dict[str, set[int]] | None) -> list[dict]:
    """Per scope file: the statements a CPU server without HiCache, sessions or PD can run (those
    ``bench/sglang_scope.py`` does not exclude), those of them that ran (suites or servers) and those a server ran;
    the lines in scope that nothing ran, as ranges by function. A line excluded there that a server ran is an error:
    the classification is wrong."""
    out = []
    for name in sglang_scope.SCOPE_FILES:
        entry = next(r for r in table if r["file"] == name)
        excluded = sglang_scope.excluded_lines(srt, name)
        executed, missing = set(entry["executed_lines"]), set(entry["missing_lines"])
        statements = executed | missing
        contradicted = sorted(n for n in (server or {}).get(name, ()) if n in excluded)
        if contradicted:
            raise SystemExit(
                f"{name}: a server ran lines bench/sglang_scope.py excludes: "
                + ", ".join(f"{n} ({excluded[n].where}: {excluded[n].kind})" for n in contradicted)
            )
        in_scope = {n for n in statements if n not in excluded}
        by_kind: dict[str, int] = {}
        for n in statements - in_scope:
            by_kind[excluded[n].kind] = by_kind.get(excluded[n].kind, 0) + 1
        out.append(
            {
                "file": name,
                "statements": len(statements),
                "in_scope": len(in_scope),
                "run": len(in_scope & executed),
                "server_run": len(in_scope & server[name]) if server else None,
                "excluded": dict(sorted(by_kind.items())),
                "excluded_but_run_by_the_suites": sorted((statements - in_scope) & executed),
                "uncovered": uncovered_ranges(srt / name, sorted(in_scope - executed)),
            }
        )
    return out


def rows(srt: Path, data: Path) -> list[dict]:
    report = data.parent / "sglang-coverage-raw.json"  # not ".<data>.json": coverage would read that as data
    subprocess.run(
        [sys.executable, "-m", "coverage", "json", "-o", str(report), "-q", f"--include={include_of(srt)}"],
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
                "executed_lines": run,
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


def main(argv: list[str] | None = None) -> None:
    import sglang

    parser = argparse.ArgumentParser(prog="python -m bench.sglang_coverage", description=__doc__.split("\n")[0])
    parser.add_argument("--no-server", action="store_true", help="the suites only: no traced server run")
    args = parser.parse_args(argv)
    if sglang.__version__ != sglang_scope.SGLANG:
        raise SystemExit(
            f"bench/sglang_scope.py classes SGLang {sglang_scope.SGLANG}'s lines; this is {sglang.__version__}"
        )
    srt = srt_dir()
    suites = REPO / "reports" / ".sglang-coverage-suites"
    suites.parent.mkdir(parents=True, exist_ok=True)
    wall = measure(srt, suites)
    trace = None if args.no_server else REPO / "reports" / ".sglang-coverage-servers"
    server_wall = measure_servers(trace) if trace else 0.0
    data = REPO / "reports" / ".sglang-coverage"
    combine(srt, suites, trace, data)
    table = rows(srt, data)
    scope = scope_rows(srt, table, server_lines(trace) if trace else None)
    OUT.write_text(
        json.dumps(
            {
                "sglang": sglang.__version__,
                "suites": SUITES,
                "server_tests": [] if args.no_server else SERVER_TESTS,
                "files": table,
                "scope": scope,
            },
            indent=1,
        )
        + "\n"
    )

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
    scope_before = json.loads(SCOPE_BEFORE.read_text()) if SCOPE_BEFORE.is_file() else {"files": {}, "measured_at": "—"}

    def run_before(r: dict) -> str:
        executed = scope_before["files"].get(r["file"])
        if executed is None:
            return "—"
        excluded = sglang_scope.excluded_lines(srt, r["file"])
        return pct(sum(1 for n in executed if n not in excluded), r["in_scope"])

    def all_lines(r: dict) -> str:
        """Every statement of the file, as the first table counts it: before (the suites alone) and after."""
        executed = scope_before["files"].get(r["file"])
        after = next(t for t in table if t["file"] == r["file"])["lines_run"]
        return ("—" if executed is None else pct(len(executed), r["statements"])) + " → " + pct(after, r["statements"])

    scope_body = markdown_table(
        (
            "file (sglang/srt/)",
            "lines in scope (of all)",
            "lines run, before",
            "lines run, after",
            "of them run inside a server",
            "lines excluded, by kind",
            "all lines run, before → after",
        ),
        [
            (
                f"`{r['file']}`",
                f"{r['in_scope']} ({r['statements']})",
                run_before(r),
                pct(r["run"], r["in_scope"]),
                "—" if r["server_run"] is None else pct(r["server_run"], r["in_scope"]),
                ", ".join(f"{kind} {n}" for kind, n in r["excluded"].items()),
                all_lines(r),
            )
            for r in scope
        ],
    )
    names = ", ".join(f"`{test.split('::')[1]}`" for test in SERVER_TESTS)
    servers = (
        "no server (`--no-server`)"
        if args.no_server
        else f"then the server suite's radix-cache tests ({names}, "
        f"every parametrization) in `nox -s sglang_server`'s venv with every server process traced, {server_wall:.0f} s"
    )
    write_section(
        "sglang-coverage",
        f"SGLang {sglang.__version__}'s SWA memory code under the suites and inside its servers (coverage)",
        "python -m bench.sglang_coverage",
        f"Suites {', '.join(SUITES)} with `--target sglang`, `SGLANG_INVARIANT_CHECK=2 SGLANG_DEBUG_MEMORY_POOL=1` "
        f"(the before column of the first five files: `SGLANG_INVARIANT_CHECK=0`) on SGLang's default tree core (Rust), then "
        f"{', '.join(PYTHON_CORE_SUITES)} on the Python one (`{TREE_CORE_ENV}=python`), one process each, "
        f"{wall:.0f} s under coverage; {servers}; the data joined per file by `coverage combine`. "
        f'"Before": {baseline["measured_at"]}; for the prefix cache\'s files '
        f"(issue 38): {baseline.get('prefix_cache_measured_at', '—')}. "
        f"Missing line ranges per file: `reports/sglang-coverage.json`; why each range is left (accelerator, another memory class, no caller): "
        f"docs/SGLANG_MEMORY_COVERAGE.md.\n\n{body}\n\n"
        f"The unified cache (issue 53): of each file, the lines a CPU server serving a hybrid sliding-window model can "
        f"run without HiCache, sessions or PD (every other range is classed in `bench/sglang_scope.py`, by kind; "
        f"the lines in scope nothing ran, and why, in docs/SGLANG_MEMORY_COVERAGE.md). Before: "
        f"{scope_before['measured_at']}.\n\n{scope_body}\n\nPublic functions no suite calls:\n\n{never}",
    )
    print(body)
    print(scope_body)
    for r in scope:
        print(f"{r['file']}: in scope, not run:", *r["uncovered"], sep="\n  ")


if __name__ == "__main__":
    main()
