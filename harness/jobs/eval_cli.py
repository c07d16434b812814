"""``swa-harness eval``: accuracy tasks with graphs ON and OFF, and with the prefix cache OFF and ON, on the same
items, compared paired.

The command line is parsed here and only here, into an :class:`EvalConfig` and then a plan
(``harness.jobs.cpu``), or a plan is read from ``--plan FILE``; the one runner runs it. Usage errors
(a limit outside 1..the set's size, a batch size of 0, an engine not installed, ...) end here with
exit code 2 and a one-line message naming the problem, before any server or lm-eval starts.

``--tasks`` names the lm-eval tasks (``--suites``, its name before tasks and pytest suites were told apart,
still works, hidden from the help).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from harness.evals.tasks import FROZEN_TASKS, set_size
from harness.jobs.cpu import EvalConfig, cpu_plan
from harness.jobs.options import RunOptions, add_threshold_options, int_in, positive_seconds, thresholds_from_options
from harness.jobs.plan_file import plan_from_file
from harness.jobs.plan_text import render
from harness.jobs.runner import run_plan
from harness.servers.registry import SERVER_KINDS, get_server_kind

_DEFAULTS = EvalConfig()  # the option defaults, so the CLI and the dataclass cannot drift apart
LAUNCHED_ENGINES = tuple(name for name in SERVER_KINDS if name != "external")


def check_fault(engine: str, fault: str) -> None:
    """The fault exists in the catalog of the engine it goes into (ValueError naming the known ones otherwise)."""
    if engine == "harness":
        from harness.faults import get_fault  # imported here: the fault catalog pulls in the engine
    elif engine == "sglang":
        from harness.targets.sglang.faults.by_id import get_fault
    else:
        raise ValueError(f"engine {engine} has no fault catalog: --fault {fault} cannot be injected")
    get_fault(fault)


class _OldName(argparse.Action):
    """A deprecated spelling of an option: stores into the new option's place and says so on stderr."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"{parser.prog}: {option_string} is deprecated; use --{self.dest}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swa-harness eval", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", type=Path, default=_DEFAULTS.model, help="HF-format checkpoint (default: the shipped tiny model)"
    )
    parser.add_argument(
        "--engine",
        default=_DEFAULTS.engine,
        choices=LAUNCHED_ENGINES,
        help="the engine that serves both arms (default: harness, this checkout's server)",
    )
    parser.add_argument(
        "--plan",
        type=Path,
        default=None,
        help="run this YAML plan (arms, tasks, limit, client...) instead of the main job",
    )
    parser.add_argument(
        "--tasks",
        default=",".join(FROZEN_TASKS),
        help=f"comma list of frozen tasks (default: {','.join(FROZEN_TASKS)})",
    )
    parser.add_argument("--suites", dest="tasks", action=_OldName, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    for name, spec in FROZEN_TASKS.items():
        size = set_size(spec)
        parser.add_argument(
            f"--limit-{name.replace('_', '-')}",
            type=int_in(1, size, " (the set's size)"),
            default=min(spec.default_limit, size),
            help=f"items of {name}, 1..{size} (default {min(spec.default_limit, size)})",
        )
    parser.add_argument(
        "--graphs-on",
        default=None,
        choices=("tape", "cuda", "auto", "eager", "on"),
        help="graph mode of the ON arm (default: the engine's own: auto for harness, on otherwise)",
    )
    parser.add_argument(
        "--fault", default=None, help="catalog fault to inject into the graphs-on servers (on, and cache-off)"
    )
    parser.add_argument(
        "--no-cache-off",
        dest="cache_off",
        action="store_false",
        help="leave out the cache-off arm (the baseline with its prefix cache off): graphs on vs off alone",
    )
    parser.add_argument("--on-url", default=None, help="use this running server as graphs ON instead of launching one")
    parser.add_argument("--off-url", default=None, help="use this running server as graphs OFF")
    parser.add_argument("--out", type=Path, default=_DEFAULTS.out)
    parser.add_argument("--kill-matrix", type=Path, default=_DEFAULTS.kill_matrix)
    parser.add_argument(
        "--history",
        type=Path,
        default=None,
        help="JSON-lines record of every eval, read for the report's trend (default: history.jsonl "
        "beside --out, i.e. reports/history.jsonl)",
    )
    parser.add_argument("--no-history", action="store_true", help="neither record this eval nor show a trend")
    parser.add_argument("--batch-size", type=int_in(1), default=_DEFAULTS.batch_size)
    parser.add_argument("--max-running", type=int_in(1), default=_DEFAULTS.max_running)
    parser.add_argument("--threads", type=int_in(1), default=_DEFAULTS.threads, help="torch threads per server")
    parser.add_argument("--device", default=_DEFAULTS.device, help="device of both servers (cuda on a GPU machine)")
    parser.add_argument("--sequential", action="store_true", help="run OFF after ON instead of side by side")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the responses a previous, interrupted run of exactly this configuration cached",
    )
    parser.add_argument(
        "--resume-trusting-url",
        action="store_true",
        help="--resume against --on-url/--off-url servers too (refused otherwise: an external server cannot say "
        "what it was launched with)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit; starts nothing")
    parser.add_argument(
        "--allow-different-models",
        action="store_true",
        help="judge arms whose servers serve different weights (refused otherwise; the report says so)",
    )
    parser.add_argument(
        "--no-logprobs",
        dest="logprobs",
        action="store_false",
        help="record no per-token logprobs (the logprob axis beside accuracy is then absent)",
    )
    parser.add_argument("--server-timeout", type=positive_seconds, default=_DEFAULTS.server_timeout)
    parser.add_argument("--lm-eval-timeout", type=positive_seconds, default=_DEFAULTS.lm_eval_timeout)
    add_threshold_options(parser)
    return parser


