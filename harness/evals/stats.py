r"""Paired statistics for graphs-ON vs graphs-OFF accuracy runs: pure, seeded, stdlib + numpy only.

Both runs score the *same* items, so the comparison is paired: what matters is how many items
changed correctness, not the two accuracies on their own. Notation: ``n`` paired items,
``b`` = items ON got right and OFF wrong, ``c`` = ON wrong and OFF right (the discordant pairs),
``d_i = on_i - off_i`` in {-1, 0, 1}, and ``z_q`` the standard normal quantile.

Accuracy CI — Wilson score interval (Wilson 1927), for ``k`` correct of ``n``, ``p = k / n``,
``z = z_{1 - alpha/2}``::

    centre = (p + z^2 / (2n)) / (1 + z^2 / n)
    half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / (4 n^2))
    CI     = [centre - half, centre + half]

It stays inside [0, 1] and is sensible at 0 % and 100 %, where the Wald interval collapses.

Paired difference — ``mean(d_i)`` = accuracy ON - accuracy OFF = ``(b - c) / n``, with a
percentile paired-bootstrap CI: draw ``n`` item indices with replacement (both runs keep the
same items, which is what makes it paired), take the mean of ``d`` over them, repeat
``resamples`` times, report the ``alpha/2`` and ``1 - alpha/2`` quantiles. Deterministic for a
given seed (``numpy.random.default_rng(seed)``). With no discordant pairs every resample is 0
and the CI is [0, 0]: the data show no difference, and the MDE says how small a difference that
rules out.

McNemar's exact test — under H0 (graphs do not change correctness) each discordant pair is
equally likely to go either way, so ``b ~ Binomial(b + c, 1/2)`` and the two-sided p-value is
``min(1, 2 * sum_{i <= min(b, c)} C(b + c, i) / 2^(b + c))``; ``p = 1`` when ``b + c = 0``.
This equals ``scipy.stats.binomtest(b, b + c, 0.5).pvalue``.

Minimum detectable effect — the smallest true |accuracy ON - accuracy OFF| that the two-sided
McNemar test at level ``alpha`` detects with probability ``power``, by the normal approximation
for paired proportions (Connor 1987, dropping the ``delta^2`` term, which makes it slightly
conservative)::

    MDE = (z_{1 - alpha/2} + z_{power}) * sqrt(psi / n)

``psi`` is the discordance rate (fraction of items whose correctness differs) assumed under the
alternative. Assumption: it is the upper end of the Wilson interval of the observed rate
``(b + c) / n``, not the rate itself, because a run with no discordant pairs would otherwise
claim it could detect any difference at all (MDE = 0). With none observed, ``psi ~ z^2 / n`` and
``MDE ~ 2.80 * 1.96 / n ~ 5.5 / n``, which matches the exact test: it needs at least 6 one-way
flips (``p = 2 / 2^6 = 0.031``) to reject, i.e. a difference of ``6 / n``. Capped at 1.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

import numpy as np

from harness.evals.results import Estimate

DEFAULT_RESAMPLES = 10_000
_STANDARD_NORMAL = NormalDist()
_MAX_DRAWS_PER_CHUNK = 2_000_000  # bootstrap index draws held in memory at once


def z_quantile(q: float) -> float:
    """Standard normal quantile ``z_q`` (e.g. ``z_quantile(0.975) = 1.95996...``)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    return _STANDARD_NORMAL.inv_cdf(q)


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def wilson_interval(correct: int, n: int, confidence: float = 0.95) -> Estimate:
    """Accuracy ``correct / n`` with its Wilson score interval (formula in the module docstring)."""
    _check_confidence(confidence)
    if n <= 0:
        raise ValueError("an accuracy needs at least one item")
    if not 0 <= correct <= n:
        raise ValueError(f"correct={correct} is not within 0..{n}")
    p = correct / n
    z = z_quantile(1.0 - (1.0 - confidence) / 2.0)
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    # Exact at the ends (k = 0 gives low = 0, k = n gives high = 1); clamp only float dust.
    low = 0.0 if correct == 0 else max(0.0, centre - half)
    high = 1.0 if correct == n else min(1.0, centre + half)
    return Estimate(p, low, high)


def accuracy(correct: Sequence[bool], confidence: float = 0.95) -> Estimate:
    """Accuracy of per-item correctness flags, with a Wilson CI."""
    flags = _as_flags(correct, "correct")
    return wilson_interval(int(flags.sum()), int(flags.size), confidence)


def _as_flags(values: Sequence[bool], name: str) -> np.ndarray:
    flags = np.asarray(values)
    if flags.ndim != 1:
        raise ValueError(f"{name} must be one flag per item")
    if flags.size and not np.isin(flags, (0, 1)).all():
        raise ValueError(f"{name} must hold booleans (or 0/1)")
    return flags.astype(np.int64)


def _paired(on: Sequence[bool], off: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    on_flags, off_flags = _as_flags(on, "on"), _as_flags(off, "off")
    if on_flags.size != off_flags.size:
        raise ValueError(f"paired runs need the same items: {on_flags.size} ON vs {off_flags.size} OFF")
    if on_flags.size == 0:
        raise ValueError("a paired comparison needs at least one item")
    return on_flags, off_flags


def discordant_counts(on: Sequence[bool], off: Sequence[bool]) -> tuple[int, int]:
    """``(b, c)``: items right only with ON, and items right only with OFF."""
    on_flags, off_flags = _paired(on, off)
    b = int(((on_flags == 1) & (off_flags == 0)).sum())
    c = int(((on_flags == 0) & (off_flags == 1)).sum())
    return b, c


def paired_bootstrap_diff(
    on: Sequence[bool],
    off: Sequence[bool],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> Estimate:
    """Accuracy ON - OFF over paired items, with a percentile paired-bootstrap CI (seeded)."""
    _check_confidence(confidence)
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    on_flags, off_flags = _paired(on, off)
    d = on_flags - off_flags  # integers in {-1, 0, 1}: sums are exact, so the CI and point agree
    n = int(d.size)
    rng = np.random.default_rng(seed)
    chunk = max(1, _MAX_DRAWS_PER_CHUNK // n)
    sums = np.empty(resamples, dtype=np.int64)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        sums[start:stop] = d[idx].sum(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(sums / n, [tail, 1.0 - tail])
    return Estimate(int(d.sum()) / n, float(low), float(high))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts (1.0 when there are none)."""
    if b < 0 or c < 0 or int(b) != b or int(c) != c:
        raise ValueError(f"discordant counts must be non-negative integers, got b={b}, c={c}")
    b, c = int(b), int(c)
    m = b + c
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**m)  # exact integer ratio, rounded once to float


def minimum_detectable_effect(n: int, discordant: int, *, alpha: float = 0.05, power: float = 0.80) -> float:
    """Smallest |ON - OFF| detectable with ``power`` at two-sided ``alpha`` for ``n`` paired items.

    ``discordant`` = ``b + c`` observed; the planning discordance rate is the upper end of its
    Wilson ``1 - alpha`` interval (see the module docstring for the formula and why).
    """
    if n <= 0:
        raise ValueError("an MDE needs at least one item")
    if not 0 <= discordant <= n:
        raise ValueError(f"discordant={discordant} is not within 0..{n}")
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must be in (0, 1), got alpha={alpha}, power={power}")
    psi = wilson_interval(discordant, n, 1.0 - alpha).high
    mde = (z_quantile(1.0 - alpha / 2.0) + z_quantile(power)) * math.sqrt(psi / n)
    return min(1.0, mde)
