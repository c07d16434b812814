"""Pair a graphs-ON run with a graphs-OFF run of the same task and decide GREEN / AMBER / RED (or no verdict).

Graph capture (CUDA graphs, the tape runner) is an execution strategy: with the same weights and
greedy decoding it should not change what the model answers. So the comparison is paired by item
and any *systematic* difference is a finding, whichever way it points.

Verdict rule for one task (first matching level wins; every matching reason is recorded):

NO VERDICT (``Verdict.NONE``)
  * either run is incomplete (``complete=False``, e.g. the server died or lm-eval failed) or has
    no items: nothing was measured, so no accuracy is computed or shown and no colour is claimed.
RED
  * ON is significantly worse: McNemar ``p < alpha`` and ``ON - OFF < 0``;
  * ON's point drop exceeds ``max_drop`` even without significance (``ON - OFF < -max_drop``):
    a loss that large is not tolerated just because the task is too small to prove it.
AMBER
  * ON is significantly *better* (``p < alpha``, ``ON - OFF > 0``): still a behaviour change that
    graphs should not cause, so a human looks at the flips;
  * underpowered: the MDE exceeds ``max_mde``, so a GREEN would not rule out a drop that matters.
    The MDE is the smallest true drop the exact McNemar test (two-sided ``alpha``) detects with
    ``power`` (80 %), from that test's exact power at the observed discordance
    (:func:`stats.minimum_detectable_effect`): with no discordant pair 1.6 pp at N = 500 and 3.9 pp
    at N = 200 (GREEN at ``max_mde = 0.05``); at N = 200 from 3 discordant pairs on (5.2 pp), AMBER;
  * only when ``max_divergent`` is set: the fraction of items whose generated *text* differs
    (flips or not) exceeds it (off by default: reduction-order differences on GPUs legitimately
    make some greedy generations diverge).
GREEN
  * otherwise: no significant difference, no drop beyond ``max_drop``, and enough power.

Defaults: ``alpha=0.05`` (CIs are ``1 - alpha`` = 95 %), ``max_drop=0.02``, ``max_mde=0.05``,
``power=0.80``, ``max_divergent=None``, ``resamples=10_000``, ``seed=0``. The overall verdict
(:func:`summarize`) is the worst task verdict (a measured RED outranks a task without a verdict), and no
verdict when nothing was compared. Nothing here
retries anything: a run is judged exactly as it was recorded.

Beside the verdict, never part of it: the logprob axis (``harness.evals.logprobs``), where the runs recorded each
generation's top-k logprobs: ``TaskComparison.logprobs``, judged against thresholds calibrated per engine and dtype.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Iterable, Mapping, Sequence

from harness.evals import stats
from harness.evals.formats import pp
from harness.evals.logprobs import (
    LogprobComparison,
    LogprobThresholds,
    judge_choices,
    judge_logprobs,
    load_thresholds,
    threshold_key,
)
from harness.evals.results import (
    ItemDiff,
    ItemResult,
    RunResult,
    ServedIdentity,
    TaskComparison,
    Summary,
    Verdict,
)

Tokenize = Callable[[str], Sequence[Any]]
_EPS = 1e-12  # float dust when a difference lands exactly on a threshold (e.g. -4/200 vs 0.02)


class ItemMismatchError(ValueError):
    """The ON and OFF runs did not score the same items, so they cannot be paired."""


@dataclass(frozen=True)
class Thresholds:
    """Knobs of the verdict rule (see the module docstring); all fractions, not percentages."""

    alpha: float = 0.05  # McNemar significance level; CIs are 1 - alpha
    max_drop: float = 0.02  # largest ON - OFF drop tolerated without significance
    max_mde: float = 0.05  # above this MDE the task is too small to vouch for a GREEN
    power: float = 0.80  # power at which the MDE is computed
    max_divergent: float | None = None  # max fraction of items with differing text; None = not gated
    resamples: int = stats.DEFAULT_RESAMPLES  # paired-bootstrap resamples
    seed: int = 0  # bootstrap seed

    def __post_init__(self) -> None:
        for name in ("alpha", "power"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise ValueError(f"threshold {name} must be in (0, 1), got {getattr(self, name)}")
        for name in ("max_drop", "max_mde"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"threshold {name} must be in [0, 1], got {getattr(self, name)}")
        if self.max_divergent is not None and not 0.0 <= self.max_divergent <= 1.0:
            raise ValueError(f"threshold max_divergent must be in [0, 1] or None, got {self.max_divergent}")
        if self.resamples < 100:
            raise ValueError(f"resamples must be at least 100, got {self.resamples}")

    @property
    def confidence(self) -> float:
        return 1.0 - self.alpha

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Thresholds:
        """Build from e.g. a config file section; unknown keys are an error, not silently ignored."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"unknown threshold(s) {unknown}; known: {sorted(known)}")
        values: dict[str, Any] = {}
        for name, value in data.items():
            if value is None or (isinstance(value, str) and value.lower() in ("none", "off", "")):
                if name != "max_divergent":
                    raise ValueError(f"threshold {name} cannot be None")
                values[name] = None
            elif name in ("resamples", "seed"):
                values[name] = int(value)
            else:
                values[name] = float(value)
        return cls(**values)


