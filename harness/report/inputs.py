"""What the report reads from disk or is handed, parsed once into records: the kill matrices, the mutation runs, the
fault-effect table, the SGLang release matrix, and a comparison's provenance.

The side inputs come from other jobs (``swa-harness faults`` per target, ``swa-harness mutants`` per target, a
fault-effect study, ``swa-harness sglang-matrix``), so each may be missing, or from an older or newer producer: a missing file
is simply not shown, an unreadable or malformed one is shown as unreadable rather than failing the
accuracy report. Parsing is lenient the way the page always was: a missing key reads as its default and a
value is shown as text, so a file that rendered before renders the same. Views (``views``) read these
records and never the JSON.

Kill and release matrices are about pytest *suites*; the fault-effect table's ``suite`` key names an
accuracy *task* (its producer's older word).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.evals.history import engine_label
from harness.kill_record import MALFORMED, KillMatrix, named_target
from harness.mutants import record as mutation_record
from harness.paths import DEFAULT_FAULT_EFFECTS, DEFAULT_RELEASE_MATRIX


# -- kill matrices (their record: ``harness.kill_record``) -----------------------------------------------


@dataclass(frozen=True)
class KillMatrixFile:
    """One target's kill matrix as found (``matrix`` is None when ``error`` says why)."""

    source: str
    target: str
    matrix: KillMatrix | None
    error: str | None = None


def _read_json(path: Path) -> tuple[Any, str | None]:
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _kill_matrix_file(source: str, target: str, data: Any, error: str | None) -> KillMatrixFile:
    if error is None and not isinstance(data, Mapping):
        error = f"expected a JSON object, got {type(data).__name__}"
    if error is not None:
        return KillMatrixFile(source, target=target, matrix=None, error=error)
    try:
        return KillMatrixFile(source, target=target, matrix=KillMatrix.from_json(data))
    except MALFORMED as exc:
        return KillMatrixFile(source, target=target, matrix=None, error=f"malformed: {type(exc).__name__}: {exc}")


def load_kill_matrices(primary: Path | None) -> list[KillMatrixFile]:
    """``primary`` (the harness target's matrix) and its siblings ``<stem>-<target>.json``.

    ``reports/kill-matrix.json`` brings ``reports/kill-matrix-sglang.json`` along; the target is the
    file's own ``target`` key when the producer wrote one, else read from the file name.
    """
    if primary is None:
        return []
    primary = Path(primary)
    found = [primary] if primary.is_file() else []
    if primary.parent.is_dir():
        found += sorted(primary.parent.glob(f"{primary.stem}-*.json"))
    out = []
    for path in found:
        data, error = _read_json(path)
        suffix = path.stem[len(primary.stem) + 1 :] if path != primary else ""
        out.append(_kill_matrix_file(str(path), named_target(data) or suffix or "harness", data, error))
    return out


def matrices_from(data: Sequence[Mapping[str, Any]]) -> list[KillMatrixFile]:
    """Kill matrices already in memory (tests, other renderers), one per target."""
    return [_kill_matrix_file("(in memory)", named_target(m) or "harness", m, None) for m in data]


# -- mutation runs (their record: ``harness.mutants.record``) --------------------------------------------


@dataclass(frozen=True)
class MutationRunFile:
    """One ``reports/mutants-<target>.json`` as found (``run`` is None when ``error`` says why)."""

    source: str
    target: str
    run: mutation_record.MutationRun | None
    error: str | None = None


def load_mutation_runs(kill_matrix: Path | None) -> list[MutationRunFile]:
    """Every ``mutants-*.json`` in the kill matrix's folder (``swa-harness mutants`` writes them to ``reports/``
    beside the kill matrices), in name order; none when there is no kill matrix path. The target is the run's own
    ``target`` key, else read from the file name."""
    if kill_matrix is None or not Path(kill_matrix).parent.is_dir():
        return []
    out = []
    for path in sorted(Path(kill_matrix).parent.glob("mutants-*.json")):
        suffix = path.stem[len("mutants-") :]
        try:
            run = mutation_record.load(path)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:  # unreadable, or not JSON
            out.append(MutationRunFile(str(path), target=suffix, run=None, error=f"{type(exc).__name__}: {exc}"))
        except MALFORMED as exc:  # JSON of another shape
            out.append(
                MutationRunFile(str(path), target=suffix, run=None, error=f"malformed: {type(exc).__name__}: {exc}")
            )
        else:
            out.append(MutationRunFile(str(path), target=str(run.target or suffix), run=run))
    return out


# -- the fault-effect table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultEffect:
    """What one fault did to one task's accuracy on one checkpoint, measured by ``bench.fault_effects``."""

    fault: str
    checkpoint: str
    task: str
    delta_pp: float | str | None  # ON - OFF in percentage points; a producer's text when not a number
    verdict: str
    n: int | None  # items paired
    measured_at: str | None

    @classmethod
    def parse(cls, row: Mapping[str, Any]) -> FaultEffect:
        n, when = row.get("n"), row.get("measured_at")
        return cls(
            str(row.get("fault", "?")),
            str(row.get("checkpoint") or ""),
            str(row.get("suite", "")),
            row.get("delta_pp"),
            str(row.get("verdict", "")),
            n if isinstance(n, int) else None,
            str(when) if when else None,
        )


@dataclass(frozen=True)
class FaultEffects:
    """The fault-effect table: accuracy deltas a fault causes per checkpoint and task."""

    source: str
    rows: tuple[FaultEffect, ...]
    error: str | None = None


