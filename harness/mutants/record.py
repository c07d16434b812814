"""A mutation run's record: each mutant's status, killer or reason, and the score, as JSON
(``reports/mutants-<target>.json``).

Statuses, with the kill matrix's meaning: ``killed`` (a test's own assertion failed; its class behavioural or
structural), ``error`` (only crashes: an exception in engine code, an engine assert, a module that no longer
imports; detected, but no assertion judged an output, so never a kill), ``timeout`` (a test hung past its limit),
``survived`` (every reaching test passed), ``unreached`` (no test of the suites enters the mutated function).

The score counts kills only: killed / (mutants - equivalent ones). A survivor or an unreached mutant is classified
in ``harness.mutants.survivors`` (equivalent with its reason, reachable only on a GPU, or a suite gap and the test
that closed it); one not classified there is shown as such.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from harness.kill_record import Failure, KillClass
from harness.mutants.generate import Mutant

MUTANTS_SCHEMA_VERSION = 1
MutantStatus = Literal["killed", "survived", "timeout", "error", "unreached"]
RunHow = Literal["process", "fork"]  # harness/mutants/swap.py: which mutants a warm server's child can run


@dataclass(frozen=True)
class MutantResult:
    mutant: Mutant
    status: MutantStatus
    kill_class: KillClass | None = None
    failure: Failure | None = None  # the killer (killed), the first crash (error, timeout)
    tests_reaching: int = 0
    tests_run: int = 0
    seconds: float = 0.0
    how: RunHow = "process"  # where its tests ran: a fresh process, or a warm server's child with one function swapped

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self.mutant),
            "status": self.status,
            "kill_class": self.kill_class,
            "failure": self.failure.to_json() if self.failure else None,
            "tests_reaching": self.tests_reaching,
            "tests_run": self.tests_run,
            "seconds": self.seconds,
            "how": self.how,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MutantResult:
        fields = {k: data[k] for k in Mutant.__dataclass_fields__}
        failure = data.get("failure")
        return cls(
            mutant=Mutant(**fields),
            status=data["status"],
            kill_class=data.get("kill_class"),
            failure=Failure.from_json(failure) if failure else None,
            tests_reaching=int(data.get("tests_reaching", 0)),
            tests_run=int(data.get("tests_run", 0)),
            seconds=float(data.get("seconds", 0.0)),
            how=data.get("how", "process"),
        )


@dataclass(frozen=True)
class MutationRun:
    """One run (or one shard of it): what was mutated, how the sample was drawn, and every mutant's result."""

    target: str
    engine_version: str
    source_digest: str  # the mutated files' text: mutant ids hold against it only
    mutator: str  # the mutation tool and release that made the mutants
    operators: tuple[str, ...]
    population: int  # every mutant of the scope
    sample: int  # how many were drawn (0: all)
    seed: int
    shard: str  # "K/N"; "1/1": the whole sample
    generated_at: str
    wall_s: float
    recording_s: float  # the clean build's runs that record which tests reach which function
    jobs: int
    results: tuple[MutantResult, ...]

    def counts(self) -> Counter[str]:
        return Counter(r.status for r in self.results)

    def to_json(self) -> dict[str, Any]:
        head = {k: v for k, v in asdict(self).items() if k != "results"}
        return {"schema_version": MUTANTS_SCHEMA_VERSION, **head, "results": [r.to_json() for r in self.results]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MutationRun:
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k != "results"}
        fields["operators"] = tuple(fields["operators"])
        return cls(**fields, results=tuple(MutantResult.from_json(r) for r in data["results"]))


def save(run: MutationRun, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run.to_json(), indent=1) + "\n")


def load(path: Path) -> MutationRun:
    return MutationRun.from_json(json.loads(path.read_text()))
