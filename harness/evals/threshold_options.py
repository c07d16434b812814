"""The ``--alpha``, ``--max-drop``, ... options that both CLIs share, read back into :class:`Thresholds`.

They live with the CLIs, not in ``compare``, so the statistics never see argparse.
"""

from __future__ import annotations

import argparse
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
