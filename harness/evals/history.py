"""The eval history: one JSON line per eval, so a nightly reader sees *since when* a verdict holds.

Every eval (``finish``) records its summary in ``reports/history.jsonl`` by default: per task and
arm the accuracy with its CI, the paired difference, the verdict and the flips, plus the run's
provenance. A record is keyed by its run id: an eval appends, ``swa-harness report`` re-judging the
same saved runs replaces that run's line instead of adding a second one.

The trend compares like with like: only the records of the current run's *series* are charted, so a fault demo, a
smoke or an ad-hoc run against an external server does not look like a nightly regression. Within a series, the
first run whose verdict differs from the run before it is a *change*; the latest change is "since when". The series
key (``HistoryEntry.series``; a field that changes starts a new series), read from each record's provenance:

| field | holds |
|---|---|
| model | the model's name |
| engine | the kind of engine under test (harness, sglang, vllm) |
| fault | the fault injected, or none |
| N | the items scored ("whole test sets", "first 100 per task") |
| settings | per side, the settings the server reported (graph mode, flags), else the graph mode asked |
| checkpoint | per side, the weights and tokenizer the server reported loading; the digests of the checkpoint's files the run recorded (``config.json``: another window or softcap is another model) |
| data | each frozen task's file and data digests |
| requests | how lm-eval asked: prompts per request, concurrency, decoding |

Left out, because they are what a trend follows: the harness's code, the engine's version, the date.

The JSON keys are the historical ones: a task's record is under ``"suites"``, named by ``"suite"``
(tasks were called suites then), so every line written before still reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.paths import REPO
from harness.seams import seam
from harness.evals.results import Estimate, RunResult, Summary, TaskComparison

DEFAULT_HISTORY = REPO / "reports" / "history.jsonl"
SCHEMA = 1
_ERROR_CHARS = 300  # errors are kept short here: the full text is in the run's own record


def _estimate(value: Mapping[str, Any] | None) -> Estimate | None:
    return None if value is None else Estimate.from_dict(dict(value))


@dataclass(frozen=True)
class TaskSnapshot:
    """One task of one eval: both arms' accuracy (with CIs), the paired difference and the verdict."""

    task: str
    verdict: str
    complete: bool
    n: int
    on_graphs: str
    off_graphs: str
    on: Estimate | None
    off: Estimate | None
    delta: Estimate | None
    mcnemar_p: float | None
    on_broke: int  # flips ON got wrong (OFF right)
    on_fixed: int  # flips ON got right (OFF wrong)
    text_diffs: int
    errors: tuple[str, ...] = ()

    @property
    def flips(self) -> int:
        return self.on_broke + self.on_fixed

    @classmethod
    def of(cls, comp: TaskComparison) -> TaskSnapshot:
        return cls(
            task=comp.task,
            verdict=comp.verdict.value,
            complete=comp.complete,
            n=comp.n,
            on_graphs=comp.on_graphs,
            off_graphs=comp.off_graphs,
            on=comp.on_accuracy,
            off=comp.off_accuracy,
            delta=comp.difference,
            mcnemar_p=comp.mcnemar_p,
            on_broke=sum(not d.on_correct for d in comp.flips),
            on_fixed=sum(d.on_correct for d in comp.flips),
            text_diffs=len(comp.text_diffs),
            errors=tuple(e[:_ERROR_CHARS] for e in comp.errors),
        )

    def to_dict(self) -> dict[str, Any]:
        data = {"suite": self.task, **asdict(self)}
        del data["task"]
        data["errors"] = list(self.errors)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskSnapshot:
        return cls(
            task=str(data["suite"]),
            verdict=str(data["verdict"]),
            complete=bool(data["complete"]),
            n=int(data["n"]),
            on_graphs=str(data.get("on_graphs", "")),
            off_graphs=str(data.get("off_graphs", "")),
            on=_estimate(data.get("on")),
            off=_estimate(data.get("off")),
            delta=_estimate(data.get("delta")),
            mcnemar_p=data.get("mcnemar_p"),
            on_broke=int(data.get("on_broke", 0)),
            on_fixed=int(data.get("on_fixed", 0)),
            text_diffs=int(data.get("text_diffs", 0)),
            errors=tuple(str(e) for e in data.get("errors", ())),
        )


