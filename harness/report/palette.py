"""The report's colours, one table for every page (the comparison report, its charts, the overview)."""

from __future__ import annotations

from harness.evals.results import Verdict

MUTED = "#59636e"  # secondary text, no verdict (nothing measured), and an arm with no result
VERDICT_COLOURS = {Verdict.GREEN: "#1a7f37", Verdict.AMBER: "#b26b00", Verdict.RED: "#c62828", Verdict.NONE: MUTED}
LINE = "#d0d7de"
SOFT = "#f6f8fa"
INK = "#1f2328"


def verdict_colour(value: str) -> str:
    """The colour of a verdict given by its name (``"RED"``); MUTED for anything else."""
    return VERDICT_COLOURS[Verdict(value)] if value in Verdict.__members__ else MUTED
