"""pytest plugin for kill-matrix runs: classify every failure, and stop at the first behavioural kill.

A failure *kills* a fault only when a test's own assertion failed: an ``AssertionError`` (or
``pytest.fail`` / ``pytest.raises`` that did not raise) whose crash frame is in suite code
(``suites/``). The same exception raised inside harness, SGLang or torch code is a crash of the code
under test: *error*, never a kill; so is a failure that says it has no verdict (``pytest.fail("NO VERDICT: ...")``,
a server that refused, dropped or never answered a request: ``ServerTransportError``; a pytest-timeout). A kill is
*structural* when the test is marked ``@pytest.mark.structural`` (a dtype, an op count, a design rule) and
*behavioural* otherwise (a computation's output was wrong: slots, K/V rows, logits, accounting).

Each report becomes one JSON line in ``$SWA_HARNESS_VERDICTS``. With ``SWA_HARNESS_STOP_ON_KILL=1``
the session ends at the first behavioural kill: later tests cannot change the verdict.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.env import STOP_ON_KILL_ENV as STOP_ENV
from harness.env import VERDICTS_ENV
from harness.kill_record import KillClass, VerdictOutcome, VerdictLine

SUITE_DIR = "suites"
_ASSERTION = ("AssertionError", "Failed:", "assert ")
_STRUCTURAL = "StructuralFailure"  # suites/checks.py: a structural assertion inside a behavioural test
# No verdict, wherever it was raised: a test that says so (suites/servers/cache_hits.py:hold), a run that hung
# (pytest-timeout). A server that gave no answer to judge raises ServerTransportError, no assertion: an error too.
NO_VERDICT_HEADS = ("Failed: NO VERDICT", "Failed: Timeout")

_session: list[pytest.Session] = []
_classes: dict[str, KillClass] = {}


def classify(report: pytest.TestReport) -> VerdictOutcome:
    """``kill`` or ``error`` for a failed report."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if report.when != "call" or crash is None:
        return "error"
    head = crash.message.strip()
    if head.startswith(NO_VERDICT_HEADS):  # a pytest.fail, yet no assertion judged an output
        return "error"
    in_suite = Path(crash.path).resolve().is_relative_to(Path.cwd().resolve() / SUITE_DIR)
    return "kill" if in_suite and (head.startswith(_ASSERTION) or _STRUCTURAL in head.split(":", 1)[0]) else "error"


def pytest_sessionstart(session: pytest.Session) -> None:
    _session.append(session)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        _classes[item.nodeid] = "structural" if item.get_closest_marker("structural") else "behavioural"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        verdict = VerdictLine(report.nodeid, outcome="passed")
    elif report.failed:
        kind = classify(report)
        crash = getattr(report.longrepr, "reprcrash", None)
        message = (crash.message if crash else str(report.longrepr)).strip().replace("\n", " ")[:300]
        structural = crash is not None and _STRUCTURAL in crash.message.split(":", 1)[0]
        kill_class = "structural" if structural else _classes.get(report.nodeid, "behavioural")
        verdict = VerdictLine(
            nodeid=report.nodeid,
            outcome=kind,
            kill_class=kill_class if kind == "kill" else None,
            where=f"{Path(crash.path).name}:{crash.lineno}" if crash else None,
            message=message,
        )
        if kind == "kill" and verdict.kill_class == "behavioural" and os.environ.get(STOP_ENV) == "1" and _session:
            _session[0].shouldstop = f"fault killed by {report.nodeid}"
    else:
        return
    path = os.environ.get(VERDICTS_ENV)
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(verdict.to_json()) + "\n")