@dataclass(frozen=True)
class HistoryEntry:
    """One eval as the history keeps it; ``series`` groups the runs a trend may compare."""

    run_id: str
    recorded_at: str  # ISO 8601, UTC
    verdict: str
    reason: str
    model: str
    fault: str | None  # the catalog fault injected into graphs ON, if any
    engine: str  # the engine under test in one line, e.g. "harness 0123abc (dirty)"
    tasks: tuple[TaskSnapshot, ...]
    provenance: Mapping[str, Any] = field(default_factory=dict)

    @property
    def series(self) -> str:
        """The series key (the table above), readable where the trend names it: model, engine, fault and N in words,
        the rest as one digest."""
        kind = self.engine.split(" ", 1)[0] if self.engine else "unknown"
        items = self._section("run").get("items") or "unknown"
        digest = hashlib.sha256(json.dumps(self.series_settings(), sort_keys=True, default=str).encode()).hexdigest()
        return f"{self.model} · {kind} · fault {self.fault or 'none'} · N {items} · settings {digest[:8]}"

    @seam("series-ignores-checkpoint")
    def series_settings(self) -> dict[str, Any]:
        """The series key's fields past model, engine, fault and N: settings, checkpoint, data, requests."""
        run = self._section("run")
        sides = {side: arm for side, arm in sorted(self._section("arms").items()) if isinstance(arm, Mapping)}
        identities = {side: arm.get("identity") or {} for side, arm in sides.items()}
        return {
            "settings": {side: identities[side].get("flags") or arm.get("graphs") for side, arm in sides.items()},
            "checkpoint": {side: [ident.get("weights"), ident.get("tokenizer")] for side, ident in identities.items()},
            "checkpoint files": {k: v for k, v in self._section("model").items() if k.endswith(" sha256")},
            "data": self.provenance.get("datasets") or {},
            "requests": [run.get("lm-eval requests"), run.get("decoding")],
        }

    def _section(self, name: str) -> Mapping[str, Any]:
        value = self.provenance.get(name)
        return value if isinstance(value, Mapping) else {}

    def task(self, name: str) -> TaskSnapshot | None:
        return next((s for s in self.tasks if s.task == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "run_id": self.run_id,
            "recorded_at": self.recorded_at,
            "verdict": self.verdict,
            "reason": self.reason,
            "model": self.model,
            "fault": self.fault,
            "engine": self.engine,
            "suites": [s.to_dict() for s in self.tasks],
            "provenance": dict(self.provenance),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HistoryEntry:
        return cls(
            run_id=str(data["run_id"]),
            recorded_at=str(data["recorded_at"]),
            verdict=str(data["verdict"]),
            reason=str(data.get("reason", "")),
            model=str(data["model"]),
            fault=data.get("fault"),
            engine=str(data.get("engine", "")),
            tasks=tuple(TaskSnapshot.from_dict(s) for s in data["suites"]),
            provenance=dict(data.get("provenance") or {}),
        )


def engine_label(provenance: Mapping[str, Any]) -> str:
    """The engine under test in one line, from the provenance (new nested layout or the older flat one)."""
    engine = provenance.get("engine under test")
    if isinstance(engine, Mapping) and engine.get("summary"):
        return str(engine["summary"])
    commit = provenance.get("commit")
    return f"harness {commit}" if commit else "unknown"


def run_id(runs: Sequence[RunResult], provenance: Mapping[str, Any]) -> str:
    """The provenance's run id when the eval recorded one, else a digest of the runs themselves.

    The digest covers only the runs, so re-rendering the same saved runs maps to the same record.
    """
    run = provenance.get("run")
    if isinstance(run, Mapping) and run.get("id"):
        return str(run["id"])
    digest = hashlib.sha256()
    for record in sorted(json.dumps(r.to_dict(), sort_keys=True, default=str) for r in runs):
        digest.update(record.encode("utf-8"))
    return "runs-" + digest.hexdigest()[:16]


def make_entry(
    comparisons: Sequence[TaskComparison],
    summary: Summary,
    runs: Sequence[RunResult],
    provenance: Mapping[str, Any],
    recorded_at: str | None = None,
) -> HistoryEntry:
    """The history record of one judged eval, timed by its provenance (else ``recorded_at``, else now)."""
    run = provenance.get("run")
    when = run.get("recorded at") if isinstance(run, Mapping) else None
    recorded_at = str(when or recorded_at or datetime.now(timezone.utc).isoformat(timespec="seconds"))
    fault = next((r.record.fault for r in runs if r.record.side == "on" and r.record.fault), None)
    model = runs[0].model if runs else (comparisons[0].model if comparisons else "unknown")
    return HistoryEntry(
        run_id=run_id(runs, provenance),
        recorded_at=recorded_at,
        verdict=summary.verdict.value,
        reason=summary.reason[:_ERROR_CHARS],
        model=model,
        fault=fault,
        engine=engine_label(provenance),
        tasks=tuple(TaskSnapshot.of(c) for c in comparisons),
        provenance=dict(provenance),
    )


@dataclass(frozen=True)
class History:
    """The records read back, oldest first, and how many lines could not be read (shown, not hidden)."""

    entries: tuple[HistoryEntry, ...]
    unreadable: int = 0
    path: Path | None = None


def load(path: Path) -> History:
    """Read the history; a missing file is an empty history, a damaged line is counted and skipped."""
    if not path.is_file():
        return History((), 0, path)
    entries: list[HistoryEntry] = []
    unreadable = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            entries.append(HistoryEntry.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            unreadable += 1
    return History(tuple(entries), unreadable, path)


def record(path: Path, entry: HistoryEntry) -> History:
    """Add ``entry`` (or replace the record with its run id) and return the whole history.

    A new run is appended as one line; a replacement rewrites the file through a temporary file
    and ``os.replace`` so a crash never leaves half a history.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    history = load(path)
    line = json.dumps(entry.to_dict(), sort_keys=True, default=str, ensure_ascii=False)
    if all(e.run_id != entry.run_id for e in history.entries):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        return History((*history.entries, entry), history.unreadable, path)
    kept = [entry if e.run_id == entry.run_id else e for e in history.entries]
    fd, tmp = tempfile.mkstemp(prefix=".history-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        for e in kept:
            fh.write(json.dumps(e.to_dict(), sort_keys=True, default=str, ensure_ascii=False) + "\n")
    os.replace(tmp, path)  # lines that could not be read are dropped here, and were counted above
    return History(tuple(kept), history.unreadable, path)


@dataclass(frozen=True)
class TrendPoint:
    """One run of a task in the trend; ``changed_from`` is the previous run's verdict when it differs."""

    index: int  # 1-based position in the series
    entry: HistoryEntry
    snapshot: TaskSnapshot | None  # None: the task was not run that time
    changed_from: str | None
    current: bool


@dataclass(frozen=True)
class TaskTrend:
    """A task's runs in one series (the last ``limit``, oldest first) and the run its verdict began at."""

    task: str
    points: tuple[TrendPoint, ...]
    since: TrendPoint | None  # the latest verdict change in the whole series, None when it never changed


@dataclass(frozen=True)
class Trend:
    """Per-task trends of the current run's series, and how many records of other series were left out."""

    series: str
    tasks: tuple[TaskTrend, ...]
    overall: tuple[TrendPoint, ...]  # the overall verdict per run (``snapshot`` is None there)
    since: TrendPoint | None  # the run where the current overall verdict began, None when it never changed
    runs: int  # runs of the series in the history, including the ones beyond ``limit``
    other_series: int
    unreadable: int


def _points(
    series: Sequence[HistoryEntry],
    snapshots: Sequence[TaskSnapshot | None],
    verdicts: Sequence[str | None],
    current: HistoryEntry,
) -> list[TrendPoint]:
    """One point per run; ``changed_from`` is the verdict of the last run before it that has one, when different."""
    points: list[TrendPoint] = []
    previous: str | None = None
    for i, (entry, snap, verdict) in enumerate(zip(series, snapshots, verdicts)):
        changed = previous if verdict is not None and previous is not None and verdict != previous else None
        points.append(
            TrendPoint(i + 1, entry=entry, snapshot=snap, changed_from=changed, current=entry.run_id == current.run_id)
        )
        previous = verdict if verdict is not None else previous
    return points


def _last_change(points: Sequence[TrendPoint]) -> TrendPoint | None:
    return next((p for p in reversed(points) if p.changed_from is not None), None)


def trend(history: History, current: HistoryEntry, limit: int = 20) -> Trend:
    """The last ``limit`` runs of ``current``'s series, per task of the current run and overall.

    Changes and "since" are found over the whole series, so a change older than the window still counts.
    """
    same = [e for e in history.entries if e.series == current.series]
    if all(e.run_id != current.run_id for e in same):
        same.append(current)
    window = slice(max(0, len(same) - limit), None)
    tasks = []
    for snap in current.tasks:
        snapshots = [e.task(snap.task) for e in same]
        points = _points(same, snapshots, [s.verdict if s is not None else None for s in snapshots], current)
        tasks.append(TaskTrend(snap.task, tuple(points[window]), _last_change(points)))
    overall = _points(same, [None] * len(same), [e.verdict for e in same], current)
    others = sum(e.series != current.series for e in history.entries)
    return Trend(
        current.series,
        tasks=tuple(tasks),
        overall=tuple(overall[window]),
        since=_last_change(overall),
        runs=len(same),
        other_series=others,
        unreadable=history.unreadable,
    )


__all__ = [
    "DEFAULT_HISTORY",
    "History",
    "HistoryEntry",
    "TaskSnapshot",
    "TaskTrend",
    "Trend",
    "TrendPoint",
    "engine_label",
    "load",
    "make_entry",
    "record",
    "run_id",
    "trend",
]
