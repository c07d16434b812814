"""After the runs: every comparison judged, recorded and reported, the job's front page and ``summary.json``, what
is printed, and the exit code (``finish``, which ``swa-harness report`` also calls on saved runs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.evals.results import RunResult
from harness.jobs.judging import ComparisonOutcome, Judged, judge
from harness.jobs.options import RunOptions
from harness.jobs.plan import Plan
from harness.jobs.recording import SideInputs, comparison_provenances, record_comparison
from harness.paths import shown
from harness.report.overview import OverviewComparison, OverviewModel, write_overview


def no_verdict(runs: Sequence[RunResult], judged: Sequence[Judged], options: RunOptions) -> list[str]:
    """Why nothing was measured, one reason each: a run that failed, or two arms that served different models (unless
    allowed). Empty when every comparison has a verdict."""
    failures = list(dict.fromkeys(r.error.splitlines()[0] for r in runs if not r.complete and r.error))
    if not options.allow_different_models:
        failures += [f"{j.comparison.model.name} {j.comparison.name}: {j.differ}" for j in judged if j.differ]
    return failures


def finish(plan: Plan, runs: Sequence[RunResult], options: RunOptions, base: Mapping[str, Any]) -> int:
    """Judge, record in the history, report (each comparison, and the overview), print; the exit code: 0 when every
    comparison met its expectation, 1 when one did not, 2 when nothing was measured (``no_verdict``)."""
    judged = judge(plan, runs, options.thresholds, allow_different_models=options.allow_different_models)
    provenance = comparison_provenances(plan, runs, base)
    side = SideInputs.read(options)
    several = len(plan.comparisons) > 1
    outcomes = []
    for j in judged:
        c = j.comparison
        recorded = record_comparison(
            j, provenance[c.model.slug, c.name], history=options.history, side=side, several=several
        )
        outcome = ComparisonOutcome(comparison=j.comparison, tasks=j.tasks, summary=j.summary, report=recorded.report)
        _print_outcome(outcome, several)
        if (trend := recorded.trend) is not None:
            since = f"; verdict since run #{trend.since.index}" if trend.since else ""
            print(f"history: {shown(Path(options.history))} ({trend.runs} run(s) of {trend.series}{since})")
        outcomes.append(outcome)
    failures = no_verdict(runs, judged, options)
    _front_page(plan, runs, outcomes, options)
    if failures:  # 2, said on stderr with each reason, after the pages that show them
        print(f"{options.name}: no verdict (exit 2): {' | '.join(failures)}", file=sys.stderr, flush=True)
        return 2
    return 0 if all(o.ok for o in outcomes) else 1


def _front_page(
    plan: Plan, runs: Sequence[RunResult], outcomes: Sequence[ComparisonOutcome], options: RunOptions
) -> None:
    """The overview and ``summary.json`` of a plan with one; else the one comparison's report is the page."""
    if not plan.overview:
        print(f"report: {outcomes[0].report}")
        return
    summary = {
        "as expected": all(o.ok for o in outcomes),
        "comparisons": [o.to_dict() for o in outcomes],
        "runs": [
            {
                "model": r.model,
                "arm": r.record.arm,
                "task": r.task,
                "complete": r.complete,
                "error": r.error,
                "correct": sum(i.correct for i in r.items),
                "n": len(r.items),
            }
            for r in runs
        ],
    }
    (plan.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    models = _overview(plan, runs, outcomes)
    page = write_overview(plan.out / "index.html", models, options.thresholds, plan.title)
    print(f"overview: {page}")


def _overview(plan: Plan, runs: Sequence[RunResult], outcomes: Sequence[ComparisonOutcome]) -> list[OverviewModel]:
    """The plan and its outcomes as the overview page's plain data (the report floor knows no plans)."""
    by_key = {(r.model, r.record.arm, r.task): r for r in runs}
    models = []
    for model in plan.models:
        arms = [
            (
                a.name,
                " ".join(a.server_flags) or "(defaults)",
                " ".join(f"{k}={v}" for k, v in a.env.items()),
            )
            for a in plan.arms
        ]
        cells = {(a.name, t.name): by_key.get((model.slug, a.name, t.name)) for a in plan.arms for t in plan.tasks}
        comparisons = [
            OverviewComparison(
                label=f"{o.comparison.treatment} vs {o.comparison.reference}",
                tasks=o.tasks,
                verdict=o.summary.verdict.value,
                expectation=o.comparison.expectation,
                ok=o.ok,
                report=str(Path(o.report).relative_to(plan.out)) if o.report else None,
            )
            for o in outcomes
            if o.comparison.model == model
        ]
        models.append(
            OverviewModel(
                name=model.name, arms=arms, tasks=[t.name for t in plan.tasks], cells=cells, comparisons=comparisons
            )
        )
    return models


def _print_outcome(outcome: ComparisonOutcome, several: bool) -> None:
    if several:  # which comparison the task lines below belong to
        pair = outcome.comparison
        print(f"{pair.model.name} {pair.name} ({pair.treatment} as ON, {pair.reference} as OFF):")
    for c in outcome.tasks:
        if not c.complete:
            print(f"{c.task}: NO VERDICT — {'; '.join(c.errors)}")
            continue
        on, off, diff = c.on_accuracy, c.off_accuracy, c.difference
        print(
            f"{c.task}: N={c.n} on {on.value:.1%} [{on.low:.1%}, {on.high:.1%}] "
            f"off {off.value:.1%} [{off.low:.1%}, {off.high:.1%}] "
            f"diff {diff.value:+.1%} [{diff.low:+.1%}, {diff.high:+.1%}] McNemar p={c.mcnemar_p:.3g} "
            f"MDE {c.mde:.1%} flips {len(c.flips)} -> {c.verdict.name}"
            + (f" | {c.logprobs.line}" if c.logprobs else "")
        )
    s = outcome.summary
    lp = outcome.logprob_verdict
    beside = f"; logprobs {lp.text}" if lp else ""
    if several:
        c = outcome.comparison
        mark = "ok " if outcome.ok else "UNEXPECTED"
        print(f"{mark} {c.model.name} {c.name}: {s.verdict.text}{beside} (expected {c.expectation}) — {s.reason}")
    else:
        print(f"verdict: {s.verdict.text}{beside} — {s.reason}")
