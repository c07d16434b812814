"""What a server is, as it reports it on /health: the code, the weights and the settings that decide its answers.

The eval keys its resume cache on this (see ``harness.evals.cache``), so answers cached from one
server are never reused for another one that happens to listen at the same address.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

from harness.evals.fingerprint import git, weights_sha256

HASH_WEIGHTS_UP_TO = 512 * 1024 * 1024  # bigger checkpoints are identified by size and time, not hashed at startup


def code_fingerprint() -> str:
    """The checkout's commit, plus a digest of its uncommitted diff; "unknown" without git."""
    try:
        head = git("rev-parse", "HEAD", timeout=10).strip()
        diff = git("diff", "HEAD", timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not head:
        return "unknown"
    return head + (f"+{hashlib.sha256(diff.encode()).hexdigest()[:16]}" if diff else "")


def weights_fingerprint(model_path: str | Path) -> str | None:
    """sha256 of ``model.safetensors`` (size and mtime past HASH_WEIGHTS_UP_TO); None without one."""
    weights = Path(model_path) / "model.safetensors"
    if not weights.is_file():
        return None
    stat = weights.stat()
    if stat.st_size > HASH_WEIGHTS_UP_TO:
        return f"size:{stat.st_size},mtime:{int(stat.st_mtime)}"
    return f"sha256:{weights_sha256(Path(model_path))}"


def server_build(model_path: str | Path, **settings: Any) -> dict[str, Any]:
    """The build /health reports: code, weights, and ``settings`` (dtype, device, injected fault...)."""
    return {"code": code_fingerprint(), "weights": weights_fingerprint(model_path), **settings}
