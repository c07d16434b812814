"""Records of accuracy runs and of their ON-vs-OFF comparison, all JSON round-trippable.

A run is stored as data, not as a score: every item keeps its prompt, gold answer, raw response
and extracted answer, so a comparison can pair items, find flips and show the generations that
diverged. A run that did not finish (server died, lm-eval failed) is kept with ``complete=False``
and its ``error``; nothing downstream may turn its partial items into an accuracy.

The logprob axis's records are here too (an item's ``TokenLogprobs``, a task's ``LogprobComparison``): they are parts
of a run and of a comparison; ``harness.evals.logprobs`` computes and judges them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Iterable, Mapping


def _require(data: dict[str, Any], keys: Iterable[str], what: str) -> None:
    """Fail loudly on a record missing a field instead of defaulting it to something plausible."""
    missing = [key for key in keys if key not in data]
    if missing:
        raise ValueError(f"{what} record is missing {', '.join(missing)}")


@dataclass(frozen=True)
class ChoiceScore:
    """One choice of a multiple-choice item as the server scored it: lm-eval's sum of the echoed logprobs of the
    choice's tokens, whether each was the argmax (``greedy``), and how many tokens it has (``tokens``: what a
    per-token comparison divides by; 0 where the checkpoint's tokenizer was not at hand)."""

    loglikelihood: float
    greedy: bool
    tokens: int


@dataclass(frozen=True)
class TokenLogprobs:
    """One generation as the server scored it: per token its text, its logprob and the top-k (text, logprob)."""

    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    top: tuple[tuple[tuple[str, float], ...], ...]

    def __post_init__(self) -> None:
        if not len(self.tokens) == len(self.logprobs) == len(self.top):
            raise ValueError(f"{len(self.tokens)} tokens, {len(self.logprobs)} logprobs, {len(self.top)} top lists")

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": list(self.tokens),
            "logprobs": list(self.logprobs),
            "top": [list(map(list, t)) for t in self.top],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenLogprobs:
        return cls(
            tuple(str(t) for t in data["tokens"]),
            tuple(float(x) for x in data["logprobs"]),
            tuple(tuple((str(k), float(v)) for k, v in row) for row in data["top"]),
        )

    @classmethod
    def from_openai(cls, choice_logprobs: Mapping[str, Any]) -> TokenLogprobs:
        """A completions choice's ``logprobs`` (``tokens``, ``token_logprobs``, ``top_logprobs``) or a chat choice's
        (``content``: ``[{token, logprob, top_logprobs: [{token, logprob}]}]``)."""
        if "content" in choice_logprobs:
            content = choice_logprobs["content"] or []
            return cls(
                tuple(str(c["token"]) for c in content),
                tuple(float(c["logprob"]) for c in content),
                tuple(
                    tuple((str(t["token"]), float(t["logprob"])) for t in c.get("top_logprobs") or []) for c in content
                ),
            )
        tokens = choice_logprobs.get("tokens") or []
        tops = choice_logprobs.get("top_logprobs") or [None] * len(tokens)
        return cls(
            tuple(str(t) for t in tokens),
            tuple(float(x) for x in choice_logprobs.get("token_logprobs") or []),
            tuple(tuple((str(k), float(v)) for k, v in (row or {}).items()) for row in tops),
        )


@dataclass(frozen=True)
class ItemResult:
    """One generation for one test item, with how it was scored. ``logprobs``: the generation's per-token top-k
    logprobs where the run recorded them (saved beside the run, not in it: see ``RunResult.save``). A multiple-choice
    item generates nothing: ``choices`` holds each choice's score, ``response`` the picked choice (the most likely),
    ``extracted`` its index."""

    item_id: str
    prompt: str
    gold: str
    response: str
    extracted: str | None
    correct: bool
    logprobs: TokenLogprobs | None = None
    choices: tuple[ChoiceScore, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in ("item_id", "prompt", "gold", "response", "extracted", "correct")}
        if self.choices:
            data["choices"] = [asdict(c) for c in self.choices]
        return data

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
            choices=tuple(
                ChoiceScore(float(c["loglikelihood"]), bool(c["greedy"]), int(c["tokens"]))
                for c in data.get("choices") or ()
            ),
        )


