"""What a judged comparison leaves behind: its line in the history (and the trend it is part of) and its HTML
report, with the other jobs' files (kill matrices, mutation runs, fault effects, release matrix) read once beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from harness.evals.history import Trend, make_entry
from harness.evals.history import record as record_history
from harness.evals.history import trend as history_trend
from harness.jobs.judging import Judged
from harness.jobs.options import RunOptions
from harness.report import render_report
from harness.report.inputs import (
    FaultEffects,
    KillMatrixFile,
    MutationRunFile,
    ReleaseMatrix,
    load_fault_effects,
    load_kill_matrices,
    load_mutation_runs,
    load_release_matrix,
)


@dataclass(frozen=True)
class SideInputs:
    """What the report shows beside the comparison, read from other jobs' files once per ``finish``."""

    kill_matrices: list[KillMatrixFile]
    fault_effects: FaultEffects | None
    release_matrix: ReleaseMatrix | None
    mutation_runs: list[MutationRunFile] = field(default_factory=list)  # reports/mutants-*.json beside the matrices

    @classmethod
    def read(cls, options: RunOptions) -> SideInputs:
        return cls(
            kill_matrices=load_kill_matrices(options.kill_matrix),
            fault_effects=load_fault_effects(options.fault_effects),
            release_matrix=load_release_matrix(options.release_matrix),
            mutation_runs=load_mutation_runs(options.kill_matrix),
        )


@dataclass(frozen=True)
class Recorded:
    """What one judged comparison left: the trend its history line is now part of (None: no history kept) and its
    HTML report."""

    trend: Trend | None
    report: Path


def record_comparison(
    judged: Judged,
    provenance: Mapping[str, Any],
    *,
    history: Path | None,
    side: SideInputs,
    several: bool = False,
) -> Recorded:
    """The comparison's line in the history, then its HTML report (which shows the trend).

    The comparisons of one job share its run id; with ``several`` each line's id names its comparison too, so that
    one comparison's line does not replace another's (and judging the same runs again replaces each its own)."""
    trend = None
    if history is not None:
        entry = make_entry(judged.tasks, judged.summary, judged.runs, provenance)
        if several:
            c = judged.comparison
            entry = replace(entry, run_id=f"{entry.run_id} {c.model.slug}/{c.name}")
        trend = history_trend(record_history(Path(history), entry), entry)
    report = render_report(
        judged.tasks,
        judged.runs,
        summary=judged.summary,
        provenance=provenance,
        out_dir=judged.comparison.dir,
        trend=trend,
        kill_matrices=side.kill_matrices,
        mutation_runs=side.mutation_runs,
        fault_effects=side.fault_effects,
        release_matrix=side.release_matrix,
        tokenize=judged.tokenize,
    )
    return Recorded(trend, report)
