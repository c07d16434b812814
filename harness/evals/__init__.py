"""Accuracy runs with graphs ON and OFF, their paired statistics and verdicts.

``results`` holds the JSON-round-trippable records, ``stats`` the pure statistical functions,
``compare`` pairs two runs of one suite and decides GREEN / AMBER / RED.
"""
