"""Side inputs of the report read from disk: the kill matrices, the fault-effect table, the SGLang release matrix.

They come from other jobs (``swa-harness faults`` per target, a fault-effect study), so each may be
missing, or from an older or newer producer: a missing file is simply not shown, an unreadable
one is shown as unreadable rather than failing the accuracy report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.paths import DEFAULT_FAULT_EFFECTS, DEFAULT_RELEASE_MATRIX


@dataclass(frozen=True)
class KillMatrixFile:
    """One target's kill matrix as found on disk (``matrix`` is None when ``error`` says why)."""

    source: str
    target: str
    matrix: Mapping[str, Any] | None
    error: str | None = None


@dataclass(frozen=True)
class FaultEffects:
    """The fault-effect table: accuracy deltas a fault causes per checkpoint and task."""

    source: str
    rows: tuple[Mapping[str, Any], ...]
    error: str | None = None


@dataclass(frozen=True)
class ReleaseMatrix:
    """``swa-harness sglang-matrix``'s output: the memory suites on each SGLang release."""

    source: str
    matrix: Mapping[str, Any] | None
    error: str | None = None


def _read_json(path: Path) -> tuple[Any, str | None]:
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


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
        if error is None and not isinstance(data, Mapping):
            data, error = None, f"expected a JSON object, got {type(data).__name__}"
        suffix = path.stem[len(primary.stem) + 1:] if path != primary else ""
        target = str((data or {}).get("target") or suffix or "harness")
        out.append(KillMatrixFile(str(path), target, data, error))
    return out


def load_fault_effects(path: Path | None = DEFAULT_FAULT_EFFECTS) -> FaultEffects | None:
    """The rows of ``docs/fault-effects.json`` (a list of objects), or None when there is no such file."""
    if path is None or not Path(path).is_file():
        return None
    data, error = _read_json(Path(path))
    if error is None and not (isinstance(data, list) and all(isinstance(r, Mapping) for r in data)):
        data, error = None, "expected a list of objects {fault, checkpoint, suite, delta_pp, verdict}"
    return FaultEffects(str(path), tuple(data or ()), error)


def load_release_matrix(path: Path | None = DEFAULT_RELEASE_MATRIX) -> ReleaseMatrix | None:
    """``reports/sglang-matrix.json``, or None when no matrix has been run here."""
    if path is None or not Path(path).is_file():
        return None
    data, error = _read_json(Path(path))
    if error is None and not (isinstance(data, Mapping) and isinstance(data.get("rows"), list)):
        data, error = None, "expected an object with rows (swa-harness sglang-matrix)"
    return ReleaseMatrix(str(path), data, error)


def matrices_from(data: Sequence[Mapping[str, Any]]) -> list[KillMatrixFile]:
    """Kill matrices already in memory (tests, other renderers), one per target."""
    return [KillMatrixFile("(in memory)", str(m.get("target") or "harness"), m) for m in data]
