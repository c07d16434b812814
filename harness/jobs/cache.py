"""lm-eval's response cache for one lm-eval run of one arm: a crashed run loses nothing (lm-eval writes each
response as it comes, sqlite) and ``--resume`` reuses them; without ``--resume`` the cache is cleared first.

The cache is keyed by :class:`harness.reuse.ResponseKey` (its table: everything an answer depends on),
built here from the plan's run, the task files and what the server said it serves. An external server (an arm's
``url``) says what it serves but not what it was launched with, and another server may answer at the same address
later: ``--resume`` against one is refused, in one line (``Arm.resume_refused``, which the runner's ``check_plan`` asks
before the job starts), unless the user says ``--resume-trusting-url``.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.evals.results import ServedIdentity
from harness.jobs.plan import ArmRun, EvalStep, Task
from harness.jobs.recording import dataset_hashes
from harness.reuse import ResponseKey, code_fingerprint


class ResumeRefused(ValueError):
    """``--resume`` cannot vouch for the cached answers; the message names why and what to say instead."""


def task_fingerprint(task: Task) -> str:
    """A frozen task by its task file, helpers and data (``dataset_hashes``, as the provenance shows them); lm-eval's
    own tasks by name."""
    files = dataset_hashes([task.name]).get(task.name)
    return json.dumps(files, sort_keys=True) if files else f"lm-eval:{task.lm_eval_task}"


def _served(identity: ServedIdentity | None, run: ArmRun) -> str:
    """What the server says it serves; where it says nothing, what it was launched with (its ``ServerSpec``)."""
    if identity is None or not (identity.raw or identity.weights or identity.tokenizer):
        spec = run.spec
        launched = {"launched": {"model": spec.model, "graphs": spec.graphs, "flags": list(spec.flags)}}
        return json.dumps(launched, sort_keys=True, default=str)
    return json.dumps({**identity.to_dict(), "raw": dict(identity.raw)}, sort_keys=True, default=str)


def response_key(run: ArmRun, step: EvalStep, identity: ServedIdentity | None) -> ResponseKey:
    """The key of one lm-eval run's answers, from the plan's run, the checkpoint, the task files and the server."""
    arm, model = run.arm, run.model
    return ResponseKey(
        checkpoint=ResponseKey.checkpoint_of(model.checkpoint, model.name),
        code=code_fingerprint(),
        engine=arm.engine,
        flags=(*model.server_args, *arm.flags),
        fault=arm.fault,
        env=ResponseKey.env_of(arm.env),
        served=_served(identity, run),
        url=arm.url,
        tasks=tuple((t.lm_eval_task, task_fingerprint(t)) for t in step.tasks),
        items=tuple(sorted(step.items.items())),
        requests=ResponseKey.requests_of(
            step.client.batch_size, step.client.concurrency, model.chat, model.max_gen_toks
        ),
    )


def response_cache(
    run: ArmRun,
    step: EvalStep,
    identity: ServedIdentity | None,
    *,
    cache_dir: Path,
    resume: bool,
    trust_url: bool = False,
) -> Path:
    """Where lm-eval keeps every completed response of this exact run (the table above); cleared unless ``resume``.
    ResumeRefused when resuming against an external server the user has not said to trust."""
    if resume and (refused := run.arm.resume_refused(trust_url=trust_url)):
        raise ResumeRefused(refused)
    key = response_key(run, step, identity)
    path = cache_dir / f"{run.model.slug}-{run.arm.name}-{step.name}-{key.digest()}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not resume:
        for old in path.parent.glob(f"{path.name}*"):
            old.unlink()
    return path
