"""``swa-harness sglang-matrix``: the memory suites against every SGLang release in a range, one overlay venv each.

    swa-harness sglang-matrix [--from 0.5.11] [--to 0.5.23] [--release X ...] [--suite pool ...]
    swa-harness sglang-matrix --suite findings --update   # only the findings' reproducers, kept beside the other rows

A cell is one suite on one release: **passed** (no test failed; skips named), **failed** (the failing tests and the
first line of each), **not applicable** (every test skipped because the release lacks what the suite drives, or runs
it only as a Triton kernel: "CPU-unreachable"), or **error** (the release could not be installed). A skip is never a
pass: a passed cell counts only tests that ran. Writes ``reports/sglang-matrix.json`` and the SGLang section of
``docs/COMPATIBILITY.md``. What the engines' matrices share (cells, rows, table, bisect): ``release_matrix.py``.

The ``findings`` suite runs the reproducers of docs/FINDINGS.md's SGLang bugs (``harness/findings.py``): a release
with the bug is an expected failure there, never a failed cell, and each finding gets a row of its own: the releases
that have it and the first that does not.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

from harness import findings
from harness.env import SGLANG_ANY_VERSION_ENV, SGLANG_SOURCE_ENV
from harness.jobs import release_matrix as shared
from harness.jobs.release_matrix import Cell, MatrixSpec, ReleaseRun, Suites, cells_from_junit, merge_rows, suite_of
from harness.paths import COMPATIBILITY_MD, REPO
from harness.targets.probe import UNREACHABLE
from harness.targets.sglang.releases import Release, overlay, published

__all__ = [
    "Cell",
    "ReleaseRun",
    "bisect",
    "cells_from_junit",
    "main",
    "merge_rows",
    "render_markdown",
    "suite_of",
    "unexpected",
]

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
EXPECTED_RED = {
    ("0.5.11", "replay"): "#24743 shipped in 0.5.11, fixed in 0.5.12",
    ("0.5.22", "differential"): "FINDINGS #12 (a chunk's checkpoint leaves its pages unlocked), fixed in 0.5.23",
}
SEEDS_HEADING = "## The seeds against released SGLang"
MATRIX_JSON = REPO / "reports" / "sglang-matrix.json"


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


SPEC = MatrixSpec(
    engine="sglang",
    suites=SUITES,
    default_range=DEFAULT_RANGE,
    out=MATRIX_JSON,
    markdown=COMPATIBILITY_MD,
    published=published,
    overlay=overlay,
    pytest_args=("--target", "sglang"),
    # The strict configuration of `nox -s sglang` (SGLang's own invariant and memory-pool checks on).
    env={SGLANG_ANY_VERSION_ENV: "1", "SGLANG_INVARIANT_CHECK": "2", "SGLANG_DEBUG_MEMORY_POOL": "1"},
    expected_red=lambda release, suite: EXPECTED_RED.get((release, suite)),
)


def run_release(release: Release, suites: Suites, *, workers: str = "auto") -> ReleaseRun:
    return shared.run_release(SPEC if workers == SPEC.workers else replace(SPEC, workers=workers), release, suites)


def releases(args: argparse.Namespace) -> list[Release]:
    if args.release:
        return [Release(r) for r in args.release]
    found = [Release(v) for v in published(args.low, args.high)]
    source = os.environ.get(SGLANG_SOURCE_ENV, "")
    if source and os.path.isdir(source):
        found.append(Release(source))
    return found


# What the cells of the scenario and differential suites mean since the engine over SGLang builds SGLang's own prefix
# cache (harness/targets/sglang/prefix_cache.py, written against 0.5.23's scheduler).
PREFIX_CACHE_NOTE = (
    "The scenario and differential suites build the engine over SGLang's pool, allocator *and* its prefix cache "
    "(`UnifiedRadixCache`, driven with the calls 0.5.23's scheduler makes, in its order: "
    "`harness/targets/sglang/prefix_cache.py`). "
    "A release without that API skips every test that needs a prefix cache (the reason names the missing methods); "
    "the harness's own prefix cache over an older release's pool, shown as narrowed, is not built yet. A failed cell "
    "not marked expected (`EXPECTED_RED` in `harness/jobs/sglang_matrix.py`, with its reason) is not explained yet: "
    "a bug of that release, or a call the adapter copies from 0.5.23 that the release's cache does not take."
)


def render_markdown(matrix: dict) -> str:
    out = [
        "# SGLang releases under the harness's suites",
        "",
        shared.written_by(matrix) + f" (base: torch {matrix['base']['torch']}, transformers "
        f"{matrix['base']['transformers']}; one overlay venv per release, `harness/targets/sglang/releases.py`). "
        "Each cell: tests passed (+ strict xfails) / failed, and what was not applicable. A skip never counts as a pass; "
        f'"{UNREACHABLE}" marks SGLang code that runs only as a Triton kernel. "install s" is 0 where the '
        "release's overlay was reused from an earlier run.",
        "",
        PREFIX_CACHE_NOTE,
        "",
        *shared.render_table(SPEC, matrix),
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


def _write_markdown(args: argparse.Namespace, matrix: dict) -> None:
    """The SGLang section of --markdown, or with --findings-section-only the findings section within it alone (the
    vLLM section, with a findings section of its own, is left as it is)."""
    current = shared.read_section(args.markdown, SPEC.engine)
    if args.findings_section_only and current is not None:
        provenance = shared.written_by(matrix) + "."
        section = findings.markdown("sglang", matrix["rows"], provenance=provenance)
        shared.write_section(args.markdown, SPEC.engine, findings.splice(current, section, before=SEEDS_HEADING))
    else:
        shared.write_section(args.markdown, SPEC.engine, render_markdown(matrix))


def main(argv: list[str] | None = None) -> int:
    p = shared.parser(SPEC, __doc__)
    p.add_argument(
        "--findings-section-only",
        action="store_true",
        help="write only the findings section into the existing --markdown; the rest stays as its last run wrote it",
    )
    return shared.main(
        SPEC,
        argv,
        releases=releases,
        render=render_markdown,
        run=lambda release, suites: run_release(release, suites),  # looked up at call time (tests replace it)
        args=p.parse_args(argv),
        write_markdown=_write_markdown,
    )


def unexpected(row: ReleaseRun) -> list[str]:
    """What in a row fails the run: an install error, a failed cell not expected red, an expected red that passed."""
    return shared.unexpected(SPEC, row)


def bisect(
    good: str, bad: str, suites: Suites, *, candidates: list[str] | None = None, run=None
) -> tuple[str, str, ReleaseRun]:
    """SGLang's releases between ``good`` and ``bad``: ``harness.jobs.release_matrix.bisect``."""
    return shared.bisect(good, bad, suites, published=published, run=run or run_release, candidates=candidates)
