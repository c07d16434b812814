"""Render the accuracy comparison as ONE self-contained ``index.html``: the Jinja environment and the page.

Self-contained means: CSS inline, charts as inline SVG drawn in Python, no script, font, image or
link that would reach the network, so the file can be mailed, attached to CI or opened offline.
All model text goes through Jinja2 autoescaping (responses can contain anything, ``<script>``
included). What each part shows is built in ``views`` from the parsed inputs (``inputs``, the
evals' records), numbers formatted there, so the template stays declarative; the verdict comes first.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from harness.evals.compare import Tokenize
from harness.evals.history import Trend
from harness.evals.logprobs import load_thresholds
from harness.evals.results import RunResult, Summary, TaskComparison
from harness.report import views
from harness.report.inputs import FaultEffects, KillMatrixFile, MutationRunFile, Provenance, ReleaseMatrix
from harness.report.palette import INK, LINE, MUTED, SOFT, VERDICT_COLOURS
from harness.report.svg import forest_plot, logprob_plot

TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE_NAME = "report.html.j2"


def breakable(text: Any) -> Markup:
    """Escaped text with line-break opportunities after ``. _ / : - , =`` (ids and keys wrap at their joints)."""
    return Markup(re.sub(r"([._/:,=-])", r"\1<wbr>", str(escape(str(text)))))


def _environment() -> Environment:
    # autoescape=True for every template (the name ends in .j2, which select_autoescape would miss).
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["breakable"] = breakable
    env.filters["verdict_text"] = lambda value: str(value).replace(
        "-", " "
    )  # NO-VERDICT (a CSS class) reads NO VERDICT
    return env


def build_context(
    comparisons: Sequence[TaskComparison],
    runs: Sequence[RunResult],
    *,
    summary: Summary,
    provenance: Mapping[str, Any],
    kill_matrices: Sequence[KillMatrixFile] = (),
    mutation_runs: Sequence[MutationRunFile] = (),
    fault_effects: FaultEffects | None = None,
    release_matrix: ReleaseMatrix | None = None,
    trend: Trend | None = None,
    tokenize: Tokenize | None = None,
    generated_at: str | None = None,
) -> dict[str, Any]:
    """Everything the template shows, already formatted (exposed for tests and other renderers).

    ``summary`` is the job's own overall verdict, shown as is: the report never judges again.
    ``tokenize`` must be the splitter the comparison used, so "first divergent token" names the
    token at the index the comparison found (characters when it is None).
    """
    thresholds = comparisons[0].thresholds if comparisons else {}
    alpha = float(thresholds.get("alpha", 0.05))
    parsed = Provenance.parse(provenance)
    sides = [r for r in runs if r.record.side]
    return {
        "title": "swa-harness accuracy: graphs ON vs OFF",
        "generated_at": generated_at or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "summary": views.summary_view(summary, comparisons),
        "confidence": f"{100 * (1 - alpha):g} %",
        # The footnote's numbers come from this run, never from an example run of another size.
        "mde_note": "; ".join(
            f"{c.task} {100 * c.mde:.1f} pp at N = {c.n}" for c in comparisons if c.complete and c.mde is not None
        ),
        "tasks": [views.task_row(comp) for comp in comparisons],
        "forest": Markup(forest_plot(comparisons, thresholds.get("max_drop"))),  # built from escaped parts in svg.py
        "logprobs": [row for comp in comparisons if (row := views.logprob_row(comp))],
        "logprob_plot": Markup(logprob_plot(comparisons, _logprob_limits(comparisons))),
        "flip_sections": [views.flip_section(comp, tokenize) for comp in comparisons],
        "runs": [views.run_row(run, 1 - alpha) for run in runs],
        "kill_matrices": [views.kill_matrix_view(m) for m in kill_matrices],
        "mutation_runs": [views.mutation_run_view(m) for m in mutation_runs],
        "fault_effects": views.fault_effects_view(fault_effects),
        "release_matrix": views.release_matrix_view(release_matrix),
        "trend": views.trend_view(trend),
        "thresholds": [(k, "None" if v is None else str(v)) for k, v in thresholds.items()],
        "provenance": views.provenance_groups(parsed),
        "glance": views.provenance_glance(
            parsed, {r.record.side: r.graphs for r in sides}, {r.record.side: r.record.forward_paths for r in sides}
        )
        if provenance
        else [],
        "engine": parsed.engine,
        "colours": {
            **{v.value: c for v, c in VERDICT_COLOURS.items()},
            "line": LINE,
            "muted": MUTED,
            "soft": SOFT,
            "ink": INK,
        },
    }


def _logprob_limits(comparisons: Sequence[TaskComparison]) -> dict[str, tuple[float, float]]:
    """Per task, the AMBER and RED max|dlp| thresholds its logprob verdict was judged by (where calibrated)."""
    known = load_thresholds()
    return {
        c.task: (t.amber.max_abs_delta, t.red.max_abs_delta)
        for c in comparisons
        if c.logprobs is not None and (t := known.get(c.logprobs.key))
    }


def render_html(
    comparisons: Sequence[TaskComparison],
    runs: Sequence[RunResult],
    *,
    summary: Summary,
    provenance: Mapping[str, Any],
    **extra: Any,
) -> str:
    """The report as an HTML string; ``extra`` are :func:`build_context`'s optional inputs."""
    context = build_context(comparisons, runs, summary=summary, provenance=provenance, **extra)
    return _environment().get_template(TEMPLATE_NAME).render(**context)


def render_report(
    comparisons: Sequence[TaskComparison],
    runs: Sequence[RunResult],
    *,
    summary: Summary,
    provenance: Mapping[str, Any],
    out_dir: str | Path,
    **extra: Any,
) -> Path:
    """Write ``out_dir/index.html`` and return its path; the verdict shown is ``summary``, as the job computed it."""
    html = render_html(comparisons, runs, summary=summary, provenance=provenance, **extra)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    path.write_text(html, encoding="utf-8")
    return path


__all__ = ["render_report", "render_html", "build_context", "breakable"]