def parse_config(argv: list[str]) -> EvalConfig:
    """The command line as an EvalConfig; a bad task, fault, engine or checkpoint exits here, before anything starts."""
    parser = build_parser()
    return config_from_args(parser, parser.parse_args(argv), argv)


def config_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]) -> EvalConfig:
    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [n for n in names if n not in FROZEN_TASKS]
    if unknown:
        parser.error(f"unknown tasks {unknown}; known: {', '.join(FROZEN_TASKS)}")
    if not (args.on_url and args.off_url):
        if reason := get_server_kind(args.engine).missing():
            parser.exit(2, f"swa-harness eval: {reason}\n")
    if args.fault:
        try:
            check_fault(args.engine, args.fault)
        except ValueError as exc:
            parser.error(str(exc).splitlines()[0])
    if not (args.on_url and args.off_url) and not (Path(args.model) / "config.json").is_file():
        parser.error(f"no HF checkpoint at {args.model} (config.json missing)")
    return EvalConfig(
        model=args.model,
        limits={name: getattr(args, f"limit_{name}") for name in names},
        engine=args.engine,
        graphs_on=args.graphs_on,
        fault=args.fault,
        cache_off=args.cache_off,
        on_url=args.on_url,
        off_url=args.off_url,
        out=args.out,
        kill_matrix=args.kill_matrix,
        history=args.history,
        keep_history=not args.no_history,
        batch_size=args.batch_size,
        max_running=args.max_running,
        threads=args.threads,
        device=args.device,
        sequential=args.sequential,
        resume=args.resume,
        resume_trusting_url=args.resume_trusting_url,
        server_timeout=args.server_timeout,
        lm_eval_timeout=args.lm_eval_timeout,
        thresholds=thresholds_from_options(vars(args)),
        logprobs=args.logprobs,
        argv=tuple(argv),
    )


def run_options(config: EvalConfig) -> RunOptions:
    return RunOptions(
        server_timeout=config.server_timeout,
        eval_timeout=config.lm_eval_timeout,
        resume=config.resume,
        resume_trusting_url=config.resume_trusting_url,
        thresholds=config.thresholds,
        kill_matrix=config.kill_matrix,
        history=config.history_file,
        argv=config.argv,
        device=config.device,
        logprobs=config.logprobs,
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    config = config_from_args(parser, args, argv)
    plan_file = args.plan
    if plan_file is None:
        plan = cpu_plan(config)
    else:
        try:
            out_given = any(a == "--out" or a.startswith("--out=") for a in argv)
            plan = plan_from_file(plan_file, out=args.out if out_given else None)
        except ValueError as exc:
            parser.exit(2, f"swa-harness eval: {exc}\n")
    print(
        f"swa-harness eval: {plan.title}: {len(plan.runs)} server(s), tasks "
        f"{', '.join(f'{t.name}' for t in plan.tasks)}"
        + (
            f", fault {config.fault} injected into graphs on ({', '.join(r.arm.name for r in plan.runs if r.arm.fault)})"
            if config.fault and plan_file is None
            else ""
        ),
        file=sys.stderr,
        flush=True,
    )
    if args.dry_run:
        sys.stdout.write(render(plan))
        return 0
    return run_plan(plan, replace(run_options(config), allow_different_models=args.allow_different_models))


if __name__ == "__main__":
    raise SystemExit(main())
