"""Records of accuracy runs and of their ON-vs-OFF comparison, all JSON round-trippable.

A run is stored as data, not as a score: every item keeps its prompt, gold answer, raw response
and extracted answer, so a comparison can pair items, find flips and show the generations that
diverged. A run that did not finish (server died, lm-eval failed) is kept with ``complete=False``
and its ``error``; nothing downstream may turn its partial items into an accuracy.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Iterable


def _require(data: dict[str, Any], keys: Iterable[str], what: str) -> None:
    """Fail loudly on a record missing a field instead of defaulting it to something plausible."""
    missing = [key for key in keys if key not in data]
    if missing:
        raise ValueError(f"{what} record is missing {', '.join(missing)}")


@dataclass(frozen=True)
class ItemResult:
    """One generation for one test item, with how it was scored."""

    item_id: str
    prompt: str
    gold: str
    response: str
    extracted: str | None
    correct: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ItemResult:
        _require(data, ("item_id", "prompt", "gold", "response", "extracted", "correct"), "item")
        extracted = data["extracted"]
        return cls(
            item_id=str(data["item_id"]),
            prompt=str(data["prompt"]),
            gold=str(data["gold"]),
            response=str(data["response"]),
            extracted=None if extracted is None else str(extracted),
            correct=bool(data["correct"]),
        )


@dataclass
class RunResult:
    """One task run with one graph mode (``graphs`` is e.g. ``"tape"``/``"cuda"`` for ON, ``"off"``).

    ``complete=False`` requires an ``error`` saying why, and ``complete=True`` forbids one, so a
    record can never be ambiguous about whether its items are a full test set. On disk the task is
    the key ``"suite"``, its name before tasks and suites were told apart: saved runs stay readable.
    """

    task: str
    graphs: str
    model: str
    complete: bool
    error: str | None
    items: list[ItemResult]
    wall_s: float
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.complete and not self.error:
            raise ValueError(f"incomplete run of {self.task!r} ({self.graphs}) must say why in `error`")
        if self.complete and self.error:
            raise ValueError(f"run of {self.task!r} ({self.graphs}) is marked complete but has error {self.error!r}")

    @property
    def label(self) -> str:
        return f"{self.task} [graphs={self.graphs}]"

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.task,
            "graphs": self.graphs,
            "model": self.model,
            "complete": self.complete,
            "error": self.error,
            "items": [item.to_dict() for item in self.items],
            "wall_s": self.wall_s,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        _require(data, ("suite", "graphs", "model", "complete", "error", "items", "wall_s"), "run")
        return cls(
            task=str(data["suite"]),
            graphs=str(data["graphs"]),
            model=str(data["model"]),
            complete=bool(data["complete"]),
            error=data["error"],
            items=[ItemResult.from_dict(item) for item in data["items"]],
            wall_s=float(data["wall_s"]),
            meta=dict(data.get("meta") or {}),
        )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> RunResult:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


class Verdict(str, Enum):
    """Traffic light for one task or the whole report; ``RED`` blocks, ``AMBER`` asks a human. ``NONE``: no
    verdict, because a run is incomplete (a server that never started, an lm-eval that failed): nothing was
    measured, so it is never shown as RED, and a measured RED elsewhere outranks it."""

    GREEN = "GREEN"
    AMBER = "AMBER"
    NONE = "NO-VERDICT"
    RED = "RED"

    @property
    def severity(self) -> int:
        return {"GREEN": 0, "AMBER": 1, "NO-VERDICT": 2, "RED": 3}[self.value]

    @property
    def text(self) -> str:
        """How people read it: ``NO VERDICT`` for NONE, else the colour."""
        return self.value.replace("-", " ")

    @staticmethod
    def worst(verdicts: Iterable[Verdict]) -> Verdict:
        return max(verdicts, key=lambda v: v.severity, default=Verdict.GREEN)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval ``[low, high]`` (95 % by default)."""

    value: float
    low: float
    high: float

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Estimate:
        _require(data, ("value", "low", "high"), "estimate")
        return cls(float(data["value"]), float(data["low"]), float(data["high"]))


