"""What is checked of a plan before anything starts (``check_plan``): every server kind installed and importable, the
flags its parser takes, ``--resume`` only where it is safe, and whether the two arms of a comparison will serve the same
model, from what is known of each arm's weights and tokenizer (``Comparison.served_differences``, the rule that
judging applies again to what the servers reported).
"""

from __future__ import annotations

from harness.evals.results import ServedIdentity
from harness.fingerprint import tokenizer_fingerprint, weights_fingerprint
from harness.jobs.options import RunOptions
from harness.jobs.plan import Arm, ArmRun, Plan
from harness.servers.identity import ServerUnreachable


def check_plan(plan: Plan, options: RunOptions) -> list[str]:
    """What stops the plan before anything starts: ``--resume`` against an untrusted external server, an engine not
    installed here or whose imports fail (a server that would die at start-up, read as a run that failed), flags its
    parser refuses, two arms of one comparison that will serve different weights (unless allowed). Each server kind
    answers for its own engine (``ServerKind.cannot_start``, ``ServerKind.refused_flags``)."""
    problems = []
    if options.resume:
        problems += [
            refused for run in plan.runs if (refused := resume_refused(run.arm, trust_url=options.resume_trusting_url))
        ]
    launched = [run for run in plan.runs if run.launched]
    problems += [reason for kind in dict.fromkeys(run.arm.kind for run in launched) if (reason := kind.cannot_start())]
    if not problems and options.check_args:
        problems += [
            f"{run.label}: {refused}"
            for run in launched
            if (refused := run.arm.kind.refused_flags(run.spec, run.arm.expect))
        ]
    if not problems and not options.allow_different_models:
        problems += models_known_to_differ(plan)
    return problems


def resume_refused(arm: Arm, *, trust_url: bool) -> str | None:
    """Why ``--resume`` cannot reuse this arm's cached answers, in one line naming the arm and what to say instead: it
    is an external server (it says what it serves, not what it was launched with, and another server may answer at
    its address later) the user has not said to trust. None when it can (``response_cache`` asks again)."""
    if arm.url and not trust_url:
        return (
            f"--resume: arm {arm.name} is the external server {arm.url}, which cannot say what it was "
            "launched with; add --resume-trusting-url, or drop --resume"
        )
    return None


def _model_before_start(run: ArmRun) -> tuple[ServedIdentity, str] | None:
    """The weights and tokenizer an arm will serve, where that is known before it runs (what an external server
    reports, or the digests of a launched arm's local checkpoint, which the harness server reports too), and a
    description."""
    if not run.launched:
        try:
            identity = run.arm.kind.identity(run.url or "", run.spec)
        except ServerUnreachable:
            return None  # its run fails with its own reason
        where = f"{run.url} serves {identity.model}"
    else:
        local = run.model.checkpoint
        if not local.is_dir():
            return None
        identity = ServedIdentity(
            engine=run.arm.engine,
            version="",
            model=run.spec.model,
            weights=weights_fingerprint(local),
            tokenizer=tokenizer_fingerprint(local),
        )
        where = run.spec.model
    parts = [
        f"{what} {digest}"
        for what, digest in (("weights", identity.weights), ("tokenizer", identity.tokenizer))
        if digest
    ]
    return (identity, f"{where} {', '.join(parts)}") if parts else None


def models_known_to_differ(plan: Plan) -> list[str]:
    """Before anything starts: comparisons whose arms will serve different models, each as one line."""
    known = {(r.model.slug, r.arm.name): found for r in plan.runs if (found := _model_before_start(r))}
    serves = {key: identity for key, (identity, _) in known.items()}
    where = {key: text for key, (_, text) in known.items()}
    return [
        f"{c.model.name} {c.name}: the arms serve different models ({c.treatment}: "
        f"{where[c.model.slug, c.treatment]}; {c.reference}: {where[c.model.slug, c.reference]}); "
        "--allow-different-models judges them anyway"
        for c in plan.comparisons
        if c.served_differences(serves)
    ]
