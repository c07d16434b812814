"""lm-eval's response cache for one lm-eval run of one arm, keyed so a resumed run never mixes builds or servers."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

from harness.fingerprint import code_fingerprint, weights_sha256
from harness.jobs.plan import ArmRun, EvalStep
from harness.paths import REPO


def response_cache(run: ArmRun, step: EvalStep, identity: Mapping[str, Any], *, cache_dir: Path, resume: bool) -> Path:
    """Where lm-eval keeps every completed response of this exact run (sqlite, written as it goes).

    A crashed run therefore loses nothing; ``--resume`` reuses the responses. The file name is keyed
    by everything that decides a response — checkpoint bytes, code (commit and uncommitted diff),
    the arm's engine, graph mode, flags and fault, the items, batching, and the ``identity`` the
    answering server reports (``harness.servers.identity.server_identity``: model, graph mode, build)
    — so a resumed run can never mix in another build's answers, nor those of another server that
    answered at the same URL. Without ``resume`` the cache is cleared first.
    """
    arm = run.arm
    model = REPO / run.model.name
    key = json.dumps(
        [
            weights_sha256(model) if model.is_dir() else run.model.name,
            code_fingerprint(),
            arm.name,
            arm.engine,
            arm.graphs,
            list(arm.flags),
            arm.fault,
            arm.url,
            [t.lm_eval_task for t in step.tasks],
            dict(step.items),
            step.client.batch_size,
            step.client.concurrency,
            dict(identity),
        ],
        sort_keys=True,
        default=str,
    )
    path = cache_dir / f"{run.model.slug}-{arm.name}-{step.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not resume:
        for old in path.parent.glob(f"{path.name}*"):
            old.unlink()
    return path
