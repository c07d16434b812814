"""Inline SVG charts, drawn in Python so the report needs no script, font or network.

Every piece of text that reaches the SVG goes through ``html.escape``: task names come from
configuration and must not be able to inject markup.
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

from harness.evals.history import TrendPoint
from harness.evals.results import TaskComparison, Verdict
from harness.report.palette import MUTED, VERDICT_COLOURS

_NICE_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5)


def _text(verdict: str) -> str:
    """A verdict as people read it (NO-VERDICT is NO VERDICT)."""
    return verdict.replace("-", " ")


def _fmt_pp(x: float) -> str:
    text = f"{100 * x:+.1f}"
    return "0" if text in ("+0.0", "-0.0") else text


def _axis(extent: float) -> tuple[float, float]:
    """Half-width of a symmetric axis covering ``extent`` and a tick step giving about 4-8 ticks."""
    for step in _NICE_STEPS:
        half = math.ceil(extent / step - 1e-9) * step
        if half / step <= 4:
            return half, step
    return 1.0, 0.5


def forest_plot(comparisons: Sequence[TaskComparison], max_drop: float | None = None) -> str:
    """Paired difference ON - OFF per task with its CI, a zero line and the ``-max_drop`` line."""
    row_h, top, bottom = 30, 28, 38
    left, plot_w, right = 190, 420, 150
    width = left + plot_w + right
    height = top + row_h * max(1, len(comparisons)) + bottom
    extent = 0.01
    for comp in comparisons:
        if comp.difference is not None:
            extent = max(extent, abs(comp.difference.low), abs(comp.difference.high))
    if max_drop is not None:
        extent = max(extent, max_drop * 1.25)
    half, step = _axis(min(extent, 1.0))

    def x(value: float) -> float:
        return left + (value + half) / (2 * half) * plot_w

    out = [
        f'<svg class="forest" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'preserveAspectRatio="xMinYMin meet">',
        "<title>Paired difference in accuracy, graphs ON minus OFF, with confidence intervals</title>",
        f'<text x="{left + plot_w / 2}" y="14" text-anchor="middle" class="axis-title">'
        "accuracy ON − OFF (percentage points)</text>",
    ]
    axis_y = top + row_h * max(1, len(comparisons))
    ticks = int(round(half / step))
    for i in range(-ticks, ticks + 1):
        value = i * step
        tx = x(value)
        out.append(f'<line x1="{tx:.1f}" y1="{top - 4}" x2="{tx:.1f}" y2="{axis_y}" class="grid"/>')
        out.append(f'<text x="{tx:.1f}" y="{axis_y + 16}" text-anchor="middle" class="tick">{_fmt_pp(value)}</text>')
    out.append(f'<line x1="{x(0):.1f}" y1="{top - 8}" x2="{x(0):.1f}" y2="{axis_y}" class="zero"/>')
    if max_drop is not None and max_drop > 0:
        mx = x(-max_drop)
        out.append(f'<line x1="{mx:.1f}" y1="{top - 8}" x2="{mx:.1f}" y2="{axis_y}" class="tolerance"/>')
        out.append(
            f'<text x="{mx:.1f}" y="{axis_y + 30}" text-anchor="middle" class="tolerance-label">'
            f"−max_drop ({100 * max_drop:.1f} pp)</text>"
        )
    for row, comp in enumerate(comparisons):
        cy = top + row_h * row + row_h / 2
        colour = VERDICT_COLOURS[comp.verdict]
        name = escape(comp.task)
        out.append(f'<g class="forest-row" data-suite="{name}">')
        out.append(f'<text x="{left - 10}" y="{cy + 4}" text-anchor="end" class="label">{name}</text>')
        if comp.difference is None:
            out.append(f'<text x="{x(0):.1f}" y="{cy + 4}" text-anchor="middle" class="incomplete">INCOMPLETE</text>')
        else:
            d = comp.difference
            tip = escape(
                f"{comp.task}: {_fmt_pp(d.value)} pp, CI {_fmt_pp(d.low)} .. {_fmt_pp(d.high)} pp, "
                f"McNemar p = {comp.mcnemar_p:.3g}, {comp.verdict.value}"
            )
            out.append(f"<title>{tip}</title>")
            out.append(
                f'<line x1="{x(max(d.low, -half)):.1f}" y1="{cy}" x2="{x(min(d.high, half)):.1f}" y2="{cy}" '
                f'stroke="{colour}" stroke-width="2.5"/>'
            )
            for end in (d.low, d.high):
                if -half <= end <= half:
                    out.append(
                        f'<line x1="{x(end):.1f}" y1="{cy - 6}" x2="{x(end):.1f}" y2="{cy + 6}" '
                        f'stroke="{colour}" stroke-width="2"/>'
                    )
            out.append(f'<rect x="{x(d.value) - 5:.1f}" y="{cy - 5}" width="10" height="10" fill="{colour}"/>')
            out.append(
                f'<text x="{left + plot_w + 10}" y="{cy + 4}" class="value">{_fmt_pp(d.value)} '
                f"[{_fmt_pp(d.low)}, {_fmt_pp(d.high)}]</text>"
            )
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _trend_range(points: Sequence[TrendPoint]) -> tuple[float, float]:
    """A y range covering every CI shown, at least 5 pp tall, inside [0, 1]."""
    values = [
        v
        for p in points
        if p.snapshot and p.snapshot.complete
        for est in (p.snapshot.on, p.snapshot.off)
        if est is not None
        for v in (est.low, est.high)
    ]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = max(0.01, (0.05 - (high - low)) / 2)
    low, high = max(0.0, low - pad), min(1.0, high + pad)
    return low, max(high, low + 0.01)


def trend_chart(task: str, points: Sequence[TrendPoint]) -> str:
    """Accuracy ON (dots in the verdict's colour) and OFF (hollow) per run, with their CIs.

    A dashed vertical line marks each run whose verdict differs from the run before, labelled
    ``OLD→NEW``; an incomplete run is a red cross on the axis; the current run has a ring.
    """
    width, height, left, right, top, bottom = 560, 170, 46, 16, 26, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    low, high = _trend_range(points)
    n = len(points)

    def x(i: int) -> float:
        return left + (plot_w / 2 if n == 1 else i * plot_w / (n - 1))

    def y(v: float) -> float:
        return top + (high - v) / (high - low) * plot_h

    name = escape(task)
    out = [
        f'<svg class="trend" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'preserveAspectRatio="xMinYMin meet" data-suite="{name}">',
        f"<title>{name}: accuracy with graphs ON and OFF per run, oldest left</title>",
    ]
    for k in range(5):
        v = low + (high - low) * k / 4
        out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{width - right}" y2="{y(v):.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" class="tick">{100 * v:.0f}%</text>')
    for arm, cls in (("off", "trend-off"), ("on", "trend-on")):
        coords = [
            (x(i), y(getattr(p.snapshot, arm).value))
            for i, p in enumerate(points)
            if p.snapshot and p.snapshot.complete and getattr(p.snapshot, arm) is not None
        ]
        if len(coords) > 1:
            path = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy in coords)
            out.append(f'<polyline points="{path}" class="{cls}" fill="none"/>')
    label_every = max(1, math.ceil(n / 10))
    for i, p in enumerate(points):
        cx = x(i)
        if i % label_every == 0 or i == n - 1:
            out.append(f'<text x="{cx:.1f}" y="{height - 10}" text-anchor="middle" class="tick">#{p.index}</text>')
        if p.changed_from is not None:
            out.append(f'<line x1="{cx:.1f}" y1="{top - 4}" x2="{cx:.1f}" y2="{top + plot_h}" class="change"/>')
            new = p.snapshot.verdict if p.snapshot else "?"
            anchor = "end" if i == n - 1 and n > 1 else ("start" if i == 0 else "middle")
            out.append(
                f'<text x="{cx:.1f}" y="{top - 8}" text-anchor="{anchor}" class="change-label">'
                f"{escape(_text(p.changed_from))}→{escape(_text(new))}</text>"
            )
        s = p.snapshot
        when = escape(p.entry.recorded_at)
        if s is None:
            continue
        if not s.complete or s.on is None or s.off is None:
            cy = top + plot_h
            out.append(
                f'<g class="trend-point incomplete" data-index="{p.index}"><title>#{p.index} {when}: '
                f"INCOMPLETE ({escape(s.verdict)})</title>"
                f'<path d="M{cx - 5:.1f},{cy - 5:.1f} l10,10 m0,-10 l-10,10" class="cross"/></g>'
            )
            continue
        colour = VERDICT_COLOURS.get(Verdict(s.verdict), MUTED)
        tip = escape(
            f"#{p.index} {p.entry.recorded_at} · {p.entry.engine}: ON {100 * s.on.value:.1f} % "
            f"OFF {100 * s.off.value:.1f} % · {s.verdict}"
        )
        out.append(
            f'<g class="trend-point" data-index="{p.index}" data-verdict="{escape(s.verdict)}"><title>{tip}</title>'
        )
        out.append(
            f'<line x1="{cx:.1f}" y1="{y(s.on.low):.1f}" x2="{cx:.1f}" y2="{y(s.on.high):.1f}" '
            f'stroke="{colour}" stroke-width="1.5" opacity=".6"/>'
        )
        out.append(f'<circle cx="{cx:.1f}" cy="{y(s.off.value):.1f}" r="4" class="off-dot"/>')
        out.append(f'<circle cx="{cx:.1f}" cy="{y(s.on.value):.1f}" r="4.5" fill="{colour}"/>')
        if p.current:
            out.append(f'<circle cx="{cx:.1f}" cy="{y(s.on.value):.1f}" r="8" class="current-ring"/>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def logprob_plot(comparisons: Sequence[TaskComparison], limits: dict[str, tuple[float, float]]) -> str:
    """Per task, every item's max|dlp| (the chosen token's largest logprob change on the common prefix) as a tick on a
    log axis, the p90 as a bar, and the AMBER / RED thresholds (``limits``: task -> (amber, red)) as dashed lines.
    An item with no change at all sits at the axis's left end."""
    row_h, top, bottom = 30, 28, 34
    left, plot_w, right = 190, 420, 150
    lo, hi = -8, 1  # log10 range
    rows = [c for c in comparisons if c.logprobs is not None]
    width, height = left + plot_w + right, top + row_h * max(1, len(rows)) + bottom

    def x(value: float) -> float:
        exp = min(max(math.log10(value), lo), hi) if value > 0 else lo
        return left + (exp - lo) / (hi - lo) * plot_w

    out = [
        f'<svg class="logprob" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'preserveAspectRatio="xMinYMin meet">',
        "<title>Per item, the largest change of the chosen token's logprob, treatment minus reference</title>",
        f'<text x="{left + plot_w / 2}" y="14" text-anchor="middle" class="axis-title">'
        "max |Δ logprob| per item (log scale)</text>",
    ]
    axis_y = top + row_h * max(1, len(rows))
    for exp in range(lo, hi + 1):
        tx = x(10.0**exp)
        out.append(f'<line x1="{tx:.1f}" y1="{top - 4}" x2="{tx:.1f}" y2="{axis_y}" class="grid"/>')
        label = "≤1e-8" if exp == lo else f"1e{exp}"
        out.append(f'<text x="{tx:.1f}" y="{axis_y + 16}" text-anchor="middle" class="tick">{label}</text>')
    for row, comp in enumerate(rows):
        axis = comp.logprobs
        assert axis is not None
        cy = top + row_h * row + row_h / 2
        colour = VERDICT_COLOURS[axis.verdict]
        name = escape(comp.task)
        out.append(f'<g class="logprob-row" data-suite="{name}" data-verdict="{axis.verdict.value}">')
        out.append(f"<title>{escape(f'{comp.task}: {axis.line}')}</title>")
        out.append(f'<text x="{left - 10}" y="{cy + 4}" text-anchor="end" class="label">{name}</text>')
        for level, limit in zip(("amber", "red"), limits.get(comp.task, ())):
            lx = x(limit)
            out.append(
                f'<line x1="{lx:.1f}" y1="{cy - 11}" x2="{lx:.1f}" y2="{cy + 11}" class="limit-{level}" '
                f'stroke="{VERDICT_COLOURS[Verdict[level.upper()]]}" stroke-dasharray="3,2"/>'
            )
        for item in axis.items:
            ix = x(item.max_abs_delta)
            out.append(
                f'<line x1="{ix:.1f}" y1="{cy - 6}" x2="{ix:.1f}" y2="{cy + 6}" stroke="{colour}" opacity="0.5"/>'
            )
        if axis.n:
            out.append(f'<rect x="{x(axis.delta.p90) - 2:.1f}" y="{cy - 9}" width="4" height="18" fill="{colour}"/>')
        out.append(
            f'<text x="{left + plot_w + 10}" y="{cy + 4}" class="value">{_text(axis.verdict.value)} · max '
            f"{axis.delta.max:.2g}</text>"
        )
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)
