"""`swa-harness check --sglang <checkout>` against faults no catalog holds: a seeded sample of SGLang mutants.

The mutants are the mutation run's (``harness.mutants.generate``: cosmic-ray's operators over SGLang's SWA memory
code as installed), less every mutant inside a function an SGLang catalog fault edits (``harness/targets/sglang/
faults/catalog``: a mutant there could be the catalog's own edit, or close to it). Each is written into a copy of
the installed SGLang (its module's whole mutated text replaces the copy's file, ``bench.sglang_checkout``), `check
--no-server` runs on it, and the file is put back. The clean copy runs first and must pass. Per mutant: check's
verdict (PASS: every stage passed, the mutant survived; FAIL: a suite assertion; NO VERDICT: a crash or a stage
that could not judge), the stage and seconds from the suites' start to the first failure, the failing test, and
the catalog fault check named or "no catalog fault matches". Goal (issue 57): <= 60 s to the first failure for
every mutant the suites kill.

    nox -s sglang --install-only && .nox/sglang/bin/python -m bench.check_mutants [--sample 30] [--seed 0]

The section is written after every mutant, so a run stopped midway keeps what it measured; ``--from-log LOG``
rebuilds the table from such a run's printed lines (run nothing), and ``--resume LOG`` keeps them and runs the
mutants that run did not reach (the clean copy is checked again first: it is a new copy). Print the resumed run's
lines after the stopped one's, and the joined log reads back as one run.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import markdown_table, write_section
from bench.sglang_checkout import CheckRun, installed_copy, put_back, replace_file, run_check
from harness.mutants.generate import Mutant, mutated_source, with_after


def outside_catalog(mutants: list[Mutant], edited: set[str]) -> list[Mutant]:
    """The mutants outside every function a catalog fault edits (``module.qualname``, its nested functions too)."""
    return [m for m in mutants if not any(m.function == f or m.function.startswith(f + ".") for f in edited)]


def sample(size: int, seed: int) -> list[Mutant]:
    from harness.faults.impact import sglang_fault_code
    from harness.mutants.generate import draw, population

    edited = {target for targets in sglang_fault_code().values() for target in targets}
    return draw(outside_catalog(population("sglang"), edited), size, seed)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " / ")


@dataclass
class Tally:
    """The rows so far, with the counts and the kills slower than the goal: written after every mutant, so a run
    stopped midway keeps what it measured (and ``--from-log`` rebuilds them from a stopped run's printed lines)."""

    drawn: int
    seed: int
    clean: str = "not run"
    rows: list[list[str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"PASS": 0, "FAIL": 0, "NO VERDICT": 0})
    slow: list[str] = field(default_factory=list)

    def add(self, mutant: Mutant, run: CheckRun) -> None:
        at = run.first_failure()
        self.counts[run.verdict] += 1
        if run.verdict == "FAIL" and (at is None or at[1] > 60):
            self.slow.append(mutant.id)
        test = run.failing_test()
        self.rows.append(
            [
                f"`{mutant.short_module}:{mutant.line}` {mutant.operator}",
                f"`{_cell(mutant.diff())}`",
                run.verdict,
                f"{at[0]}, {at[1]} s" if at else f"{run.wall_s:.0f} s in all",
                f"`{test}`" if test else "",
                run.says(),
            ]
        )

    def body(self) -> str:
        killed, done = self.counts["FAIL"], len(self.rows)
        run = f"all {done} run" if done == self.drawn else f"**{done} of them run** (the run stopped there)"
        return (
            f"Mutants: {self.drawn} drawn (seed {self.seed}) from SGLang's mutation scope less the functions the SGLang"
            f" catalog edits, {run}. Clean copy of the installed SGLang: {self.clean}. Verdicts: {killed} FAIL,"
            f" {self.counts['PASS']} PASS (survived check), {self.counts['NO VERDICT']} NO VERDICT. Time to the first"
            f" failure <= 60 s for {killed - len(self.slow)} of the {killed} killed (goal: all)"
            + (f"; over it: {', '.join(self.slow)}" if self.slow else "")
            + ".\n\n"
            + markdown_table(
                ["mutant", "change", "verdict", "stage, seconds to the first failure", "failing test", "check says"],
                self.rows,
            )
        )

    def write(self, command: str) -> None:
        write_section("check-mutants", "check against unknown faults (mutants)", command, self.body())


def _clean_text(run: CheckRun) -> str:
    return f"exit {run.rc}, {run.wall_s:.0f} s" + ("" if run.rc == 0 else " (the clean checkout must pass)")


_HEADER = re.compile(r"^== \[(\d+)/(\d+)\] (\S+): (PASS|FAIL|NO VERDICT) in (\d+) s$", re.M)
_HEADER_IDS = re.compile(r"^== \[\d+/\d+\] (\S+): ", re.M)
_RC = {"PASS": 0, "FAIL": 1, "NO VERDICT": 2}


def from_log(log: str, chosen: list[Mutant], tally: Tally, texts: dict[str, str]) -> None:
    """The results a stopped run printed: the clean run's output first, then one block per mutant under its ``==``
    line (the id, the verdict, the seconds); each block read back as the ``CheckRun`` it printed."""
    heads = list(_HEADER.finditer(log))
    if heads:
        clean = re.search(r"^PASS: every stage passed in (\d+) s$", log[: heads[0].start()], re.M)
        tally.clean = _clean_text(CheckRun(0, "", float(clean.group(1)))) if clean else "did not pass (see its log)"
    by_id = {m.id: m for m in chosen}
    for head, end in zip(heads, [h.start() for h in heads[1:]] + [len(log)]):
        mutant = by_id.get(head.group(3))
        if mutant is None:
            raise LookupError(f"{head.group(3)}: not in the sample this seed draws; was the log made with other flags?")
        run = CheckRun(_RC[head.group(4)], log[head.end() : end], float(head.group(5)))
        tally.add(with_after(mutant, texts[mutant.module]), run)


def main() -> int:
    from harness.mutants.scope import SCOPES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    parser.add_argument("--from-log", type=Path, help="run nothing: the table from a stopped run's printed lines")
    parser.add_argument(
        "--resume",
        type=Path,
        help="a stopped run's printed lines: keep its results, run the mutants it did not reach (the clean copy again)",
    )
    args = parser.parse_args()
    scopes = {s.module: s for s in SCOPES["sglang"]}
    chosen = sample(args.sample, args.seed)
    texts = {m.module: scopes[m.module].path().read_text() for m in chosen}
    tally = Tally(len(chosen), args.seed)
    command = f"python -m bench.check_mutants --sample {args.sample} --seed {args.seed} (in the nox -s sglang venv)"
    if args.from_log:
        from_log(args.from_log.read_text(), chosen, tally, texts)
        print(tally.body())
        if not args.no_write:
            tally.write(command + ", rendered from its printed lines by `--from-log`")
        return 0
    done: set[str] = set()
    if args.resume:
        from_log(args.resume.read_text(), chosen, tally, texts)
        done = set(_HEADER_IDS.findall(args.resume.read_text()))
        command += f", resumed from a stopped run's printed lines ({len(done)} of them kept)"
    problems = 0
    with installed_copy() as tree:
        run = run_check(tree)
        print(run.output, flush=True)
        tally.clean = _clean_text(run)
        problems += run.rc != 0
        for i, mutant in enumerate(chosen, 1):
            if mutant.id in done:
                continue
            text = texts[mutant.module]
            mutant = with_after(mutant, text)
            copy = tree.joinpath(*mutant.module.split(".")).with_suffix(".py")
            if not copy.is_file():
                raise LookupError(f"{mutant.module}: no {copy} in the copy of the installed SGLang")
            replace_file(copy, mutated_source(text, mutant.operator, mutant.occurrence))
            try:
                run = run_check(tree)
            finally:
                put_back({copy: text})
            print(f"== [{i}/{len(chosen)}] {mutant.id}: {run.verdict} in {run.wall_s:.0f} s\n{run.output}", flush=True)
            tally.add(mutant, run)
            if not args.no_write:
                tally.write(command)
    print(tally.body())
    return 1 if problems or tally.slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