# ------------------------------------------------------------------ divergence


def first_divergence(a: str, b: str, tokenize: Tokenize | None = None) -> int | None:
    """Index of the first token (characters when ``tokenize`` is None) where ``a`` and ``b`` differ.

    ``None`` when the texts are identical; when one is a prefix of the other, the shorter length.
    """
    if a == b:
        return None
    left, right = (tokenize(a), tokenize(b)) if tokenize is not None else (a, b)
    for index, (x, y) in enumerate(zip(left, right)):
        if x != y:
            return index
    return min(len(left), len(right))


def common_prefix_chars(a: str, b: str) -> int:
    """Length in characters of the longest common prefix (where the report starts highlighting)."""
    limit = min(len(a), len(b))
    for index in range(limit):
        if a[index] != b[index]:
            return index
    return limit


# ------------------------------------------------------------------ pairing


def _natural_key(item_id: str) -> tuple[Any, ...]:
    """Sort ``gsm/2`` before ``gsm/10``; the parts alternate str/int so tuples always compare."""
    parts = re.split(r"(\d+)", item_id)
    return tuple(int(part) if i % 2 else part for i, part in enumerate(parts))


def _ids_preview(ids: Iterable[str], limit: int = 20) -> str:
    ordered = sorted(ids, key=_natural_key)
    shown = ", ".join(ordered[:limit])
    return shown + (f", ... ({len(ordered)} in all)" if len(ordered) > limit else "")


def _index(run: RunResult, side: str) -> dict[str, ItemResult]:
    by_id: dict[str, ItemResult] = {}
    duplicates: set[str] = set()
    for item in run.items:
        if item.item_id in by_id:
            duplicates.add(item.item_id)
        by_id[item.item_id] = item
    if duplicates:
        raise ItemMismatchError(f"{side} run {run.label} scores some items twice: {_ids_preview(duplicates)}")
    return by_id


def pair_items(on: RunResult, off: RunResult) -> list[tuple[ItemResult, ItemResult]]:
    """ON/OFF item pairs by ``item_id``, in natural id order; raises naming any unpaired ids."""
    on_items, off_items = _index(on, "ON"), _index(off, "OFF")
    only_on = on_items.keys() - off_items.keys()
    only_off = off_items.keys() - on_items.keys()
    if only_on or only_off:
        problems = []
        if only_off:
            problems.append(f"missing from ON: {_ids_preview(only_off)}")
        if only_on:
            problems.append(f"missing from OFF: {_ids_preview(only_on)}")
        raise ItemMismatchError(f"{on.task}: ON and OFF item sets differ; " + "; ".join(problems))
    changed = [
        item_id
        for item_id, item in on_items.items()
        if (item.prompt, item.gold) != (off_items[item_id].prompt, off_items[item_id].gold)
    ]
    if changed:
        raise ItemMismatchError(f"{on.task}: same ids but different prompt or gold: {_ids_preview(changed)}")
    return [(on_items[i], off_items[i]) for i in sorted(on_items, key=_natural_key)]


