"""What identifies a build: the checkpoint's bytes and the code's git state (for cache keys and provenance)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from harness.evals.paths import REPO


def weights_sha256(model: Path) -> str | None:
    """Hex digest of the checkpoint's weights, or None when there is no ``model.safetensors``."""
    weights = Path(model) / "model.safetensors"
    return hashlib.sha256(weights.read_bytes()).hexdigest() if weights.is_file() else None


def git(*args: str, timeout: float | None = None) -> str:
    """Raw stdout of a git command in the checkout (empty when git fails; OSError when git is missing)."""
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout).stdout
