"""The logprob axis of a comparison: the two arms' per-token logprobs of the same item, compared where their
contexts are identical, and a verdict beside accuracy's.

Why: most harness faults change no answer (``docs/FAULT_EFFECTS.md``), but a fault that touches the computation
changes a logit, and a logit is measured to the last bit where accuracy is measured to the item. SGLang's own CI
judges cache reuse the same way (KL of continuation logprobs, ``kl_test_utils``).

Per item (both arms' generations of one prompt, greedy, with the top-k logprobs of every generated token):

* ``parted_at``: the first position where the two generated token sequences differ (None: identical; the shorter
  length when one is a prefix of the other). Up to and including that position both arms saw the same context, so
  their distributions there are comparable; past it they are not, and nothing past it is compared.
* ``max_abs_delta``: the largest ``|logprob_on - logprob_off|`` of the chosen token over the positions before
  ``parted_at`` (where both chose the same token), and at ``parted_at`` that of the reference's token (a lower bound
  when it fell out of the treatment's top-k): a fault that flips one near-tie shows there, and nowhere before.
* ``max_kl``: the largest over the comparable positions of ``KL(off || on)`` over a coarsening of the vocabulary:
  each token in either arm's top-k is its own bucket (where one arm's list lacks it, that arm's k-th probability, the
  most it can have), every other token falls in one "rest" bucket (1 - the buckets' mass). Exact over that coarsening
  when both lists hold the same tokens, as on clean arms; a coarsening never raises KL (data processing), so there it
  is a lower bound of the full KL. Buckets of the shared tokens alone would hide a flip between two tokens that
  each left the other's list. The worst position, not the mean (SGLang's ``kl_test_utils`` averages): a fault may touch
  a few positions of a long generation.

Per task: the quantiles (p50, p90, p99, max) of both per-item statistics, how many items part, and a verdict
against thresholds calibrated per engine and dtype on clean runs (``logprob_thresholds.json`` beside this module,
recomputed by ``python -m bench.logprob_thresholds``): RED when the worst item exceeds a RED threshold, AMBER when
it exceeds an AMBER one, GREEN otherwise; NO VERDICT when no item has logprobs on both sides or the engine and
dtype were never calibrated. The worst item, not a quantile, because a fault may corrupt a few requests only.

A multiple-choice item (a loglikelihood task: nothing generated, each choice's tokens echoed with their logprobs and
summed by lm-eval) is compared by ``compare_choices``: both arms scored the same texts, so every choice is comparable;
``max_abs_delta`` is the largest change of a choice's loglikelihood divided by its token count (the mean move per token
of the choice that moved most: a lower bound of its largest per-token move, so held to the per-token thresholds it
can miss noise, never add it), ``max_kl`` the KL between the two arms' distributions over the choices (softmax of the
loglikelihoods), reported but not judged (the KL limits are calibrated on next-token distributions over a
vocabulary, not on four choices), and the item parts when the arms pick different choices.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.evals.results import ChoiceScore, ItemLogprobDiff, LogprobComparison, Quantiles, TokenLogprobs, Verdict

THRESHOLDS_FILE = Path(__file__).with_name("logprob_thresholds.json")
TOP_K = 5  # top logprobs asked per generated token (OpenAI's completions allow 5; SGLang and vLLM more)


def quantiles(values: Sequence[float]) -> Quantiles:
    """A per-item statistic's quantiles over a task's items (all 0 for none)."""
    if not values:
        return Quantiles(p50=0.0, p90=0.0, p99=0.0, max=0.0)
    ordered = sorted(values)
    p50, p90, p99 = (_quantile(ordered, q) for q in (0.5, 0.9, 0.99))
    return Quantiles(p50=p50, p90=p90, p99=p99, max=ordered[-1])


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class LogprobLimits:
    """Per-item maxima a task's worst item is held to, at one level (AMBER or RED)."""

    max_abs_delta: float
    max_kl: float


@dataclass(frozen=True)
class LogprobThresholds:
    """The calibrated thresholds of one engine and dtype (``key``: ``"harness/float32"``), from ``seeds`` clean runs."""

    key: str
    amber: LogprobLimits
    red: LogprobLimits
    seeds: int

    @classmethod
    def from_dict(cls, key: str, data: Mapping[str, Any]) -> LogprobThresholds:
        return cls(key, LogprobLimits(**data["amber"]), LogprobLimits(**data["red"]), int(data["seeds"]))


