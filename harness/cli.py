"""``swa-harness`` command line: serve | eval | report | faults."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swa-harness", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("serve", "eval", "report", "faults"):
        sub.add_parser(name)
    args = parser.parse_args(argv)
    print(f"swa-harness {args.command}: not built yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
