"""What identifies a build: the checkpoint's bytes and the code's git state.

The harness server reports these on /health, the jobs key their resume cache on them and record
them in the provenance; one module so that every floor computes them the same way.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

from harness.paths import REPO

HASH_WEIGHTS_UP_TO = 512 * 1024 * 1024  # bigger checkpoints are identified by size and time, not hashed at startup


def git(*args: str, timeout: float | None = None, cwd: Path = REPO) -> str:
    """Raw stdout of a git command in ``cwd`` (empty when git fails; OSError when git is missing)."""
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout).stdout


def file_sha256(path: Path) -> str | None:
    """Hex digest of a file, read in chunks (checkpoints can be large); None when it is missing."""
    if not Path(path).is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def weights_sha256(model: Path) -> str | None:
    """Hex digest of the checkpoint's weights, or None when there is no ``model.safetensors``."""
    return file_sha256(Path(model) / "model.safetensors")


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


def checkout_state(cwd: Path = REPO) -> dict[str, Any]:
    """A git checkout's full sha and whether tracked files have uncommitted changes."""
    try:
        sha = git("rev-parse", "HEAD", timeout=10, cwd=cwd).strip()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", timeout=10, cwd=cwd).strip())
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "", False
    return {"commit": sha or "unknown", "dirty": dirty}


def weights_fingerprint(model_path: str | Path) -> str | None:
    """sha256 of ``model.safetensors`` (size and mtime past HASH_WEIGHTS_UP_TO); None without one."""
    weights = Path(model_path) / "model.safetensors"
    if not weights.is_file():
        return None
    stat = weights.stat()
    if stat.st_size > HASH_WEIGHTS_UP_TO:
        return f"size:{stat.st_size},mtime:{int(stat.st_mtime)}"
    return f"sha256:{weights_sha256(Path(model_path))}"


def tokenizer_fingerprint(model_path: str | Path) -> str | None:
    """sha256 of ``tokenizer.json``; None without one. Other weights are one difference, another tokenizer another."""
    digest = file_sha256(Path(model_path) / "tokenizer.json")
    return f"sha256:{digest}" if digest else None


def server_build(model_path: str | Path, **settings: Any) -> dict[str, Any]:
    """The build /health reports: code, weights, tokenizer, and ``settings`` (dtype, device, injected fault...)."""
    return {
        "code": code_fingerprint(),
        "weights": weights_fingerprint(model_path),
        "tokenizer": tokenizer_fingerprint(model_path),
        **settings,
    }
