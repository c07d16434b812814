"""The findings plugin: a reproducer marked ``@pytest.mark.finding(N)`` asserts the correct behaviour, and its outcome
is read against ``harness/findings.py``:

- the engine is not installed here: skipped (``nox -s tests`` collects these files without any engine);
- the installed release is listed in the finding's ``has_it``: a strict xfail that only an ``AssertionError`` meets,
  so a pass (the reproducer stopped reproducing) and any other error (it broke) fail the run;
- any other release: a failing assertion becomes an xfail, "still present in X"; a pass stays a pass and is reported
  "fixed in X": in the summary at the end of the run and as the junit property ``finding``. Neither fails CI.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.findings import DISTRIBUTIONS, Engine, Finding, describe, finding
from harness.paths import REPO

_HELD = pytest.StashKey[tuple[Finding, str]]()


def installed(engine: Engine) -> str | None:
    """The installed release of ``engine`` (its distribution's version), or None."""
    for name in DISTRIBUTIONS[engine]:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def load_script(found: Finding) -> ModuleType:
    """The finding's standalone script (docs/repro), imported as a module: the test and the script share one scene."""
    name = f"repro_{Path(found.script).stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / found.script)
    assert spec is not None and spec.loader is not None, found.script
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def reproduce(number: int):
    """Run finding ``number``'s scene. Where the script cannot set it up on this release (the code path is absent, or a
    Triton kernel on CPU) the test skips as not applicable, except on a release listed with the bug: there the
    reproducer must reproduce, and its setup problem fails the test."""
    found = finding(number)
    release = installed(found.engine)
    if found.engine == "sglang":
        from harness.targets.sglang.imports import import_sglang

        import_sglang(any_version=True)  # the import shims (CPU torchvision, old releases' config names)
    script = load_script(found)
    try:
        return script.reproduce()
    except script.SetupProblem as problem:
        if release in found.has_it:
            raise
        pytest.skip(f"{found.engine} {release}: {problem}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("finding")
        if marker is None:
            continue
        found = finding(marker.args[0])
        release = installed(found.engine)
        if release is None:
            item.add_marker(pytest.mark.skip(reason=f"{found.engine} is not installed here"))
            continue
        item.stash[_HELD] = (found, release)
        if release in found.has_it:
            item.add_marker(
                pytest.mark.xfail(strict=True, raises=AssertionError, reason=describe(found, release, "present"))
            )


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = (yield).get_result()
    held = item.stash.get(_HELD, None)
    if held is None or report.when != "call":
        return
    found, release = held
    if release not in found.has_it:
        if report.failed and call.excinfo is not None and call.excinfo.errisinstance(AssertionError):
            report.outcome = "skipped"
            report.wasxfail = describe(found, release, "present")  # how pytest carries an xfail
        elif report.passed:
            report.user_properties.append(("finding", describe(found, release, "fixed")))
    elif report.failed and "XPASS(strict)" in str(report.longrepr):
        report.user_properties.append(("finding", describe(found, release, "fixed")))


class _Summary:
    """Collects the "fixed" lines from every report (on the xdist controller too) and prints them at the end."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.lines += [f"{report.nodeid}: {value}" for name, value in report.user_properties if name == "finding"]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.lines:
            terminalreporter.section("findings: reproducers that passed")
            for line in dict.fromkeys(self.lines):
                terminalreporter.line(line)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Summary(), "swa-harness-findings-summary")
