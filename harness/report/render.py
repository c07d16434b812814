"""Render the accuracy comparison as ONE self-contained ``index.html``.

Self-contained means: CSS inline, charts as inline SVG drawn in Python, no script, font, image or
link that would reach the network, so the file can be mailed, attached to CI or opened offline.
All model text goes through Jinja2 autoescaping (responses can contain anything, ``<script>``
included). Numbers are formatted here, not in the template, so the template stays declarative.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from harness.evals import stats
from harness.evals.results import ItemDiff, RunResult, SuiteComparison, Summary
from harness.report.svg import VERDICT_COLOURS, forest_plot

TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE_NAME = "report.html.j2"


def _environment() -> Environment:
    # autoescape=True for every template (the name ends in .j2, which select_autoescape would miss).
    return Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _pp(x: float) -> str:
    text = f"{100 * x:+.1f} pp"
    return text.replace("+0.0", "0.0").replace("-0.0", "0.0")


def _ci(low: float, high: float, fmt: Callable[[float], str] = _pct) -> str:
    return f"[{fmt(low)}, {fmt(high)}]"


def _p_value(p: float) -> str:
    return f"{p:.3g}" if p >= 1e-4 else f"{p:.1e}"


def _suite_row(comp: SuiteComparison) -> dict[str, Any]:
    """Table cells for one suite; an incomplete comparison carries errors and no numbers."""
    row: dict[str, Any] = {
        "suite": comp.suite,
        "model": comp.model,
        "graphs": f"{comp.on_graphs} vs {comp.off_graphs}",
        "complete": comp.complete,
        "errors": comp.errors,
        "verdict": comp.verdict.value,
        "reasons": comp.reasons,
        "anchor": f"suite-{comp.suite}",
    }
    if comp.complete:
        assert comp.on_accuracy and comp.off_accuracy and comp.difference and comp.mde is not None
        assert comp.mcnemar_p is not None
        row.update(
            n=comp.n,
            on_acc=_pct(comp.on_accuracy.value),
            on_ci=_ci(comp.on_accuracy.low, comp.on_accuracy.high),
            off_acc=_pct(comp.off_accuracy.value),
            off_ci=_ci(comp.off_accuracy.low, comp.off_accuracy.high),
            diff=_pp(comp.difference.value),
            diff_ci=_ci(comp.difference.low, comp.difference.high, _pp),
            discordant=f"{comp.on_better} / {comp.off_better}",
            p=_p_value(comp.mcnemar_p),
            mde=f"{100 * comp.mde:.1f} pp",
            divergent=comp.n_divergent,
        )
    return row


def _diff_view(diff: ItemDiff) -> dict[str, Any]:
    """Split both responses at the common prefix so the template can mark the diverging rest."""
    cut = diff.prefix_chars
    return {
        "item_id": diff.item_id,
        "direction": diff.direction,
        "prompt": diff.prompt,
        "gold": diff.gold,
        "on_extracted": "—" if diff.on_extracted is None else diff.on_extracted,
        "off_extracted": "—" if diff.off_extracted is None else diff.off_extracted,
        "on_correct": diff.on_correct,
        "off_correct": diff.off_correct,
        "first_diff_token": diff.first_diff_token,
        "prefix_chars": cut,
        "identical": diff.on_response == diff.off_response,
        "on_prefix": diff.on_response[:cut],
        "on_rest": diff.on_response[cut:],
        "off_prefix": diff.off_response[:cut],
        "off_rest": diff.off_response[cut:],
    }


def _run_row(run: RunResult, confidence: float) -> dict[str, Any]:
    row: dict[str, Any] = {
        "suite": run.suite,
        "graphs": run.graphs,
        "model": run.model,
        "complete": run.complete,
        "error": run.error,
        "n_items": len(run.items),
        "wall_s": f"{run.wall_s:.1f}",
        "meta": json.dumps(run.meta, sort_keys=True, default=str) if run.meta else "",
        "accuracy": None,
    }
    if run.complete and run.items:
        acc = stats.accuracy([item.correct for item in run.items], confidence)
        row["accuracy"] = f"{_pct(acc.value)} {_ci(acc.low, acc.high)}"
    return row


def _flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Provenance as ``(dotted.key, text)`` rows; nested dicts become dotted keys, the rest JSON."""
    rows: list[tuple[str, str]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            rows.extend(_flatten(value, f"{name}."))
        elif isinstance(value, str):
            rows.append((name, value))
        else:
            rows.append((name, json.dumps(value, sort_keys=True, default=str)))
    return rows


def _kill_matrix_view(matrix: Mapping[str, Any]) -> dict[str, Any]:
    """Fault x suite grid from the faults runner's JSON; unknown statuses are shown, not dropped."""
    clean = matrix.get("clean") or {}
    faults = matrix.get("faults") or []
    suites: list[str] = list(clean)
    for fault in faults:
        suites.extend(s for s in fault.get("suites", {}) if s not in suites)
    rows = []
    killed = survived = errored = 0
    for fault in faults:
        cells = []
        statuses = []
        for suite in suites:
            cell = fault.get("suites", {}).get(suite)
            status = str(cell.get("status")) if cell else "missing"
            statuses.append(status)
            cells.append({"status": status, "first_failure": (cell or {}).get("first_failure") or ""})
        if "killed" in statuses:
            killed += 1
            outcome = "killed"
        elif "error" in statuses or "missing" in statuses:
            errored += 1
            outcome = "error"
        else:
            survived += 1
            outcome = "survived"
        rows.append(
            {
                "id": str(fault.get("id", "?")),
                "seed": str(fault.get("seed", "")),
                "breaks": str(fault.get("breaks", "")),
                "user_sees": str(fault.get("user_sees", "")),
                "cells": cells,
                "outcome": outcome,
            }
        )
    clean_cells = []
    for suite in suites:
        cell = clean.get(suite) or {}
        clean_cells.append({"status": str(cell.get("status", "missing")), "detail": str(cell.get("detail") or "")})
    clean_failed = [s for s, c in zip(suites, clean_cells) if c["status"] != "passed"]
    summary = f"{killed} of {len(faults)} faults killed by at least one suite"
    if survived:
        summary += f", {survived} survived every suite"
    if errored:
        summary += f", {errored} not killed, with a suite erroring"
    summary += "; clean baseline " + (
        "passed every suite" if not clean_failed else "FAILED on " + ", ".join(clean_failed)
    )
    return {
        "generated_at": str(matrix.get("generated_at", "")),
        "wall_s": matrix.get("wall_s"),
        "suites": suites,
        "clean": clean_cells,
        "rows": rows,
        "summary": summary,
        "clean_ok": not clean_failed,
        "all_killed": killed == len(faults),
    }


def build_context(
    comparisons: Sequence[SuiteComparison],
    runs: Sequence[RunResult],
    *,
    summary: Summary,
    kill_matrix: Mapping[str, Any] | None,
    provenance: Mapping[str, Any],
    generated_at: str | None = None,
) -> dict[str, Any]:
    """Everything the template shows, already formatted (exposed for tests and other renderers).

    ``summary`` is the job's own overall verdict, shown as is: the report never judges again.
    """
    thresholds = comparisons[0].thresholds if comparisons else {}
    alpha = float(thresholds.get("alpha", 0.05))
    max_drop = thresholds.get("max_drop")
    return {
        "title": "swa-harness accuracy: graphs ON vs OFF",
        "generated_at": generated_at or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "summary": {
            "verdict": summary.verdict.value,
            "reason": summary.reason,
            "counts": summary.counts,
            "colour": VERDICT_COLOURS[summary.verdict],
        },
        "confidence": f"{100 * (1 - alpha):g} %",
        "suites": [_suite_row(comp) for comp in comparisons],
        "forest": Markup(forest_plot(comparisons, max_drop)),  # built from escaped parts in svg.py
        "flip_sections": [
            {
                "suite": comp.suite,
                "anchor": f"flips-{comp.suite}",
                "complete": comp.complete,
                # ON-broke flips first: those are the ones a regression hunt starts from.
                "flips": [_diff_view(d) for d in sorted(comp.flips, key=lambda d: d.on_correct)],
                "text_diffs": [_diff_view(d) for d in comp.text_diffs],
            }
            for comp in comparisons
        ],
        "runs": [_run_row(run, 1 - alpha) for run in runs],
        "kill_matrix": _kill_matrix_view(kill_matrix) if kill_matrix is not None else None,
        "thresholds": [(k, "None" if v is None else str(v)) for k, v in thresholds.items()],
        "provenance": _flatten(provenance),
        "colours": {v.value: c for v, c in VERDICT_COLOURS.items()},
    }


def render_html(
    comparisons: Sequence[SuiteComparison],
    runs: Sequence[RunResult],
    *,
    summary: Summary,
    kill_matrix: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any],
    generated_at: str | None = None,
) -> str:
    """The report as an HTML string (``render_report`` writes it to disk)."""
    context = build_context(
        comparisons, runs, summary=summary, kill_matrix=kill_matrix, provenance=provenance, generated_at=generated_at
    )
    return _environment().get_template(TEMPLATE_NAME).render(**context)


def render_report(
    comparisons: Sequence[SuiteComparison],
    runs: Sequence[RunResult],
    *,
    summary: Summary,
    kill_matrix: Mapping[str, Any] | None,
    provenance: Mapping[str, Any],
    out_dir: str | Path,
    generated_at: str | None = None,
) -> Path:
    """Write ``out_dir/index.html`` and return its path; the verdict shown is ``summary``, as the job computed it."""
    html = render_html(
        comparisons, runs, summary=summary, kill_matrix=kill_matrix, provenance=provenance, generated_at=generated_at
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    path.write_text(html, encoding="utf-8")
    return path


__all__ = ["render_report", "render_html", "build_context"]
