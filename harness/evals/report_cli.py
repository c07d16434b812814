"""``swa-harness report``: re-render the HTML report from the runs an eval saved (``<out>/runs/*.json``),
e.g. with other thresholds or after a new kill matrix — without generating anything again."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.evals.compare import Thresholds
from harness.evals.history import DEFAULT_HISTORY
from harness.evals.paths import DEFAULT_KILL_MATRIX, DEFAULT_MODEL, DEFAULT_OUT, REPO
from harness.evals.results import RunResult
from harness.evals.run import finish
from harness.evals.threshold_options import add_threshold_options, thresholds_from_options


def rerender(out: Path, *, model: Path, kill_matrix: Path | None, thresholds: Thresholds,
             history: Path | None = DEFAULT_HISTORY) -> int:
    """Judge and report the saved runs again; 2 when there are none, else the eval's exit code.

    The runs keep their record in ``history`` (their run id comes from the saved provenance), so
    re-rendering updates that record instead of adding a run that never happened.
    """
    files = sorted((out / "runs").glob("*.json"))
    if not files:
        print(f"swa-harness report: no saved runs under {out / 'runs'}; run `swa-harness eval` first", file=sys.stderr)
        return 2
    runs = [RunResult.load(f) for f in files]
    provenance_file = out / "provenance.json"
    provenance = json.loads(provenance_file.read_text()) if provenance_file.is_file() else {}
    return finish(runs, out, model=model, thresholds=thresholds, kill_matrix=kill_matrix,
                  provenance=provenance | {"re-rendered by": "swa-harness report"}, history=history)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swa-harness report", description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder holding runs/ (the report is written there)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="checkpoint whose tokenizer splits flips into tokens")
    parser.add_argument("--kill-matrix", type=Path, default=DEFAULT_KILL_MATRIX,
                        help="the harness target's matrix; <stem>-<target>.json beside it are shown too")
    history = parser.add_mutually_exclusive_group()
    history.add_argument("--history", type=Path, default=DEFAULT_HISTORY,
                         help=f"JSON-lines eval history the trend is read from and this run's record updated in "
                              f"(default {DEFAULT_HISTORY.relative_to(REPO)})")
    history.add_argument("--no-history", dest="history", action="store_const", const=None,
                         help="neither read nor write a history (no trend in the report)")
    add_threshold_options(parser)
    args = parser.parse_args(argv)
    return rerender(args.out, model=args.model, kill_matrix=args.kill_matrix,
                    thresholds=thresholds_from_options(vars(args)), history=args.history)


if __name__ == "__main__":
    raise SystemExit(main())
