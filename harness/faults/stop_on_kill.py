"""pytest plugin for kill-matrix runs: end the session at the first failed *assertion*.

Once a suite has killed a fault, the rest of its tests cannot change the verdict. Failures that are
not assertions (a crash elsewhere) do not stop the run, so a later real kill is still found.
"""

from __future__ import annotations

import pytest

ASSERTION_PREFIXES = ("AssertionError", "assert ", "Failed:")


def is_assertion(report: pytest.TestReport) -> bool:
    crash = getattr(report.longrepr, "reprcrash", None)
    return report.when == "call" and crash is not None and crash.message.strip().startswith(ASSERTION_PREFIXES)


_session: list[pytest.Session] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    _session.append(session)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed and is_assertion(report) and _session:
        _session[0].shouldstop = f"fault killed by {report.nodeid}"
