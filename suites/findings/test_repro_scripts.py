"""The standalone scripts under ``docs/repro`` (what a maintainer would paste into an issue), run as a maintainer would
run them: ``python <script>`` with the engine's interpreter, no harness on the path. On a release listed with the bug
the exit status must be 1; on any other, 0 (fixed) or 1 (still present) are both answers and are reported, and 2 (no
verdict) is NO VERDICT. The scripts of isolated scenes (#6, #7) are run this way by their reproducer tests already."""

from __future__ import annotations

import pytest

from harness.findings import FINDINGS, Finding, describe, expected_exit
from suites.findings.conftest import EXIT_BUG, installed, run_script

IMPORTED = [f for f in FINDINGS if not f.isolated]
# Each script imports its engine afresh in its own interpreter (44-72 s each on 2 loaded cores): the full sessions run
# them; .ci/run (-m "not extended") follows the same bugs through their reproducers in this suite.
pytestmark = pytest.mark.extended


@pytest.mark.parametrize("found", IMPORTED, ids=[f"finding-{f.number}-{f.engine}" for f in IMPORTED])
def test_the_script_exits_with_the_releases_verdict(found: Finding, record_property):
    release = installed(found.engine)
    if release is None:
        pytest.skip(f"{found.engine} is not installed here")
    run = run_script(found)
    expected = expected_exit(found, release)
    status = run.judged(found.script)
    if expected is not None:
        assert status == expected, (
            f"{found.script} exited {run.status} on {found.engine} {release}, listed as having the bug (1): {run.said}"
        )
    record_property("finding", describe(found, release, "present" if run.status == EXIT_BUG else "fixed"))
    record_property("script_seconds", run.seconds)
