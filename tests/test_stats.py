"""Paired statistics of harness.evals.stats against known values and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.evals import stats

# ------------------------------------------------------------------ Wilson


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [  # Newcombe (1998), Stat. Med. 17:857, Table I, method 3 (Wilson score, no continuity correction)
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0000, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_matches_textbook_values(k: int, n: int, low: float, high: float) -> None:
    est = stats.wilson_interval(k, n)
    assert est.value == pytest.approx(k / n)
    assert est.low == pytest.approx(low, abs=5e-5)
    assert est.high == pytest.approx(high, abs=5e-5)


def test_wilson_matches_scipy() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    for n in (1, 7, 30, 200, 500):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            ref = scipy_stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
            est = stats.wilson_interval(k, n)
            assert (est.low, est.high) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_wilson_edges_and_errors() -> None:
    assert stats.wilson_interval(0, 10).low == 0.0
    assert stats.wilson_interval(10, 10).high == 1.0
    assert stats.wilson_interval(5, 10, 0.99).high > stats.wilson_interval(5, 10, 0.95).high
    for bad in ((0, 0), (-1, 10), (11, 10)):
        with pytest.raises(ValueError):
            stats.wilson_interval(*bad)
    with pytest.raises(ValueError):
        stats.wilson_interval(1, 2, confidence=1.0)


def test_accuracy_of_flags() -> None:
    est = stats.accuracy([True, False, True, True])
    assert est.value == 0.75 and est.contains(0.75)
    with pytest.raises(ValueError):
        stats.accuracy([0.5, 1.0])


@given(n=st.integers(1, 2000), data=st.data())
def test_wilson_interval_contains_estimate_within_unit_interval(n: int, data) -> None:
    k = data.draw(st.integers(0, n))
    est = stats.wilson_interval(k, n)
    assert 0.0 <= est.low <= est.value <= est.high <= 1.0


# ------------------------------------------------------------------ McNemar


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [(0, 0, 1.0), (3, 0, 0.25), (6, 0, 0.03125), (5, 12, 0.143463134765625), (10, 10, 1.0), (0, 5, 0.0625)],
)
def test_mcnemar_known_values(b: int, c: int, p: float) -> None:
    assert stats.mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)


def test_mcnemar_matches_scipy_binomtest() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    for b in range(0, 26):
        for c in range(0, 26):
            if b + c:
                ref = scipy_stats.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue
                assert stats.mcnemar_exact(b, c) == pytest.approx(ref, rel=1e-9, abs=1e-15)
    assert stats.mcnemar_exact(300, 200) == pytest.approx(scipy_stats.binomtest(300, 500).pvalue, rel=1e-9)


def test_mcnemar_rejects_bad_counts() -> None:
    for bad in ((-1, 2), (1.5, 2)):
        with pytest.raises(ValueError):
            stats.mcnemar_exact(*bad)


@given(b=st.integers(0, 400), c=st.integers(0, 400))
def test_mcnemar_is_a_symmetric_probability(b: int, c: int) -> None:
    p = stats.mcnemar_exact(b, c)
    assert 0.0 <= p <= 1.0
    assert p == stats.mcnemar_exact(c, b)
    if b == c:
        assert p == 1.0


# ------------------------------------------------------------------ paired bootstrap


def _synthetic_pairs(rng: np.random.Generator, n: int, p_b: float, p_c: float) -> tuple[np.ndarray, np.ndarray]:
    """Paired flags whose true difference is ``p_b - p_c`` (b = ON-only right, c = OFF-only right)."""
    u = rng.random(n)
    base = rng.random(n) < 0.6
    on, off = base.copy(), base.copy()
    only_on = u < p_b
    only_off = (u >= p_b) & (u < p_b + p_c)
    on[only_on], off[only_on] = True, False
    on[only_off], off[only_off] = False, True
    return on, off


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    on, off = _synthetic_pairs(np.random.default_rng(3), 300, 0.05, 0.08)
    first = stats.paired_bootstrap_diff(on, off, seed=7)
    assert first == stats.paired_bootstrap_diff(on, off, seed=7)
    assert first.value == pytest.approx(on.mean() - off.mean())
    assert first != stats.paired_bootstrap_diff(on, off, seed=8)


def test_bootstrap_ci_contains_the_true_difference() -> None:
    """Coverage over independent synthetic data sets is close to the nominal 95 %."""
    true_diff = 0.04 - 0.08
    rng = np.random.default_rng(11)
    trials, covered = 60, 0
    for trial in range(trials):
        on, off = _synthetic_pairs(rng, 400, 0.04, 0.08)
        est = stats.paired_bootstrap_diff(on, off, resamples=2000, seed=trial)
        covered += est.contains(true_diff)
    assert 0.85 <= covered / trials <= 1.0


def test_bootstrap_width_matches_the_normal_approximation() -> None:
    on, off = _synthetic_pairs(np.random.default_rng(5), 500, 0.06, 0.10)
    est = stats.paired_bootstrap_diff(on, off, seed=0)
    d = on.astype(int) - off.astype(int)
    half = 1.959964 * d.std() / math.sqrt(d.size)
    assert (est.high - est.low) / 2 == pytest.approx(half, rel=0.1)


def test_bootstrap_without_discordant_pairs_is_zero() -> None:
    flags = [True, False, True] * 20
    assert stats.paired_bootstrap_diff(flags, flags) == stats.Estimate(0.0, 0.0, 0.0)


def test_bootstrap_input_errors() -> None:
    with pytest.raises(ValueError, match="same items"):
        stats.paired_bootstrap_diff([True], [True, False])
    with pytest.raises(ValueError):
        stats.paired_bootstrap_diff([], [])


@given(pairs=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=120), seed=st.integers(0, 2**32))
def test_bootstrap_ci_contains_estimate_and_is_antisymmetric(pairs, seed: int) -> None:
    on = [a for a, _ in pairs]
    off = [b for _, b in pairs]
    est = stats.paired_bootstrap_diff(on, off, resamples=500, seed=seed)
    assert -1.0 <= est.low <= est.value <= est.high <= 1.0
    swapped = stats.paired_bootstrap_diff(off, on, resamples=500, seed=seed)
    assert swapped.value == pytest.approx(-est.value)
    assert (swapped.low, swapped.high) == pytest.approx((-est.high, -est.low), abs=1e-9)


# ------------------------------------------------------------------ MDE


def _power_without_discordance(n: int, drop: float) -> float:
    """Closed form at 0 observed discordant pairs: only ON-worse flips, and 6 of them reject at 5 %."""
    return 1.0 - sum(math.comb(n, k) * drop**k * (1.0 - drop) ** (n - k) for k in range(6))


def test_mde_matches_the_exact_test_at_zero_discordance() -> None:
    # Issue 13: 80 % power needs about 1.6 pp at N = 500 and 3.9 pp at N = 200.
    assert stats.minimum_detectable_effect(500, 0) == pytest.approx(0.016, abs=5e-4)
    assert stats.minimum_detectable_effect(200, 0) == pytest.approx(0.039, abs=5e-4)
    for n in (100, 200, 500):
        mde = stats.minimum_detectable_effect(n, 0)
        assert _power_without_discordance(n, mde) == pytest.approx(0.8, abs=1e-5)
        assert _power_without_discordance(n, mde - 1e-4) < 0.8
        assert stats.mcnemar_power(n, 0, mde) == pytest.approx(_power_without_discordance(n, mde), abs=1e-12)
    # The normal approximation's old MDEs (1.1 pp, 2.7 pp) have only about 46 % power.
    for n, old_mde in ((500, 0.011), (200, 0.027)):
        assert stats.mcnemar_power(n, 0, old_mde) == pytest.approx(0.46, abs=0.02)


def test_rejection_bounds_are_the_exact_test() -> None:
    for alpha in (0.05, 0.01, 0.1, 0.0625, 0.125):  # 0.0625 = 2 / 2^5 and 0.125 are exact ties
        bounds = stats._rejection_bounds(90, alpha)
        for m in range(91):
            rejecting = [b for b in range(m + 1) if m - b > b and stats.mcnemar_exact(b, m - b) < alpha]
            assert bounds[m] == (max(rejecting) if rejecting else -1), (alpha, m)
            assert rejecting == list(range(bounds[m] + 1))  # the region is b = 0..r_m
    bounds = stats._rejection_bounds(2000, 0.05)
    assert bounds[5] == -1 and bounds[6] == 0 and (np.diff(bounds) >= 0).all()


@pytest.mark.parametrize(("n", "discordant"), [(500, 0), (200, 0), (500, 3), (200, 5), (400, 80)])
def test_mcnemar_power_matches_simulation(n: int, discordant: int) -> None:
    """Exact power vs 20,000 simulated paired experiments, at the MDE and at half of it.

    Each experiment draws (b, c, concordant) ~ Multinomial(n, [psi0/2, psi0/2 + drop, rest]) and
    applies ``mcnemar_exact`` itself (p < 0.05 with c > b). Tolerance 0.015 absolute: the
    Monte-Carlo standard error is at most sqrt(0.25 / 20000) = 0.0035, so this is over 4 SE.
    """
    rng = np.random.default_rng(20240613 + n + discordant)
    mde = stats.minimum_detectable_effect(n, discordant)
    psi0 = discordant / n
    for drop in (mde, mde / 2):
        counts = rng.multinomial(n, [psi0 / 2, psi0 / 2 + drop, 1 - psi0 - drop], size=20_000)[:, :2]
        pairs, times = np.unique(counts, axis=0, return_counts=True)
        detected = sum(
            int(k) for (b, c), k in zip(pairs, times) if c > b and stats.mcnemar_exact(int(b), int(c)) < 0.05
        )
        simulated = detected / 20_000
        assert stats.mcnemar_power(n, discordant, drop) == pytest.approx(simulated, abs=0.015), (drop, simulated)
    assert stats.mcnemar_power(n, discordant, mde) == pytest.approx(0.8, abs=1e-5)


def test_mcnemar_power_grows_with_the_drop() -> None:
    for n, discordant in ((200, 0), (200, 7), (500, 40)):
        powers = [stats.mcnemar_power(n, discordant, d) for d in np.linspace(0, 0.2, 41)]
        assert all(a <= b + 1e-12 for a, b in zip(powers, powers[1:]))
        assert powers[0] <= 0.025  # no drop: at most the test's one-sided size
    assert stats.mcnemar_power(200, 0, 0.0) == 0.0
    with pytest.raises(ValueError):
        stats.mcnemar_power(200, 20, 0.95)  # more than 1 - background discordance


def test_mde_is_monotone_in_n() -> None:
    ns = [20, 50, 100, 200, 500, 1000, 5000]
    clean = [stats.minimum_detectable_effect(n, 0) for n in ns]
    noisy = [stats.minimum_detectable_effect(n, n // 10) for n in ns]
    assert all(a > b > 0 for a, b in zip(clean, clean[1:]))
    assert all(a > b > 0 for a, b in zip(noisy, noisy[1:]))
    assert all(c < d for c, d in zip(clean, noisy))  # more discordance, less power


def test_mde_grows_with_stricter_alpha_and_power() -> None:
    base = stats.minimum_detectable_effect(200, 20)
    assert stats.minimum_detectable_effect(200, 20, alpha=0.01) > base
    assert stats.minimum_detectable_effect(200, 20, power=0.9) > base
    assert stats.minimum_detectable_effect(3, 3) == 1.0  # capped
    with pytest.raises(ValueError):
        stats.minimum_detectable_effect(0, 0)
    with pytest.raises(ValueError):
        stats.minimum_detectable_effect(10, 11)
