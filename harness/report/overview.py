"""The front page of a job with several comparisons (the nightly, a plan, the main job): per model, one column per arm (accuracy
per task), then every comparison's verdict per task, whether it met its expectation, and a link to its
full report. Self-contained HTML in the report's palette; it takes plain data, not the job's plan."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Mapping, Sequence

from harness.evals import stats
from harness.evals.compare import Thresholds
from harness.evals.formats import pct, pp
from harness.evals.results import RunResult, TaskComparison
from harness.report.palette import INK, LINE, MUTED, SOFT, verdict_colour


@dataclass(frozen=True)
class OverviewComparison:
    label: str  # "on vs off"
    tasks: Sequence[TaskComparison]
    verdict: str
    expectation: str
    ok: bool
    report: str | None  # its report, relative to the overview page


@dataclass(frozen=True)
class OverviewModel:
    name: str
    arms: Sequence[tuple[str, str, str]]  # name, flags, env
    tasks: Sequence[str]
    cells: Mapping[tuple[str, str], RunResult | None]  # (arm, task) -> its run
    comparisons: Sequence[OverviewComparison]


_CSS = f"""
body{{font:14px/1.45 system-ui,sans-serif;margin:24px;max-width:1360px;color:{INK}}}
table{{border-collapse:collapse;margin:8px 0 20px}}th,td{{border:1px solid {LINE};padding:4px 8px;text-align:left;
vertical-align:top}}th{{background:{SOFT}}}.v{{color:#fff;font-weight:600;padding:1px 6px;border-radius:3px}}
.banner{{padding:10px 14px;border-radius:6px;color:#fff;font-weight:600;margin-bottom:16px}}.small{{color:{MUTED};
font-size:12px}}code{{font-size:12px;overflow-wrap:anywhere}}
"""


def _verdict(value: str) -> str:
    return f'<span class="v" style="background:{verdict_colour(value)}">{escape(value.replace("-", " "))}</span>'


def _cell(run: RunResult | None, confidence: float) -> str:
    if run is None:
        return "—"
    if not run.complete:
        return (
            f'<span class="v" style="background:{MUTED}">NO RESULT</span>'
            f'<div class="small">{escape((run.error or "").splitlines()[0][:200])}</div>'
        )
    if not run.items:
        return "no items"
    acc = stats.accuracy([i.correct for i in run.items], confidence)
    return f'{pct(acc.value)}<div class="small">[{100 * acc.low:.1f}, {100 * acc.high:.1f}] · N={len(run.items)}</div>'


# What a server counted over its run (``harness.servers``: one name per counter for every kind), as the overview
# shows it under each arm; a counter the kind does not report is left out, never shown as 0.
_COUNTERS = (
    ("preemptions", "preemptions {:,}"),
    ("prefix_cache_evicted_tokens", "tokens evicted {:,}"),
    ("prefix_cache_swa_evicted_tokens", "SWA tokens evicted {:,}"),
    ("prefix_cache_swa_tokens_held", "live SWA tokens held at the end {:,}"),
    ("prefix_cache_swa_evictable_tokens", "SWA tokens evictable at the end {:,}"),
    ("kv_blocks_reallocated", "blocks handed out again {:,}"),
)


def counters_line(counters: Mapping[str, object] | None) -> str:
    """An arm's server counters in one line: prompt tokens served from its prefix cache, then pressure."""
    if not counters:
        return "—"
    parts = []
    hits, asked = counters.get("prefix_cache_hit_tokens"), counters.get("prefix_cache_query_tokens")
    if isinstance(asked, int) and asked > 0:
        parts.append(f"prefix cache {hits or 0:,} / {asked:,} prompt tokens ({(hits or 0) / asked:.0%})")
    elif isinstance(asked, int):
        parts.append("prefix cache: no prompt tokens asked (off)")
    parts += [fmt.format(counters[name]) for name, fmt in _COUNTERS if isinstance(counters.get(name), int)]
    return " · ".join(parts) or "—"


def render_overview(
    models: Sequence[OverviewModel],
    thresholds: Thresholds = Thresholds(),
    title: str = "Nightly: graphs on vs off and stress arms",
) -> str:
    outcomes = [c for m in models for c in m.comparisons]
    ok = all(c.ok for c in outcomes)
    missed = [c for m in models for c in m.comparisons if not c.ok]
    unexpected = [
        f"{m.name} {c.label}: {c.verdict.replace('-', ' ')}, expected {c.expectation}"
        for m in models
        for c in m.comparisons
        if not c.ok
    ]
    # Only a measured verdict against its expectation is a red banner; comparisons without one are grey.
    banner = "GREEN" if ok else "RED" if any(c.verdict != "NO-VERDICT" for c in missed) else "NO-VERDICT"
    n = sorted({len(r.items) for m in models for r in m.cells.values() if r is not None and r.complete})
    parts = [
        '<!doctype html><html><head><meta charset="utf-8"><title>swa-harness overview</title>',
        f"<style>{_CSS}</style></head><body><h1>{escape(title)}</h1>",
        f'<div class="banner" style="background:{verdict_colour(banner)}">'
        + ("every comparison as expected" if ok else "not as expected: " + escape("; ".join(unexpected)))
        + "</div>",
        f'<p class="small">N per task: {", ".join(map(str, n)) or "none"}; CIs {100 * thresholds.confidence:.0f} %; '
        "plan: plan.json, verdicts: summary.json</p>",
    ]
    for model in models:
        parts.append(
            f"<h2>{escape(model.name)}</h2><table><tr><th>task</th>"
            + "".join(
                f'<th>{escape(name)}<div class="small">{escape(flags)}{escape(" " + env if env else "")}</div></th>'
                for name, flags, env in model.arms
            )
            + "</tr>"
        )
        for task in model.tasks:
            parts.append(
                f"<tr><th>{escape(task)}</th>"
                + "".join(
                    f"<td>{_cell(model.cells.get((arm, task)), thresholds.confidence)}</td>" for arm, _, _ in model.arms
                )
                + "</tr>"
            )
        parts.append(
            '<tr><th>server counters<div class="small">over the arm\'s run</div></th>'
            + "".join(
                f'<td class="small">{escape(counters_line(_arm_counters(model, arm)))}</td>' for arm, _, _ in model.arms
            )
            + "</tr>"
        )
        parts.append(
            "</table><table><tr><th>comparison (ON vs OFF)</th>"
            + "".join(f"<th>{escape(t)}</th>" for t in model.tasks)
            + "<th>verdict</th><th>expected</th><th>report</th></tr>"
        )
        for c in model.comparisons:
            cells = []
            for task in c.tasks:
                diff = f" {pp(task.difference.value)}" if task.difference else ""
                cells.append(
                    f'<td>{_verdict(task.verdict.value)}{diff}<div class="small">{escape(task.reason[:160])}</div></td>'
                )
            link = f'<a href="{escape(c.report)}">report</a>' if c.report else "—"
            parts.append(
                f"<tr><th>{escape(c.label)}</th>" + "".join(cells) + f"<td>{_verdict(c.verdict)}</td>"
                f"<td>{escape(c.expectation)} {'✓' if c.ok else '✗'}</td><td>{link}</td></tr>"
            )
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "".join(parts)


def _arm_counters(model: OverviewModel, arm: str) -> Mapping[str, object] | None:
    """The arm's counters: its server counts once over the lm-eval run every task shares."""
    runs = [model.cells.get((arm, task)) for task in model.tasks]
    return next((r.record.counters for r in runs if r is not None and r.record.counters), None)


def write_overview(
    path: Path, models: Sequence[OverviewModel], thresholds: Thresholds = Thresholds(), title: str | None = None
) -> Path:
    """The page at ``path``; ``title``: the job's (default: the nightly's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    page = render_overview(models, thresholds) if title is None else render_overview(models, thresholds, title)
    path.write_text(page, encoding="utf-8")
    return path
