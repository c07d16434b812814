"""swa-harness before issue 41: the resume cache's key held the arm's flags but not its variables, so a source patch
or an engine variable changed between two runs and ``--resume`` served the first run's answers."""

from __future__ import annotations

from harness.faults.base import Fault, Patch
from collections.abc import Mapping

from harness.reuse import ResponseKey


def env_of(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Twin of ``ResponseKey.env_of``: the variables are not part of the key."""
    return ()


FAULT = Fault(
    id="resume-key-drops-env",
    seed="swa-harness 7d92a25 (harness/jobs/cache.py keyed flags, not env)",
    breaks="ResponseKey leaves out the arm's variables and the files they name: SWA_HARNESS_SGLANG_PATCH, "
    "SGLANG_* switches and a patch file edited in place all key the same cache",
    user_sees="--resume after changing a candidate fix or an engine variable reuses the answers of the run "
    "before it: the verdict is over the wrong server's answers",
    invariant="reuse: the resume key holds everything an answer depends on (harness/jobs/cache.py's table)",
    patches=(Patch(ResponseKey, "env_of", staticmethod(env_of)),),
)
