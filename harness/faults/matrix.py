"""The kill matrix: run the suites on the clean build and once per catalog fault, per target.

Every run is a pytest session with the fault switched on through the target's environment
variable (none for the clean build); runs go in parallel, one single-threaded process per core. A run that records
(the clean build's, with its test impact) is a subprocess; the others are forked from a warm server per parallel job
that imported and collected the suites once (``harness/faults/forkserver.py``; ``--no-fork-server``: subprocesses).
``harness.faults.verdicts`` classifies every failure: a *kill* is a test's own assertion on a real
computation (*behavioural*) or on a design property (*structural*, marked tests and
``expect_structure``); any other failure, asserts inside harness or SGLang code included, is an
*error*; a suite with neither *survived*. The clean build must pass, and run at least ``min_tests``
tests per suite (a suite that collected nothing proves nothing). The matrix is printed and written as
JSON for the HTML report. Exit 0 when every fault is killed on a clean build that passes; 1 (FAIL) when the clean
build fails an assertion or a fault survives; 2 (NO VERDICT) when the rest is errors only: a fault no suite could
judge, or a clean build that crashed; and 2 at once when the python running the matrix cannot import what the
target's suites import (``harness/targets/preflight.py``: one line naming the nox session that builds it).

Two modes, with the same verdicts (``--compare`` checks two matrices fault by fault):

* ``impact`` (default): the clean build's runs also record which tests reach each fault's code
  (``harness.faults.impact``). A fault then runs only those tests, suite after suite, the tests that
  killed it last time first (from the previous matrix at ``--out``), and stops at its first behavioural
  kill; later suites are *not run*. A fault whose code no test reaches is *unreached*, with that code,
  never *survived* after zero tests. A fault that runs under its own settings (an SGLang fault's
  ``env``) has its tests recorded on a clean build under the same settings, which must pass too.
* ``full``: every fault through every whole suite, one (fault, suite) run each.

The clean recording is kept beside the matrix and reused while nothing that produced it changed
(``harness/faults/recording_cache.py``: the key, field by field; ``--fresh`` records anyway). Every finished cell
prints a line as it lands, with what is left (``harness/cell_progress.py``). ``--shard K/N`` runs the faults of one
shard (``harness/shards.py``), with the clean build and its recording; ``swa-harness merge`` joins the shards' JSONs
into the matrix one machine writes.

    swa-harness faults                     # the harness's own twins (harness/faults/catalog)
    swa-harness faults --target sglang     # source patches into real SGLang (in the `nox -s sglang` venv)
    swa-harness faults --target vllm       # source patches into real vLLM (in the `nox -s vllm` venv)
    swa-harness faults --mode full         # every fault through every suite
    swa-harness faults --target sglang --shard 2/4 --out shard-2.json   # one machine's part of four
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from harness.env import (
    DURATIONS_ENV,
    FAULT_ENV,
    HYPOTHESIS_ENV,
    IMPACT_CODE_ENV,
    IMPACT_ENV,
    IMPACT_LINES_ENV,
    MUTANT_ENV,
    SELECT_ENV,
    SGLANG_FAULT_ENV,
    STOP_ON_KILL_ENV,
    VERDICTS_ENV,
    VLLM_FAULT_ENV,
)
from harness.cell_progress import CellProgress
from harness.faults.forkserver import ForkServers, ForkServerSpec, server_env
from harness.faults.impact import Impact
from harness.faults.recording_cache import Lookup, RecordingCache, Settings
from harness.kill_record import CleanCell, Failure, FaultRow, FaultSpec, KillCell, KillMatrix, RecordingUse, VerdictLine
from harness.kill_record import load, load_if_any, read_verdicts, save, specs
from harness.paths import REPO
from harness.reuse import code_fingerprint
from harness.shards import WHOLE, Shard
from harness.targets.preflight import SGLANG_SUITES, VLLM_SUITES, Needs, unimportable

Mode = Literal["impact", "full"]


@dataclass(frozen=True)
class MatrixTarget:
    """What differs between targets: suites, how a fault is switched on, which faults exist."""

    name: str
    suites: dict[str, str]  # suite name -> path
    min_tests: dict[str, int]
    fault_env: str
    catalog: Callable[[], dict[str, FaultSpec]]  # fault id -> its record (id, seed, breaks, ...)
    pytest_args: tuple[str, ...] = ()
    out: Path = REPO / "reports" / "kill-matrix.json"
    needs: Needs | None = None  # what its suites import from a real engine, checked before any run
    # Whether its runs that record nothing may be forked from a warm server (harness/faults/forkserver.py): not where
    # a suite applies its fault when a conftest is imported (a warm parent imports it once, without the fault).
    fork_server: bool = True


def _harness_catalog() -> dict[str, FaultSpec]:
    from harness.faults import FAULTS

    return specs(FAULTS.values())


def _vllm_catalog() -> dict[str, FaultSpec]:
    from harness.targets.vllm.faults.by_id import VLLM_FAULTS

    return specs(VLLM_FAULTS.values())


def _sglang_catalog() -> dict[str, FaultSpec]:
    from harness.targets.sglang.faults.by_id import SGLANG_FAULTS

    return specs(SGLANG_FAULTS.values())


MATRIX_TARGETS: dict[str, MatrixTarget] = {
    "harness": MatrixTarget(
        name="harness",
        suites={
            "scenarios": "suites/scenarios",
            "differential": "suites/differential",
            "prefix": "suites/prefix",
            "reuse": "suites/reuse",
        },
        min_tests={"scenarios": 110, "differential": 15, "prefix": 4, "reuse": 40},
        fault_env=FAULT_ENV,
        catalog=_harness_catalog,
    ),
    "sglang": MatrixTarget(
        name="sglang",
        suites={
            "pool": "suites/pool",
            "scenarios": "suites/scenarios",
            "differential": "suites/differential",
            "registry": "suites/sglang/test_decode_registry.py",
            "plan": "suites/sglang/test_kv_loc_plan.py",
            "retraction": "suites/sglang/test_swa_retraction.py",
            "layouts": "suites/sglang/test_swa_pool_layouts.py",
            "registries": "suites/sglang/test_graph_registries.py",
            "prefix": "suites/prefix",
            "prefix-adapter": "suites/sglang/test_prefix_cache_adapter.py",
            "hicache": "suites/sglang/test_hicache.py",
        },
        min_tests={
            "pool": 7,
            "scenarios": 110,
            "differential": 33,
            "registry": 14,
            "plan": 8,
            "retraction": 5,
            "layouts": 7,
            "registries": 11,
            "prefix": 4,
            "prefix-adapter": 12,
            "hicache": 29,
        },
        fault_env=SGLANG_FAULT_ENV,
        catalog=_sglang_catalog,
        pytest_args=("--target", "sglang"),
        out=REPO / "reports" / "kill-matrix-sglang.json",
        needs=SGLANG_SUITES,
    ),
    # vLLM's own code, driven without a model (in the `nox -s vllm` venv): its KV-cache manager and its worker's
    # block tables, slot mappings and padded KV writes.
    "vllm": MatrixTarget(
        name="vllm",
        suites={
            "manager": "suites/vllm/test_kv_cache_manager.py",
            "hits": "suites/vllm/test_cache_hits.py",
            "worker": "suites/vllm/test_block_table.py",
        },
        min_tests={"manager": 3, "hits": 100, "worker": 1},
        fault_env=VLLM_FAULT_ENV,
        catalog=_vllm_catalog,
        pytest_args=(),
        out=REPO / "reports" / "kill-matrix-vllm.json",
        needs=VLLM_SUITES,
        fork_server=False,  # suites/vllm/conftest.py applies SWA_HARNESS_VLLM_FAULT when it is imported
    ),
}


@dataclass(frozen=True)
class SuiteOutcome:
    """One pytest run's verdicts: the tests that passed, the kills and the errors, in order."""

    passed: int = 0
    kills: tuple[VerdictLine, ...] = ()
    errors: tuple[VerdictLine, ...] = ()

    @classmethod
    def from_verdicts(cls, path: Path) -> SuiteOutcome:
        verdicts = read_verdicts(path)
        return cls(
            passed=sum(v.outcome == "passed" for v in verdicts),
            kills=tuple(v for v in verdicts if v.outcome == "kill"),
            errors=tuple(v for v in verdicts if v.outcome not in ("passed", "kill")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "kills": [v.to_json() for v in self.kills],
            "errors": [v.to_json() for v in self.errors],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SuiteOutcome:
        return cls(
            passed=int(data.get("passed", 0)),
            kills=tuple(VerdictLine.from_json(v) for v in data.get("kills") or ()),
            errors=tuple(VerdictLine.from_json(v) for v in data.get("errors") or ()),
        )

    @property
    def ran(self) -> int:
        return self.passed + len(self.kills) + len(self.errors)

    @property
    def killed_behaviourally(self) -> bool:
        return any(k.kill_class == "behavioural" for k in self.kills)

    def fault_status(self) -> KillCell:
        if self.kills:
            best = next((k for k in self.kills if k.kill_class == "behavioural"), self.kills[0])
            return KillCell("killed", kill_class=best.kill_class, failure=best.failure, tests_run=self.ran)
        if self.errors:
            return KillCell("error", kill_class=None, failure=self.errors[0].failure, tests_run=self.ran)
        return KillCell("survived", kill_class=None, failure=None, tests_run=self.ran)

    def clean_status(self, min_tests: int) -> CleanCell:
        failures = self.kills + self.errors
        if failures:  # "error": only crashes, no assertion failed (no verdict on the clean build)
            status = "failed" if self.kills else "error"
            return CleanCell(status, self.passed, failures[0].failure.describe())
        if self.passed < min_tests:
            detail = f"only {self.passed} tests passed; the suite must run at least {min_tests}"
            return CleanCell("failed", self.passed, detail)
        return CleanCell("passed", self.passed, f"{self.passed} tests passed")


def run_env(verdicts: Path, *, stop_on_kill: bool, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of one matrix pytest run (a kill matrix's or a mutation run's): derandomised examples, its
    verdicts file, whether it stops at a kill; no recording, selection or mutant inherited; ``extra`` last."""
    env = {
        **os.environ,
        HYPOTHESIS_ENV: "matrix",
        "PYTHONHASHSEED": "0",
        VERDICTS_ENV: str(verdicts),
        STOP_ON_KILL_ENV: "1" if stop_on_kill else "0",
    }
    for inherited in (IMPACT_ENV, IMPACT_CODE_ENV, IMPACT_LINES_ENV, SELECT_ENV, MUTANT_ENV, DURATIONS_ENV):
        env.pop(inherited, None)
    return {**env, **(extra or {})}


def pytest_command(
    target: MatrixTarget, paths: Iterable[str], *, plugins: tuple[str, ...] = (), test_timeout_s: float = 300
) -> list[str]:
    """One matrix pytest process over ``paths``: no cache, no xdist, the verdicts and impact plugins (``plugins``
    before them), each test's time limit."""
    return [sys.executable, "-m", "pytest", *pytest_argv(target, paths, plugins=plugins, test_timeout_s=test_timeout_s)]


def pytest_argv(
    target: MatrixTarget, paths: Iterable[str], *, plugins: tuple[str, ...] = (), test_timeout_s: float = 300
) -> list[str]:
    """``pytest_command``'s arguments after ``-m pytest`` (what a fork server's child passes to ``pytest.main``)."""
    loaded = [
        arg for plugin in (*plugins, "harness.faults.verdicts", "harness.faults.impact") for arg in ("-p", plugin)
    ]
    return [
        *paths,
        *target.pytest_args,
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        *loaded,
        "--timeout",
        str(round(test_timeout_s)),
    ]


def run_suite(
    target: MatrixTarget,
    fault_id: str | None,
    suite: str,
    workdir: Path,
    timeout_s: float,
    *,
    select: list[str] | None = None,
    record: Path | None = None,
    settings: Settings = (),
    servers: ForkServers | None = None,
) -> tuple[SuiteOutcome, float]:
    """One pytest run of ``suite``: with ``select``, only those tests in that order; with ``record``, the
    impact recording written there; ``settings``: environment the run needs beyond the fault's switch. With
    ``servers`` a run that records nothing is forked from a warm server (same argv, environment, exit-code checks and
    time limit: ``ForkRunTimeout`` is the ``subprocess.TimeoutExpired`` of a fork); else it is a subprocess."""
    run_id = f"{fault_id or 'clean'}{'-'.join(['', *(v for _, v in settings)])}-{suite}"
    verdicts = workdir / f"{run_id}.jsonl"
    env = run_env(
        verdicts, stop_on_kill=fault_id is not None, extra={**dict(settings), target.fault_env: fault_id or ""}
    )
    if record is not None:
        env[IMPACT_ENV] = f"{target.name}:{record}"
    if select is not None:
        selection = workdir / f"{run_id}.select.json"
        selection.write_text(json.dumps(select))
        env[SELECT_ENV] = str(selection)
    argv = pytest_argv(target, [target.suites[suite]])
    start = time.perf_counter()
    if servers is not None and record is None:
        forked = servers.run(argv, env, timeout_s=timeout_s, log=workdir / f"{run_id}.log", cwd=REPO)
        returncode, output, wall = forked.returncode, forked.output, forked.wall_s  # without the server's warm-up
    else:
        cmd = [sys.executable, "-m", "pytest", *argv]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
        returncode, output = proc.returncode, f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        wall = time.perf_counter() - start
    # 0: passed, 1: some failed, 2: stopped at a kill (fault runs only); anything else (e.g. 5:
    # nothing collected, 3/4: pytest itself broke) must never pass for a verdict.
    expected = (0, 1, 2) if fault_id is not None else (0, 1)
    if returncode not in expected:
        raise RuntimeError(f"pytest exited {returncode} for {target.name}:{fault_id or 'clean'}/{suite}:\n{output}")
    return SuiteOutcome.from_verdicts(verdicts), wall


def build_matrix(
    target: MatrixTarget,
    fault_ids: list[str],
    *,
    jobs: int = 2,
    timeout_s: float = 900,
    mode: Mode = "impact",
    previous: KillMatrix | None = None,
    shard: Shard = WHOLE,
    cache: RecordingCache | None = None,
    fresh: bool = False,
    stream: Any = None,
    fork_server: bool = True,
) -> KillMatrix:
    """The matrix of ``fault_ids`` (the shard's part of them); ``cache``: where the clean recording is kept and
    reused (None: recorded every time, kept nowhere); ``stream``: where progress goes (stderr); ``fork_server``: the
    runs that record nothing are forked from ``jobs`` warm servers (harness/faults/forkserver.py) where the target
    allows it, else each is a subprocess."""
    catalog = target.catalog()
    held = shard.select(fault_ids)
    start = time.perf_counter()
    recordings: tuple[RecordingUse, ...] = ()
    with (
        tempfile.TemporaryDirectory(prefix="swa-kill-matrix-") as tmp,
        ThreadPoolExecutor(jobs) as pool,
        contextlib.ExitStack() as stack,
    ):
        servers = None
        if fork_server and target.fork_server and (held or mode == "full"):
            servers = stack.enter_context(start_servers(target, Path(tmp), jobs))
        runs = _Runs(target=target, workdir=Path(tmp), timeout_s=timeout_s, pool=pool, servers=servers)
        if shard != WHOLE:
            said = ", ".join(held) or "none"
            print(
                f"shard {shard}: {len(held)} of {len(fault_ids)} faults: {said}", file=stream or sys.stderr, flush=True
            )
        if mode == "full":
            clean, faults = _full_runs(runs, [catalog[fid] for fid in held], stream=stream)
            under: dict[str, dict[str, CleanCell]] = {}
            recorded_s = None
        else:
            recording = _record(runs, [catalog[fid] for fid in held], cache=cache, fresh=fresh, stream=stream)
            killers = previous.behavioural_killers() if previous else {}
            with CellProgress("faults", total=len(held), stream=stream) as progress:

                def row(fid: str) -> FaultRow:
                    progress.start(fid)
                    out = _impact_row(runs, recording, catalog[fid], killers.get(fid, []))
                    progress.done(fid, out.verdict(), out.run_s or 0.0)
                    return out

                futures = [pool.submit(row, fid) for fid in held]
                faults = [f.result() for f in futures]
            if servers is not None and servers.servers:
                warm = ", ".join(f"{s.ready_s} s ({s.threads} threads)" for s in servers.servers)
                print(f"fork servers: {len(servers.servers)}, warm in {warm}", file=stream or sys.stderr, flush=True)
            clean = recording.clean_outcomes(())
            under = {_env(st): _clean_cells(target, recording.clean_outcomes(st)) for st in recording.settings if st}
            recorded_s = recording.seconds
            recordings = recording.uses
    return KillMatrix(
        target=target.name,
        mode=mode,
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        wall_s=round(time.perf_counter() - start, 1),
        jobs=jobs,
        suites=tuple(target.suites),
        clean=_clean_cells(target, clean),
        faults=tuple(faults),
        clean_under_settings=under,
        clean_and_recording_s=recorded_s,
        shard=None if shard == WHOLE else str(shard),
        selection=None if shard == WHOLE else tuple(fault_ids),
        commit=code_fingerprint(),
        engine=cache.fingerprint.engine if cache else "",
        recordings=recordings,
    )


@dataclass(frozen=True)
class _Runs:
    """Where a matrix's pytest runs go: its target, work folder, time limit and pool of parallel runs."""

    target: MatrixTarget
    workdir: Path
    timeout_s: float
    pool: ThreadPoolExecutor
    servers: ForkServers | None = None

    def run(self, fault_id: str | None, suite: str, **how: Any) -> tuple[SuiteOutcome, float]:
        return run_suite(self.target, fault_id, suite, self.workdir, self.timeout_s, servers=self.servers, **how)


def start_servers(target: MatrixTarget, workdir: Path, jobs: int) -> ForkServers:
    """``jobs`` fork servers for ``target``'s runs, started by the first run that forks (each warm once it has imported
    and collected every suite): their environment is a run's without what each run sets (verdicts, fault, selection,
    stop)."""
    per_run = (VERDICTS_ENV, STOP_ON_KILL_ENV, SELECT_ENV, target.fault_env)
    env = server_env(run_env(workdir / "unused.jsonl", stop_on_kill=False), per_run)
    spec = ForkServerSpec(target=target.name, preload=tuple(target.suites.values()), pytest_args=target.pytest_args)
    return ForkServers(spec=spec, env=env, workdir=workdir, jobs=jobs)


def _clean_cells(target: MatrixTarget, outcomes: dict[str, SuiteOutcome]) -> dict[str, CleanCell]:
    return {s: outcomes[s].clean_status(target.min_tests[s]) for s in target.suites}


def _env(settings: Settings) -> str:
    return " ".join(f"{k}={v}" for k, v in settings)


def _full_runs(
    runs: _Runs, specs: list[FaultSpec], stream: Any = None
) -> tuple[dict[str, SuiteOutcome], list[FaultRow]]:
    """Every fault through every whole suite, after the clean build: one run each (a cell of the progress each)."""
    suites = list(runs.target.suites)
    keys = [(fid, suite) for fid in [None, *(spec.id for spec in specs)] for suite in suites]
    with CellProgress("runs", total=len(keys), stream=stream) as progress:

        def run(fid: str | None, suite: str) -> tuple[SuiteOutcome, float]:
            what = f"{fid or 'clean'}/{suite}"
            progress.start(what)
            outcome, seconds = runs.run(fid, suite)
            status = outcome.fault_status().status if fid else outcome.clean_status(runs.target.min_tests[suite]).status
            progress.done(what, status, seconds)
            return outcome, seconds

        futures = {key: runs.pool.submit(run, *key) for key in keys}
        results = {key: f.result() for key, f in futures.items()}
    rows = [
        FaultRow(
            spec=spec,
            cells={s: results[spec.id, s][0].fault_status() for s in suites},
            run_s=round(sum(results[spec.id, s][1] for s in suites), 1),
        )
        for spec in specs
    ]
    return {s: results[None, s][0] for s in suites}, rows


@dataclass(frozen=True)
class _Recording:
    """The clean build's runs under each fault's settings (``()``: as it ships), each recording which tests reach
    which fault's code."""

    settings: tuple[Settings, ...]
    outcomes: dict[tuple[Settings, str], SuiteOutcome]
    impacts: dict[tuple[Settings, str], Impact]
    seconds: float
    uses: tuple[RecordingUse, ...] = ()  # per settings: reused or recorded, and why

    def clean_outcomes(self, settings: Settings) -> dict[str, SuiteOutcome]:
        return {suite: outcome for (st, suite), outcome in self.outcomes.items() if st == settings}

    def code(self, fault_id: str) -> tuple[str, ...]:
        """The functions a fault changes: the same in every recording."""
        return tuple(next(iter(self.impacts.values())).code.get(fault_id, ()))


def _record(
    runs: _Runs,
    specs: list[FaultSpec],
    *,
    cache: RecordingCache | None = None,
    fresh: bool = False,
    stream: Any = None,
) -> _Recording:
    """Record on the clean build, as it ships and under each fault's own settings: each settings group reused from
    ``cache`` where its key is unchanged, else recorded now (and kept there when its clean build passed)."""
    target = runs.target
    suites = list(target.suites)
    settings = tuple(sorted({spec.settings for spec in specs} | {()}))
    start = time.perf_counter()
    found = {
        st: cache.lookup(st, suites, fresh=fresh) if cache else Lookup(None, "no recording kept") for st in settings
    }
    outcomes: dict[tuple[Settings, str], SuiteOutcome] = {}
    impacts: dict[tuple[Settings, str], Impact] = {}
    uses = []
    for st, lookup in found.items():
        label = _env(st) or "the clean build as it ships"
        if lookup.stored is not None:
            stored = lookup.stored
            print(
                f"recording under {label}: reused (recorded {stored.recorded_at} in {stored.seconds} s; "
                f"key: {stored.key.short()})",
                file=stream or sys.stderr,
                flush=True,
            )
            for suite in suites:
                outcomes[st, suite] = SuiteOutcome.from_json(stored.outcomes[suite])
                impacts[st, suite] = Impact.load(stored.impacts[suite])
            uses.append(RecordingUse(_env(st), reused=True, seconds=stored.seconds))
    todo = [st for st, lookup in found.items() if lookup.stored is None]
    paths = {(st, suite): runs.workdir / f"impact-{i}-{suite}.json" for i, st in enumerate(todo) for suite in suites}
    if paths:
        with CellProgress("recording", total=len(paths), stream=stream) as progress:
            for st in todo:
                progress.say(
                    f"recording under {_env(st) or 'the clean build as it ships'}: started "
                    f"({len(suites)} suite runs), because {found[st].why}"
                )

            def record(st: Settings, suite: str, path: Path) -> tuple[SuiteOutcome, float]:
                what = f"clean/{suite}" + (f" under {_env(st)}" if st else "")
                progress.start(what)
                outcome, seconds = runs.run(None, suite, record=path, settings=st)
                cell = outcome.clean_status(target.min_tests[suite])
                progress.done(what, f"{cell.status}, {cell.detail}", seconds)
                return outcome, seconds

            futures: dict[Future[tuple[SuiteOutcome, float]], tuple[Settings, str]] = {
                runs.pool.submit(record, *key, path): key for key, path in paths.items()
            }
            results: dict[tuple[Settings, str], tuple[SuiteOutcome, float]] = {}
            failed: BaseException | None = None
            for future in as_completed(futures):  # each settings group kept as soon as its runs are in
                st, suite = futures[future]
                try:
                    results[st, suite] = future.result()
                except Exception as error:  # noqa: BLE001 - the other groups' recordings are still kept
                    failed = failed or error
                    continue
                if all((st, s) in results for s in suites):
                    uses.append(_keep(target, cache, st, found[st].why, {s: results[st, s] for s in suites}, paths))
            if failed is not None:
                raise failed
        for key, path in paths.items():
            outcomes[key] = results[key][0]
            impacts[key] = Impact.load(path)
    return _Recording(
        settings=settings,
        outcomes=outcomes,
        impacts=impacts,
        seconds=round(time.perf_counter() - start, 1),
        uses=tuple(uses),
    )


def _keep(
    target: MatrixTarget,
    cache: RecordingCache | None,
    settings: Settings,
    why: str,
    results: Mapping[str, tuple[SuiteOutcome, float]],
    paths: Mapping[tuple[Settings, str], Path],
) -> RecordingUse:
    """A settings group's recording, all its suites in: kept in ``cache`` when its clean build passed."""
    seconds = round(sum(s for _, s in results.values()), 1)  # its suite runs' seconds, summed
    if cache is not None and all(
        o.clean_status(target.min_tests[s]).status == "passed" for s, (o, _) in results.items()
    ):
        outcomes = {s: o.to_json() for s, (o, _) in results.items()}
        cache.store(settings, outcomes, {s: paths[settings, s] for s in results}, seconds)
    return RecordingUse(_env(settings), reused=False, why=why, seconds=seconds)


def _impact_row(runs: _Runs, recording: _Recording, spec: FaultSpec, killers: list[Failure]) -> FaultRow:
    """One fault through the tests that reach its code, suite by suite (those of its last killers first), up to its
    first behavioural kill."""
    suites = list(runs.target.suites)
    reach = {suite: recording.impacts[spec.settings, suite].reaching(spec.id) for suite in suites}
    known = {suite: [t for t in reach[suite] if any(k.is_test(t) for k in killers)] for suite in suites}
    order = [s for s in suites if known[s]] + [s for s in suites if not known[s]]
    cells: dict[str, KillCell] = {}
    wall = 0.0
    for suite in order:
        if not reach[suite]:
            cells[suite] = KillCell("unreached", tests_run=0)
        elif any(c.killed_behaviourally for c in cells.values()):
            cells[suite] = KillCell("not run", tests_run=0)
        else:
            select = [*known[suite], *(t for t in reach[suite] if t not in known[suite])]
            outcome, seconds = runs.run(spec.id, suite, select=select, settings=spec.settings)
            wall += seconds
            cells[suite] = outcome.fault_status()
    return FaultRow(
        spec=spec,
        cells={s: dataclasses.replace(cells[s], reaching=len(reach[s])) for s in suites},
        run_s=round(wall, 1),
        code=recording.code(spec.id),
        tests_reaching=sum(len(r) for r in reach.values()),
        tests_run=sum(cells[s].tests_run or 0 for s in suites),
    )


NO_VERDICT = "NO VERDICT: "  # a problem that is no verdict (errors only), not a failure


def verdict(matrix: KillMatrix) -> tuple[bool, list[str]]:
    """Whether the matrix holds, and every problem in one line; a problem that is only errors starts NO_VERDICT."""

    def clean(label: str, suites: Mapping[str, CleanCell]) -> list[str]:
        return [
            f"{NO_VERDICT if r.status == 'error' else ''}{label}: {s} {r.detail}"
            for s, r in suites.items()
            if r.status != "passed"
        ]

    problems = clean("clean build", matrix.clean)
    for settings, suites in matrix.clean_under_settings.items():
        problems += clean(f"clean build under {settings}", suites)
    for fault in matrix.faults:
        outcome, fid = fault.verdict(), fault.spec.id
        if outcome == "unreached":
            problems.append(f"fault {fid}: no test reaches its code ({', '.join(fault.code or ())})")
        elif outcome == "error":
            problems.append(f"{NO_VERDICT}fault {fid}: no suite killed it and one errored: {_errored(fault)}")
        elif not outcome.startswith("killed"):
            problems.append(f"fault {fid} survived every suite")
        elif fault.spec.expected_kill == "behavioural" and outcome != "killed: behavioural":
            problems.append(f"fault {fid} changes computed outputs but was only killed structurally")
    return not problems, problems


def _errored(fault: FaultRow) -> str:
    return fault.first_error().first_failure


def exit_code(ok: bool, problems: list[str]) -> int:
    """0 when the matrix holds, 2 when every problem is no verdict, else 1."""
    return 0 if ok else 2 if all(p.startswith(NO_VERDICT) for p in problems) else 1


def compare(a: KillMatrix, b: KillMatrix) -> list[str]:
    """The faults whose verdict differs between two matrices of one target (and faults only one of them ran)."""
    va = {f.spec.id: f.verdict() for f in a.faults}
    vb = {f.spec.id: f.verdict() for f in b.faults}
    return [
        f"{fid}: {va.get(fid, 'not in the first')} vs {vb.get(fid, 'not in the second')}"
        for fid in {**va, **vb}
        if va.get(fid) != vb.get(fid)
    ]


def _cell(cell: KillCell) -> str:
    return f"killed: {cell.kill_class}" if cell.status == "killed" else cell.status


def _fault_line(fault: FaultRow) -> str:
    best, outcome = fault.best_kill(), fault.verdict()
    ran = f" ({fault.tests_run} of {fault.tests_reaching} reaching tests run)" if fault.tests_run is not None else ""
    if best:
        said = f"{best.kill_class}: {best.first_failure}{ran}"
    elif outcome == "unreached":
        said = f"UNREACHED: no test runs {', '.join(fault.code or ())}"
    elif outcome == "error":
        said = f"NO VERDICT (a suite errored): {_errored(fault)}{ran}"
    else:
        said = f"NOT KILLED{ran}"
    return f"{fault.spec.id} [{fault.spec.seed}]: {said}"


def format_matrix(matrix: KillMatrix) -> str:
    suites = matrix.suites
    width = max([len(f.spec.id) for f in matrix.faults] + [14])
    lines = [
        f"target: {matrix.target} ({matrix.mode})",
        f"{'':{width}}  " + "  ".join(f"{s:>20}" for s in suites),
    ]
    lines.append(f"{'(clean build)':{width}}  " + "  ".join(f"{matrix.clean[s].status:>20}" for s in suites))
    for fault in matrix.faults:
        lines.append(f"{fault.spec.id:{width}}  " + "  ".join(f"{_cell(fault.cells[s]):>20}" for s in suites))
    lines.append("")
    lines += [_fault_line(fault) for fault in matrix.faults]
    lines.append("\nclean build: " + ", ".join(f"{s} {r.tests} tests" for s, r in matrix.clean.items()))
    for settings, suites_ in matrix.clean_under_settings.items():
        lines.append(f"clean build under {settings}: " + ", ".join(f"{s} {r.status}" for s, r in suites_.items()))
    for use in matrix.recordings:
        how = "reused" if use.reused else f"recorded ({use.why})"
        lines.append(f"recording under {use.settings or 'the clean build as it ships'}: {how}, {use.seconds} s of runs")
    if matrix.shard is not None:
        lines.append(f"shard {matrix.shard}: {len(matrix.faults)} of {len(matrix.selection or ())} faults")
    lines.append(f"wall time {matrix.wall_s} s with {matrix.jobs} parallel runs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="swa-harness faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=sorted(MATRIX_TARGETS), default="harness")
    parser.add_argument("--only", nargs="*", default=None, help="fault ids (default: the target's whole catalog)")
    parser.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument("--out", default=None, help="JSON path (default: reports/kill-matrix[-<target>].json)")
    parser.add_argument("--list", action="store_true", help="list the catalog and exit")
    parser.add_argument("--mode", choices=["impact", "full"], default="impact", help="see the module docstring")
    parser.add_argument(
        "--previous", default=None, help="an earlier matrix whose killers run first (default: the one at --out)"
    )
    parser.add_argument("--shard", default=None, help="K/N: only the faults of shard K of N (harness/shards.py)")
    parser.add_argument("--fresh", action="store_true", help="record the clean build even where a stored one fits")
    parser.add_argument(
        "--no-fork-server",
        action="store_true",
        help="run every pytest run as a subprocess (default: the runs that record nothing fork from warm servers, "
        "harness/faults/forkserver.py)",
    )
    parser.add_argument(
        "--recording-dir",
        default=None,
        help="where clean recordings are kept (default: .kill-recording-<target>/ beside --out)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar="JSON",
        default=None,
        help="compare two matrices' verdicts fault by fault and exit",
    )
    args = parser.parse_args(argv)
    try:
        shard = Shard.parse(args.shard) if args.shard else WHOLE
    except ValueError as error:
        parser.error(str(error))
    if args.compare:
        a, b = (load(Path(p)) for p in args.compare)
        differences = compare(a, b)
        for fault in a.faults:
            print(f"{fault.spec.id:44} {fault.verdict()}")
        theirs = {f.spec.id: f.verdict() for f in b.faults}
        both = [f for f in a.faults if f.spec.id in theirs]  # a fault only one matrix ran is a DIFFERS line below
        same = sum(f.verdict() == theirs[f.spec.id] for f in both)
        print(f"{same} of {len(both)} faults in both: the same verdict in both")
        for line in differences:
            print(f"DIFFERS: {line}")
        return 1 if differences else 0
    target = MATRIX_TARGETS[args.target]
    if not args.list and target.needs and (reason := unimportable(target.needs)):  # before the catalog: no torch
        print(f"{NO_VERDICT}faults --target {target.name}: {reason}", file=sys.stderr)
        return 2
    catalog = target.catalog()
    if args.list:
        for fault in catalog.values():
            print(f"{fault.id:42} {fault.seed:30} {fault.breaks}")
        return 0
    unknown = [f for f in args.only or [] if f not in catalog]
    if unknown:
        parser.error(f"unknown fault ids {unknown}; known for target {target.name}: {', '.join(catalog)}")
    out = Path(args.out) if args.out else target.out
    previous_path = Path(args.previous) if args.previous else out
    fault_ids = args.only if args.only is not None else list(catalog)
    cache = None
    if args.mode == "impact":
        where = Path(args.recording_dir) if args.recording_dir else None
        cache = RecordingCache.beside(out, target.name, tuple(target.suites.values()), where)
    matrix = build_matrix(
        target,
        fault_ids,
        jobs=args.jobs,
        mode=args.mode,
        previous=load_if_any(previous_path),
        shard=shard,
        cache=cache,
        fresh=args.fresh,
        fork_server=not args.no_fork_server,
    )
    save(matrix, out)
    print(format_matrix(matrix))
    ok, problems = verdict(matrix)
    print(f"\nkill matrix written to {out}")
    for problem in problems:
        print(problem if problem.startswith(NO_VERDICT) else f"FAIL: {problem}")
    return exit_code(ok, problems)


if __name__ == "__main__":
    raise SystemExit(main())
