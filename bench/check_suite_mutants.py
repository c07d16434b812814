"""One suite file against chosen SGLang mutants, each imported in its own pytest process (the mutation run's way:
``-p harness.mutants.activate``, nothing on disk changed), its failures classed by the kill matrix's verdicts plugin.
A quick check that a new suite kills what it was written for, before the whole mutation run.

    .nox/sglang/bin/python -m bench.check_suite_mutants suites/sglang/test_hicache.py ID [ID ...] [--ids-from FILE]

Prints one line per mutant: killed (behavioural / structural, the failing test and its message), error (only
crashes: an engine exception or assert), survived (every test passed), and the seconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import tempfile
import time
from pathlib import Path

from harness.env import MUTANT_ENV
from harness.faults.matrix import MATRIX_TARGETS, SuiteOutcome, pytest_command, run_env
from harness.mutants.generate import mutated_source
from harness.paths import REPO


def mutant_file(mutant_id: str, workdir: Path) -> Path:
    """``module:line:Operator:occurrence`` as the JSON the activate plugin reads."""
    module, _line, operator, occurrence = mutant_id.split(":")
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)  # a top-level lookup imports nothing; the module itself must not be
    if spec is None or spec.origin is None:
        raise LookupError(f"{top} is not installed here")
    source = Path(spec.origin).parent.joinpath(*rest).with_suffix(".py").read_text()
    path = workdir / f"{mutant_id.replace(':', '_')}.json"
    path.write_text(json.dumps({"module": module, "source": mutated_source(source, operator, int(occurrence))}))
    return path


def check(suite: str, mutant_id: str, workdir: Path) -> tuple[str, float, str]:
    verdicts = workdir / f"{mutant_id.replace(':', '_')}.verdicts.jsonl"
    env = run_env(verdicts, stop_on_kill=True, extra={MUTANT_ENV: str(mutant_file(mutant_id, workdir))})
    cmd = pytest_command(MATRIX_TARGETS["sglang"], [suite], plugins=("harness.mutants.activate",), test_timeout_s=120)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - start
    outcome = SuiteOutcome.from_verdicts(verdicts)
    if outcome.kills:
        kill = outcome.kills[0]
        return f"killed: {kill.kill_class}", seconds, f"{kill.nodeid}: {kill.message[:200]}"
    if outcome.errors:
        error = outcome.errors[0]
        return "error", seconds, f"{error.nodeid}: {error.message[:200]}"
    if proc.returncode not in (0, 5):
        return "error", seconds, f"pytest exit {proc.returncode}: {(proc.stdout + proc.stderr)[-300:]}"
    return "survived", seconds, f"{outcome.passed} passed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite")
    parser.add_argument("ids", nargs="*")
    parser.add_argument("--ids-from", type=Path)
    args = parser.parse_args()
    ids = list(args.ids)
    if args.ids_from:
        ids += [line.split()[0] for line in args.ids_from.read_text().splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        for mutant_id in ids:
            status, seconds, detail = check(args.suite, mutant_id, Path(tmp))
            print(f"{mutant_id}\t{status}\t{seconds:.1f}s\t{detail}", flush=True)


if __name__ == "__main__":
    main()
