"""The findings plugin: a reproducer marked ``@pytest.mark.finding(N)`` asserts the correct behaviour, and its outcome
is read against ``harness/findings.py``:

- the engine is not installed here: skipped (``nox -s tests`` collects these files without any engine);
- the installed release is listed in the finding's ``has_it``: a strict xfail that only an ``AssertionError`` saying
  the finding's ``says`` meets (``suites/known_failures.py``), so a pass (the reproducer stopped reproducing) and any
  other failure (it broke, or found something else) fail the run;
- any other release: a failing assertion becomes an xfail, "still present in X"; a pass stays a pass and is reported
  "fixed in X": in the summary at the end of the run and as the junit property ``finding``. Neither fails CI;
- except the pinned release of a finding fixed before it (the release matrix found it in an older one): there the
  reproducer guards the fix, and a failing assertion fails the run.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from harness.findings import DISTRIBUTIONS, PINNED, Finding, describe, finding
from harness.targets.releases import TargetEngine
from harness.paths import REPO
from suites.known_failures import known_failure

EXIT_FIXED, EXIT_BUG = 0, 1  # the scripts' exit statuses (2: no verdict)
_HELD = pytest.StashKey[tuple[Finding, str]]()


@dataclass(frozen=True)
class Verdict:
    """What a reproducer's scene found: the bug there or not, in the scene's own words."""

    bug_present: bool
    message: str


def installed(engine: TargetEngine) -> str | None:
    """The installed release of ``engine`` (its distribution's version), or None."""
    for name in DISTRIBUTIONS[engine]:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _script(found: Finding | str) -> str:
    """A finding's script, or a script named by its path (a docs/repro script of a finding that is no engine bug)."""
    return found if isinstance(found, str) else found.script


def load_script(found: Finding | str) -> ModuleType:
    """The finding's standalone script (docs/repro), imported as a module: the test and the script share one scene."""
    script = _script(found)
    name = f"repro_{Path(script).stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / script)
    assert spec is not None and spec.loader is not None, script
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class ScriptRun:
    """One run of a finding's script with this interpreter: its exit status and what it printed."""

    status: int
    stdout: str
    stderr: str  # the engine's logs
    seconds: float

    @property
    def said(self) -> str:
        """The script's verdict line: its last line on stdout."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        return lines[-1] if lines else "(nothing on stdout)"

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def judged(self, script: str) -> int:
        """Its exit status when the script reached a verdict (0 fixed, 1 present); any other (2: it could not set up,
        a crash) ends the test as NO VERDICT, an error and never a kill, as a script's own "no verdict" means."""
        if self.status not in (EXIT_BUG, EXIT_FIXED):
            pytest.fail(f"NO VERDICT: {script} exited {self.status}: {self.said}\n{self.output[-4000:]}", pytrace=False)
        return self.status


# Runs a script as __main__ after the harness's SGLang import shims (CPU torchvision; the config names that SGLang
# 0.5.11-0.5.19 register and transformers 5.19 already ships), which the release matrix's shared base needs: the
# reproducer of an isolated scene runs this way, as the in-process ones import the script after the same shims.
_WITH_SHIMS = (
    "import runpy, sys; from harness.targets.sglang.imports import prepare_imports; prepare_imports(); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_script(found: Finding | str, *, timeout: float = 300.0, shims: bool = False) -> ScriptRun:
    """``python docs/repro/<script>`` with the engine's interpreter, as a maintainer would run it; ``shims``: after the
    harness's SGLang import shims (see ``_WITH_SHIMS``)."""
    started = time.monotonic()
    script = str(REPO / _script(found))
    done = subprocess.run(
        [sys.executable, "-c", _WITH_SHIMS, script] if shims else [sys.executable, script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"},
    )
    return ScriptRun(done.returncode, done.stdout, done.stderr, round(time.monotonic() - started, 1))


def reproduce(number: int) -> Verdict:
    """Run finding ``number``'s scene: in this process (the script imported as a module), or, for an isolated scene,
    the script in its own. Where the scene cannot be set up on this release (the code path is absent, or a Triton
    kernel on CPU) the test skips as not applicable, except on a release listed with the bug: there the reproducer
    must reproduce, and its setup problem fails the test."""
    found = finding(number)
    release = installed(found.engine)
    listed = release in found.has_it
    if found.isolated:
        run = run_script(found, shims=found.engine == "sglang")
        if run.status in (EXIT_BUG, EXIT_FIXED):
            return Verdict(run.status == EXIT_BUG, run.said)
        problem = f"{found.script} exited {run.status}: {run.said}"
        if listed:
            raise RuntimeError(f"{problem}\n{run.output[-4000:]}")
        pytest.skip(f"{found.engine} {release}: {problem}")
    if found.engine == "sglang":
        from harness.targets.sglang.imports import import_sglang

        import_sglang(any_version=True)  # the import shims (CPU torchvision, old releases' config names)
    script = load_script(found)
    try:
        verdict = script.reproduce()
    except script.SetupProblem as problem:
        if listed:
            raise
        pytest.skip(f"{found.engine} {release}: {problem}")
    return Verdict(verdict.bug_present, verdict.message)


def require_pinned(number: int) -> Finding:
    """For a control that patches the finding's fix into the engine: the patch is written against the pinned release's
    code (older releases compute the same thing elsewhere), so the control runs there and skips anywhere else."""
    found = finding(number)
    release = installed(found.engine)
    if release is None:
        pytest.skip(f"{found.engine} is not installed here")
    if release != PINNED[found.engine]:
        pytest.skip(f"the control's fix is written against {found.engine} {PINNED[found.engine]}, not {release}")
    return found


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
            if found.says is None:
                raise pytest.UsageError(f"finding #{found.number} says nothing (harness/findings.py: its `says`)")
            item.add_marker(known_failure(describe(found, release, "present"), raises=AssertionError, match=found.says))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = (yield).get_result()
    held = item.stash.get(_HELD, None)
    if held is None or report.when != "call":
        return
    found, release = held
    if release not in found.has_it:
        guarded = release == PINNED[found.engine]  # fixed before the pinned release: a failure is its return
        if report.failed and not guarded and call.excinfo is not None and call.excinfo.errisinstance(AssertionError):
            said = str(call.excinfo.value).strip().splitlines()
            report.outcome = "skipped"
            report.wasxfail = describe(found, release, "present") + (f": {said[0]}" if said else "")  # an xfail
        elif report.passed:
            report.user_properties.append(("finding", describe(found, release, "fixed")))
    elif report.failed and "XPASS(strict)" in str(report.longrepr):
        report.user_properties.append(("finding", describe(found, release, "fixed")))


class _Summary:
    """Collects the findings lines ("fixed in X", a script's verdict) from every report (on the xdist controller too) and prints them at the end."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.lines += [f"{report.nodeid}: {value}" for name, value in report.user_properties if name == "finding"]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.lines:
            terminalreporter.section("findings: what the reproducers said")
            for line in dict.fromkeys(self.lines):
                terminalreporter.line(line)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Summary(), "swa-harness-findings-summary")