def load_thresholds(path: Path = THRESHOLDS_FILE) -> dict[str, LogprobThresholds]:
    """Every calibrated engine/dtype; empty when the file is missing (then every verdict is NO VERDICT)."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {key: LogprobThresholds.from_dict(key, entry) for key, entry in data["thresholds"].items()}


def threshold_key(engine: str | None, dtype: str | None) -> str:
    return f"{engine or 'unknown'}/{dtype or 'unknown'}"


REST_FLOOR = 1e-6
"""The least mass the rest bucket is given. Servers return float32 log-softmax values, whose probabilities sum to 1
only to a few float32 steps at 1 (6e-8 each): on a peaked distribution ``1 - sum(top-k)`` is that rounding, not the
tail. SGLang's clean arms, one position: the rest read -4.6e-8 in one arm (clipped to 0) and +5.7e-8 in the other,
and the KL term 5.7e-8 * (log 5.7e-8 + 690) put 3.8e-5 nats where the chosen token moved by 1.2e-7."""


def _bucket_kl(p_top: Mapping[str, float], q_top: Mapping[str, float]) -> float:
    """KL(P || Q) over the tokens in either top-k list plus one bucket for all the rest. A token one side's list lacks
    gets that side's k-th probability there (the most it can have), so a token that left the top-k still counts.
    Exact over this coarsening when both lists hold the same tokens (clean arms), an estimate otherwise. The rest
    bucket holds at least ``REST_FLOOR`` on both sides: below it, it is float32 rounding (a softmax gives every token
    some mass, so 0 is never the truth), and both sides are normalized after it."""
    tokens = sorted(p_top.keys() | q_top.keys())
    p_floor, q_floor = min(p_top.values()), min(q_top.values())
    p = [math.exp(p_top.get(t, p_floor)) for t in tokens]
    q = [math.exp(q_top.get(t, q_floor)) for t in tokens]
    p.append(max(REST_FLOOR, 1.0 - math.fsum(p)))
    q.append(max(REST_FLOOR, 1.0 - math.fsum(q)))
    p_sum, q_sum = math.fsum(p), math.fsum(q)  # 1 to float32 rounding: normalized, the first-order terms cancel
    p, q = [x / p_sum for x in p], [x / q_sum for x in q]
    kl = 0.0
    for pi, qi in zip(p, q):
        if pi > 0.0:
            kl += pi * (math.log(pi) - math.log(max(qi, 1e-300)))
    return max(kl, 0.0)  # rounding of the rest buckets can leave a -1e-17


def compare_item(item_id: str, on: TokenLogprobs, off: TokenLogprobs) -> ItemLogprobDiff:
    """Both generations of one item, compared position by position while their contexts are identical."""
    common = min(len(on.tokens), len(off.tokens))
    parted = next((i for i in range(common) if on.tokens[i] != off.tokens[i]), None)
    if parted is None and len(on.tokens) != len(off.tokens):
        parted = common
    same = common if parted is None else parted  # positions where both chose the same token
    comparable = min(common, same + 1)  # the position where they part had the same context too
    deltas = [abs(on.logprobs[i] - off.logprobs[i]) for i in range(same)]
    if comparable > same and on.top[same]:  # where they part: the reference's token under both
        alternatives = dict(on.top[same])
        token, logprob = off.tokens[same], off.logprobs[same]
        if token in alternatives:
            deltas.append(abs(logprob - alternatives[token]))
        else:  # it left the treatment's top-k, so its logprob there is at most the k-th: a lower bound
            deltas.append(max(0.0, logprob - min(alternatives.values())))
    kls = [_bucket_kl(dict(off.top[i]), dict(on.top[i])) for i in range(comparable) if on.top[i] and off.top[i]]
    return ItemLogprobDiff(
        item_id,
        compared=comparable,
        parted_at=parted,
        max_abs_delta=max(deltas, default=0.0),
        max_kl=max(kls, default=0.0),
    )


def compare_choices(item_id: str, on: Sequence[ChoiceScore], off: Sequence[ChoiceScore]) -> ItemLogprobDiff:
    """Both arms' scores of one multiple-choice item (the module docstring's last paragraph). A choice whose token
    count is unknown (0) is divided by 1: its whole sum is held to the per-token limits, stricter, never laxer."""
    if len(on) != len(off):
        raise ValueError(f"{item_id}: {len(on)} choices scored in one arm, {len(off)} in the other")
    deltas = [abs(a.loglikelihood - b.loglikelihood) / max(b.tokens, 1) for a, b in zip(on, off)]
    p, q = _choice_distribution(off), _choice_distribution(on)
    kl = math.fsum(pi * (math.log(pi) - math.log(max(qi, 1e-300))) for pi, qi in zip(p, q) if pi > 0.0)
    pick_on = max(range(len(on)), key=lambda c: on[c].loglikelihood)
    pick_off = max(range(len(off)), key=lambda c: off[c].loglikelihood)
    return ItemLogprobDiff(
        item_id,
        compared=len(on),
        parted_at=None if pick_on == pick_off else 0,
        max_abs_delta=max(deltas, default=0.0),
        max_kl=max(kl, 0.0),
    )


def _choice_distribution(choices: Sequence[ChoiceScore]) -> list[float]:
    """The softmax of the choices' loglikelihoods (how likely each choice is, given that one of them is the answer)."""
    top = max(c.loglikelihood for c in choices)
    weights = [math.exp(c.loglikelihood - top) for c in choices]
    total = math.fsum(weights)
    return [w / total for w in weights]


