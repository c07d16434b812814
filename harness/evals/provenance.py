"""The provenance table of the report: enough to reproduce the run, or to see why two runs differ."""

from __future__ import annotations

import platform

from harness.evals.config import EvalConfig
from harness.evals.fingerprint import git, weights_sha256


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001 - provenance must not fail the run
        return "not installed"


def _git(*args: str) -> str:
    try:
        return git(*args, timeout=10).strip()
    except OSError:
        return "unknown"


def provenance(config: EvalConfig) -> dict[str, str]:
    digest = weights_sha256(config.model)
    on = next(m for m in config.modes if m.label == "on")
    dirty = " (uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no") else ""
    return {
        "commit": (_git("rev-parse", "--short", "HEAD") or "unknown") + dirty,
        "checkpoint": str(config.model),
        "checkpoint sha256[:16]": digest[:16] if digest else "n/a",
        "graphs on": on.graphs,
        "fault injected (graphs on)": on.fault or "none",
        "items": ", ".join(f"{k}={v}" for k, v in config.limits.items()),
        "decoding": "greedy (temperature 0), lm-eval seed 0",
        "lm-eval batch": f"{config.batch_size} prompts per request, no concurrency",
        "device": config.device,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "lm-eval": _version("lm_eval"),
        "platform": platform.platform(),
        "command": "swa-harness eval " + " ".join(config.argv),
    }
