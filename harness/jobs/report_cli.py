"""``swa-harness report``: judge and render again the runs a job saved (``<out>/plan.json`` and each run's
``runs/*.json``), e.g. with other thresholds or after a new kill matrix — without generating anything again."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.evals.history import DEFAULT_HISTORY
from harness.jobs.judging import load_runs
from harness.jobs.options import RunOptions, add_threshold_options, thresholds_from_options
from harness.jobs.saved import plan_from_inputs
from harness.jobs.summary import finish
from harness.paths import DEFAULT_KILL_MATRIX, DEFAULT_OUT, REPO


def rerender(out: Path, *, options: RunOptions) -> int:
    """Judge and report the saved runs again; 2 when there are none, else the job's exit code.

    The runs keep their record in the history (their run id comes from the saved provenance), so
    re-rendering updates that record instead of adding a run that never happened.
    """
    saved = out / "plan.json"
    if not saved.is_file():
        print(
            f"swa-harness report: no saved job under {out} (plan.json missing); run `swa-harness eval` first",
            file=sys.stderr,
        )
        return 2
    try:
        plan = plan_from_inputs(json.loads(saved.read_text())["inputs"])
    except (KeyError, TypeError, ValueError) as exc:
        print(f"swa-harness report: {saved} cannot be read back: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    provenance_file = out / "provenance.json"
    provenance = json.loads(provenance_file.read_text()) if provenance_file.is_file() else {}
    return finish(plan, load_runs(plan), options, provenance | {"re-rendered by": "swa-harness report"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swa-harness report", description=__doc__)
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="folder holding plan.json (the report is written there)"
    )
    parser.add_argument(
        "--kill-matrix",
        type=Path,
        default=DEFAULT_KILL_MATRIX,
        help="the harness target's matrix; <stem>-<target>.json and mutants-<target>.json beside it are shown too",
    )
    history = parser.add_mutually_exclusive_group()
    history.add_argument(
        "--history",
        type=Path,
        default=DEFAULT_HISTORY,
        help=f"JSON-lines eval history the trend is read from and this run's record updated in "
        f"(default {DEFAULT_HISTORY.relative_to(REPO)})",
    )
    history.add_argument(
        "--no-history",
        dest="history",
        action="store_const",
        const=None,
        help="neither read nor write a history (no trend in the report)",
    )
    add_threshold_options(parser)
    args = parser.parse_args(argv)
    options = RunOptions(
        thresholds=thresholds_from_options(vars(args)),
        kill_matrix=args.kill_matrix,
        history=args.history,
        command="swa-harness report",
        name="swa-harness report",
    )
    return rerender(args.out, options=options)


if __name__ == "__main__":
    raise SystemExit(main())