def judge_choices(
    pairs: Sequence[tuple[str, Sequence[ChoiceScore], Sequence[ChoiceScore]]],
    thresholds: LogprobThresholds | None,
    key: str,
) -> LogprobComparison:
    """A loglikelihood task's items (id, ON's choice scores, OFF's; empty where an arm has none) compared and judged
    on the per-token change alone (the KL is reported, not judged: the module docstring)."""
    items = tuple(compare_choices(i, on, off) for i, on, off in pairs if on and off)
    return _judged(items, len(pairs) - len(items), thresholds, key, judge_kl=False)


def judge_logprobs(
    pairs: Sequence[tuple[str, TokenLogprobs | None, TokenLogprobs | None]],
    thresholds: LogprobThresholds | None,
    key: str,
) -> LogprobComparison:
    """One task's items (id, ON's logprobs, OFF's) compared and judged against ``thresholds`` (None: uncalibrated)."""
    items = tuple(compare_item(i, on, off) for i, on, off in pairs if on is not None and off is not None)
    return _judged(items, len(pairs) - len(items), thresholds, key, judge_kl=True)


def _judged(
    items: tuple[ItemLogprobDiff, ...],
    missing: int,
    thresholds: LogprobThresholds | None,
    key: str,
    *,
    judge_kl: bool,
) -> LogprobComparison:
    delta = quantiles([i.max_abs_delta for i in items])
    kl = quantiles([i.max_kl for i in items])
    parted = sum(i.parted_at is not None for i in items)
    verdict, reason = _verdict(items, missing, delta, kl, thresholds, key, judge_kl=judge_kl)
    return LogprobComparison(
        len(items),
        missing=missing,
        positions=sum(i.compared for i in items),
        parted=parted,
        delta=delta,
        kl=kl,
        verdict=verdict,
        reason=reason,
        key=key,
        items=items,
    )


def _verdict(
    items: Sequence[ItemLogprobDiff],
    missing: int,
    delta: Quantiles,
    kl: Quantiles,
    t: LogprobThresholds | None,
    key: str,
    *,
    judge_kl: bool = True,
) -> tuple[Verdict, str]:
    if not items:
        return Verdict.NONE, f"no item has logprobs on both sides ({missing} without)"
    if t is None:
        return Verdict.NONE, f"no thresholds calibrated for {key} (python -m bench.logprob_thresholds)"
    worst = f"worst item: max|dlp| {delta.max:.3g}, max KL {kl.max:.3g}" + ("" if judge_kl else " (not judged)")
    for level, limits in ((Verdict.RED, t.red), (Verdict.AMBER, t.amber)):
        over = [
            f"{name} {value:.3g} > {limit:.3g}"
            for name, value, limit in (
                ("max|dlp|", delta.max, limits.max_abs_delta),
                ("max KL", kl.max, limits.max_kl if judge_kl else math.inf),
            )
            if value > limit
        ]
        if over:
            return level, f"{level.value} for {key}: " + ", ".join(over) + f" ({len(items)} items)"
    gap = f"; {missing} item(s) without logprobs" if missing else ""
    return Verdict.GREEN, f"within {key}'s clean range ({t.seeds} seeds): {worst}{gap}"
