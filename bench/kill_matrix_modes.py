"""A kill matrix run both ways, side by side: every fault through every whole suite (``--mode full``) and through
only the tests that reach its code (``--mode impact``). Same verdict per fault, or the difference named; the wall
times; per fault, the tests each way ran.

    swa-harness faults --mode full --out full.json && swa-harness faults --out impact.json --previous full.json
    python -m bench.kill_matrix_modes --full full.json --impact impact.json [--note "what else ran"]

Several targets may be given (``--full`` and ``--impact`` repeated, in the same order): one section holds them all.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.common import markdown_table, write_section
from harness.faults.matrix import compare
from harness.kill_record import KillMatrix, load


def _blank(value: object) -> object:
    """A value the matrix may lack (a full matrix has no test-impact counts), blank when it does."""
    return "" if value is None else value


def section(full: KillMatrix, impact: KillMatrix) -> tuple[str, bool]:
    differences = compare(full, impact)
    by_id = {f.spec.id: f for f in impact.faults}
    rows = []
    for fault in full.faults:
        other = by_id.get(fault.spec.id)
        rows.append(
            [
                fault.spec.id,
                fault.verdict(),
                other.verdict() if other else "(not run)",
                fault.tests_run_in_cells() or "",
                f"{_blank(other.tests_run)} of {_blank(other.tests_reaching)}" if other else "",
                _blank(fault.run_s),
                _blank(other.run_s) if other else "",
            ]
        )
    ratio = full.wall_s / impact.wall_s if full.wall_s is not None and impact.wall_s else float("nan")
    head = (
        f"**{full.target}**: {len(full.faults)} faults; full {full.wall_s} s, impact {impact.wall_s} s "
        f"({ratio:.1f}x faster), {full.jobs} and {impact.jobs} parallel runs. "
        + (
            "Every fault has the same verdict both ways."
            if not differences
            else "Verdicts that DIFFER: " + "; ".join(differences)
        )
    )
    table = markdown_table(
        [
            "fault",
            "verdict, full",
            "verdict, impact",
            "tests run, full",
            "tests run of reaching, impact",
            "s, full",
            "s, impact",
        ],
        rows,
    )
    return f"{head}\n\n{table}", not differences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="append", required=True)
    parser.add_argument("--impact", action="append", required=True)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    parts, same = [], True
    for full_path, impact_path in zip(args.full, args.impact, strict=True):
        body, ok = section(load(Path(full_path)), load(Path(impact_path)))
        parts.append(body)
        same &= ok
    write_section(
        "kill-matrix-modes",
        "Kill matrices with test impact vs every fault through every suite (CPU)",
        "python -m bench.kill_matrix_modes "
        + " ".join(f"--full {f} --impact {i}" for f, i in zip(args.full, args.impact)),
        "\n\n".join(([args.note] if args.note else []) + parts),
    )
    print("\n\n".join(parts))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
