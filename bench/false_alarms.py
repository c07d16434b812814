"""False alarms: the scenario, pool and differential suites on the clean build, once per hypothesis seed.

A suite that fails on clean code for some seed would cry wolf in CI; this runs the suites with
``SWA_HARNESS_HYPOTHESIS=seeded --hypothesis-seed=<seed>`` for seeds 1..N and records every outcome
in docs/FALSE_ALARMS.md with the command that produced it. Exit status 1 if any run failed.

    python -m bench.false_alarms --seeds 20
    python -m bench.false_alarms --seeds 20 --suite suites/scenarios/test_boundaries.py ... --out docs/X.md
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from harness.env import HYPOTHESIS_ENV
from harness.paths import REPO

SUITES = ["suites/pool", "suites/scenarios", "suites/differential"]
OUT = REPO / "docs" / "FALSE_ALARMS.md"


def run_seed(seed: int, workers: str, suites: list[str], target: str) -> tuple[str, float]:
    env = {**os.environ, HYPOTHESIS_ENV: "seeded"}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *suites,
        "--target",
        target,
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        workers,
        f"--hypothesis-seed={seed}",
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    tail = [line for line in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    return (tail[-1].strip("= ") if tail else f"pytest exited {proc.returncode}"), time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", default="2", help="pytest-xdist workers per run")
    parser.add_argument("--suite", action="append", help=f"test paths (default: {' '.join(SUITES)}); repeatable")
    parser.add_argument("--target", default="harness", help="the suites' --target (tests/ ignore it)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    suites, args.out = args.suite or SUITES, args.out.resolve()
    rows, failures, start = [], 0, time.perf_counter()
    for seed in range(1, args.seeds + 1):
        summary, wall = run_seed(seed, args.workers, suites, args.target)
        failed = "failed" in summary or "error" in summary or "passed" not in summary
        failures += failed
        rows.append(f"| {seed} | {summary} | {wall:.0f} |")
        print(f"seed {seed}: {summary} ({wall:.0f} s)", flush=True)
        write(
            args.out, suites, args.target, rows, failures, args.seeds, time.perf_counter() - start
        )  # a cut-off run keeps its record
    return 1 if failures else 0


def write(out: Path, suites: list[str], target: str, rows: list[str], failures: int, seeds: int, wall: float) -> None:
    command = " ".join(
        [
            "python -m bench.false_alarms",
            f"--seeds {seeds}",
            *(f"--suite {s}" for s in suites if suites != SUITES),
            *([f"--target {target}"] if target != "harness" else []),
            *([f"--out {out.relative_to(REPO)}"] if out != OUT else []),
        ]
    )
    out.write_text(
        "\n".join(
            [
                "# False alarms: clean suites across hypothesis seeds",
                "",
                f"`{command}` (suites: {', '.join(suites)}, target {target}; profile `seeded`: "
                "40 examples per generated test, examples drawn from the seed).",
                "",
                f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}; "
                f"{len(rows)} of {seeds} seeds run, wall {wall:.0f} s (other jobs shared the cores). "
                f"Runs that failed on the clean build: **{failures} of {len(rows)}**.",
                "",
                "| seed | pytest summary | wall s |",
                "|---|---|---|",
                *rows,
                "",
            ]
        )
    )


if __name__ == "__main__":
    raise SystemExit(main())
