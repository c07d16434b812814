"""What SGLang's and vLLM's release matrices share: cells from a pytest run, a release's row, the table and the notes
that explain every cell that is not a plain pass, the JSON, a section of ``docs/COMPATIBILITY.md``, and bisect.

A cell is one suite on one release: **passed** (no test failed; skips named), **failed** (the failing tests and the
first line of each), **not applicable** (every test skipped because the release lacks what the suite drives, or runs
it only on an accelerator), or **error** (the release could not be installed, or its tests not run). A skip is never a
pass: a passed cell counts only tests that ran. A test may also record, as a junit property ``narrowed``, what of its
drawn space the release could not take (a feature it lacks): the table marks the cell and the notes name it.

Each engine is a :class:`MatrixSpec` (its suites, releases, overlays and pytest command) in its own module
(``harness/jobs/sglang_matrix.py``, ``harness/jobs/vllm_matrix.py``); adding a suite is one line of its ``SUITES``.

Each release is a cell of the progress (``harness/cell_progress.py``: a line as it lands, the ETA of the rest).
``--shard K/N`` runs only the releases of that shard (``harness/shards.py``) and writes its JSON alone, no markdown;
``swa-harness merge`` joins the shards' JSONs into the one a whole run writes (then ``--render`` writes the section).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from packaging.version import Version

from harness import findings
from harness.cell_progress import CellProgress
from harness.paths import REPO, shown
from harness.reuse import code_fingerprint
from harness.shards import WHOLE, Shard
from harness.targets.releases import Release, TargetEngine, release_order
from harness.targets.probe import NARROWED, UNREACHABLE

Status = Literal["passed", "failed", "not applicable"]
Suites = Mapping[str, tuple[str, ...]]


@dataclass
class Cell:
    status: Status
    passed: int = 0
    failed: list[str] = field(default_factory=list)  # "test id: first line of the failure"
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> tests
    xfailed: int = 0
    narrowed: dict[str, int] = field(default_factory=dict)  # what the release could not take -> tests

    @property
    def unreachable(self) -> int:
        return sum(n for reason, n in self.skipped.items() if UNREACHABLE in reason)


@dataclass
class ReleaseRun:
    release: str
    install_s: float
    run_s: float
    cells: dict[str, Cell]
    error: str = ""
    findings: dict[str, findings.FindingOutcome] = field(
        default_factory=dict
    )  # finding number -> outcome (findings suite)


Runner = Callable[[Release, Suites], ReleaseRun]


def suite_of(path: str, suites: Suites) -> str | None:
    for name, roots in suites.items():
        if any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots):
            return name
    return None


def _first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    return (errors[0][1:].strip() if errors else lines[0] if lines else "")[:240]


def cells_from_junit(xml: Path, suites: Suites) -> dict[str, Cell]:
    """One cell per suite from pytest's junit XML (a test's file decides its suite)."""
    tallies: dict[str, dict] = {
        name: {"passed": 0, "failed": [], "skipped": Counter(), "xfailed": 0, "narrowed": Counter()} for name in suites
    }
    for case in ET.parse(xml).iter("testcase"):
        path = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        name = suite_of(path, suites)
        if name is None:
            continue
        tally = tallies[name]
        test = f"{path}::{case.get('name')}"
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped")
        for prop in case.iter("property"):
            if prop.get("name") == NARROWED:
                tally["narrowed"][prop.get("value", "")] += 1
        if problem is not None:
            tally["failed"].append(f"{test}: {_first_line(problem.get('message') or problem.text)}")
        elif skipped is not None and skipped.get("type") == "pytest.xfail":
            tally["xfailed"] += 1
        elif skipped is not None:
            reason = (skipped.get("message") or "").removeprefix("Skipped: ")
            tally["skipped"][reason] += 1
        else:
            tally["passed"] += 1
    cells = {}
    for name, t in tallies.items():
        if not (t["passed"] or t["failed"] or t["skipped"] or t["xfailed"]):
            t["failed"].append(f"{', '.join(suites[name])}: no test collected")  # exit code 5 is never a pass
        status = "failed" if t["failed"] else "passed" if t["passed"] or t["xfailed"] else "not applicable"
        cells[name] = Cell(
            status=status,
            passed=t["passed"],
            failed=t["failed"],
            skipped=dict(t["skipped"]),
            xfailed=t["xfailed"],
            narrowed=dict(t["narrowed"]),
        )
    return cells


def run_suites(
    python: Path,
    engine: TargetEngine,
    suites: Suites,
    *,
    pytest_args: tuple[str, ...],
    env: Mapping[str, str],
    workers: str,
) -> tuple[dict[str, Cell], dict[str, findings.FindingOutcome], str]:
    """The suites under ``python`` (an overlay venv's): one cell per suite and, where the ``findings`` suite ran, each
    finding's outcome (``harness/findings.py``); or the error that left no report."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        paths = [p for roots in suites.values() for p in roots]
        result = subprocess.run(
            [
                str(python),
                "-m",
                "pytest",
                "-n",
                workers,
                "-q",
                "-p",
                "no:cacheprovider",
                *paths,
                *pytest_args,
                f"--junitxml={xml}",
                "-o",
                "junit_family=xunit1",
            ],
            cwd=REPO,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
        )
        if not xml.exists():
            tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
            return {}, {}, f"pytest wrote no report (exit {result.returncode}): {' | '.join(tail)}"
        found = findings.outcomes_from_junit(xml, engine) if "findings" in suites else {}
        return cells_from_junit(xml, suites), found, ""


@dataclass(frozen=True)
class MatrixSpec:
    """One engine's release matrix: what it runs, on which releases, and how its report reads."""

    engine: Literal["sglang", "vllm"]  # the command's name and the COMPATIBILITY.md section
    suites: dict[str, tuple[str, ...]]
    default_range: tuple[str, str]
    out: Path
    markdown: Path
    published: Callable[[str, str], list[str]]
    overlay: Callable[[Release], Path]
    pytest_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    # Cells that must fail, (release, suite) -> why: a known bug shipped in that release. A pass there fails the run,
    # as a strict xfail. None: the cell should pass.
    expected_red: Callable[[str, str], str | None] = field(default=lambda release, suite: None)
    workers: str = "auto"

    @property
    def prog(self) -> str:
        return f"swa-harness {self.engine}-matrix"


def run_release(spec: MatrixSpec, release: Release, suites: Suites) -> ReleaseRun:
    started = time.monotonic()
    try:
        python = spec.overlay(release)
    except Exception as error:  # noqa: BLE001 - an install that fails is a row of its own, never the end of the run
        return ReleaseRun(
            release=release.label,
            install_s=round(time.monotonic() - started, 1),
            run_s=0.0,
            cells={},
            error=f"install failed: {error}",
        )
    installed = time.monotonic()
    cells, found, error = run_suites(
        python, spec.engine, suites, pytest_args=spec.pytest_args, env=spec.env, workers=spec.workers
    )
    return ReleaseRun(
        release=release.label,
        install_s=round(installed - started, 1),
        run_s=round(time.monotonic() - installed, 1),
        cells=cells,
        error=error,
        findings=found,
    )


def cell_text(cell: dict, expected: str | None) -> str:
    skipped = sum(cell["skipped"].values())
    text = {
        "passed": f"passed {cell['passed']}",
        "failed": f"**FAILED** {len(cell['failed'])}",
        "not applicable": "n/a",
    }[cell["status"]]
    if expected:
        text += " (expected)" if cell["status"] == "failed" else " (**expected to fail**)"
    if cell["xfailed"]:
        text += f" (+{cell['xfailed']} xfail)"
    if skipped and cell["status"] != "not applicable":
        text += f", {skipped} n/a"
    if cell.get("narrowed"):
        text += " (narrowed)"
    return text


def render_table(spec: MatrixSpec, matrix: dict) -> list[str]:
    """The release x suite table and, after it, why each cell that is not a plain pass is so."""
    suites = list(matrix["suites"])
    for row in matrix["rows"]:  # rows merged from a run of other suites keep theirs
        suites += [s for s in row.get("cells", {}) if s not in suites]
    out = [
        "| release | install s | run s | " + " | ".join(suites) + " |",
        "|---|---|---|" + "---|" * len(suites),
    ]
    notes = []
    for row in matrix["rows"]:
        if row["error"]:
            out.append(
                f"| {row['release']} | {row['install_s']} | {row['run_s']} | "
                + " | ".join("error" for _ in suites)
                + " |"
            )
            notes.append(f"- **{row['release']}**: {row['error']}")
            continue
        shown_cells = []
        for suite in suites:
            cell = row["cells"].get(suite)
            if cell is None:  # a rerun of other suites (--update --suite ...)
                shown_cells.append("not run")
                continue
            expected = spec.expected_red(row["release"], suite)
            shown_cells.append(cell_text(cell, expected))
            if expected:
                notes.append(f"- **{row['release']}** {suite}: expected to fail: {expected}")
            for reason, n in cell["skipped"].items():
                notes.append(f"- **{row['release']}** {suite}: {n} skipped: {reason}")
            for what, n in cell.get("narrowed", {}).items():
                notes.append(f"- **{row['release']}** {suite}: {n} ran narrowed: {what}")
            for failure in cell["failed"]:
                notes.append(f"- **{row['release']}** {suite}: FAILED {failure}")
        out.append(f"| {row['release']} | {row['install_s']} | {row['run_s']} | " + " | ".join(shown_cells) + " |")
    return [*out, "", "## Why each cell that is not a plain pass is so", "", *dict.fromkeys(notes), ""]


def written_by(matrix: dict) -> str:
    """The provenance sentence's start: the command and date, and where ``--update`` kept cells of earlier runs."""
    kept = " over the cells that earlier runs wrote (`--update`: a release's run s adds up)"
    return f"Written by `{matrix['command']}` on {matrix['date']}" + (kept if "--update" in matrix["command"] else "")


def _section_pattern(engine: str) -> tuple[str, str, re.Pattern[str]]:
    begin, end = f"<!-- matrix:{engine} -->", f"<!-- /matrix:{engine} -->"
    return begin, end, re.compile(re.escape(begin) + r"\n?(.*?)" + re.escape(end) + r"\n?", re.S)


def read_section(path: Path, engine: str) -> str | None:
    """The text between this engine's markers in ``path`` (None where it has none)."""
    found = _section_pattern(engine)[2].search(path.read_text()) if path.is_file() else None
    return found.group(1) if found else None


def write_section(path: Path, engine: str, text: str) -> None:
    """Puts ``text`` between this engine's markers in ``path``, leaving the other engines' sections as they are."""
    begin, end, pattern = _section_pattern(engine)
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    old = path.read_text() if path.is_file() else ""
    new = pattern.sub(lambda _: block, old, count=1) if pattern.search(old) else (old + "\n" if old else "") + block
    path.write_text(new)


def unexpected(spec: MatrixSpec, row: ReleaseRun) -> list[str]:
    """What in a row fails the run: an error, a failed cell not expected red, an expected red that passed."""
    if row.error:
        return [row.error]
    return [
        f"{suite}: {cell.status}"
        for suite, cell in row.cells.items()
        if (cell.status == "failed") != (spec.expected_red(row.release, suite) is not None)
        and cell.status != "not applicable"
    ]


def _base() -> dict[str, str]:
    import importlib.metadata as metadata

    return {name: metadata.version(name) for name in ("torch", "transformers")}


def _shard(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parser(spec: MatrixSpec, description: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=spec.prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--from", dest="low", default=spec.default_range[0], help="oldest release (default %(default)s)")
    p.add_argument("--to", dest="high", default=spec.default_range[1], help="newest release (default %(default)s)")
    p.add_argument("--release", action="append", help="exactly these releases (or source trees); repeatable")
    p.add_argument("--suite", action="append", choices=sorted(spec.suites), help="only these suites; repeatable")
    p.add_argument(
        "--update",
        action="store_true",
        help="keep the rows of releases not run now from the existing --out (a rerun of a few)",
    )
    p.add_argument("--out", type=Path, default=spec.out)
    p.add_argument("--markdown", type=Path, default=spec.markdown)
    p.add_argument("--render", action="store_true", help="only re-render --markdown from --out; run nothing")
    p.add_argument("--shard", type=_shard, default=WHOLE, help="K/N: only the releases of shard K of N (no markdown)")
    return p


def main(
    spec: MatrixSpec,
    argv: list[str] | None,
    *,
    releases: Callable[[argparse.Namespace], list[Release]],
    render: Callable[[dict], str],
    run: Runner,
    description: str | None = None,
    args: argparse.Namespace | None = None,
    write_markdown: Callable[[argparse.Namespace, dict], None] | None = None,
) -> int:
    """The matrix command: each release's row, the JSON, the markdown section; exit 1 on anything unexpected."""
    if args is None:
        args = parser(spec, description).parse_args(argv)
    if args.render:
        write_section(args.markdown, spec.engine, render(json.loads(args.out.read_text())))
        print(f"{spec.engine}-matrix: wrote {shown(args.markdown)} from {shown(args.out)}")
        return 0
    chosen = releases(args)
    if not chosen:  # an empty range must not write a matrix over the one there (with --update, its rows kept)
        print(f"{spec.engine}-matrix: no release between {args.low} and {args.high}: nothing run, nothing written")
        return 2
    shard: Shard = getattr(args, "shard", WHOLE)
    if shard != WHOLE and args.update:
        raise SystemExit(f"{spec.prog}: --shard writes a shard's rows alone; merge the shards, not --update")
    held = [r for r in chosen if shard.holds(r.label)]
    suites = {name: spec.suites[name] for name in (args.suite or spec.suites)}
    previous = json.loads(args.out.read_text()) if args.update and args.out.is_file() else {}
    kept = previous.get("rows", [])
    matrix = {
        "command": " ".join([spec.prog, *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d"),
        "base": _base(),  # read before the run: the base venv is this process's own
        # the engine's order, the suites run now and those the kept rows were run with
        "suites": {k: list(v) for k, v in spec.suites.items() if k in suites or k in previous.get("suites", {})},
        "rows": [],
    }
    if shard != WHOLE:  # what `swa-harness merge` checks: one engine, one checkout, every shard of one selection
        matrix.update(
            engine=spec.engine, commit=code_fingerprint(), shard=str(shard), selection=[r.label for r in chosen]
        )
    rows: list[ReleaseRun] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with CellProgress(f"{spec.engine}-matrix", total=len(held)) as progress:
        if shard != WHOLE:
            progress.say(f"shard {shard}: {len(held)} of {len(chosen)} releases: {[r.label for r in held]}")
        for release in held:
            progress.start(release.label)
            row = run(release, suites)
            rows.append(row)
            summary = row.error or ", ".join(f"{s}: {c.status}" for s, c in row.cells.items())
            progress.done(release.label, f"{summary} (install {row.install_s} s)", row.install_s + row.run_s)
            matrix["rows"] = merge_rows(kept, [asdict(r) for r in rows])
            args.out.write_text(json.dumps(matrix, indent=1) + "\n")  # after every release: a crash keeps the rows
    if shard != WHOLE:
        args.out.write_text(json.dumps(matrix, indent=1) + "\n")  # a shard that held no release writes its JSON too
        print(f"{spec.engine}-matrix: wrote {shown(args.out)} (shard {shard}; merge the shards, then --render)")
        return 1 if any(unexpected(spec, r) for r in rows) else 0
    if write_markdown is not None:
        write_markdown(args, matrix)
    else:
        write_section(args.markdown, spec.engine, render(matrix))
    print(f"{spec.engine}-matrix: wrote {shown(args.out)} and {shown(args.markdown)}")
    return 1 if any(unexpected(spec, r) for r in rows) else 0


def merge_rows(kept: list[dict], fresh: list[dict]) -> list[dict]:
    """``--update``: the rows kept from the last run, with this run's rows over them. A release run again for all of
    its suites is replaced; run again for some, it keeps its cells of the others (and its findings, unless the findings
    ran again), and its times add up."""
    by_release = {row["release"]: row for row in kept}
    for row in fresh:
        old = by_release.get(row["release"])
        if old is None or row["error"] or old["error"] or set(row["cells"]) >= set(old["cells"]):
            by_release[row["release"]] = row
            continue
        by_release[row["release"]] = {
            **old,
            "install_s": round(old["install_s"] + row["install_s"], 1),
            "run_s": round(old["run_s"] + row["run_s"], 1),
            "cells": {**old["cells"], **row["cells"]},
            "findings": row.get("findings") or old.get("findings", {}),
        }
    return sorted(by_release.values(), key=lambda row: release_order(row["release"]))


def bisect(
    good: str,
    bad: str,
    suites: Suites,
    *,
    published: Callable[[str, str], list[str]],
    run: Runner,
    candidates: list[str] | None = None,
) -> tuple[str, str, ReleaseRun]:
    """The release next to ``good`` where the suites first fail, walking towards ``bad`` (a regression when good is
    older, the release a fix landed after when good is newer). Releases where every chosen suite is not applicable
    are stepped over. Returns (last good, first bad, the first bad release's row)."""
    if candidates is None:
        low, high = sorted((good, bad), key=Version)
        candidates = published(low, high)
    order = sorted(candidates, key=Version, reverse=Version(good) > Version(bad))
    if order[0] != good or order[-1] != bad:
        raise ValueError(f"{good} and {bad} must both be published releases (found {order[0]} .. {order[-1]})")
    verdicts: dict[str, tuple[str, ReleaseRun]] = {}

    def verdict(release: str) -> str:
        if release not in verdicts:
            row = run(Release(release), suites)
            failed = row.error or any(c.status == "failed" for c in row.cells.values())
            ran = any(c.status != "not applicable" for c in row.cells.values())
            verdicts[release] = ("bad" if failed else "good" if ran else "skip", row)
            print(f"bisect: {release}: {verdicts[release][0]}", flush=True)
        return verdicts[release][0]

    for end, wanted in ((good, "good"), (bad, "bad")):
        if verdict(end) != wanted:
            raise ValueError(f"{end} was given as {wanted} but the suites say {verdict(end)}")
    lo, hi = 0, len(order) - 1  # order[lo] good, order[hi] bad
    while hi - lo > 1:
        mid = (lo + hi) // 2
        probe = next((i for i in range(mid, hi) if verdict(order[i]) != "skip"), None) or next(
            (i for i in range(mid - 1, lo, -1) if verdict(order[i]) != "skip"), None
        )
        if probe is None:
            break  # everything between is not applicable: the boundary is as narrow as it gets
        if verdict(order[probe]) == "good":
            lo = probe
        else:
            hi = probe
    return order[lo], order[hi], verdicts[order[hi]][1]
