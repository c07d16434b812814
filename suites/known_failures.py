"""Known failures: a strict xfail that only its own failure meets.

``pytest.mark.xfail(strict=True, raises=AssertionError)`` takes any assertion, and one without ``raises`` any error:
a server that crashed, or a fault that broke the test another way, would read as the known bug "still present".
``known_failure(reason, raises=..., match=r"...")`` is a strict xfail whose failure must be of that type and say
that pattern (``re.search`` over its message, pytest's ``RaisesExc``); any other failure fails the test, and this
plugin adds which known failure it was not. A pass fails as any strict xfail's does (``XPASS(strict)``). Under
``suites/`` (registered by ``suites/conftest.py``) every strict xfail must be one: another fails the test, saying so.
"""

from __future__ import annotations

import pytest

RULE = "a strict xfail under suites/ names its exception and message: suites/known_failures.py:known_failure"


def known_failure(
    reason: str, *, raises: type[BaseException] | tuple[type[BaseException], ...], match: str
) -> pytest.MarkDecorator:
    """A strict xfail met only by ``raises`` whose message contains ``match`` (a regular expression)."""
    return pytest.mark.xfail(strict=True, raises=pytest.RaisesExc(raises, match=match), reason=reason)


def _strict_xfail(item: pytest.Item) -> pytest.Mark | None:
    """The strict xfail that applies to ``item`` (an unconditional one, or one whose condition held), if any."""
    default = item.config.getini("xfail_strict")
    for mark in item.iter_markers("xfail"):
        if all(isinstance(c, bool) and c for c in mark.args) and mark.kwargs.get("strict", default):
            return mark
    return None


def _say(report: pytest.TestReport, note: str) -> None:
    """Fail ``report`` with ``note`` on its one-line summary (its crash message), its traceback kept."""
    report.outcome = "failed"
    if hasattr(report, "wasxfail"):
        del report.wasxfail
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        crash.message = f"{crash.message} [{note}]"
    else:
        report.longrepr = f"{report.longrepr}\n{note}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = (yield).get_result()
    mark = _strict_xfail(item) if report.when == "call" else None
    if mark is None:
        return
    expected = mark.kwargs.get("raises")
    if not isinstance(expected, pytest.RaisesExc) or expected.match is None:
        _say(report, RULE)
    elif report.failed and call.excinfo is not None:  # pytest's xfail found it of another type or message
        error = call.excinfo.value
        said = (str(error).strip().splitlines() or [""])[0]
        _say(
            report,
            f"not the known failure {mark.kwargs.get('reason')!r}: expected {expected!r}, got "
            f"{type(error).__name__}: {said}",
        )