@dataclass(frozen=True)
class ServedIdentity:
    """What a run's server said it is, read from its endpoints by its server kind (``harness.servers``) and kept with
    the run. ``raw`` is what the endpoints answered (it keys the resume cache); the rest is what two arms of a
    comparison are compared by."""

    engine: str
    version: str
    model: str
    weights: str | None = None  # a digest when the server reports one (None: unknown)
    tokenizer: str | None = None  # a digest when the server reports one
    flags: Mapping[str, Any] = field(default_factory=dict)  # graph mode and the settings that change answers
    raw: Mapping[str, Any] = field(default_factory=dict)

    def model_differences(self, other: ServedIdentity) -> list[str]:
        """How ``other`` serves another model than this one (empty: the same, as far as both report)."""
        found = []
        if self.weights and other.weights and self.weights != other.weights:
            found.append(f"weights {self.weights} vs {other.weights}")
        if self.tokenizer and other.tokenizer and self.tokenizer != other.tokenizer:
            found.append(f"tokenizer {self.tokenizer} vs {other.tokenizer}")
        return found

    def to_dict(self) -> dict[str, Any]:
        """As saved under ``identity`` (``raw`` is saved beside it, under ``server``)."""
        return {
            "engine": self.engine,
            "version": self.version,
            "model": self.model,
            "weights": self.weights,
            "tokenizer": self.tokenizer,
            "flags": dict(self.flags),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], raw: Mapping[str, Any] | None = None) -> ServedIdentity:
        return cls(
            str(data.get("engine") or ""),
            str(data.get("version") or ""),
            str(data.get("model") or ""),
            data.get("weights"),
            data.get("tokenizer"),
            dict(data.get("flags") or {}),
            dict(raw or {}),
        )


@dataclass(frozen=True)
class RunRecord:
    """How one run was served: written by the runner as the run goes, saved with it, read back by the judge, the
    history, the provenance and the report.

    ``served_by`` (the server kind) is None only for a run that never reached a server: a saved run found missing.
    ``side`` is the run's place in the comparison being judged, ``"on"`` (the treatment) or ``"off"`` (the
    reference); a run as saved has none.

    On disk the record is the run's ``meta``, under the keys it always had (``mode`` is the side, or the arm's
    name when there is none; ``engine`` the counters; ``server`` the raw identity), so saved runs stay readable.
    """

    arm: str
    side: str | None = None
    served_by: str | None = None
    graphs: str | None = None  # the graph mode that ran (the server resolves "auto"), else the arm's
    fault: str | None = None
    base_url: str | None = None  # an external arm's URL; None when this job launched the server
    start_s: float | None = None  # seconds the server took to start, when this job started it
    identity: ServedIdentity | None = None
    counters: Mapping[str, Any] | None = None  # what the server did over the run (its kind's ``stats``)

    @property
    def forward_paths(self) -> Mapping[str, int]:
        """Forwards per path (``decode-graph``, ``extend-eager``, ...), where the server counts them."""
        paths = (self.counters or {}).get("forward_paths")
        return paths if isinstance(paths, Mapping) else {}

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"arm": self.arm, "mode": self.side or self.arm}
        if self.served_by is not None:
            data.update(
                {"served by": self.served_by, "graphs": self.graphs, "fault": self.fault, "base_url": self.base_url}
            )
        if self.start_s is not None:
            data["server_start_s"] = self.start_s
        if self.identity is not None:
            data.update(server=dict(self.identity.raw), identity=self.identity.to_dict())
        if self.counters is not None:
            data["engine"] = dict(self.counters)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], arm: str) -> RunRecord:
        """A saved ``meta``; ``arm`` names the arm when it does not (very old runs were named by graph mode).
        Its ``mode`` was the arm's name when saved, so it gives no side."""
        identity, counters = data.get("identity"), data.get("engine")
        return cls(
            arm=str(data.get("arm") or arm),
            served_by=data.get("served by"),
            graphs=data.get("graphs"),
            fault=data.get("fault"),
            base_url=data.get("base_url"),
            start_s=data.get("server_start_s"),
            identity=ServedIdentity.from_dict(identity, data.get("server"))
            if isinstance(identity, Mapping) and identity
            else None,
            counters=dict(counters) if isinstance(counters, Mapping) else None,
        )


