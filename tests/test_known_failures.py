"""Known failures (suites/known_failures.py): a strict xfail is met only by its own exception saying its own message,
on real pytest runs of small test files; and each finding's ``says`` (harness/findings.py) matches what its script
says when it finds the bug, and nothing it says otherwise."""

from __future__ import annotations

import ast
import re

import pytest

from harness.findings import FINDINGS, Finding
from harness.paths import REPO

pytest_plugins = ["pytester"]

KNOWN = """
import pytest
from harness.servers.lifecycle import ServerTransportError
from suites.known_failures import known_failure

BUG = known_failure("finding #0", raises=AssertionError, match=r"took \\d+ slots")

@BUG
def test_the_bug():
    assert False, "a refused decode took 4 slots"

@BUG
def test_another_assertion():
    assert False, "a decode was served without a page"

@BUG
def test_a_server_that_died():
    raise ServerTransportError("dropped", "the server dropped a request; its log's last error: took 4 slots")

@BUG
def test_fixed():
    pass

@pytest.mark.xfail(strict=True, raises=AssertionError, reason="a plain strict xfail")
def test_plain_strict():
    assert False, "anything"

@pytest.mark.xfail(reason="not strict: not a known failure")
def test_not_strict():
    assert False

def test_marked_while_it_runs(request):
    request.applymarker(known_failure("finding #0", raises=AssertionError, match=r"took \\d+ slots"))
    assert False, "the pool lost a page"
"""


@pytest.fixture
def outcomes(pytester: pytest.Pytester) -> dict[str, tuple[str, str]]:
    """Each test of KNOWN -> (its outcome, its one-line summary: the crash message pytest prints), under the plugin."""
    pytester.makepyfile(test_known=KNOWN)
    recorded = pytester.inline_run("-p", "suites.known_failures", "-p", "no:cacheprovider")
    found = {}
    for report in recorded.getreports("pytest_runtest_logreport"):
        if report.when == "call":
            crash = getattr(report.longrepr, "reprcrash", None)
            outcome = "XFAIL" if hasattr(report, "wasxfail") else report.outcome.upper()
            found[report.nodeid.split("::")[-1]] = (outcome, crash.message if crash else str(report.longrepr))
    return found


def test_only_its_own_exception_and_message_meet_a_known_failure(outcomes: dict[str, tuple[str, str]]) -> None:
    assert outcomes["test_the_bug"][0] == "XFAIL"
    outcome, said = outcomes["test_another_assertion"]
    assert outcome == "FAILED" and "a decode was served without a page" in said, said
    assert "not the known failure 'finding #0'" in said and "match='took \\\\d+ slots'" in said, said
    outcome, said = outcomes["test_a_server_that_died"]  # the right words, the wrong exception: a crash
    assert outcome == "FAILED" and "RaisesExc(AssertionError" in said and "got ServerTransportError" in said, said
    outcome, said = outcomes["test_fixed"]
    assert outcome == "FAILED" and "XPASS(strict)" in said, said
    outcome, said = outcomes["test_marked_while_it_runs"]
    assert outcome == "FAILED" and "not the known failure" in said, said


def test_a_strict_xfail_without_a_message_pattern_fails_naming_the_rule(outcomes: dict[str, tuple[str, str]]) -> None:
    outcome, said = outcomes["test_plain_strict"]
    assert outcome == "FAILED" and "names its exception and message" in said, said
    assert outcomes["test_not_strict"][0] == "XFAIL"  # a plain xfail is no known failure: left alone


def _verdicts(found: Finding) -> dict[bool, list[str]]:
    """The messages the finding's script gives its verdicts, ``Verdict(bug_present, f"...")``, each formatted value
    written ``0``: bug present -> its messages, fixed -> its messages."""
    out: dict[bool, list[str]] = {True: [], False: []}
    for node in ast.walk(ast.parse((REPO / found.script).read_text())):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "Verdict" and len(node.args) == 2:
            present, message = node.args
            parts = message.values if isinstance(message, ast.JoinedStr) else [message]
            text = "".join(p.value if isinstance(p, ast.Constant) else "0" for p in parts)
            out[ast.literal_eval(present)].append(text)
    return out


@pytest.mark.parametrize("found", FINDINGS, ids=[f"finding-{f.number}" for f in FINDINGS])
def test_each_finding_says_what_its_script_says_of_the_bug_and_only_that(found: Finding) -> None:
    verdicts = _verdicts(found)
    assert verdicts[True] and verdicts[False], f"{found.script}: no Verdict(True, ...) and Verdict(False, ...) read"
    assert found.says is not None, f"finding #{found.number} has no `says` in harness/findings.py"
    unmatched = [m for m in verdicts[True] if not re.search(found.says, f"sglang 0.5.23: BUG PRESENT: {m}")]
    assert not unmatched, f"#{found.number}: says {found.says!r}, which misses {unmatched}"
    matched = [m for m in verdicts[False] if re.search(found.says, m)]
    assert not matched, f"#{found.number}: says {found.says!r}, which also matches the fixed verdict {matched}"
