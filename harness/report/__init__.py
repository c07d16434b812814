"""Every HTML page: a comparison's self-contained report (verdict, per-task statistics, forest plot, flips,
kill matrix) and the overview of a job with several comparisons, in one palette (``palette``)."""

from harness.report.render import build_context, render_html, render_report

__all__ = ["build_context", "render_html", "render_report"]
