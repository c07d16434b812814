"""Every HTML page: a comparison's self-contained report (verdict, per-task statistics, forest plot, flips,
kill matrix) and the overview of a job with several comparisons, in one palette (``palette``).

``inputs`` parses what the report reads (kill matrices, fault effects, the release matrix, provenance) once,
``views`` builds what each part of the page shows from parsed records, ``render`` is the Jinja page."""

from harness.report.render import build_context, render_html, render_report

__all__ = ["build_context", "render_html", "render_report"]
