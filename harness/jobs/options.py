"""Option types and the ``--alpha``, ``--max-drop``, ... options the job CLIs share, read back into :class:`Thresholds`.

They live with the CLIs, not in ``compare``, so the statistics never see argparse.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from harness.evals.compare import Thresholds
from harness.paths import DEFAULT_FAULT_EFFECTS, DEFAULT_KILL_MATRIX, DEFAULT_RELEASE_MATRIX


def add_threshold_options(parser: argparse.ArgumentParser) -> None:
    """Add one option per threshold; read back with :func:`thresholds_from_options`."""
    group = parser.add_argument_group("verdict thresholds")
    for f in fields(Thresholds):
        group.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f"threshold_{f.name}",
            default=None,
            metavar=f.name.upper(),
            help=f"default {f.default}",
        )


def thresholds_from_options(options: Mapping[str, Any], base: Thresholds | None = None) -> Thresholds:
    """Thresholds from the parsed options (``vars(args)``); options not given keep ``base`` (or the defaults)."""
    data = (base or Thresholds()).to_dict()
    for name in data:
        value = options.get(f"threshold_{name}")
        if value is not None:
            data[name] = value
    return Thresholds.from_dict(data)


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


@dataclass(frozen=True)
class RunOptions:
    """How to run a plan (not what: that is the plan)."""

    server_timeout: float = 600
    eval_timeout: float = 3600
    resume: bool = False  # reuse the responses an interrupted run of exactly this configuration cached
    resume_trusting_url: bool = False  # resume against external servers too (they cannot say what they run)
    thresholds: Thresholds = field(default_factory=Thresholds)
    kill_matrix: Path | None = DEFAULT_KILL_MATRIX
    fault_effects: Path | None = DEFAULT_FAULT_EFFECTS
    release_matrix: Path | None = DEFAULT_RELEASE_MATRIX
    history: Path | None = None  # JSON-lines record of every judged comparison, read for the trend (None: neither)
    check_args: bool = True  # parse each launched arm's flags with its engine's own parser first, where it has one
    argv: tuple[str, ...] = ()  # the command line, recorded in the provenance
    command: str = "swa-harness eval"
    device: str = "cpu"
    python: str = sys.executable
    name: str = "swa-harness eval"  # how the job names itself on stderr
    allow_different_models: bool = False  # judge arms that serve different weights anyway (the report says so)
    logprobs: bool = True  # record every generation's top-k logprobs (a proxy before each server): the logprob axis

    @property
    def command_line(self) -> str:
        return " ".join((self.command, *self.argv))
