"""The nightly's front page: per model, one column per arm (accuracy per task), then every comparison's
verdict per task, whether it met its expectation, and a link to its full report. Self-contained HTML."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from harness.evals import stats
from harness.evals.compare import Thresholds
from harness.evals.results import RunResult

if TYPE_CHECKING:
    from harness.nightly.plan import NightlyPlan
    from harness.nightly.runner import ComparisonOutcome

COLOURS = {"GREEN": "#1a7f37", "AMBER": "#b76e00", "RED": "#cf222e"}
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;max-width:1360px;color:#1f2328}
table{border-collapse:collapse;margin:8px 0 20px}th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;
vertical-align:top}th{background:#f6f8fa}.v{color:#fff;font-weight:600;padding:1px 6px;border-radius:3px}
.banner{padding:10px 14px;border-radius:6px;color:#fff;font-weight:600;margin-bottom:16px}.small{color:#57606a;
font-size:12px}code{font-size:12px;overflow-wrap:anywhere}
"""


def _verdict(value: str) -> str:
    return f'<span class="v" style="background:{COLOURS.get(value, "#57606a")}">{escape(value)}</span>'


def _cell(run: RunResult | None, confidence: float) -> str:
    if run is None:
        return "—"
    if not run.complete:
        return f'{_verdict("RED")} INCOMPLETE<div class="small">{escape((run.error or "").splitlines()[0][:200])}</div>'
    if not run.items:
        return "no items"
    acc = stats.accuracy([i.correct for i in run.items], confidence)
    return (f"{100 * acc.value:.1f} %<div class=\"small\">[{100 * acc.low:.1f}, {100 * acc.high:.1f}] · "
            f"N={len(run.items)}</div>")


def render_overview(plan: NightlyPlan, runs: Sequence[RunResult], outcomes: Sequence[ComparisonOutcome],
                    thresholds: Thresholds = Thresholds()) -> str:
    by_key = {(r.model, r.graphs, r.suite): r for r in runs}
    ok = all(o.ok for o in outcomes)
    unexpected = [f"{o.comparison.model.name} {o.comparison.name}: {o.summary.verdict.value}, expected "
                  f"{o.comparison.expectation}" for o in outcomes if not o.ok]
    parts = ["<!doctype html><html><head><meta charset=\"utf-8\"><title>swa-harness nightly</title>",
             f"<style>{_CSS}</style></head><body><h1>Nightly: SGLang, graphs on vs off and stress arms</h1>",
             f'<div class="banner" style="background:{COLOURS["GREEN" if ok else "RED"]}">'
             + ("every comparison as expected" if ok else "not as expected: " + escape("; ".join(unexpected)))
             + "</div>",
             f'<p class="small">{"whole test sets" if plan.limit is None else f"first {plan.limit} items per task"}; '
             f"{plan.concurrency} concurrent requests per server; CIs {100 * thresholds.confidence:.0f} %; "
             "plan: plan.json, verdicts: summary.json</p>"]
    for model in plan.models:
        parts.append(f"<h2>{escape(model.name)}</h2><table><tr><th>task</th>"
                     + "".join(f"<th>{escape(a.name)}<div class=\"small\">{escape(' '.join(a.flags) or '(defaults)')}"
                               f"{escape(' ' + ' '.join(f'{k}={v}' for k, v in a.env.items()) if a.env else '')}</div></th>"
                               for a in plan.arms) + "</tr>")
        for task in plan.tasks:
            parts.append(f"<tr><th>{escape(task.name)}</th>"
                         + "".join(f"<td>{_cell(by_key.get((model.name, a.name, task.name)), thresholds.confidence)}</td>"
                                   for a in plan.arms) + "</tr>")
        parts.append("</table><table><tr><th>comparison (ON vs OFF)</th>"
                     + "".join(f"<th>{escape(t.name)}</th>" for t in plan.tasks)
                     + "<th>verdict</th><th>expected</th><th>report</th></tr>")
        for o in (o for o in outcomes if o.comparison.model == model):
            cells = []
            for suite in o.suites:
                diff = f" {100 * suite.difference.value:+.1f} pp" if suite.difference else ""
                cells.append(f"<td>{_verdict(suite.verdict.value)}{diff}<div class=\"small\">{escape(suite.reason[:160])}"
                             "</div></td>")
            link = (f'<a href="{escape(str(Path(o.report).relative_to(plan.out)))}">report</a>' if o.report else "—")
            parts.append(f"<tr><th>{escape(o.comparison.treatment)} vs {escape(o.comparison.reference)}</th>"
                         + "".join(cells) + f"<td>{_verdict(o.summary.verdict.value)}</td>"
                         f"<td>{escape(o.comparison.expectation)} {'✓' if o.ok else '✗'}</td><td>{link}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "".join(parts)


def write_overview(plan: NightlyPlan, runs: Sequence[RunResult], outcomes: Sequence[ComparisonOutcome],
                   thresholds: Thresholds = Thresholds()) -> Path:
    path = plan.out / "index.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_overview(plan, runs, outcomes, thresholds), encoding="utf-8")
    return path