@dataclass(frozen=True)
class RunResult:
    """One task run with one graph mode (``graphs`` is e.g. ``"tape"``/``"cuda"`` for ON, ``"off"``).

    ``complete=False`` requires an ``error`` saying why, and ``complete=True`` forbids one, so a
    record can never be ambiguous about whether its items are a full test set. ``record`` says how the
    run was served. On disk the task is the key
    ``"suite"``, its name before tasks and suites were told apart, and the record ``"meta"``: saved runs
    stay readable.
    """

    task: str
    graphs: str
    model: str
    complete: bool
    error: str | None
    items: list[ItemResult]
    wall_s: float
    record: RunRecord

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
            "meta": self.record.to_dict(),
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
            record=RunRecord.from_dict(data.get("meta") or {}, arm=str(data["graphs"])),
        )

    def save(self, path: str | Path) -> Path:
        """The run as JSON at ``path``; its items' logprobs, where recorded, as JSON lines beside it
        (``<task>.logprobs.jsonl``: one compact line per item, thousands of numbers each, kept out of the
        indented run)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        side = logprobs_path(path)
        side.unlink(missing_ok=True)
        if any(item.logprobs is not None for item in self.items):
            with open(side, "w", encoding="utf-8") as f:
                for item in self.items:
                    if item.logprobs is not None:
                        f.write(json.dumps({"item_id": item.item_id, **item.logprobs.to_dict()}, ensure_ascii=False))
                        f.write("\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> RunResult:
        path = Path(path)
        run = cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        side = logprobs_path(path)
        if not side.is_file():
            return run
        found = {}
        for line in side.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                found[record["item_id"]] = TokenLogprobs.from_dict(record)
        return replace(run, items=[replace(i, logprobs=found.get(i.item_id)) for i in run.items])


def logprobs_path(run_path: Path) -> Path:
    """Where a saved run's items' logprobs lie: ``runs/<task>.logprobs.jsonl`` beside ``runs/<task>.json``."""
    return run_path.with_name(run_path.stem + ".logprobs.jsonl")


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


@dataclass(frozen=True)
class ItemLogprobDiff:
    """One item's two generations compared where their contexts are identical (``harness.evals.logprobs`` says how)."""

    item_id: str
    compared: int  # positions with identical contexts (the common prefix, and the position where they part)
    parted_at: int | None
    max_abs_delta: float
    max_kl: float


@dataclass(frozen=True)
class Quantiles:
    """A per-item statistic over a task's items."""

    p50: float
    p90: float
    p99: float
    max: float


@dataclass(frozen=True)
class LogprobComparison:
    """One task's logprob axis: the per-item statistics' quantiles, how many items part, the verdict and why."""

    n: int  # items with logprobs on both sides
    missing: int  # items without (the server gave none, or the record was lost)
    positions: int  # positions compared over all items
    parted: int  # items whose generations part
    delta: Quantiles
    kl: Quantiles
    verdict: Verdict
    reason: str
    key: str  # the engine/dtype whose thresholds judged it
    items: tuple[ItemLogprobDiff, ...] = ()

    @property
    def line(self) -> str:
        """The CLI's words for it: worst item first, then the bulk."""
        if self.n == 0:
            return f"logprobs: {self.verdict.text} ({self.reason})"
        return (
            f"logprobs: {self.verdict.text} (N={self.n}, max|dlp| p90 {self.delta.p90:.2g} max {self.delta.max:.2g}, "
            f"KL p90 {self.kl.p90:.2g} max {self.kl.max:.2g}, parted {self.parted})"
        )

    def to_dict(self, items: bool = True) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = self.verdict.value
        if not items:
            del data["items"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LogprobComparison:
        return cls(
            int(data["n"]),
            int(data["missing"]),
            int(data["positions"]),
            int(data["parted"]),
            Quantiles(**data["delta"]),
            Quantiles(**data["kl"]),
            Verdict(data["verdict"]),
            str(data["reason"]),
            str(data["key"]),
            tuple(ItemLogprobDiff(**i) for i in data.get("items") or ()),
        )


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
    logprobs: LogprobComparison | None = None  # the logprob axis, beside the accuracy verdict (never part of it)

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
        data["logprobs"] = None if self.logprobs is None else self.logprobs.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskComparison:
        if "task" not in data and "suite" in data:  # written before tasks and suites were told apart
            data = {**data, "task": data["suite"]}
        _require(data, tuple(n for n in cls.__dataclass_fields__ if n != "logprobs"), "task comparison")
        values = {name: data.get(name) for name in cls.__dataclass_fields__}
        for name in ("on_accuracy", "off_accuracy", "difference"):
            values[name] = None if values[name] is None else Estimate.from_dict(values[name])
        values["flips"] = [ItemDiff.from_dict(flip) for flip in values["flips"]]
        values["text_diffs"] = [ItemDiff.from_dict(diff) for diff in values["text_diffs"]]
        values["verdict"] = Verdict(values["verdict"])
        if values["logprobs"] is not None:
            values["logprobs"] = LogprobComparison.from_dict(values["logprobs"])
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
