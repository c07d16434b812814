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
"""

from __future__ import annotations

import argparse

from bench.common import markdown_table, write_section
from bench.sglang_checkout import installed_copy, put_back, replace_file, run_check
from harness.mutants.generate import Mutant


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


def main() -> int:
    from harness.mutants.generate import mutated_source, with_after
    from harness.mutants.scope import SCOPES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = parser.parse_args()
    scopes = {s.module: s for s in SCOPES["sglang"]}
    chosen = sample(args.sample, args.seed)
    rows, counts, slow, problems = [], {"PASS": 0, "FAIL": 0, "NO VERDICT": 0}, [], 0
    with installed_copy() as tree:
        run = run_check(tree)
        print(run.output, flush=True)
        clean = f"exit {run.rc}, {run.wall_s:.0f} s" + ("" if run.rc == 0 else " (the clean checkout must pass)")
        problems += run.rc != 0
        for i, mutant in enumerate(chosen, 1):
            installed = scopes[mutant.module].path()
            text = installed.read_text()
            mutant = with_after(mutant, text)
            copy = tree.joinpath(*mutant.module.split(".")).with_suffix(".py")
            if not copy.is_file():
                raise LookupError(f"{mutant.module}: no {copy} in the copy of the installed SGLang")
            replace_file(copy, mutated_source(text, mutant.operator, mutant.occurrence))
            try:
                run = run_check(tree)
            finally:
                put_back({copy: text})
            at = run.first_failure()
            counts[run.verdict] += 1
            if run.verdict == "FAIL" and (at is None or at[1] > 60):
                slow.append(mutant.id)
            print(f"== [{i}/{len(chosen)}] {mutant.id}: {run.verdict} in {run.wall_s:.0f} s\n{run.output}", flush=True)
            test = run.failing_test()
            rows.append(
                [
                    f"`{mutant.short_module}:{mutant.line}` {mutant.operator}",
                    f"`{_cell(mutant.diff())}`",
                    run.verdict,
                    f"{at[0]}, {at[1]} s" if at else f"{run.wall_s:.0f} s in all",
                    f"`{test}`" if test else "",
                    run.says(),
                ]
            )
    killed = counts["FAIL"]
    body = (
        f"Mutants: {len(chosen)} drawn (seed {args.seed}) from SGLang's mutation scope less the functions the SGLang"
        f" catalog edits. Clean copy of the installed SGLang: {clean}. Verdicts: {killed} FAIL, {counts['PASS']} PASS"
        f" (survived check), {counts['NO VERDICT']} NO VERDICT. Time to the first failure <= 60 s for"
        f" {killed - len(slow)} of the {killed} killed (goal: all)"
        + (f"; over it: {', '.join(slow)}" if slow else "")
        + ".\n\n"
        + markdown_table(
            ["mutant", "change", "verdict", "stage, seconds to the first failure", "failing test", "check says"], rows
        )
    )
    print(body)
    if not args.no_write:
        write_section(
            "check-mutants",
            "check against unknown faults (mutants)",
            f"python -m bench.check_mutants --sample {args.sample} --seed {args.seed} (in the nox -s sglang venv)",
            body,
        )
    return 1 if problems or slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
