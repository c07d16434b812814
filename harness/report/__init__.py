"""The self-contained HTML report: verdict, per-suite statistics, forest plot, flips, kill matrix."""

from harness.report.render import build_context, render_html, render_report

__all__ = ["build_context", "render_html", "render_report"]
