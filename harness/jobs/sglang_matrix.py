"""``swa-harness sglang-matrix``: the memory suites against every SGLang release in a range, one overlay venv each.

    swa-harness sglang-matrix [--from 0.5.11] [--to 0.5.23] [--release X ...] [--suite pool ...]
    swa-harness sglang-matrix --suite findings --update   # only the findings' reproducers, kept beside the other rows

A cell is one suite on one release: **passed** (no test failed; skips named), **failed** (the failing tests and the
first line of each), **not applicable** (every test skipped because the release lacks what the suite drives, or runs
it only as a Triton kernel: "CPU-unreachable"), or **error** (the release could not be installed). A skip is never a
pass: a passed cell counts only tests that ran. Writes ``reports/sglang-matrix.json`` and ``docs/COMPATIBILITY.md``.

The ``findings`` suite runs the reproducers of docs/FINDINGS.md's SGLang bugs (``harness/findings.py``): a release
with the bug is an expected failure there, never a failed cell, and each finding gets a row of its own: the releases
that have it and the first that does not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness import findings
from harness.env import SGLANG_ANY_VERSION_ENV, SGLANG_SOURCE_ENV
from harness.paths import REPO, shown
from harness.targets.sglang.capabilities import UNREACHABLE
from harness.targets.sglang.releases import Release, overlay, published

SUITES: dict[str, tuple[str, ...]] = {
    "pool": ("suites/pool",),
    "scenarios": ("suites/scenarios",),
    "differential": ("suites/differential",),
    # The decode registry's padding (the #24743 family) from 0.5.13 on; test_graph_registries.py drives 0.5.22's
    # registry API (prefill registry options, the runtime context) and stays with `nox -s sglang`.
    "registry": ("suites/sglang/test_decode_registry.py",),
    "replay": ("suites/sglang/test_seed_replay.py",),
    # docs/FINDINGS.md's SGLang bugs: their reproducers, a strict xfail where a release is listed with the bug.
    "findings": findings.test_paths("sglang"),
}
DEFAULT_RANGE = ("0.5.11", "0.5.23")  # 0.5.11-0.5.12.post1 for the seed replay; the suites' API from 0.5.13
# Cells that must fail: a seed's bug shipped in that release (its replay). A pass there fails the run, as a strict xfail.
EXPECTED_RED = {("0.5.11", "replay"): "#24743 shipped in 0.5.11, fixed in 0.5.12"}
SEEDS_HEADING = "## The seeds against released SGLang"
MATRIX_JSON = REPO / "reports" / "sglang-matrix.json"
COMPATIBILITY_MD = REPO / "docs" / "COMPATIBILITY.md"


# How the adapters follow SGLang's memory API through the releases (harness/targets/sglang/adapters.py, asked of the
# installed SGLang by capabilities.py), and what stays out of reach on CPU.
API_MOVES = (
    (
        "`SWATokenToKVPoolAllocator`",
        "in `swa_memory_pool.py` up to 0.5.12.post1, `allocator/swa.py` from 0.5.13",
        "the first module that has it",
    ),
    ("`SWAKVPool(enable_kvcache_transpose=...)`", "required up to 0.5.15", "passed (False) where the signature has it"),
    (
        "the SWA write ids",
        "pool state (`set_swa_loc`) up to 0.5.12.post1; `set_kv_buffer(loc, swa_loc=)` in 0.5.13; a "
        "`KVWriteLoc` from 0.5.14",
        "`KVWriteLoc` where `memory_pool` has it, else the keyword",
    ),
    ("`free_full`", "from 0.5.19", "before, `free` skips tokens without an SWA peer itself: the adapter calls `free`"),
    ("`free_group_begin/end`", "from 0.5.18", "a test that needs them skips, naming them"),
    ("`free_segment`, `free_swa_segment`, `free_full_segment`", "from 0.5.20", "skip, naming them"),
    (
        "`kv_index_translator`, `kv_loc_plan`",
        "from 0.5.19 and 0.5.22",
        "the decode registry suite takes the padded "
        "batch's SWA ids from the KV-loc plan where it exists, else from the pool's translation of the padded write loc, "
        "as those releases' attention backends compute them once per forward",
    ),
    (
        "`runtime_context` (parallel widths)",
        "from 0.5.14; `dp_size` renamed `num_dp_ranks` later",
        "tests that set a width skip before 0.5.14; the field name is the release's own",
    ),
    (
        "paged `alloc_extend`, `alloc_extend_swa_tail`",
        "a Triton kernel up to 0.5.21",
        "Triton finds no driver on CPU: the test skips as CPU-unreachable, never a pass",
    ),
)

# The seeds (../shared/seeds, docs/FAULTS.md) against released SGLang: replayed where the buggy code shipped in a wheel
# and runs on CPU, else why not. Checked against each wheel's source from 0.5.11 to 0.5.23.
SEED_REPLAYS = (
    (
        "#24743",
        "replayed: suites/sglang/test_seed_replay.py, red on 0.5.11, green on 0.5.12 (its fix zeroes the SWA "
        "write ids of padded rows); 0.5.13 on place decode batches with the buffer registry, whose padding "
        "suites/sglang/test_decode_registry.py checks",
    ),
    (
        "#23552",
        "not replayed: its harm is the CUDA graph capture recording the per-layer translation (a GPU capture); "
        "its dtype half (int64 SWA write ids, int32 from 0.5.12) changes no slot written on CPU",
    ),
    (
        "#24138",
        "not replayed: the re-translation sits in the GPU attention backends' prefill paths (FlashAttention, "
        "Triton); torch_native on CPU takes neither",
    ),
    (
        "#25824",
        "not replayed: never released; no wheel from 0.5.11 to 0.5.23 has a translation memo in "
        "swa_memory_pool.py (0.5.13 on translate once per forward, as its review asked)",
    ),
    ("#26152", "not replayed: never released; it fixes the same unreleased memo's invalidation"),
)


@dataclass
class Cell:
    status: str  # passed | failed | not applicable | error
    passed: int = 0
    failed: list[str] = field(default_factory=list)  # "test id: first line of the failure"
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> tests
    xfailed: int = 0

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
    findings: dict[str, findings.Outcome] = field(default_factory=dict)  # finding number -> outcome (findings suite)


def suite_of(path: str, suites: dict[str, tuple[str, ...]]) -> str | None:
    for name, roots in suites.items():
        if any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots):
            return name
    return None


def _first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    return (errors[0][1:].strip() if errors else lines[0] if lines else "")[:240]


def cells_from_junit(xml: Path, suites: dict[str, tuple[str, ...]]) -> dict[str, Cell]:
    """One cell per suite from pytest's junit XML (a test's file decides its suite)."""
    tallies: dict[str, dict] = {
        name: {"passed": 0, "failed": [], "skipped": Counter(), "xfailed": 0} for name in suites
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
        cells[name] = Cell(status, t["passed"], t["failed"], dict(t["skipped"]), t["xfailed"])
    return cells


def run_release(release: Release, suites: dict[str, tuple[str, ...]], *, workers: str = "auto") -> ReleaseRun:
    started = time.monotonic()
    try:
        python = overlay(release)
    except Exception as error:  # noqa: BLE001 - an install that fails is a row of its own, never the end of the run
        return ReleaseRun(release.label, round(time.monotonic() - started, 1), 0.0, {}, f"install failed: {error}")
    installed = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        paths = [p for roots in suites.values() for p in roots]
        # The strict configuration of `nox -s sglang` (SGLang's own invariant and memory-pool checks on).
        env = {
            **os.environ,
            SGLANG_ANY_VERSION_ENV: "1",
            "SGLANG_INVARIANT_CHECK": "2",
            "SGLANG_DEBUG_MEMORY_POOL": "1",
        }
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
                "--target",
                "sglang",
                f"--junitxml={xml}",
                "-o",
                "junit_family=xunit1",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        if not xml.exists():
            tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
            return ReleaseRun(
                release.label,
                round(installed - started, 1),
                round(time.monotonic() - installed, 1),
                {},
                f"pytest wrote no report (exit {result.returncode}): {' | '.join(tail)}",
            )
        cells = cells_from_junit(xml, suites)
        found = findings.outcomes_from_junit(xml, "sglang") if "findings" in suites else {}
    return ReleaseRun(
        release.label, round(installed - started, 1), round(time.monotonic() - installed, 1), cells, findings=found
    )


def releases(args: argparse.Namespace) -> list[Release]:
    if args.release:
        return [Release(r) for r in args.release]
    found = [Release(v) for v in published(args.low, args.high)]
    source = os.environ.get(SGLANG_SOURCE_ENV, "")
    if source and os.path.isdir(source):
        found.append(Release(source))
    return found


def render_markdown(matrix: dict) -> str:
    suites = list(matrix["suites"])
    for row in matrix["rows"]:  # rows merged from a run of other suites keep theirs
        suites += [s for s in row.get("cells", {}) if s not in suites]
    out = [
        "# SGLang releases under the harness's suites",
        "",
        f"Written by `{matrix['command']}` on {matrix['date']} (base: torch {matrix['base']['torch']}, transformers "
        f"{matrix['base']['transformers']}; one overlay venv per release, `harness/targets/sglang/releases.py`). "
        "Each cell: tests passed (+ strict xfails) / failed, and what was not applicable. A skip never counts as a pass; "
        f'"{UNREACHABLE}" marks SGLang code that runs only as a Triton kernel. "install s" is 0 where the '
        "release's overlay was reused from an earlier run.",
        "",
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
            skipped = sum(cell["skipped"].values())
            expected = EXPECTED_RED.get((row["release"], suite))
            text = {
                "passed": f"passed {cell['passed']}",
                "failed": f"**FAILED** {len(cell['failed'])}",
                "not applicable": "n/a",
            }[cell["status"]]
            if expected:
                text += " (expected)" if cell["status"] == "failed" else " (**expected to fail**)"
                notes.append(f"- **{row['release']}** {suite}: expected to fail: {expected}")
            if cell["xfailed"]:
                text += f" (+{cell['xfailed']} xfail)"
            if skipped and cell["status"] != "not applicable":
                text += f", {skipped} n/a"
            shown_cells.append(text)
            for reason, n in cell["skipped"].items():
                notes.append(f"- **{row['release']}** {suite}: {n} skipped: {reason}")
            for failure in cell["failed"]:
                notes.append(f"- **{row['release']}** {suite}: FAILED {failure}")
        out.append(f"| {row['release']} | {row['install_s']} | {row['run_s']} | " + " | ".join(shown_cells) + " |")
    out += [
        "",
        "## Why each cell that is not a plain pass is so",
        "",
        *dict.fromkeys(notes),
        "",
        *findings.markdown("sglang", matrix["rows"]),
        SEEDS_HEADING,
        "",
        "| seed | replay |",
        "|---|---|",
        *(f"| {seed} | {text} |" for seed, text in SEED_REPLAYS),
        "",
        "## How the adapters follow the API",
        "",
        "Asked of the installed SGLang (modules, classes, signatures), never of its version string "
        "(`harness/targets/sglang/capabilities.py`). Import shims for the older releases: "
        "`harness/targets/sglang/import_shims/README.md`.",
        "",
        "| what | where it moved | how the adapter follows |",
        "|---|---|---|",
        *(f"| {what} | {moved} | {how} |" for what, moved, how in API_MOVES),
        "",
    ]
    return "\n".join(out)


def _order(row: dict) -> tuple[int, Version | str]:
    """Releases by version, source trees after them."""
    try:
        return 0, Version(row["release"])
    except InvalidVersion:
        return 1, row["release"]


def _base() -> dict[str, str]:
    import importlib.metadata as metadata

    return {name: metadata.version(name) for name in ("torch", "transformers")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="swa-harness sglang-matrix", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--from", dest="low", default=DEFAULT_RANGE[0], help="oldest release (default %(default)s)")
    parser.add_argument("--to", dest="high", default=DEFAULT_RANGE[1], help="newest release (default %(default)s)")
    parser.add_argument("--release", action="append", help="exactly these releases (or source trees); repeatable")
    parser.add_argument("--suite", action="append", choices=sorted(SUITES), help="only these suites; repeatable")
    parser.add_argument(
        "--update",
        action="store_true",
        help="keep the rows of releases not run now from the existing --out (a rerun of a few)",
    )
    parser.add_argument("--out", type=Path, default=MATRIX_JSON)
    parser.add_argument("--markdown", type=Path, default=COMPATIBILITY_MD)
    parser.add_argument("--render", action="store_true", help="only re-render --markdown from --out; run nothing")
    parser.add_argument(
        "--findings-section-only",
        action="store_true",
        help="write only the findings section into the existing --markdown; the rest stays as its last run wrote it",
    )
    args = parser.parse_args(argv)
    if args.render:
        args.markdown.write_text(render_markdown(json.loads(args.out.read_text())))
        print(f"sglang-matrix: wrote {shown(args.markdown)} from {shown(args.out)}")
        return 0
    suites = {name: SUITES[name] for name in (args.suite or SUITES)}
    rows = []
    for release in releases(args):
        print(f"sglang-matrix: {release.label} ...", flush=True)
        row = run_release(release, suites)
        rows.append(row)
        summary = row.error or ", ".join(f"{s}: {c.status}" for s, c in row.cells.items())
        print(f"sglang-matrix: {release.label}: install {row.install_s} s, run {row.run_s} s; {summary}", flush=True)
    fresh = [asdict(r) for r in rows]
    if args.update and args.out.is_file():
        fresh = merge_rows(json.loads(args.out.read_text())["rows"], fresh)
    matrix = {
        "command": " ".join(["swa-harness sglang-matrix", *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d"),
        "base": _base(),
        "suites": {k: list(v) for k, v in suites.items()},
        "rows": fresh,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(matrix, indent=1) + "\n")
    if args.findings_section_only and args.markdown.is_file():
        provenance = f"Written by `{matrix['command']}` on {matrix['date']}."
        section = findings.markdown("sglang", matrix["rows"], provenance=provenance)
        args.markdown.write_text(findings.splice(args.markdown.read_text(), section, before=SEEDS_HEADING))
    else:
        args.markdown.write_text(render_markdown(matrix))
    print(f"sglang-matrix: wrote {shown(args.out)} and {shown(args.markdown)}")
    return 1 if any(unexpected(r) for r in rows) else 0


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
            "findings": row["findings"] or old.get("findings", {}),
        }
    return sorted(by_release.values(), key=_order)


def unexpected(row: ReleaseRun) -> list[str]:
    """What in a row fails the run: an install error, a failed cell not expected red, an expected red that passed."""
    if row.error:
        return [row.error]
    return [
        f"{suite}: {cell.status}"
        for suite, cell in row.cells.items()
        if (cell.status == "failed") != ((row.release, suite) in EXPECTED_RED) and cell.status != "not applicable"
    ]


def bisect(
    good: str, bad: str, suites: dict[str, tuple[str, ...]], *, candidates: list[str] | None = None, run=run_release
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


def bisect_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swa-harness bisect", description=bisect.__doc__)
    parser.add_argument("--good", required=True, help="a release where the suites pass")
    parser.add_argument("--bad", required=True, help="a release where they fail")
    parser.add_argument("--suite", action="append", choices=sorted(SUITES), help="suites to run (default: all)")
    args = parser.parse_args(argv)
    suites = {name: SUITES[name] for name in (args.suite or SUITES)}
    try:
        last_good, first_bad, row = bisect(args.good, args.bad, suites)
    except ValueError as error:
        print(f"bisect: {error}", file=sys.stderr)
        return 2
    print(f"bisect: first bad release: {first_bad} (last good: {last_good})")
    for suite, cell in row.cells.items():
        for failure in cell.failed:
            print(f"bisect:   {suite}: {failure}")
    if row.error:
        print(f"bisect:   {row.error}")
    return 0
