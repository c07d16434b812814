"""Judging a plan's runs: every comparison paired task by task, its verdict, and the saved runs read back.

``judge`` pairs the treatment (ON) with the reference (OFF) per task and gives each comparison its verdict
(``comparison_verdict``: the worst task's; none where its arms' servers reported different models, unless allowed), so
that what comes after (provenance, recording, the summary) only reads a ``Judged``; ``ComparisonOutcome`` is one
comparison judged, as ``summary.json`` and the overview show it. ``load_runs`` reads the runs a plan saved
(``swa-harness report``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from harness.evals.compare import Thresholds, Tokenize, compare_runs, summarize
from harness.evals.results import RunRecord, RunResult, Summary, TaskComparison, Verdict
from harness.jobs.plan import Comparison, Plan
from harness.paths import shown
from harness.reuse import memoized_tokenize


@dataclass(frozen=True)
class ComparisonOutcome:
    """One comparison judged: its tasks, the worst verdict, the report, and whether that was expected.

    ``to_dict`` is its entry in ``summary.json``, whose keys (``"suites"`` for the tasks) stay as they were."""

    comparison: Comparison
    tasks: list[TaskComparison]
    summary: Summary
    report: Path | None

    @property
    def ok(self) -> bool:
        verdict = self.summary.verdict
        return verdict is Verdict.RED if self.comparison.expect_red else verdict in (Verdict.GREEN, Verdict.AMBER)

    def to_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {
            "model": c.model.name,
            "comparison": c.name,
            "treatment": c.treatment,
            "reference": c.reference,
            "verdict": self.summary.verdict.value,
            "expected": c.expectation,
            "as expected": self.ok,
            "reason": self.summary.reason,
            "logprobs": self.logprob_verdict.value if self.logprob_verdict else None,
            "report": str(self.report) if self.report else None,
            "suites": {
                t.task: {
                    "verdict": t.verdict.value,
                    "difference": t.difference.value if t.difference else None,
                    "n": t.n,
                    "reason": t.reason,
                    "logprobs": t.logprobs.to_dict(items=False) if t.logprobs else None,
                }
                for t in self.tasks
            },
        }

    @property
    def logprob_verdict(self) -> Verdict | None:
        """The worst task's logprob verdict (None: no task has the axis). Shown beside the accuracy verdict; the
        exit code is accuracy's alone."""
        return logprob_verdict(self.tasks)


def logprob_verdict(tasks: Sequence[TaskComparison]) -> Verdict | None:
    """The worst logprob verdict over the tasks that have the axis (None: none has)."""
    axes = [t.logprobs for t in tasks if t.logprobs is not None]
    return Verdict.worst(a.verdict for a in axes) if axes else None


@dataclass(frozen=True)
class Judged:
    """One comparison paired task by task: its task comparisons, its runs as judged (their sides set), how its arms'
    servers reported different models (None: they did not), its verdict, which such a difference withholds, and the
    checkpoint's tokenizer that split its flips (None: no local one), so that its report splits them the same way."""

    comparison: Comparison
    tasks: list[TaskComparison]
    runs: list[RunResult]
    differ: str | None
    summary: Summary
    tokenize: Tokenize | None


def load_runs(plan: Plan) -> list[RunResult]:
    """The saved runs of a plan (``swa-harness report``, ``--report-only``); a missing one is INCOMPLETE, saying so."""
    runs = []
    for run in plan.runs:
        for step in run.evals:
            for task in step.tasks:
                path = run.dir / "runs" / f"{task.name}.json"
                if path.is_file():
                    runs.append(RunResult.load(path))
                else:
                    runs.append(
                        RunResult(
                            task=task.name,
                            graphs=run.arm.graphs,
                            model=run.model.slug,
                            complete=False,
                            error=f"no saved run at {shown(path)}",
                            items=[],
                            wall_s=0.0,
                            record=RunRecord(run.arm.name),
                        )
                    )
    return runs


def _as_side(run: RunResult, side: str) -> RunResult:
    return replace(run, record=replace(run.record, side=side))


def judge(
    plan: Plan, runs: Sequence[RunResult], thresholds: Thresholds, *, allow_different_models: bool = False
) -> list[Judged]:
    """Every comparison of the plan over ``runs``, paired per task (the treatment as ON, the reference as OFF), and its
    verdict: none where its arms' servers reported different models, unless ``allow_different_models``."""
    by_key = {(r.model, r.record.arm, r.task): r for r in runs}
    served = {(r.model, r.record.arm): r.record.identity for r in runs if r.record.identity}
    judged = []
    for comparison in plan.comparisons:
        tasks, pair_runs = [], []
        tokenize = comparison_tokenizer(comparison)  # one per checkpoint (a memo), whatever the task
        for task in plan.tasks:
            on = _as_side(by_key[comparison.model.slug, comparison.treatment, task.name], "on")
            off = _as_side(by_key[comparison.model.slug, comparison.reference, task.name], "off")
            task_thresholds = thresholds if task.max_drop is None else replace(thresholds, max_drop=task.max_drop)
            # lm-eval scored other items in one arm: no pairing, no verdict
            tasks.append(
                compare_runs(on, off, thresholds=task_thresholds, tokenize=tokenize, mismatch_is_no_verdict=True)
            )
            pair_runs += [on, off]
        diff = comparison.served_differences(served)
        differ = f"the arms served different models ({'; '.join(diff)})" if diff else None
        judged.append(
            Judged(
                comparison=comparison,
                tasks=tasks,
                runs=pair_runs,
                differ=differ,
                summary=comparison_verdict(tasks, differ, allow_different_models),
                tokenize=tokenize,
            )
        )
    return judged


def comparison_verdict(tasks: Sequence[TaskComparison], differ: str | None, allow_different_models: bool) -> Summary:
    """The comparison's overall verdict; arms that served different models (``differ`` says how) give none, unless
    allowed, and then the reason says so first."""
    summary = summarize(tasks)
    if not differ:
        return summary
    if allow_different_models:
        return replace(summary, reason=f"judged although {differ} (--allow-different-models); " + summary.reason)
    return replace(summary, verdict=Verdict.NONE, reason=f"no verdict: {differ}")


def comparison_tokenizer(comparison: Comparison) -> Tokenize | None:
    """Split flips into tokens with the checkpoint's own tokenizer, where the model is a local checkpoint."""
    path = comparison.model.checkpoint
    if not (path / "tokenizer.json").is_file():
        return None
    return memoized_tokenize(str(path))
