"""``swa-harness report``: re-render the HTML report from the runs an eval saved (``<out>/runs/*.json``),
e.g. with other thresholds or after a new kill matrix — without generating anything again."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.evals.compare import Thresholds
from harness.evals.results import RunResult
from harness.evals.run import DEFAULT_MODEL, REPO, finish


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swa-harness report", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "latest", help="folder holding runs/ (the report is written there)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="checkpoint whose tokenizer splits flips into tokens")
    parser.add_argument("--kill-matrix", type=Path, default=REPO / "reports" / "kill-matrix.json")
    Thresholds.add_arguments(parser)
    args = parser.parse_args(argv)
    files = sorted((args.out / "runs").glob("*.json"))
    if not files:
        print(f"swa-harness report: no saved runs under {args.out / 'runs'}; run `swa-harness eval` first", file=sys.stderr)
        return 2
    runs = [RunResult.load(f) for f in files]
    provenance_file = args.out / "provenance.json"
    provenance = json.loads(provenance_file.read_text()) if provenance_file.is_file() else {}
    return finish(runs, args.out, args, Thresholds.from_args(args), provenance | {"re-rendered by": "swa-harness report"})


if __name__ == "__main__":
    raise SystemExit(main())
