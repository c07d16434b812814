"""How a fraction reads wherever people see it: the verdicts' reasons, the report, the overview.

``pct`` writes an accuracy (``74.8 %``), ``pp`` a difference in signed percentage points (``-0.2 pp``,
``+1.5 pp``); a difference that rounds to zero is ``0.0 pp``, never ``+0.0 pp`` or ``-0.0 pp``.
"""

from __future__ import annotations


def pct(x: float) -> str:
    """A fraction as a percentage with one decimal."""
    return f"{100 * x:.1f} %"


def pp(x: float) -> str:
    """A difference of fractions as signed percentage points with one decimal; zero has no sign."""
    text = f"{100 * x:+.1f}"
    return f"{'0.0' if text in ('+0.0', '-0.0') else text} pp"
