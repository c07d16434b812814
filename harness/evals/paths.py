"""Default locations, all inside the checkout, so the job runs the same from any working directory."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TASKS_DIR = REPO / "suites" / "accuracy"  # the lm-eval task YAMLs
DEFAULT_MODEL = REPO / "fixtures" / "models" / "gemma2-tiny-swa"
DEFAULT_OUT = REPO / "reports" / "latest"
DEFAULT_KILL_MATRIX = REPO / "reports" / "kill-matrix.json"
