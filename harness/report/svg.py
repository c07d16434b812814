"""Inline SVG charts, drawn in Python so the report needs no script, font or network.

Every piece of text that reaches the SVG goes through ``html.escape``: suite names come from
configuration and must not be able to inject markup.
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

from harness.evals.results import SuiteComparison, Verdict

VERDICT_COLOURS = {Verdict.GREEN: "#1a7f37", Verdict.AMBER: "#b26b00", Verdict.RED: "#c62828"}
_NICE_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5)


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


def forest_plot(comparisons: Sequence[SuiteComparison], max_drop: float | None = None) -> str:
    """Paired difference ON - OFF per suite with its CI, a zero line and the ``-max_drop`` line."""
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
        f'<svg class="forest" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
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
        name = escape(comp.suite)
        out.append(f'<g class="forest-row" data-suite="{name}">')
        out.append(f'<text x="{left - 10}" y="{cy + 4}" text-anchor="end" class="label">{name}</text>')
        if comp.difference is None:
            out.append(
                f'<text x="{x(0):.1f}" y="{cy + 4}" text-anchor="middle" class="incomplete">INCOMPLETE</text>'
            )
        else:
            d = comp.difference
            tip = escape(
                f"{comp.suite}: {_fmt_pp(d.value)} pp, CI {_fmt_pp(d.low)} .. {_fmt_pp(d.high)} pp, "
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