@dataclass(frozen=True)
class ItemDiff:
    """One item whose two generations differ: a flip (correctness differs) or a text-only diff.

    ``first_diff_token`` is the index of the first token at which the generations diverge (``None``
    when the texts are identical); ``prefix_chars`` is the length of their common prefix in
    characters, which is what the report highlights from.
    """

    item_id: str
    prompt: str
    gold: str
    on_response: str
    off_response: str
    on_extracted: str | None
    off_extracted: str | None
    on_correct: bool
    off_correct: bool
    first_diff_token: int | None
    prefix_chars: int

    @property
    def flipped(self) -> bool:
        return self.on_correct != self.off_correct

    @property
    def direction(self) -> str:
        """``"ON fixed"`` (ON right, OFF wrong), ``"ON broke"`` (ON wrong, OFF right) or ``"same"``."""
        if not self.flipped:
            return "same"
        return "ON fixed" if self.on_correct else "ON broke"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ItemDiff:
        names = tuple(cls.__dataclass_fields__)
        _require(data, names, "item diff")
        return cls(**{name: data[name] for name in names})


Flip = ItemDiff  # the name the report and the brief use for a correctness-changing ItemDiff


@dataclass
class TaskComparison:
    """Graphs ON vs OFF on one task: per-run accuracy, paired difference, tests, flips, verdict.

    When either run is incomplete every statistic is ``None`` and ``errors`` says why; the
    verdict is then RED. ``on_better`` (b) and ``off_better`` (c) are McNemar's discordant counts.
    """

    task: str
    model: str
    on_graphs: str
    off_graphs: str
    complete: bool
    errors: list[str]
    n: int
    on_accuracy: Estimate | None
    off_accuracy: Estimate | None
    difference: Estimate | None
    on_better: int
    off_better: int
    mcnemar_p: float | None
    mde: float | None
    flips: list[ItemDiff]
    text_diffs: list[ItemDiff]
    verdict: Verdict
    reasons: list[str]
    thresholds: dict[str, Any]

    @property
    def reason(self) -> str:
        """The headline reason: the first reason at the verdict's own level."""
        return self.reasons[0] if self.reasons else ""

    @property
    def n_divergent(self) -> int:
        """Items whose ON and OFF generations differ at all (flips plus text-only diffs)."""
        return len(self.flips) + len(self.text_diffs)

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        for name in ("on_accuracy", "off_accuracy", "difference"):
            data[name] = None if data[name] is None else data[name].to_dict()
        data["flips"] = [flip.to_dict() for flip in self.flips]
        data["text_diffs"] = [diff.to_dict() for diff in self.text_diffs]
        data["verdict"] = self.verdict.value
        data["errors"] = list(self.errors)
        data["reasons"] = list(self.reasons)
        data["thresholds"] = dict(self.thresholds)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskComparison:
        if "task" not in data and "suite" in data:  # written before tasks and suites were told apart
            data = {**data, "task": data["suite"]}
        _require(data, tuple(cls.__dataclass_fields__), "task comparison")
        values = {name: data[name] for name in cls.__dataclass_fields__}
        for name in ("on_accuracy", "off_accuracy", "difference"):
            values[name] = None if values[name] is None else Estimate.from_dict(values[name])
        values["flips"] = [ItemDiff.from_dict(flip) for flip in values["flips"]]
        values["text_diffs"] = [ItemDiff.from_dict(diff) for diff in values["text_diffs"]]
        values["verdict"] = Verdict(values["verdict"])
        return cls(**values)


@dataclass(frozen=True)
class Summary:
    """The overall verdict over all tasks, with the one-line reason shown at the top of the report."""

    verdict: Verdict
    reason: str
    counts: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict.value, "reason": self.reason, "counts": dict(self.counts)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Summary:
        _require(data, ("verdict", "reason", "counts"), "summary")
        return cls(Verdict(data["verdict"]), str(data["reason"]), dict(data["counts"]))
