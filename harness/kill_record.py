"""The kill matrix's record: one test's verdict, a fault's cell per suite, its row, the matrix, and their JSON.

Every reader of a kill matrix (``swa-harness faults`` and ``--compare``, ``swa-harness check``, the HTML report,
``bench.fault_effects``, ``bench.kill_matrix_modes``) reads it through these records and never by key, so a field
has one name and one meaning. A failed test is kept as its fields (node id, where its assertion stood, message);
the one-line form ``test [where]: message`` is only ever written, for people.

Schema 2 (``schema_version``) keeps each cell's failure as those fields. Schema 1 (no ``schema_version``, the
matrices written before it) kept the line and, for a kill, the killer's node id beside it: it is read here, once,
and written back as schema 2. Reading is lenient, as the report always was: a missing key reads as its default,
so a matrix any producer wrote still loads; a value of the wrong shape raises one of ``MALFORMED``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = 2
MALFORMED = (AttributeError, KeyError, TypeError, ValueError)  # a producer's JSON of an unexpected shape

KillClass = Literal["behavioural", "structural"]
VerdictOutcome = Literal["passed", "kill", "error"]  # one test under the verdicts plugin
# A fault's verdict over every suite (``FaultRow.verdict``).
FaultVerdict = Literal["killed: behavioural", "killed: structural", "unreached", "error", "survived"]

_LINE = re.compile(r"(?P<test>.*?) \[(?P<where>[^\]]*)\]: (?P<message>.*)", re.DOTALL)  # schema 1's failure line


@dataclass(frozen=True)
class Failure:
    """A failed test: its node id, where the failing line stood (``file.py:12``; None when pytest gave no crash
    frame) and its message. Schema 1's errored cells kept only the node id's last part (``file.py::test``)."""

    nodeid: str
    where: str | None
    message: str

    @property
    def test(self) -> str:
        """The node id without its folders, as the matrix shows it."""
        return self.nodeid.split("/")[-1]

    def label(self) -> str:
        """The test and where it failed: ``file.py::test [file.py:12]`` ("" for a failure no test is named for)."""
        return f"{self.test} [{self.where}]" if self.nodeid else ""

    def describe(self) -> str:
        """One line for people: ``file.py::test [file.py:12]: message``."""
        return f"{self.label()}: {self.message}" if self.nodeid else self.message

    def is_test(self, nodeid: str) -> bool:
        """Whether ``nodeid`` is this failure's test (a shortened node id names it by its file's part)."""
        return bool(self.nodeid) and (nodeid == self.nodeid or nodeid.endswith("/" + self.nodeid))

    def to_json(self) -> dict[str, Any]:
        return {"nodeid": self.nodeid, "where": self.where, "message": self.message}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Failure:
        where = data.get("where")
        return cls(str(data.get("nodeid") or ""), None if where is None else str(where), str(data.get("message", "")))

    @classmethod
    def from_line(cls, line: str, nodeid: str | None = None) -> Failure:
        """Schema 1's ``test [where]: message`` (``nodeid``: its killer, the whole node id, where it kept one); a
        line of another shape is all message."""
        match = _LINE.fullmatch(line)
        if match is None:
            return cls(nodeid or "", None, line)
        where = match["where"]
        return cls(nodeid or match["test"], None if where == "None" else where, match["message"])


@dataclass(frozen=True)
class VerdictLine:
    """One test as the verdicts plugin (``harness.faults.verdicts``) classified it: one JSON line of a run's file."""

    nodeid: str
    outcome: VerdictOutcome
    kill_class: KillClass | None = None  # a kill's class; None for the rest
    where: str | None = None
    message: str = ""

    @property
    def failure(self) -> Failure:
        return Failure(self.nodeid, self.where, self.message)

    def to_json(self) -> dict[str, Any]:
        if self.outcome == "passed":
            return {"nodeid": self.nodeid, "outcome": self.outcome}
        return {
            "nodeid": self.nodeid,
            "outcome": self.outcome,
            "kill_class": self.kill_class,
            "where": self.where,
            "message": self.message,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VerdictLine:
        return cls(data["nodeid"], data["outcome"], data.get("kill_class"), data.get("where"), data.get("message", ""))


def read_verdicts(path: Path) -> list[VerdictLine]:
    """A run's verdict lines in the order written (none when the run wrote no file)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [VerdictLine.from_json(json.loads(line)) for line in lines]


@dataclass(frozen=True)
class KillCell:
    """One fault through one suite: ``killed`` (with its class and killer), ``survived``, ``error``, ``unreached``
    (no test of the suite runs the fault's code), ``not run`` (an earlier suite killed it), or ``missing`` (the
    matrix has no cell). ``reaching``: the tests of the suite that run its code (test-impact matrices only)."""

    status: str
    kill_class: KillClass | None = None
    failure: Failure | None = None
    tests_run: int | None = None
    reaching: int | None = None

    @property
    def first_failure(self) -> str:
        return self.failure.describe() if self.failure else ""

    @property
    def killed_behaviourally(self) -> bool:
        return self.status == "killed" and self.kill_class == "behavioural"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "kill_class": self.kill_class}
        out["failure"] = self.failure.to_json() if self.failure else None
        if self.tests_run is not None:
            out["tests_run"] = self.tests_run
        if self.reaching is not None:
            out["reaching"] = self.reaching
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> KillCell:
        if not data:
            return cls("missing")
        if "failure" in data:
            failure = Failure.from_json(data["failure"]) if data["failure"] else None
        else:  # schema 1
            line = data.get("first_failure")
            failure = Failure.from_line(str(line), data.get("killer")) if line else None
        return cls(
            str(data.get("status")), data.get("kill_class"), failure, data.get("tests_run"), data.get("reaching")
        )


@dataclass(frozen=True)
class CleanCell:
    """One suite on the clean build (no fault): it must pass (``missing``: the matrix has no cell)."""

    status: str
    tests: int | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "tests": self.tests, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> CleanCell:
        data = data or {}
        return cls(str(data.get("status", "missing")), data.get("tests"), str(data.get("detail") or ""))


@dataclass(frozen=True)
class FaultSpec:
    """A catalog fault as the matrix records it (``Fault.to_dict`` of each target's catalog). ``env``: the
    settings its code runs under, ``K=V K2=V2`` (SGLang's and vLLM's; None where the target has none)."""

    id: str
    seed: str = ""
    breaks: str = ""
    user_sees: str = ""
    invariant: str = ""
    expected_kill: KillClass = "behavioural"
    structural_reason: str = ""
    env: str | None = None

    @property
    def settings(self) -> tuple[tuple[str, str], ...]:
        """``env`` as pairs: the environment a run of this fault needs beyond its switch."""
        return tuple((k, v) for k, _, v in (pair.partition("=") for pair in (self.env or "").split()))

    def to_json(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "seed": self.seed,
            "breaks": self.breaks,
            "user_sees": self.user_sees,
            "invariant": self.invariant,
            "expected_kill": self.expected_kill,
            "structural_reason": self.structural_reason,
        }
        return out if self.env is None else {**out, "env": self.env}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FaultSpec:
        env = data.get("env")
        return cls(
            id=str(data.get("id", "?")),
            seed=str(data.get("seed", "")),
            breaks=str(data.get("breaks", "")),
            user_sees=str(data.get("user_sees", "")),
            invariant=str(data.get("invariant", "")),
            expected_kill=data.get("expected_kill") or "behavioural",
            structural_reason=str(data.get("structural_reason") or ""),
            env=None if env is None else str(env),
        )


@dataclass(frozen=True)
class FaultRow:
    """One catalog fault and what each suite did to it. A test-impact matrix also keeps the functions the fault
    changes (``code``) and how many tests reach them and ran (None in a full matrix)."""

    spec: FaultSpec
    cells: Mapping[str, KillCell]  # suite -> its cell, for every suite the matrix has a cell for
    run_s: float | None = None
    code: tuple[str, ...] | None = None
    tests_reaching: int | None = None
    tests_run: int | None = None

    def cell(self, suite: str) -> KillCell:
        return self.cells.get(suite) or KillCell("missing")

    def best_kill(self) -> KillCell | None:
        """The cell that judged the fault: its first behavioural kill, else its first kill."""
        kills = [c for c in self.cells.values() if c.status == "killed"]
        return next((c for c in kills if c.kill_class == "behavioural"), kills[0] if kills else None)

    def first_error(self) -> KillCell:
        return next(c for c in self.cells.values() if c.status == "error")

    def verdict(self) -> FaultVerdict:
        """Over every suite: killed (behaviourally when any suite was), ``unreached`` when no test runs its code,
        ``error`` when a suite could not judge it, else ``survived``."""
        cells = list(self.cells.values())
        classes = {c.kill_class for c in cells if c.status == "killed"}
        if classes:
            return "killed: behavioural" if "behavioural" in classes else "killed: structural"
        if cells and all(c.status == "unreached" for c in cells):
            return "unreached"
        return "error" if any(c.status == "error" for c in cells) else "survived"

    def tests_run_in_cells(self) -> int:
        return sum(c.tests_run or 0 for c in self.cells.values())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.spec.to_json(), "run_s": self.run_s}
        out["suites"] = {s: c.to_json() for s, c in self.cells.items()}
        if self.code is not None:
            out["code"] = list(self.code)
        if self.tests_reaching is not None:
            out["tests_reaching"] = self.tests_reaching
        if self.tests_run is not None:
            out["tests_run"] = self.tests_run
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FaultRow:
        code = data.get("code")
        return cls(
            spec=FaultSpec.from_json(data),
            cells={s: KillCell.from_json(c) for s, c in (data.get("suites") or {}).items()},
            run_s=data.get("run_s"),
            code=None if code is None else tuple(code),
            tests_reaching=data.get("tests_reaching"),
            tests_run=data.get("tests_run"),
        )


@dataclass(frozen=True)
class RecordingUse:
    """How a test-impact matrix got its clean recording under one settings group (``""``: as it ships): reused from
    the stored one (``harness.faults.recording_cache``) or recorded now, and why; ``seconds``: what recording took
    when it was made."""

    settings: str
    reused: bool
    why: str = ""
    seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"settings": self.settings, "reused": self.reused, "why": self.why, "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RecordingUse:
        return cls(
            str(data.get("settings", "")), bool(data.get("reused")), str(data.get("why", "")), data.get("seconds")
        )


@dataclass(frozen=True)
class KillMatrix:
    """Fault x suite for one target (``mode``: ``impact`` or ``full``, see ``harness.faults.matrix``). A test-impact
    matrix also has the clean build under each fault's own settings and the time its recording took. A shard's
    matrix (``--shard K/N``, ``harness/shards.py``) names its shard and the whole matrix's fault ids (``selection``);
    ``swa-harness merge`` puts the shards back together, checking ``target``, ``commit`` and ``engine`` agree."""

    target: str = ""
    mode: str = "full"
    generated_at: str = ""
    wall_s: float | None = None
    jobs: int | None = None
    suites: tuple[str, ...] = ()
    clean: Mapping[str, CleanCell] = field(default_factory=dict)
    faults: tuple[FaultRow, ...] = ()
    clean_under_settings: Mapping[str, Mapping[str, CleanCell]] = field(default_factory=dict)  # "K=V" -> suites
    clean_and_recording_s: float | None = None
    schema_version: int = SCHEMA_VERSION
    shard: str | None = None  # "K/N"; None for a whole matrix
    selection: tuple[str, ...] | None = None  # a shard's: every fault id of the matrix it is part of, in order
    commit: str = ""  # the harness checkout (``code_fingerprint``)
    engine: str = ""  # the engine under test: its version and source digest ("" for the harness target)
    recordings: tuple[RecordingUse, ...] = ()

    def all_suites(self) -> tuple[str, ...]:
        """Every suite in page order: the producer's list (else the clean run's), then any a fault names beyond it."""
        suites = list(self.suites or self.clean)
        for fault in self.faults:
            suites.extend(s for s in fault.cells if s not in suites)
        return tuple(suites)

    def clean_cell(self, suite: str) -> CleanCell:
        return self.clean.get(suite) or CleanCell("missing")

    def row(self, fault_id: str) -> FaultRow | None:
        return next((f for f in self.faults if f.spec.id == fault_id), None)

    def behavioural_killers(self) -> dict[str, list[Failure]]:
        """Fault id -> the failures that killed it behaviourally, suite by suite."""
        out: dict[str, list[Failure]] = {}
        for fault in self.faults:
            for cell in fault.cells.values():
                if cell.killed_behaviourally and cell.failure and cell.failure.nodeid:
                    out.setdefault(fault.spec.id, []).append(cell.failure)
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "target": self.target,
            "mode": self.mode,
            "generated_at": self.generated_at,
            "wall_s": self.wall_s,
            "jobs": self.jobs,
            "suites": list(self.suites),
            "clean": _cells_json(self.clean),
        }
        if self.clean_and_recording_s is not None:
            out["clean_under_settings"] = {k: _cells_json(v) for k, v in self.clean_under_settings.items()}
            out["clean_and_recording_s"] = self.clean_and_recording_s
        if self.recordings:
            out["recordings"] = [r.to_json() for r in self.recordings]
        if self.commit or self.engine:
            out["commit"], out["engine"] = self.commit, self.engine
        if self.shard is not None:
            out["shard"], out["selection"] = self.shard, list(self.selection or ())
        return {**out, "faults": [f.to_json() for f in self.faults]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KillMatrix:
        under = data.get("clean_under_settings") or {}
        return cls(
            target=str(data.get("target") or ""),
            mode=str(data.get("mode") or "full"),
            generated_at=str(data.get("generated_at", "")),
            wall_s=data.get("wall_s"),
            jobs=data.get("jobs"),
            suites=tuple(data.get("suites") or ()),
            clean=_cells(data.get("clean") or {}),
            faults=tuple(FaultRow.from_json(f) for f in data.get("faults") or ()),
            clean_under_settings={str(k): _cells(v) for k, v in under.items()},
            clean_and_recording_s=data.get("clean_and_recording_s"),
            schema_version=int(data.get("schema_version") or 1),
            shard=None if data.get("shard") is None else str(data["shard"]),
            selection=None if data.get("selection") is None else tuple(map(str, data["selection"])),
            commit=str(data.get("commit") or ""),
            engine=str(data.get("engine") or ""),
            recordings=tuple(RecordingUse.from_json(r) for r in data.get("recordings") or ()),
        )


def _cells(data: Mapping[str, Any]) -> dict[str, CleanCell]:
    return {str(s): CleanCell.from_json(c) for s, c in data.items()}


def _cells_json(cells: Mapping[str, CleanCell]) -> dict[str, Any]:
    return {s: c.to_json() for s, c in cells.items()}


def named_target(data: Any) -> str:
    """The target a matrix's JSON names ("" when it names none, or is no object): read before it is parsed, so
    that a malformed file is still shown under its target."""
    return str(data.get("target") or "") if isinstance(data, Mapping) else ""


def load(path: Path) -> KillMatrix:
    return KillMatrix.from_json(json.loads(Path(path).read_text()))


def load_if_any(path: Path | None) -> KillMatrix | None:
    """The matrix at ``path``, or None when there is none."""
    return load(path) if path is not None and Path(path).exists() else None


def save(matrix: KillMatrix, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(matrix.to_json(), indent=2))


def spec_of(fault: Any) -> FaultSpec:
    """A catalog fault's record, whichever target's (``harness.faults.Fault``, ``SGLangFault``, ``VLLMFault``: each has
    these fields; an SGLang or vLLM fault also the settings its code runs under, ``env``)."""
    env = getattr(fault, "env", None)
    return FaultSpec(
        id=fault.id,
        seed=fault.seed,
        breaks=fault.breaks,
        user_sees=fault.user_sees,
        invariant=fault.invariant,
        expected_kill="structural" if fault.structural_only else "behavioural",
        structural_reason=fault.structural_only,
        env=None if env is None else " ".join(f"{k}={v}" for k, v in env),
    )


def specs(faults: Iterable[Any]) -> dict[str, FaultSpec]:
    """A catalog's faults as their records, by id."""
    return {spec.id: spec for spec in map(spec_of, faults)}
