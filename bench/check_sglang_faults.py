"""`swa-harness check --sglang <checkout>` against every SGLang catalog fault written into a checkout.

The checkout is a copy of the installed SGLang (hard links, its python/ folder); each fault's edits are written into
its source files (``write_into_tree``), `check --no-server` runs on it, and the files are put back. The clean copy
runs first and must pass. Per fault: the first failing test, the seconds from the suites' start to that failure
(what `check` prints), and the catalog fault `check` said it looks like.

    nox -s sglang --install-only && .nox/sglang/bin/python -m bench.check_sglang_faults [--only ID ...]
"""

from __future__ import annotations

import argparse

from bench.common import markdown_table, write_section
from bench.sglang_checkout import installed_copy, put_back, run_check


def main() -> int:
    from harness.targets.sglang.faults import write_into_tree
    from harness.targets.sglang.faults.by_id import SGLANG_FAULTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    rows, failures = [], 0
    with installed_copy() as tree:
        run = run_check(tree)
        print(run.output)
        clean = f"exit {run.rc}, {run.wall_s:.0f} s" + ("" if run.rc == 0 else " (the clean checkout must pass)")
        failures += run.rc != 0
        for fid, fault in SGLANG_FAULTS.items():
            if args.only and fid not in args.only:
                continue
            originals = write_into_tree(fault, tree)
            try:
                run = run_check(tree)
            finally:
                put_back(originals)
            print(f"== {fid}: exit {run.rc} in {run.wall_s:.0f} s\n{run.output}")
            test, at, named = run.failing_test(), run.first_failure(), run.named()
            rows.append(
                [
                    fid,
                    f"`{test}`" if test else "(no failure)",
                    f"{at[0]}, {at[1]} s" if at else f"exit {run.rc}",
                    run.says() or "(none)",
                    "yes" if named and named[0] == fid else "no",
                ]
            )
            failures += run.rc != 1
    within = sum(1 for r in rows if r[2].split(", ")[-1].endswith(" s") and float(r[2].split(", ")[-1][:-2]) <= 60)
    body = (
        f"Clean copy of the installed SGLang: {clean}. Faults: {len(rows)}; a failure printed within 60 s of the "
        f"suites' start for {within}; `check` named the fault itself for {sum(r[4] == 'yes' for r in rows)}.\n\n"
        + markdown_table(
            ["fault written into the checkout", "first failing test", "stage, seconds to it", "check says", "itself"],
            rows,
        )
    )
    write_section(
        "check-sglang",
        "`swa-harness check --sglang <checkout>` against every SGLang catalog fault (CPU)",
        "python -m bench.check_sglang_faults (in the nox -s sglang venv)",
        body,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