def _diff(on_item: ItemResult, off_item: ItemResult, tokenize: Tokenize | None) -> ItemDiff:
    return ItemDiff(
        item_id=on_item.item_id,
        prompt=on_item.prompt,
        gold=on_item.gold,
        on_response=on_item.response,
        off_response=off_item.response,
        on_extracted=on_item.extracted,
        off_extracted=off_item.extracted,
        on_correct=on_item.correct,
        off_correct=off_item.correct,
        first_diff_token=first_divergence(on_item.response, off_item.response, tokenize),
        prefix_chars=common_prefix_chars(on_item.response, off_item.response),
    )


# ------------------------------------------------------------------ comparison


def compare_runs(
    on: RunResult,
    off: RunResult,
    *,
    thresholds: Thresholds = Thresholds(),
    tokenize: Tokenize | None = None,
    logprob_thresholds: Mapping[str, LogprobThresholds] | None = None,
    mismatch_is_no_verdict: bool = False,
) -> TaskComparison:
    """Paired comparison of one task with graphs ON vs OFF, and its verdict; beside it the logprob axis
    (``harness.evals.logprobs``) where either run recorded logprobs, judged by ``logprob_thresholds`` (default: the
    committed calibration).

    Raises :class:`ItemMismatchError` when two complete runs did not score the same items (or
    disagree on an item's prompt/gold) and ``ValueError`` when the tasks or models differ:
    those are harness bugs, not findings. An incomplete run gets no verdict and no statistics. With
    ``mismatch_is_no_verdict`` (a job judging what lm-eval scored) a mismatch is no verdict too: the ON run is
    read as incomplete, the mismatch its error.
    """
    if on.task != off.task:
        raise ValueError(f"cannot compare different tasks: ON {on.task!r} vs OFF {off.task!r}")
    if on.model != off.model:
        raise ValueError(f"{on.task}: ON and OFF ran different models ({on.model!r} vs {off.model!r})")
    base = dict(
        task=on.task,
        model=on.model,
        on_graphs=on.graphs,
        off_graphs=off.graphs,
        thresholds=thresholds.to_dict(),
    )
    errors = [
        f"{side} run (graphs={run.graphs}) incomplete: {run.error}"
        for side, run in (("ON", on), ("OFF", off))
        if not run.complete
    ]
    pairs = []
    if not errors:
        try:
            pairs = pair_items(on, off)
        except ItemMismatchError as exc:
            if not mismatch_is_no_verdict:
                raise
            errors.append(f"ON run (graphs={on.graphs}) incomplete: ItemMismatchError: {exc}")
        else:
            if not pairs:
                errors.append("both runs are marked complete but scored no items")
    if errors:
        return TaskComparison(
            **base,
            complete=False,
            errors=errors,
            n=0,
            on_accuracy=None,
            off_accuracy=None,
            difference=None,
            on_better=0,
            off_better=0,
            mcnemar_p=None,
            mde=None,
            flips=[],
            text_diffs=[],
            verdict=Verdict.NONE,
            reasons=[f"no verdict: {e}" for e in errors],
        )

    on_flags = [a.correct for a, _ in pairs]
    off_flags = [b.correct for _, b in pairs]
    n = len(pairs)
    confidence = thresholds.confidence
    b, c = stats.discordant_counts(on_flags, off_flags)
    difference = stats.paired_bootstrap_diff(
        on_flags, off_flags, resamples=thresholds.resamples, seed=thresholds.seed, confidence=confidence
    )
    p = stats.mcnemar_exact(b, c)
    mde = stats.minimum_detectable_effect(n, b + c, alpha=thresholds.alpha, power=thresholds.power)
    on_accuracy, off_accuracy = stats.accuracy(on_flags, confidence), stats.accuracy(off_flags, confidence)
    diffs = [_diff(a, o, tokenize) for a, o in pairs if a.response != o.response or a.correct != o.correct]
    flips = [d for d in diffs if d.flipped]
    text_diffs = [d for d in diffs if not d.flipped]
    verdict, reasons = _verdict(n, difference.value, difference.low, difference.high, p, mde, len(diffs), thresholds)
    return TaskComparison(
        **base,
        complete=True,
        errors=[],
        n=n,
        on_accuracy=on_accuracy,
        off_accuracy=off_accuracy,
        difference=difference,
        on_better=b,
        off_better=c,
        mcnemar_p=p,
        mde=mde,
        flips=flips,
        text_diffs=text_diffs,
        verdict=verdict,
        reasons=reasons,
        logprobs=logprob_axis(pairs, on, logprob_thresholds),
    )


