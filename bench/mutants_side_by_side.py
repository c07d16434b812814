"""Two mutation runs of one sample side by side: every mutant's verdict in each, where it ran, and the seconds.

Why: forking mutants from a warm server (``harness/mutants/swap.py``) must change how long a run takes and nothing
else. This reads two finished runs of the same sample (``swa-harness mutants --out A.json``, then again with or
without ``--no-fork-server``, or from another tree), checks they are runs of one sample (target, engine, source,
sample, seed, shard), and writes the verdicts mutant by mutant, the statuses that differ, and the seconds per phase.

    python -m bench.mutants_side_by_side A.json B.json --label A="..." --label B="..." [--commands "..."]

Each run's wall time is its own record's (``wall_s``: the recording and the mutants, not the venv's set-up); the
whole command's time, when given with ``--total A=SECONDS``, is shown beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench.common import markdown_table, write_section
from harness.mutants.record import MutantResult, MutationRun, load

SAME_SAMPLE = ("target", "engine_version", "source_digest", "sample", "seed", "shard")
STATUSES = ("killed", "error", "timeout", "survived", "unreached")


def _verdict(r: MutantResult) -> str:
    return f"killed ({r.kill_class})" if r.status == "killed" else r.status


def _phase(run: MutationRun) -> float:
    """The mutants' own seconds, summed (the parallel jobs overlap them: compare with ``wall_s - recording_s``)."""
    return sum(r.seconds for r in run.results)


def compare(a: MutationRun, b: MutationRun, labels: tuple[str, str], totals: dict[str, float]) -> tuple[str, int]:
    """The section's body and how many mutants' verdicts differ."""
    for name in SAME_SAMPLE:
        if getattr(a, name) != getattr(b, name):
            raise SystemExit(f"not one sample: {name} is {getattr(a, name)!r} in A and {getattr(b, name)!r} in B")
    by_b = {r.mutant.id: r for r in b.results}
    if set(by_b) != {r.mutant.id for r in a.results}:
        raise SystemExit("the two runs hold different mutants")
    rows, differ = [], 0
    for r in a.results:
        other = by_b[r.mutant.id]
        same = _verdict(r) == _verdict(other)
        differ += not same
        if r.status == "unreached" and other.status == "unreached":
            continue
        rows.append(
            [
                f"`{r.mutant.short_module}:{r.mutant.line}` {r.mutant.operator}",
                _verdict(r),
                f"{r.seconds:.1f} s ({r.how})",
                _verdict(other),
                f"{other.seconds:.1f} s ({other.how})",
                "same" if same else "**differs**",
            ]
        )
    head = []
    for label, run in zip(labels, (a, b)):
        counts = run.counts()
        reached = [x for x in run.results if x.status != "unreached"]
        forked = [x.seconds for x in reached if x.how == "fork"]
        process = [x.seconds for x in reached if x.how == "process"]
        head.append(
            [
                label,
                f"{totals[label]:.1f}" if label in totals else "-",
                f"{run.wall_s:.1f}",
                f"{run.recording_s:.1f}",
                f"{run.wall_s - run.recording_s:.1f}",
                f"{_phase(run):.1f}",
                f"{len(forked)} / {len(process)}",
                f"{statistics.median(forked):.1f}" if forked else "-",
                f"{statistics.median(process):.1f}" if process else "-",
                ", ".join(f"{counts[s]} {s}" for s in STATUSES),
            ]
        )
    body = markdown_table(
        [
            "run",
            "command s (all in)",
            "run's wall s",
            "recording s",
            "after the recording s",
            "mutant runs s (sum)",
            "forked / processes",
            "median s forked",
            "median s process",
            "statuses",
        ],
        head,
    )
    body += (
        f"\n\n**{len(a.results) - differ} of {len(a.results)} mutants the same verdict in both runs"
        f"{'' if not differ else f'; {differ} differ'}.** "
        f"{a.sample} drawn with seed {a.seed} from {a.population} ({a.target} {a.engine_version}, {a.jobs} jobs in "
        f"A, {b.jobs} in B); the mutants no test reaches run nothing in either and are left out of the table.\n\n"
    )
    body += markdown_table(["mutant", f"{labels[0]}", "seconds", f"{labels[1]}", "seconds", ""], rows)
    return body, differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--label", action="append", default=[], help="A=... and B=...: what each run was")
    parser.add_argument("--total", action="append", default=[], help="A=SECONDS: the whole command's wall time")
    parser.add_argument("--commands", default="", help="the commands that made A and B, for the section's head")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    named = dict(item.split("=", 1) for item in args.label)
    labels = (named.get("A", "A"), named.get("B", "B"))
    totals = {labels[0 if k == "A" else 1]: float(v) for k, v in (t.split("=", 1) for t in args.total)}
    a, b = load(args.a), load(args.b)
    body, differ = compare(a, b, labels, totals)
    print(body)
    if not args.no_write:
        command = f"python -m bench.mutants_side_by_side {args.a.name} {args.b.name}"
        if args.commands:
            command += f" (the runs: {args.commands})"
        title = f"Mutation runs, {a.target} {a.engine_version}: one sample forked and in processes"
        write_section(f"mutants-side-by-side-{a.target}", title, command, body)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
