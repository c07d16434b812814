"""How long each tool takes to say NO VERDICT when its engine is missing or does not import (issue 53, item 7: goal
30 s), measured on the commands ``tests/test_no_verdict.py`` holds to their one line and exit 2.

    python -m bench.no_verdict [--repeats 3]

Run in the main job's venv (no SGLang, no vLLM): the "missing" rows as they are, the "broken" rows with SGLang and
vLLM installed but importing a module this venv lacks (the test's fake engines).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine_line, markdown_table, write_section
from harness.paths import REPO

COMMANDS = {
    "check --sglang 0.5.23 --no-server": ["check", "--sglang", "0.5.23", "--no-server"],
    "faults --target sglang": ["faults", "--target", "sglang"],
    "faults --target vllm": ["faults", "--target", "vllm"],
    "eval --plan suites/plans/sglang-cpu-smoke.yaml": ["eval", "--plan", "suites/plans/sglang-cpu-smoke.yaml"],
}


def _run(argv: list[str], env: dict[str, str], out: Path) -> tuple[float, int, str]:
    if argv[0] == "eval":
        argv = [*argv, "--no-history", "--out", str(out)]
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", *argv], cwd=REPO, env=env, capture_output=True, text=True
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    return time.monotonic() - start, done.returncode, lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    from tests.test_no_verdict import _fake_engines

    parser = argparse.ArgumentParser(prog="python -m bench.no_verdict", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        site = _fake_engines(Path(tmp) / "site")
        setups = {
            "missing": dict(os.environ),
            "does not import": {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])},
        }
        for setup, env in setups.items():
            for name, command in COMMANDS.items():
                if setup == "does not import" and command[0] == "check":
                    command = ["check", "--sglang", str(site), "--no-server"]  # a checkout whose import fails
                runs = [_run(command, env, Path(tmp) / "out") for _ in range(args.repeats)]
                codes = sorted({code for _, code, _ in runs})
                print(f"{setup}: {name}: {[round(s, 1) for s, _, _ in runs]} s, exit {codes}: {runs[-1][2]}")
                said = runs[-1][2].replace(str(site), "<site>")
                rows.append([setup, name, f"{statistics.median(s for s, _, _ in runs):.1f} s", codes, said[:140]])
    body = (
        f"{machine_line()}; median of {args.repeats} runs each, quiet machine assumed (re-run when it is not).\n\n"
        + markdown_table(("engine", "command", "median wall", "exit", "what it said (last line)"), rows)
    )
    write_section(
        "no-verdict",
        "NO VERDICT in one line: the tools without their engine (issue 53, item 7)",
        f"python -m bench.no_verdict --repeats {args.repeats}",
        body,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
