"""What is checked of a plan before anything starts (``check_plan``): every server kind installed and importable, the
flags its parser takes, ``--resume`` only where it is safe, and whether the two arms of a comparison will serve the same
model, from what is known of each arm's weights and tokenizer (``Comparison.served_differences``, the rule that
judging applies again to what the servers reported).
"""

from __future__ import annotations

from pathlib import Path

from harness.evals.results import ServedIdentity
from harness.fingerprint import tokenizer_fingerprint, weights_fingerprint
from harness.jobs.cache import untrusted_resume
from harness.jobs.options import RunOptions
from harness.jobs.plan import ArmRun, Plan
from harness.paths import REPO
from harness.servers.base import ServerNotInstalled
from harness.servers.identity import ServerUnreachable
from harness.servers.registry import get_server_kind
from harness.targets.preflight import SERVERS, unimportable


def check_plan(plan: Plan, options: RunOptions) -> list[str]:
    """What stops the plan before anything starts: ``--resume`` against an untrusted external server, an engine not
    installed here or whose imports fail (a server that would die at start-up, read as a run that failed), flags its
    parser refuses, two arms of one comparison that will serve different weights (unless allowed)."""
    problems = []
    problems += [
        refused
        for run in plan.runs
        if (refused := untrusted_resume(run, resume=options.resume, trust_url=options.resume_trusting_url))
    ]
    for name in dict.fromkeys(r.arm.engine for r in plan.runs if r.launched):
        try:
            get_server_kind(name).check_installed()
        except ServerNotInstalled as exc:
            problems.append(str(exc))
            continue
        if (needs := SERVERS.get(name)) and (reason := unimportable(needs)):
            problems.append(reason)
    if not problems and options.check_args:
        problems += _preflight(plan)
    if not problems and not options.allow_different_models:
        problems += models_known_to_differ(plan)
    return problems


def _preflight(plan: Plan) -> list[str]:
    """Every launched SGLang arm's flags through SGLang's own parser (the nightly's arms check ServerArgs fields)."""
    runs = [r for r in plan.runs if r.launched and r.arm.engine == "sglang"]
    if not runs:
        return []
    from harness.servers.sglang_server import sglang_args
    from harness.servers.sglang_server.server_args import InvalidServerArgs, check_arm, sglang_parser

    parser = sglang_parser()
    problems = []
    for run in runs:
        try:
            check_arm(sglang_args(run.spec), run.arm.expect, parser)
        except InvalidServerArgs as exc:
            problems.append(f"{run.label}: {exc}")
    return problems


def _model_before_start(run: ArmRun) -> tuple[ServedIdentity, str] | None:
    """The weights and tokenizer an arm will serve, where that is known before it runs (what an external server
    reports, or the digests of a launched arm's local checkpoint, which the harness server reports too), and a
    description."""
    if not run.launched:
        try:
            identity = get_server_kind(run.arm.engine).identity(run.url or "", run.spec)
        except ServerUnreachable:
            return None  # its run fails with its own reason
        where = f"{run.url} serves {identity.model}"
    else:
        local = Path(run.spec.model)
        local = local if local.is_absolute() else REPO / local  # servers run in the checkout
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
