"""Where things are in the checkout: one repo root, and the defaults every job resolves from it.

Every path is absolute, so a job runs the same from any working directory.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS_DIR = REPO / "suites" / "accuracy"  # the lm-eval task YAMLs
DATA_DIR = REPO / "fixtures" / "data"  # the frozen eval sets
DEFAULT_MODEL = REPO / "fixtures" / "models" / "gemma2-tiny-swa"
DEFAULT_OUT = REPO / "reports" / "latest"
DEFAULT_KILL_MATRIX = REPO / "reports" / "kill-matrix.json"
DEFAULT_FAULT_EFFECTS = REPO / "docs" / "fault-effects.json"
DEFAULT_RELEASE_MATRIX = REPO / "reports" / "sglang-matrix.json"  # `swa-harness sglang-matrix`
COMPATIBILITY_MD = REPO / "docs" / "COMPATIBILITY.md"  # the engines' release matrices, written by each


def shown(path: Path) -> str:
    """A path as a reader should see it: relative to the checkout when it is inside (no machine paths in reports)."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(REPO))
    except ValueError:
        pass
    try:
        return "~/" + str(resolved.relative_to(Path.home()))
    except ValueError:
        return str(path)
