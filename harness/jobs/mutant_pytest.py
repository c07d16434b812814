"""Where a mutation run's pytest runs go (``swa-harness mutants``, ``harness/jobs/mutants.py``): the clean build's
recording of which tests reach which line, kept and reused as the kill matrix keeps its own, and each mutant's run,
a fresh process or a child of a warm fork server (``harness/mutants/swap.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.cell_progress import CellProgress
from harness.env import DURATIONS_ENV, IMPACT_CODE_ENV, IMPACT_ENV, IMPACT_LINES_ENV, MUTANT_ENV, SELECT_ENV
from harness.faults.forkserver import ForkRunTimeout, ForkServerError, ForkServers
from harness.faults.impact import Impact
from harness.faults.matrix import NO_VERDICT, MatrixTarget, SuiteOutcome, pytest_argv, run_env
from harness.faults.recording_cache import Fingerprint, RecordingCache
from harness.paths import REPO

TEST_TIMEOUT_S = 60  # per test under a mutant, at least; 4x the slowest selected test's clean seconds if more
RUN_TIMEOUT_S = 900  # per mutant, all its tests: past it the mutant is a timeout


@dataclass(frozen=True)
class PytestRun:
    """One pytest run's verdicts, seconds, exit code (None: killed at its limit), output tail, and whether it was a
    child forked from a warm server (else a fresh process)."""

    outcome: SuiteOutcome
    seconds: float
    code: int | None
    tail: str
    forked: bool = False


@dataclass(frozen=True)
class MutationPytest:
    """Where a mutation run's pytest processes go and how they run."""

    target: MatrixTarget
    workdir: Path
    servers: ForkServers | None = None  # warm fork servers for the mutants that can be swapped in (swap.py)

    def run(
        self,
        name: str,
        paths: Iterable[str],
        *,
        select: list[str] | None = None,
        record: Path | None = None,
        code: Path | None = None,
        mutant: Path | None = None,
        test_timeout_s: float = TEST_TIMEOUT_S,
        durations: Path | None = None,
        lines: Path | None = None,
        timeout_s: float = RUN_TIMEOUT_S,
        fork: bool = False,
    ) -> PytestRun:
        """One pytest process (``fork``: a child of a warm server). A forked child that dies or ends outside pytest is
        run again as a process: the verdict is the process's, as without a server."""
        verdicts = self.workdir / f"{name}.jsonl"
        extra = {self.target.fault_env: ""}
        if lines is not None:
            extra[IMPACT_LINES_ENV] = str(lines)
        if durations is not None:
            extra[DURATIONS_ENV] = str(durations)
        if record is not None and code is not None:
            extra[IMPACT_ENV], extra[IMPACT_CODE_ENV] = f"{self.target.name}:{record}", str(code)
        if select is not None:
            (selection := self.workdir / f"{name}.select.json").write_text(json.dumps(select))
            extra[SELECT_ENV] = str(selection)
        if mutant is not None:
            extra[MUTANT_ENV] = str(mutant)
        env = run_env(verdicts, stop_on_kill=mutant is not None, extra=extra)
        limit = test_timeout_s if mutant else 300
        argv = pytest_argv(self.target, paths, plugins=("harness.mutants.activate",), test_timeout_s=limit)
        if fork and self.servers is not None and (forked := self._fork(name, argv, env, verdicts, timeout_s)):
            return forked
        cmd = [sys.executable, "-m", "pytest", *argv]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
            code, tail = proc.returncode, (proc.stdout[-1500:] + proc.stderr[-1500:])
        except subprocess.TimeoutExpired:
            code, tail = None, f"killed after {timeout_s:.0f} s"
        seconds = round(time.perf_counter() - start, 1)
        return PytestRun(outcome=SuiteOutcome.from_verdicts(verdicts), seconds=seconds, code=code, tail=tail)

    def _fork(
        self, name: str, argv: list[str], env: dict[str, str], verdicts: Path, timeout_s: float
    ) -> PytestRun | None:
        """The run as a warm server's child; None when the fork failed (the caller runs it as a process)."""
        assert self.servers is not None
        start = time.perf_counter()
        try:
            forked = self.servers.run(argv, env, timeout_s=timeout_s, log=self.workdir / f"{name}.log", cwd=REPO)
        except ForkRunTimeout:
            seconds, tail = round(time.perf_counter() - start, 1), f"killed after {timeout_s:.0f} s"
            return PytestRun(SuiteOutcome.from_verdicts(verdicts), seconds=seconds, code=None, tail=tail, forked=True)
        except ForkServerError as error:
            print(f"{name}: the fork failed ({str(error).splitlines()[0]}); run again as a process", flush=True)
            verdicts.unlink(missing_ok=True)
            return None
        return PytestRun(
            SuiteOutcome.from_verdicts(verdicts),
            seconds=round(forked.wall_s, 1),
            code=forked.returncode,
            tail=forked.output,
            forked=True,
        )


