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

Minimum detectable effect — the smallest true accuracy drop ``delta`` (ON - OFF = -delta) that
the exact McNemar test above, two-sided at level ``alpha``, detects as a drop (``p < alpha`` with
``c > b``, i.e. RED) with probability at least ``power``. It is computed from the exact test's
power, not a normal approximation (which at low discordance claims far more power than the test
has: at 0 discordant pairs its 1.1 pp at n = 500 has about 46 % power). Model of the alternative:
each item is independently an ON-better pair with probability ``psi0 / 2``, an ON-worse pair with
``psi0 / 2 + delta``, concordant otherwise, where ``psi0 = (b + c) / n`` is the observed discordance
rate: the observed discordance as symmetric background noise, plus a one-directional drop. The
number of discordant pairs ``m`` is random, ``m ~ Binomial(n, psi0 + delta)``, and given ``m`` the
ON-better count is ``b ~ Binomial(m, (psi0 / 2) / (psi0 + delta))``, so the power is::

    power(delta) = sum_m P(m) * P(b <= r_m | m)

where ``r_m`` is the largest ``b`` with ``mcnemar_exact(b, m - b) < alpha`` (-1 when no split of
``m`` pairs rejects: at ``alpha = 0.05`` a test needs ``m >= 6``). Both sums are enumerated
(dropping values of ``m`` with probability under 1e-18), with ``r_m`` in integer arithmetic
mirroring :func:`mcnemar_exact`, so the power is that of the test the verdict applies. ``r_m`` never decreases with ``m``, so the power never decreases with
``delta`` and the MDE is found by bisection on ``delta`` (to 1e-7). With no discordant pair
observed, ``power(delta) = P(Binomial(n, delta) >= 6)``: 80 % needs ``delta ~ 7.9 / n`` (1.6 pp
at n = 500, 3.9 pp at n = 200, 7.8 pp at n = 100) — about 8 expected flips, not the 6 that
suffice when they do happen. A rise is symmetric (swap b and c), so this is also the MDE for
``|ON - OFF|``. Returns 1.0 when even ``delta = 1 - psi0`` (every concordant item turns into a
drop) falls short of ``power``.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist
from typing import Sequence

import numpy as np

from harness.evals.results import Estimate

DEFAULT_RESAMPLES = 10_000
_STANDARD_NORMAL = NormalDist()
_MAX_DRAWS_PER_CHUNK = 2_000_000  # bootstrap index draws held in memory at once
_MDE_TOLERANCE = 1e-7  # the MDE bisection stops when its bracket is this narrow (a fraction of items)
_NEGLIGIBLE_MASS = 1e-18  # power terms for discordant counts less likely than this are dropped


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


@functools.lru_cache(maxsize=64)
def _rejection_bounds(n: int, alpha: float) -> np.ndarray:
    """``r[m]`` for ``m = 0..n``: the largest ``b`` with ``mcnemar_exact(b, m - b) < alpha``, -1 if none.

    Exact integer arithmetic, one step per ``m``: with ``T(r, m) = sum_{i <= r} C(m, i)``,
    ``T(r, m) = 2 T(r, m - 1) - C(m - 1, r)`` and ``C(m, r) = C(m - 1, r) * m / (m - r)``. The
    p-value compared is the float :func:`mcnemar_exact` returns, so ties round the same way.
    ``r[m]`` never decreases (and ``r[m] < m / 2``, where the p-value is 1).
    """
    bounds = np.empty(n + 1, dtype=np.int64)
    r, tail, coef = -1, 0, 0  # T(r, m) and C(m, r); both 0 while r = -1
    for m in range(n + 1):
        if m and r >= 0:
            tail = 2 * tail - coef
            coef = coef * m // (m - r)
        denominator = 1 << m
        while True:
            next_coef = 1 if r < 0 else coef * (m - r) // (r + 1)  # C(m, r + 1)
            if min(1.0, 2 * (tail + next_coef) / denominator) >= alpha:
                break
            r, tail, coef = r + 1, tail + next_coef, next_coef
        bounds[m] = r
    bounds.flags.writeable = False
    return bounds


@functools.lru_cache(maxsize=64)
def _log_factorials(n: int) -> np.ndarray:
    table = np.array([math.lgamma(k + 1.0) for k in range(n + 1)])
    table.flags.writeable = False
    return table


