"""Accuracy results and their statistics: data and pure functions only, no orchestration.

``results`` holds the JSON-round-trippable records, ``samples`` reads lm-eval's per-sample logs into
them, ``stats`` the pure statistical functions, ``compare`` pairs two runs of one task and decides
GREEN / AMBER / RED, ``history`` keeps judged evals and their trend, ``tasks`` names the frozen lm-eval task sets
(a *task*; a *suite* is a set of pytest tests), ``formats`` writes a fraction as people read it.
Nothing here imports the jobs, the engines or the report.
"""
