"""Which SGLang code a real server ran: coverage in every one of its processes, summed per file.

    SWA_HARNESS_SGLANG_TRACE=/tmp/trace swa-harness eval --engine sglang ...   # or any patched_server launch
    python -m harness.servers.sglang_server.trace /tmp/trace [--json out.json]

A claim such as "the hybrid SWA pool and the CPU graph runner served these answers" should rest on what ran,
not on which flags were passed. ``patched_server`` calls ``start_if_asked`` in the launcher and in every process
SGLang spawns (scheduler, detokenizer); each writes its own data file into the folder. SGLang ends its children
with SIGKILL, so nothing runs at their exit: data is saved every ``SAVE_EVERY_S`` seconds instead (the last
seconds of a process may be missing; never its start-up or a run's requests, which end before the server is
stopped). Tracing slows the server (a C tracer on every line of SGLang's Python): use it for a measurement run,
not for timings.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

TRACE_ENV = "SWA_HARNESS_SGLANG_TRACE"
SAVE_EVERY_S = 5.0
INCLUDE = ("*/sglang/*",)
OMIT = ("*/harness/*",)  # this package's own harness/servers/sglang_server/ is not SGLang


def start_if_asked() -> bool:
    """Trace this process when ``SWA_HARNESS_SGLANG_TRACE`` names a folder; whether it does."""
    folder = os.environ.get(TRACE_ENV)
    if not folder:
        return False
    import coverage  # only here: a traced run needs it (nox -s sglang_server installs it), others do not

    Path(folder).mkdir(parents=True, exist_ok=True)
    cov = coverage.Coverage(
        data_file=str(Path(folder) / ".coverage"),
        data_suffix=True,
        include=list(INCLUDE),
        omit=list(OMIT),
        branch=True,  # arcs, as bench/sglang_coverage.py's in-process run records: coverage combines only like data
        config_file=False,
    )
    cov.start()

    def save() -> None:
        while True:
            time.sleep(SAVE_EVERY_S)
            try:
                cov.save()
            except Exception as exc:  # one failed save must not end the tracing of a server's whole life
                print(f"sglang-trace: a periodic save failed, retried in {SAVE_EVERY_S} s: {exc}", file=sys.stderr)

    threading.Thread(target=save, name="sglang-trace", daemon=True).start()
    return True


@dataclass(frozen=True)
class FileRun:
    path: str  # relative to the sglang package, e.g. srt/mem_cache/swa_memory_pool.py
    lines: int  # distinct lines executed, in any process
    in_functions: int = 0  # of those, lines inside a function body: code that ran, not only the module's import


def function_lines(source: str) -> set[int]:
    """The line numbers inside function bodies (importing a module runs its ``def`` lines, never these)."""
    import ast

    inside: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            body = node.body if isinstance(node.body, list) else [node.body]
            inside.update(range(body[0].lineno, (node.end_lineno or body[-1].lineno) + 1))
    return inside


def lines_run(folder: str | os.PathLike) -> dict[str, set[int]]:
    """The lines each SGLang file ran, over all processes' data in ``folder``, by path inside the ``sglang`` package
    (``srt/mem_cache/swa_memory_pool.py``)."""
    from coverage import CoverageData

    merged: dict[str, set[int]] = {}
    with tempfile.TemporaryDirectory() as snapshots:
        for data_file in sorted(Path(folder).glob(".coverage.*")):
            # Read a copy: coverage gives a data file it finds without its tables a schema of its own, so a read of
            # a file its traced process is still creating wrote into it, and that process's save then failed.
            copy = Path(snapshots) / data_file.name
            shutil.copyfile(data_file, copy)
            data = CoverageData(basename=str(copy))
            data.read()
            for name in data.measured_files():
                merged.setdefault(name, set()).update(data.lines(name) or ())
    return {name: lines for name, lines in merged.items() if lines and "/sglang/" in name and "/harness/" not in name}


def executed(folder: str | os.PathLike) -> list[FileRun]:
    """Every SGLang file with at least one line run, over all processes' data in ``folder``, by path."""
    runs = []
    for name, lines in lines_run(folder).items():
        try:
            body = function_lines(Path(name).read_text())
        except (OSError, SyntaxError, ValueError):
            body = set()
        runs.append(FileRun(name.rsplit("/sglang/", 1)[1], len(lines), len(lines & body)))
    return sorted(runs, key=lambda r: r.path)


def by_folder(runs: list[FileRun]) -> dict[str, list[FileRun]]:
    """Files grouped by their folder (``srt/mem_cache``), for a table a reader can scan."""
    groups: dict[str, list[FileRun]] = {}
    for run in runs:
        groups.setdefault(run.path.rsplit("/", 1)[0] if "/" in run.path else ".", []).append(run)
    return groups


def markdown(runs: list[FileRun]) -> str:
    """Files whose functions ran, by folder, with the lines run inside functions; import-only files counted."""
    ran = [r for r in runs if r.in_functions]
    lines = [
        f"{len(ran)} SGLang files had code run inside functions ({sum(r.in_functions for r in ran)} lines); "
        f"{len(runs) - len(ran)} more were only imported.",
        "",
        "| folder | files (lines run inside functions) |",
        "|---|---|",
    ]
    for folder, group in sorted(by_folder(ran).items()):
        files = ", ".join(f"`{r.path.rsplit('/', 1)[-1]}` ({r.in_functions})" for r in group)
        lines.append(f"| `{folder}` | {files} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.servers.sglang_server.trace",
        description="which SGLang files a traced server ran (SWA_HARNESS_SGLANG_TRACE)",
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", type=Path, default=None, help="also write the list as JSON here")
    args = parser.parse_args(argv)
    if not any(args.folder.glob(".coverage.*")):
        print(f"trace: no coverage data in {args.folder} (was {TRACE_ENV} set for the server?)", file=sys.stderr)
        return 2
    runs = executed(args.folder)
    print(markdown(runs), end="")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in runs], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