def _binomial_pmf(trials: np.ndarray, k: np.ndarray, p: float, log_fact: np.ndarray) -> np.ndarray:
    """``P(Binomial(trials, p) = k)`` elementwise (broadcast), 0 where ``k`` is outside ``0..trials``."""
    valid = (k >= 0) & (k <= trials)
    k, rest = np.where(valid, k, 0), np.where(valid, trials - k, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_p = np.where(k > 0, k * math.log(p) if p > 0 else -np.inf, 0.0)
        log_q = np.where(rest > 0, rest * math.log1p(-p) if p < 1 else -np.inf, 0.0)
    log_pmf = np.where(valid, log_fact[trials] - log_fact[k] - log_fact[rest] + log_p + log_q, -np.inf)
    return np.exp(log_pmf)


def _check_mde_args(n: int, discordant: int, alpha: float, power: float | None = None) -> None:
    if n <= 0:
        raise ValueError("an MDE needs at least one item")
    if not 0 <= discordant <= n:
        raise ValueError(f"discordant={discordant} is not within 0..{n}")
    if not 0.0 < alpha < 1.0 or (power is not None and not 0.0 < power < 1.0):
        raise ValueError(f"alpha and power must be in (0, 1), got alpha={alpha}, power={power}")


def mcnemar_power(n: int, discordant: int, drop: float, *, alpha: float = 0.05) -> float:
    """Exact probability that McNemar's test at two-sided ``alpha`` finds ON significantly worse.

    The alternative is the module docstring's MDE model: ``n`` paired items, background
    discordance ``discordant / n`` split evenly between the two directions, plus a true drop
    ``drop`` (a fraction of items, ``0 <= drop <= 1 - discordant / n``) that only goes ON-worse.
    """
    _check_mde_args(n, discordant, alpha)
    psi0 = discordant / n
    if not 0.0 <= drop <= 1.0 - psi0 + 1e-12:
        raise ValueError(f"drop={drop} is not within 0..{1.0 - psi0} (1 - the background discordance)")
    p_better = psi0 / 2.0
    p_discordant = min(1.0, psi0 + drop)
    if p_discordant <= 0.0:
        return 0.0
    log_fact = _log_factorials(n)
    bounds = _rejection_bounds(n, alpha)
    m = np.arange(n + 1)
    p_m = _binomial_pmf(np.full(n + 1, n), m, p_discordant, log_fact)
    keep = (p_m > _NEGLIGIBLE_MASS) & (bounds >= 0)
    if not keep.any():
        return 0.0
    m, p_m, r = m[keep], p_m[keep], bounds[keep]
    b = np.arange(int(r.max()) + 1)
    # P(b <= r_m | m): ON-better pairs among the m discordant ones, Binomial(m, p_better / p_discordant)
    p_b = _binomial_pmf(m[:, None], b[None, :], min(1.0, p_better / p_discordant), log_fact)
    rejects = np.where(b[None, :] <= r[:, None], p_b, 0.0).sum(axis=1)
    return float(min(1.0, np.dot(p_m, rejects)))


def minimum_detectable_effect(n: int, discordant: int, *, alpha: float = 0.05, power: float = 0.80) -> float:
    """Smallest true accuracy drop (OFF - ON) the exact McNemar test at two-sided ``alpha`` detects with ``power``.

    ``n`` paired items, ``discordant`` = ``b + c`` observed; the power is the exact power of
    :func:`mcnemar_power` (model and method in the module docstring), bracketed from a small
    guess upwards (small drops are cheap to evaluate) and bisected to 1e-7. 1.0 when no drop the
    model allows reaches ``power``. A few ms for n = 500.
    """
    _check_mde_args(n, discordant, alpha, power)
    largest = 1.0 - discordant / n  # every concordant item turned into an ON-worse pair
    if largest <= 0.0:
        return 1.0
    low, high = 0.0, min(largest, max(8.0 / n, 3.0 * math.sqrt(discordant) / n))
    while mcnemar_power(n, discordant, high, alpha=alpha) < power:
        if high >= largest:
            return 1.0
        low, high = high, min(largest, 2.0 * high)
    if low == 0.0 and mcnemar_power(n, discordant, 0.0, alpha=alpha) >= power:
        return 0.0
    while high - low > _MDE_TOLERANCE:  # invariant: power(low) < power <= power(high)
        mid = (low + high) / 2.0
        if mcnemar_power(n, discordant, mid, alpha=alpha) >= power:
            high = mid
        else:
            low = mid
    return high
