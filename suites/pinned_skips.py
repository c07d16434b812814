"""No silent skip on a pinned release: the pytest plugin that holds ``suites/expected_skips.py`` (registered by
``suites/conftest.py``).

Where the installed SGLang or vLLM is its pinned release (``harness/findings.py`` ``PINNED``), a capability skip of
that engine that no row of the table expects fails its test, naming the test, the skip reason and the table; and a
row that is not true fails the session: its test ran on the pinned release without that skip (the release runs it
now), its file is gone, or it says no why. A capability skip is ``NotOnThisSGLang`` or ``NotOnThisVLLM`` (what the
capability modules raise: "lacks", "imports ... no CPU build", "CPU-unreachable"), or any skip of a finding's
reproducer on its engine's pinned release (its scene could not be set up: ``suites/findings/conftest.py``'s
``reproduce``). Every other skip is left alone (the engine not installed, a test for another target, a GPU-only
test), and so is every skip on any other release: the release matrices show those. The skip is told by the
exception a test or its fixtures raised, which a ``unittest.TestCase`` test hands pytest as a message only: the suites
have none (their state machines run through ``run_state_machine_as_test``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from harness.findings import PINNED, finding
from harness.targets.releases import TargetEngine
from harness.targets.sglang.capabilities import NotOnThisSGLang
from harness.targets.vllm.capabilities import NotOnThisVLLM
from suites.expected_skips import EXPECTED_SKIPS, ExpectedSkip
from suites.findings.conftest import installed

TABLE = "suites/expected_skips.py"
CAPABILITY_SKIPS: dict[TargetEngine, type[BaseException]] = {"sglang": NotOnThisSGLang, "vllm": NotOnThisVLLM}
# The report properties the plugin leaves, read back on the xdist controller (and in the junit XML).
EXPECTED, UNEXPECTED = "expected_skip", "unexpected_skip"


def pinned_here() -> dict[TargetEngine, str]:
    """The engines installed here at their pinned release, and that release."""
    return {engine: release for engine, release in PINNED.items() if installed(engine) == release}


def row_problems(rows: Sequence[ExpectedSkip], root: Path) -> list[str]:
    """What makes a row unusable anywhere: an engine with no pinned release, a test file not under ``root`` (the
    session's rootdir, the checkout's root), no reason or no why."""
    problems = []
    for row in rows:
        if row.engine not in PINNED:
            problems.append(f"{row.test}: engine {row.engine!r} has no pinned release (harness/findings.py PINNED)")
        if not (root / row.file).is_file():
            problems.append(f"{row.test}: no such test file {row.file}")
        if not row.reason.strip() or not row.why.strip():
            problems.append(f"{row.test}: a row needs a part of the skip reason and a why")
    return problems


def paste_row(engine: TargetEngine, nodeid: str, reason: str, release: str) -> str:
    """The table row that would expect this skip, its reason without the release in front, its why left to write."""
    _, found, rest = reason.partition(release)
    part = rest.removeprefix("'s").removeprefix(":").strip() if found else reason
    return f"ExpectedSkip({engine!r}, {nodeid!r}, {part!r}, why=''),"


class PinnedSkips:
    """The plugin: judges each skip where it happens (an xdist worker), and the table once the session is over (on
    the controller, which sees every worker's reports)."""

    def __init__(self, rows: Sequence[ExpectedSkip], pinned: Mapping[TargetEngine, str]) -> None:
        self.rows, self.pinned = tuple(rows), dict(pinned)
        self.ran: set[str] = set()
        self.expected: set[int] = set()  # rows that matched a skip
        self.unexpected: list[str] = []  # rows to paste
        self.problems: list[str] = []

    @classmethod
    def here(cls) -> PinnedSkips:
        return cls(EXPECTED_SKIPS, pinned_here())

    def capability(self, item: pytest.Item, call: pytest.CallInfo[None]) -> TargetEngine | None:
        """The pinned engine whose capability this skip is about, or None where it is no such skip."""
        if call.excinfo is None:
            return None
        engine = next((e for e, kind in CAPABILITY_SKIPS.items() if call.excinfo.errisinstance(kind)), None)
        marker = item.get_closest_marker("finding")
        if engine is None and marker is not None and call.excinfo.errisinstance(pytest.skip.Exception):
            engine = finding(marker.args[0]).engine  # a reproducer's scene that could not be set up
        return engine if engine in self.pinned else None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]):
        # Asked before the unittest plugin turns a SkipTest into pytest's own skip, which keeps only its message.
        engine = self.capability(item, call)
        reason = str(call.excinfo.value) if call.excinfo is not None else ""
        report: pytest.TestReport = yield
        if engine is None or not report.skipped or hasattr(report, "wasxfail"):
            return report
        row = next((i for i, r in enumerate(self.rows) if r.matches(engine, item.nodeid, reason)), None)
        if row is not None:
            report.user_properties.append((EXPECTED, row))
            return report
        release = self.pinned[engine]
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} skipped on {engine} {release}, the pinned release, and {TABLE} does not expect it: "
            f"{reason} (make it run there, or add a row that says why it cannot)"
        )
        report.user_properties.append((UNEXPECTED, paste_row(engine, item.nodeid, reason, release)))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup":
            self.ran.add(report.nodeid)
        for name, value in report.user_properties:
            if name == EXPECTED:
                self.expected.add(int(value))
            elif name == UNEXPECTED:
                self.unexpected.append(str(value))

    def untrue_rows(self, root: Path) -> list[str]:
        """Rows unusable anywhere, and rows of a pinned engine whose test ran here without the skip they expect."""
        stale = [
            f"{row.test}: ran on {row.engine} {self.pinned[row.engine]}, the pinned release, without a skip for "
            f"{row.reason!r}: drop the row, or fix it"
            for i, row in enumerate(self.rows)
            if row.engine in self.pinned and i not in self.expected and any(map(row.covers, self.ran))
        ]
        return row_problems(self.rows, root) + stale

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # an xdist worker: its controller sees every test
            return
        self.problems = self.untrue_rows(session.config.rootpath)
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.unexpected:
            terminalreporter.section(f"skips on a pinned release, not in {TABLE}")
            for line in dict.fromkeys(self.unexpected):
                terminalreporter.line(line)
        if self.problems:
            terminalreporter.section(f"{TABLE}: rows that are not true (the session fails)", red=True)
            for line in self.problems:
                terminalreporter.line(line)
