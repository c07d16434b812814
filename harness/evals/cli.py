"""``swa-harness eval``: accuracy suites with graphs ON and OFF on the same items, compared paired.

The command line is parsed here and only here, into an :class:`EvalConfig`; the job gets that.
Usage errors (a limit outside 1..the set's size, a batch size of 0, ...) end here with exit code 2
and argparse's one-line message naming the option, before any server or lm-eval starts.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

from harness.evals.config import EvalConfig
from harness.evals.paths import REPO
from harness.evals.run import run_eval
from harness.evals.suites import SUITES, SuiteSpec
from harness.evals.threshold_options import add_threshold_options, thresholds_from_options

_DEFAULTS = EvalConfig()  # the option defaults, so the CLI and the dataclass cannot drift apart


def set_size(spec: SuiteSpec) -> int:
    """Items in the suite's frozen test set (the default limit when the set is not shipped here)."""
    path = REPO / "fixtures" / "data" / spec.name / "test.jsonl"
    if not path.is_file():
        return spec.default_limit
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def int_in(low: int, high: int | None = None, what: str = "") -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}{what}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swa-harness eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=_DEFAULTS.model,
                        help="HF-format checkpoint (default: the shipped tiny model)")
    parser.add_argument("--suites", default=",".join(SUITES))
    for name, spec in SUITES.items():
        size = set_size(spec)
        parser.add_argument(f"--limit-{name.replace('_', '-')}", type=int_in(1, size, " (the set's size)"),
                            default=min(spec.default_limit, size),
                            help=f"items of {name}, 1..{size} (default {min(spec.default_limit, size)})")
    parser.add_argument("--graphs-on", default=_DEFAULTS.graphs_on, choices=("tape", "cuda", "auto", "eager"))
    parser.add_argument("--fault", default=None, help="catalog fault to inject into the graphs-on server")
    parser.add_argument("--on-url", default=None, help="use this running server as graphs ON instead of launching one")
    parser.add_argument("--off-url", default=None, help="use this running server as graphs OFF")
    parser.add_argument("--out", type=Path, default=_DEFAULTS.out)
    parser.add_argument("--kill-matrix", type=Path, default=_DEFAULTS.kill_matrix)
    parser.add_argument("--history", type=Path, default=None,
                        help="JSON-lines record of every eval, read for the report's trend (default: history.jsonl "
                             "beside --out, i.e. reports/history.jsonl)")
    parser.add_argument("--no-history", action="store_true", help="neither record this eval nor show a trend")
    parser.add_argument("--batch-size", type=int_in(1), default=_DEFAULTS.batch_size)
    parser.add_argument("--max-running", type=int_in(1), default=_DEFAULTS.max_running)
    parser.add_argument("--threads", type=int_in(1), default=_DEFAULTS.threads, help="torch threads per server")
    parser.add_argument("--device", default=_DEFAULTS.device, help="device of both servers (cuda on a GPU machine)")
    parser.add_argument("--sequential", action="store_true", help="run OFF after ON instead of side by side")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the responses a previous, interrupted run of exactly this configuration cached")
    parser.add_argument("--server-timeout", type=positive_seconds, default=_DEFAULTS.server_timeout)
    parser.add_argument("--lm-eval-timeout", type=positive_seconds, default=_DEFAULTS.lm_eval_timeout)
    add_threshold_options(parser)
    return parser


def parse_config(argv: list[str]) -> EvalConfig:
    """The command line as an EvalConfig; a bad suite, fault or checkpoint exits here, before anything starts."""
    parser = build_parser()
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        parser.error(f"unknown suites {unknown}; known: {', '.join(SUITES)}")
    if args.fault:
        from harness.faults import get_fault  # imported here: the fault catalog pulls in the engine

        get_fault(args.fault)  # a clear error before anything starts
    if not (args.on_url and args.off_url) and not (Path(args.model) / "config.json").is_file():
        parser.error(f"no HF checkpoint at {args.model} (config.json missing)")
    return EvalConfig(
        model=args.model,
        limits={name: getattr(args, f"limit_{name}") for name in names},
        graphs_on=args.graphs_on,
        fault=args.fault,
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
        server_timeout=args.server_timeout,
        lm_eval_timeout=args.lm_eval_timeout,
        thresholds=thresholds_from_options(vars(args)),
        argv=tuple(argv),
    )


def main(argv: list[str] | None = None) -> int:
    return run_eval(parse_config(list(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    raise SystemExit(main())
