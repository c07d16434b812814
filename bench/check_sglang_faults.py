"""`swa-harness check --sglang <checkout>` against every SGLang catalog fault written into a checkout.

The checkout is a copy of the installed SGLang (hard links, its python/ folder); each fault's edits are written into
its source files (``write_into_tree``), `check --no-server` runs on it, and the files are put back. The clean copy
runs first and must pass. Per fault: the first failing test, the seconds from the suites' start to that failure
(what `check` prints), and the catalog fault `check` said it looks like.

    nox -s sglang --install-only && .nox/sglang/bin/python -m bench.check_sglang_faults [--only ID ...]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import markdown_table, write_section
from harness.paths import REPO


def _check(tree: Path) -> tuple[int, str, float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "check", "--sglang", str(tree.parent), "--no-server"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - start


def main() -> int:
    from harness.targets.sglang.faults import write_into_tree
    from harness.targets.sglang.faults.catalog import SGLANG_FAULTS
    from harness.targets.sglang.imports import import_sglang

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    sglang = import_sglang()
    installed = Path(sglang.__file__).resolve().parent
    rows, failures = [], 0
    with tempfile.TemporaryDirectory(prefix="sglang-checkout-") as tmp:
        tree = Path(tmp) / "python"
        tree.mkdir()
        subprocess.run(["cp", "-al", str(installed), str(tree / "sglang")], check=True)
        shutil.rmtree(tree / "sglang" / "__pycache__", ignore_errors=True)
        rc, out, wall = _check(tree)
        print(out)
        clean = f"exit {rc}, {wall:.0f} s" + ("" if rc == 0 else " (the clean checkout must pass)")
        failures += rc != 0
        for fid, fault in SGLANG_FAULTS.items():
            if args.only and fid not in args.only:
                continue
            originals = write_into_tree(fault, tree)
            try:
                rc, out, wall = _check(tree)
            finally:
                for path, text in originals.items():
                    path.unlink()
                    path.write_text(text)
            print(f"== {fid}: exit {rc} in {wall:.0f} s\n{out}")
            failed = re.search(r"^FAIL (.+?)(?: \[[^\]]*\])?$", out, re.M)
            at = re.search(r"(\w+): FAILED after (\d+) tests, ([\d.]+) s after the suites started", out)
            like = re.search(
                r"looks like catalog fault (\S+) .*?: (the same test killed it|the closest kill message)", out
            )
            named = like.group(1) if like else "(none)"
            rows.append(
                [
                    fid,
                    f"`{failed.group(1).split('/')[-1]}`" if failed else "(no failure)",
                    f"{at.group(1)}, {at.group(3)} s" if at else f"exit {rc}",
                    named + (f" ({like.group(2)})" if like else ""),
                    "yes" if named == fid else "no",
                ]
            )
            failures += rc != 1
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