def load_fault_effects(path: Path | None = DEFAULT_FAULT_EFFECTS) -> FaultEffects | None:
    """The rows of ``docs/fault-effects.json`` (a list of objects), or None when there is no such file."""
    if path is None or not Path(path).is_file():
        return None
    data, error = _read_json(Path(path))
    if error is None and not (isinstance(data, list) and all(isinstance(r, Mapping) for r in data)):
        data, error = None, "expected a list of objects {fault, checkpoint, suite, delta_pp, verdict}"
    return FaultEffects(str(path), tuple(FaultEffect.parse(r) for r in data or ()), error)


# -- the SGLang release matrix ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseCell:
    """One suite on one release: its status, what passed, what failed, and why tests were skipped."""

    status: str
    passed: int
    failed: tuple[str, ...]
    skipped: Mapping[str, int]  # reason -> tests

    @classmethod
    def parse(cls, cell: Mapping[str, Any]) -> ReleaseCell:
        return cls(
            str(cell.get("status")),
            cell.get("passed", 0),
            tuple(cell.get("failed") or ()),
            dict(cell.get("skipped") or {}),
        )


@dataclass(frozen=True)
class ReleaseRow:
    """One release: installed and run in ``install_s`` + ``run_s``, or an ``error`` that stopped it."""

    release: str
    install_s: float
    run_s: float
    error: str
    cells: Mapping[str, ReleaseCell]  # suite -> its cell, where the suite ran

    @classmethod
    def parse(cls, row: Mapping[str, Any]) -> ReleaseRow:
        cells = {s: ReleaseCell.parse(c) for s, c in (row.get("cells") or {}).items() if c}
        return cls(
            str(row.get("release")),
            row.get("install_s", 0),
            row.get("run_s", 0),
            str(row["error"]) if row.get("error") else "",
            cells,
        )


@dataclass(frozen=True)
class ReleaseMatrix:
    """``swa-harness sglang-matrix``'s output: the memory suites on each SGLang release (``error``: unreadable).
    ``suites`` is the producer's list, then any a row ran beyond it (rows merged from a run of other suites)."""

    source: str
    error: str | None = None
    command: str = ""
    date: str = ""
    suites: tuple[str, ...] = ()
    rows: tuple[ReleaseRow, ...] = ()

    @classmethod
    def parse(cls, source: str, data: Mapping[str, Any]) -> ReleaseMatrix:
        suites = list(data.get("suites") or {})
        for row in data["rows"]:
            suites += [s for s in row.get("cells") or {} if s not in suites]
        return cls(
            source,
            None,
            str(data.get("command", "swa-harness sglang-matrix")),
            str(data.get("date", "?")),
            tuple(suites),
            tuple(ReleaseRow.parse(r) for r in data["rows"]),
        )


def load_release_matrix(path: Path | None = DEFAULT_RELEASE_MATRIX) -> ReleaseMatrix | None:
    """``reports/sglang-matrix.json``, or None when no matrix has been run here."""
    if path is None or not Path(path).is_file():
        return None
    data, error = _read_json(Path(path))
    if error is None and not (isinstance(data, Mapping) and isinstance(data.get("rows"), list)):
        error = "expected an object with rows (swa-harness sglang-matrix)"
    if error is not None:
        return ReleaseMatrix(str(path), error=error)
    try:
        return ReleaseMatrix.parse(str(path), data)
    except MALFORMED as exc:
        return ReleaseMatrix(str(path), error=f"malformed: {type(exc).__name__}: {exc}")


# -- provenance ------------------------------------------------------------------------------------------


def _group(record: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = record.get(name)
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class ArmProvenance:
    """One side of the comparison as the provenance names it: ``side`` (on/off), the plan's arm, the graph mode it
    asked for and the fault injected (None: none)."""

    side: str
    arm: str
    graphs: str
    fault: str | None

    @classmethod
    def parse(cls, side: str, arm: Mapping[str, Any]) -> ArmProvenance:
        fault = arm.get("fault")
        return cls(
            side,
            str(arm.get("arm") or side),
            str(arm.get("graphs", "?")),
            None if fault in (None, "none") else str(fault),
        )


@dataclass(frozen=True)
class Provenance:
    """A comparison's provenance (``harness.jobs.recording``): ``record`` as saved, shown whole as tables, and the
    parts the glance at the top reads. Older records are flat: their groups are then empty."""

    record: Mapping[str, Any]
    engine: str  # the engine under test in one line
    commit: str  # of the engine under test, where it is this checkout
    model: str | None  # None: no model group
    weights: str  # the checkpoint's model.safetensors sha256 ("" when unknown)
    arms: tuple[ArmProvenance, ...]
    hardware: Mapping[str, Any]
    software: Mapping[str, Any]
    datasets: Mapping[str, tuple[str, ...]]  # task -> its files' "name digest" lines, sorted
    run: Mapping[str, Any]

    @classmethod
    def parse(cls, record: Mapping[str, Any]) -> Provenance:
        model, datasets = _group(record, "model"), _group(record, "datasets")
        return cls(
            record=record,
            engine=engine_label(record),
            commit=str(_group(record, "engine under test").get("commit", "")),
            model=str(model.get("name", "?")) if model else None,
            weights=str(model.get("model.safetensors sha256", "")),
            arms=tuple(
                ArmProvenance.parse(side, arm)
                for side, arm in _group(record, "arms").items()
                if isinstance(arm, Mapping)
            ),
            hardware=_group(record, "hardware"),
            software=_group(record, "software"),
            datasets={
                task: tuple(sorted(f"{f} {h}" for f, h in (hashes.items() if isinstance(hashes, Mapping) else [])))
                for task, hashes in datasets.items()
            },
            run=_group(record, "run"),
        )
