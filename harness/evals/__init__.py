"""Accuracy runs with graphs ON and OFF, their paired statistics and verdicts.

Two layers, imported strictly downwards (``harness.report`` sits between them):

* statistics, importing nothing of the jobs or the report: ``results`` holds the
  JSON-round-trippable records, ``stats`` the pure statistical functions, ``compare`` pairs two
  runs of one suite and decides GREEN / AMBER / RED;
* jobs: ``cli`` parses ``swa-harness eval`` into a ``config.EvalConfig`` and ``run`` runs it (a
  server and lm-eval per mode, with ``suites``, ``lmeval``, ``cache``, ``progress``,
  ``provenance``); ``report_cli`` re-renders saved runs.
"""
