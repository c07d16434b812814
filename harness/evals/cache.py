"""lm-eval's response cache for one mode of one run, keyed so a resumed run never mixes builds."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness.evals.config import EvalConfig, ModeSpec
from harness.evals.fingerprint import git, weights_sha256


def response_cache(config: EvalConfig, mode: ModeSpec) -> Path:
    """Where lm-eval keeps every completed response of this exact run (sqlite, written as it goes).

    A crashed run therefore loses nothing; ``--resume`` reuses the responses. The file name is keyed
    by everything that decides a response — checkpoint bytes, code (commit and uncommitted diff),
    graph mode, fault, items, batching — so a resumed run can never mix in another build's answers.
    Without ``--resume`` the cache is cleared first.
    """
    code = git("rev-parse", "HEAD") + git("diff", "HEAD")
    key = json.dumps([weights_sha256(config.model) or str(config.model),
                      hashlib.sha256(code.encode()).hexdigest(), mode.label, mode.graphs, mode.fault, mode.base_url,
                      [s.task for s in config.suites], dict(config.limits), config.batch_size, config.max_running,
                      config.device])
    path = Path(config.out) / "cache" / f"{mode.label}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not config.resume:
        for old in path.parent.glob(f"{path.name}*"):
            old.unlink()
    return path