def served_dtype(run: RunResult) -> str | None:
    """The dtype the run's server computed in (None for a run that never reached a server)."""
    return identity_dtype(run.record.identity) if run.record.identity is not None else None


def identity_dtype(identity: ServedIdentity) -> str | None:
    """The harness server reports its dtype; other engines', their ``--dtype`` flag, if given."""
    if dtype := identity.flags.get("dtype"):
        return str(dtype)
    words = str(identity.flags.get("flags") or "").split()
    return words[words.index("--dtype") + 1] if "--dtype" in words[:-1] else None


def logprob_axis(
    pairs: Sequence[tuple[ItemResult, ItemResult]],
    on: RunResult,
    thresholds: Mapping[str, LogprobThresholds] | None = None,
) -> LogprobComparison | None:
    """The paired items' logprobs compared and judged (None: neither run recorded any, e.g. a run saved before); a
    loglikelihood task's items by their choices' scores (``judge_choices``)."""
    scored = any(a.choices or b.choices for a, b in pairs)
    if not scored and not any(a.logprobs is not None or b.logprobs is not None for a, b in pairs):
        return None
    key = threshold_key(on.record.served_by, served_dtype(on))
    known = load_thresholds() if thresholds is None else thresholds
    if scored:
        return judge_choices([(a.item_id, a.choices, b.choices) for a, b in pairs], known.get(key), key)
    return judge_logprobs([(a.item_id, a.logprobs, b.logprobs) for a, b in pairs], known.get(key), key)


def _verdict(
    n: int, diff: float, low: float, high: float, p: float, mde: float, divergent: int, t: Thresholds
) -> tuple[Verdict, list[str]]:
    """Apply the rule in the module docstring; reasons come back worst first."""
    ci = f"CI {pp(low)} .. {pp(high)}"
    red: list[str] = []
    amber: list[str] = []
    significant = p < t.alpha
    if significant and diff < 0:
        red.append(f"ON significantly worse: {pp(diff)} ({ci}), McNemar p = {p:.3g} < {t.alpha:g}")
    if diff < -t.max_drop - _EPS:
        red.append(f"ON drops {pp(diff)}, beyond the tolerated {100 * t.max_drop:.1f} pp (p = {p:.3g})")
    if significant and diff > 0:
        amber.append(
            f"ON significantly better: {pp(diff)} ({ci}), McNemar p = {p:.3g}; graphs should not change accuracy"
        )
    if mde > t.max_mde + _EPS:
        amber.append(
            f"underpowered: MDE {100 * mde:.1f} pp > {100 * t.max_mde:.1f} pp at N = {n}; a real drop could hide"
        )
    if t.max_divergent is not None and divergent / n > t.max_divergent + _EPS:
        amber.append(
            f"generations differ on {divergent}/{n} items ({100 * divergent / n:.1f} %),"
            f" above {100 * t.max_divergent:.1f} %"
        )
    if red:
        return Verdict.RED, red + amber
    if amber:
        return Verdict.AMBER, amber
    return Verdict.GREEN, [
        f"no significant difference: {pp(diff)} ({ci}), McNemar p = {p:.3g}, MDE {100 * mde:.1f} pp at N = {n}"
    ]


def summarize(comparisons: Sequence[TaskComparison]) -> Summary:
    """Overall verdict = the worst task verdict (no verdict when nothing was compared), with one reason line."""
    counts = {v.value: sum(c.verdict is v for c in comparisons) for v in Verdict}
    if not comparisons:
        return Summary(Verdict.NONE, "no verdict: no task was compared", counts)
    worst = Verdict.worst(c.verdict for c in comparisons)
    if worst is Verdict.GREEN:
        names = ", ".join(c.task for c in comparisons)
        return Summary(worst, f"all {len(comparisons)} tasks GREEN ({names}): ON matches OFF", counts)
    # The tasks that set the verdict, then (under a measured verdict) those that have none: both need a look.
    culprits = [c for c in comparisons if c.verdict is worst]
    culprits += [c for c in comparisons if c.verdict is Verdict.NONE and worst is not Verdict.NONE]
    return Summary(worst, "; ".join(f"{c.task}: {c.reason}" for c in culprits), counts)