@dataclass(frozen=True)
class Recording:
    impacts: dict[str, Impact]  # suite -> which tests reach which function
    outcomes: dict[str, SuiteOutcome]
    seconds: float
    durations: dict[str, float]  # test -> its seconds on the clean build (set-up and teardown in)
    line_files: tuple[str, ...]  # the scope's files; a line key is ``<index>:<line>``

    def reaching(self, function: str) -> list[str]:
        return [t for impact in self.impacts.values() for t in impact.reaching(function)]

    def running(self, path: Path, lines: range) -> list[str]:
        """The tests that ran any of ``lines`` of the file at ``path`` (in suite order, each once)."""
        index = self.line_files.index(str(path))
        keys = {f"{index}:{line}" for line in lines}
        # Only a test that ran a line here: one credited with every line for starting a process cannot see the mutant.
        found = (t for impact in self.impacts.values() for t, credited in impact.tests if credited & keys)
        return list(dict.fromkeys(found))


# Beside the suites, what a mutation run's recording runs: its runner, its plugin, and what decides the functions.
RUN_MODULES = (
    "harness/jobs/mutants.py",
    "harness/jobs/mutant_pytest.py",
    "harness/mutants/activate.py",
    "harness/mutants/generate.py",
    "harness/mutants/scope.py",
)


def recording_cache(target: MatrixTarget, root: Path | None = None) -> RecordingCache:
    """Where the clean build's recording of every scope function is kept (``reports/.mutants-recording-<target>``,
    git-ignored), keyed as the kill matrix keys its own (``harness/faults/recording_cache.py``), this runner's
    modules in the suites digest."""
    folder = root or REPO / "reports" / f".mutants-recording-{target.name}"
    return RecordingCache(folder, Fingerprint.now(target.name, (*target.suites.values(), *RUN_MODULES)))


def record(
    runner: MutationPytest,
    functions: set[str],
    line_files: tuple[str, ...],
    jobs: int,
    cache: RecordingCache,
    fresh: bool,
) -> Recording:
    """The clean build of every suite with the recorder on, suites in parallel; reused from ``cache`` when its key
    is this run's (then it took no time here: ``seconds`` is 0)."""
    suites = runner.target.suites
    looked = cache.lookup((), list(suites), fresh=fresh)
    if looked.stored is not None:
        print(f"clean build: recording reused from {cache.root} ({looked.stored.recorded_at})", flush=True)
        stored = looked.stored
        return Recording(
            impacts={s: Impact.load(stored.impacts[s]) for s in suites},
            outcomes={s: SuiteOutcome.from_json(stored.outcomes[s]) for s in suites},
            seconds=0.0,
            durations={t: float(d) for s in suites for t, d in stored.outcomes[s].get("durations", {}).items()},
            line_files=line_files,
        )
    print(f"clean build: recording which tests reach the {len(functions)} functions ({looked.why})", flush=True)
    code = runner.workdir / "functions.json"
    code.write_text(json.dumps({f: [f] for f in sorted(functions)}))
    (lines := runner.workdir / "lines.json").write_text(json.dumps(list(line_files)))
    start = time.perf_counter()

    def clean(suite: str) -> PytestRun:
        progress.start(suite)
        out = runner.run(
            f"clean-{suite}",
            [suites[suite]],
            record=runner.workdir / f"impact-{suite}.json",
            code=code,
            durations=runner.workdir / f"durations-{suite}.jsonl",
            lines=lines,
        )
        failed = len(out.outcome.kills) + len(out.outcome.errors)
        progress.done(suite, f"{out.outcome.passed} passed, {failed} failed", out.seconds)
        return out

    with ThreadPoolExecutor(jobs) as pool, CellProgress("recording", total=len(suites)) as progress:
        results = dict(zip(suites, pool.map(clean, suites)))
    impacts = {}
    for suite in suites:
        path = runner.workdir / f"impact-{suite}.json"
        if not path.exists():
            raise RuntimeError(f"clean {suite}: no impact recording written:\n{results[suite].tail}")
        impacts[suite] = Impact.load(path)
    durations: dict[str, dict[str, float]] = {s: {} for s in suites}
    for suite in suites:
        path = runner.workdir / f"durations-{suite}.jsonl"
        for line in path.read_text().splitlines() if path.exists() else ():
            row = json.loads(line)
            durations[suite][row["nodeid"]] = durations[suite].get(row["nodeid"], 0.0) + float(row["seconds"])
    recording = Recording(
        impacts=impacts,
        outcomes={s: r.outcome for s, r in results.items()},
        seconds=round(time.perf_counter() - start, 1),
        durations={t: d for per in durations.values() for t, d in per.items()},
        line_files=line_files,
    )
    if not clean_problems(runner.target, recording):  # a red or crashed clean build is never kept
        outcomes = {s: {**recording.outcomes[s].to_json(), "durations": durations[s]} for s in suites}
        paths = {s: runner.workdir / f"impact-{s}.json" for s in suites}
        cache.store((), outcomes, paths, recording.seconds)
    return recording


def clean_problems(target: MatrixTarget, recording: Recording) -> list[str]:
    problems = []
    for suite, outcome in recording.outcomes.items():
        cell = outcome.clean_status(target.min_tests[suite])
        if cell.status != "passed":
            problems.append(f"{NO_VERDICT if cell.status == 'error' else ''}clean build: {suite} {cell.detail}")
    return problems
