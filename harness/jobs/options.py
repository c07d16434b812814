"""Option types and the ``--alpha``, ``--max-drop``, ... options the job CLIs share, read back into :class:`Thresholds`.

They live with the CLIs, not in ``compare``, so the statistics never see argparse.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import fields
from typing import Any, Mapping

from harness.evals.compare import Thresholds


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
