"""Command line of the nightly job: build the plan, print it (``--dry-run``), run it, or judge saved runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.jobs.judging import load_runs
from harness.jobs.nightly import (
    ARM_NAMES,
    DEFAULT_CONCURRENCY,
    DEFAULT_FAULT,
    DEFAULT_MODELS,
    NIGHTLY_OUT,
    DEFAULT_PORT,
    DEFAULT_TASKS,
    MODELS,
    build_nightly_plan,
)
from harness.jobs.options import RunOptions
from harness.jobs.plan import Model
from harness.jobs.plan_text import render
from harness.jobs.runner import run_plan
from harness.jobs.summary import finish


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _url(text: str) -> tuple[str, str]:
    arm, sep, url = text.partition("=")
    if not sep or not arm or not url:
        raise argparse.ArgumentTypeError(f"expected ARM=URL, got {text!r}")
    return arm, url


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="swa-harness nightly",
        description="Real SGLang servers per model and arm (graphs on/off, stress, fault demo), lm-eval per task, "
        "paired comparisons, HTML reports. Needs a GPU unless --dry-run or --report-only.",
    )
    p.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="HUB_ID",
        help=f"model to serve (repeatable; default: {', '.join(DEFAULT_MODELS)}); one not in the built-in "
        "list is asked through /v1/completions unless --chat",
    )
    p.add_argument("--chat", action="store_true", help="treat --model ids not in the built-in list as chat models")
    p.add_argument("--arms", type=_names, default=list(ARM_NAMES), help=f"comma list (default: {','.join(ARM_NAMES)})")
    p.add_argument(
        "--tasks", type=_names, default=list(DEFAULT_TASKS), help=f"comma list (default: {','.join(DEFAULT_TASKS)})"
    )
    p.add_argument("--limit", type=int, default=None, help="first N items per task (default: whole test sets)")
    p.add_argument(
        "--fault", default=DEFAULT_FAULT, help=f"SGLang catalog fault of the fault-demo arm ({DEFAULT_FAULT})"
    )
    p.add_argument("--out", type=Path, default=NIGHTLY_OUT, help=f"output folder (default: {NIGHTLY_OUT})")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="first server port; arm i listens on port + i")
    p.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY, help="concurrent lm-eval requests")
    p.add_argument(
        "--url",
        type=_url,
        action="append",
        default=[],
        metavar="ARM=URL",
        help="use a server already running for ARM instead of launching one (one model)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the whole plan and exit; needs no GPU")
    p.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    p.add_argument("--report-only", action="store_true", help="judge the runs saved under --out again")
    p.add_argument("--no-preflight", action="store_true", help="do not parse the arms' flags with SGLang first")
    p.add_argument(
        "--allow-different-models",
        action="store_true",
        help="judge arms whose servers serve different weights (refused otherwise; the report says so)",
    )
    p.add_argument("--server-timeout", type=float, default=1800, help="seconds for a server to become ready")
    p.add_argument("--eval-timeout", type=float, default=6 * 3600, help="seconds for one lm-eval run")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    models = [MODELS.get(m) or Model(m, chat=args.chat) for m in (args.models or DEFAULT_MODELS)]
    try:
        plan = build_nightly_plan(
            models=models,
            arms=args.arms,
            tasks=args.tasks,
            limit=args.limit,
            out=args.out,
            fault=args.fault,
            port=args.port,
            concurrency=args.concurrency,
            urls=dict(args.url),
        )
    except ValueError as exc:
        print(f"nightly: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        sys.stdout.write(plan.to_json() if args.json else render(plan))
        return 0
    options = RunOptions(
        server_timeout=args.server_timeout,
        eval_timeout=args.eval_timeout,
        fault_effects=None,
        check_args=not args.no_preflight,
        argv=tuple(argv),
        command="swa-harness nightly",
        device="cuda",
        name="nightly",
        allow_different_models=args.allow_different_models,
    )
    if args.report_only:
        from harness.jobs.recording import job_provenance

        return finish(plan, load_runs(plan), options, job_provenance(plan, options.command_line, options.device))
    return run_plan(plan, options)


if __name__ == "__main__":
    raise SystemExit(main())
