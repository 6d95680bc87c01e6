"""Tests for sealbench.stats: published vectors, exact checks, properties, scipy cross-checks."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from sealbench.stats import (
    Interval,
    _betainc,
    _betainc_pair,
    binomial_cdf,
    clopper_pearson_interval,
    holm_adjust,
    mcnemar_exact,
    median_interval,
    pass_at_k,
    wilson_interval,
)

TOL = 1e-9


# --------------------------------------------------------------------------- strategies


@st.composite
def counts(draw: st.DrawFn, max_n: int = 400) -> tuple[int, int]:
    """A valid (successes, n) pair with n >= 1."""
    n = draw(st.integers(min_value=1, max_value=max_n))
    x = draw(st.integers(min_value=0, max_value=n))
    return x, n


confidences = st.floats(min_value=0.01, max_value=0.9999, allow_nan=False)
pvalue_lists = st.lists(st.floats(min_value=0.0, max_value=1.0, allow_nan=False), max_size=25)


def exact_binomial_cdf(k: int, n: int, p: Fraction) -> Fraction:
    """P(X <= k) for X ~ Binomial(n, p), by direct exact summation."""
    return sum(
        (Fraction(math.comb(n, i)) * p**i * (1 - p) ** (n - i) for i in range(max(-1, min(k, n)) + 1)),
        Fraction(0),
    )


def textbook_wilson(x: int, n: int, z: float) -> tuple[float, float]:
    """Wilson (1927) bounds in the textbook centre +- half-width form."""
    p = x / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def holm_step_down_rejections(pvalues: list[float], alpha: float) -> set[int]:
    """Holm (1979) sequentially rejective procedure, run literally."""
    m = len(pvalues)
    rejected: set[int] = set()
    for rank, index in enumerate(sorted(range(m), key=pvalues.__getitem__)):
        if pvalues[index] <= alpha / (m - rank):
            rejected.add(index)
        else:
            break
    return rejected


# --------------------------------------------------------------------------- published vectors


def test_interval_is_a_named_tuple() -> None:
    interval = wilson_interval(2, 4)
    assert isinstance(interval, Interval)
    low, high = interval
    assert (low, high) == (interval.low, interval.high)


def test_wilson_two_of_four() -> None:
    low, high = wilson_interval(2, 4)
    assert low == pytest.approx(0.1500389892, abs=TOL)
    assert high == pytest.approx(0.8499610108, abs=TOL)


def test_wilson_zero_of_four() -> None:
    low, high = wilson_interval(0, 4)
    assert low == 0.0
    assert high == pytest.approx(0.4898908365, abs=TOL)


def test_wilson_all_of_four_mirrors_zero_of_four() -> None:
    low, high = wilson_interval(4, 4)
    assert high == 1.0
    assert low == pytest.approx(1 - 0.4898908365, abs=TOL)


def test_wilson_default_confidence_is_95() -> None:
    assert wilson_interval(3, 17) == wilson_interval(3, 17, 0.95)


def test_wilson_matches_textbook_formula_on_a_grid() -> None:
    for confidence, z in ((0.95, 1.959963984540054), (0.99, 2.5758293035489004), (0.9, 1.6448536269514722)):
        for n in range(1, 40):
            for x in range(n + 1):
                low, high = wilson_interval(x, n, confidence)
                ref_low, ref_high = textbook_wilson(x, n, z)
                assert low == pytest.approx(max(0.0, ref_low), abs=1e-12)
                assert high == pytest.approx(min(1.0, ref_high), abs=1e-12)


def test_clopper_pearson_two_of_four() -> None:
    low, high = clopper_pearson_interval(2, 4)
    assert low == pytest.approx(0.06758598649, abs=TOL)
    assert high == pytest.approx(0.9324140135, abs=TOL)


@pytest.mark.parametrize("n", [1, 2, 4, 10, 37, 100, 1000])
@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99])
def test_clopper_pearson_closed_forms_at_the_edges(n: int, confidence: float) -> None:
    # x = 0: upper bound solves (1 - p)^n = alpha/2; x = n: lower bound solves p^n = alpha/2.
    tail = (1 - confidence) / 2
    zero = clopper_pearson_interval(0, n, confidence)
    full = clopper_pearson_interval(n, n, confidence)
    assert zero.low == 0.0
    assert full.high == 1.0
    assert zero.high == pytest.approx(1 - tail ** (1 / n), rel=1e-12, abs=1e-15)
    assert full.low == pytest.approx(tail ** (1 / n), rel=1e-12, abs=1e-15)


def test_clopper_pearson_bounds_solve_the_defining_tail_equations() -> None:
    # P(X >= x | low) = alpha/2 and P(X <= x | high) = alpha/2 (Clopper & Pearson 1934).
    for confidence in (0.9, 0.95, 0.99):
        tail = (1 - confidence) / 2
        for n in (1, 5, 12, 50):
            for x in range(n + 1):
                low, high = clopper_pearson_interval(x, n, confidence)
                if x > 0:
                    assert 1 - binomial_cdf(x - 1, n, low) == pytest.approx(tail, rel=1e-9)
                if x < n:
                    assert binomial_cdf(x, n, high) == pytest.approx(tail, rel=1e-9)


def test_mcnemar_published_vectors() -> None:
    assert mcnemar_exact(7, 1) == 9 / 128
    assert mcnemar_exact(1, 7) == 9 / 128
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == 1.0


def test_mcnemar_is_not_mid_p() -> None:
    # Mid-p for (7, 1) would be 2 * (P(X < 1) + P(X = 1)/2) = 2 * (1 + 4) / 256 = 5/128.
    assert mcnemar_exact(7, 1) != 5 / 128
    assert mcnemar_exact(6, 0) == 2 / 64


def test_mcnemar_matches_exact_rational_sum() -> None:
    for b in range(0, 30):
        for c in range(0, 30):
            if b + c == 0:
                continue
            exact = min(Fraction(1), 2 * exact_binomial_cdf(min(b, c), b + c, Fraction(1, 2)))
            got = mcnemar_exact(b, c)
            # Smallest float >= the exact value: exact when representable, never understated.
            assert Fraction(got) >= exact
            assert Fraction(math.nextafter(got, 0.0)) < exact


def test_mcnemar_extreme_split_never_underflows_to_zero() -> None:
    assert mcnemar_exact(0, 3000) == 5e-324
    assert mcnemar_exact(0, 3000) > 0.0


def test_pass_at_k_published_vectors() -> None:
    assert pass_at_k(10, 3, 5) == 11 / 12
    for n in (1, 5, 10, 200):
        for k in (1, n // 2 or 1, n):
            assert pass_at_k(n, 0, k) == 0.0
            assert pass_at_k(n, n, k) == 1.0


def test_pass_at_k_is_exact_for_large_n() -> None:
    assert pass_at_k(10**6, 1, 1) == 1e-6
    assert pass_at_k(1000, 1, 500) == 0.5
    assert pass_at_k(10**5, 10**5 - 10, 11) == 1.0
    n, c, k = 5000, 37, 250
    assert pass_at_k(n, c, k) == float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def test_pass_at_k_equals_subset_enumeration() -> None:
    # Definition: probability that a uniformly random size-k subset holds a correct sample.
    for n in range(1, 9):
        for c in range(n + 1):
            correct = set(range(c))
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(range(n), k))
                hits = sum(1 for s in subsets if correct.intersection(s))
                assert pass_at_k(n, c, k) == float(Fraction(hits, len(subsets)))


def test_holm_textbook_example() -> None:
    adjusted = holm_adjust([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-12)


def test_holm_caps_at_one_and_handles_edges() -> None:
    assert holm_adjust([]) == []
    assert holm_adjust([0.3]) == [0.3]
    assert holm_adjust([0.5, 0.6, 0.9]) == [1.0, 1.0, 1.0]
    assert holm_adjust([0.02, 0.02]) == [0.04, 0.04]
    assert holm_adjust([0, 1]) == [0.0, 1.0]


def test_binomial_cdf_edges_and_exact_values() -> None:
    assert binomial_cdf(-1, 5, 0.3) == 0.0
    assert binomial_cdf(5, 5, 0.3) == 1.0
    assert binomial_cdf(7, 5, 0.3) == 1.0
    assert binomial_cdf(0, 5, 0.0) == 1.0
    assert binomial_cdf(4, 5, 1.0) == 0.0
    assert binomial_cdf(0, 0, 0.5) == 1.0
    assert binomial_cdf(1, 8, 0.5) == pytest.approx(9 / 256, rel=1e-13)
    assert binomial_cdf(3, 10, 0.3) == pytest.approx(
        float(exact_binomial_cdf(3, 10, Fraction(0.3))), rel=1e-13
    )


# --------------------------------------------------------------------------- invalid input


@pytest.mark.parametrize("func", [wilson_interval, clopper_pearson_interval])
@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((0, 0), "n"),
        ((1, 0), "n"),
        ((-1, 4), "successes"),
        ((5, 4), "successes"),
        ((1, -4), "n"),
        ((1.0, 4), "successes"),
        ((True, 4), "successes"),
        ((1, 4, 0.0), "confidence"),
        ((1, 4, 1.0), "confidence"),
        ((1, 4, 1.5), "confidence"),
        ((1, 4, -0.5), "confidence"),
        ((1, 4, float("nan")), "confidence"),
        ((1, 4, "0.95"), "confidence"),
    ],
)
def test_interval_invalid_input(func: Any, args: tuple[Any, ...], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        func(*args)


def test_empty_denominator_is_refused_not_zero() -> None:
    with pytest.raises(ValueError, match="empty denominator"):
        wilson_interval(0, 0)
    with pytest.raises(ValueError, match="empty denominator"):
        clopper_pearson_interval(0, 0)


@pytest.mark.parametrize(
    ("args", "name"), [((-1, 3), "b"), ((3, -1), "c"), ((2.0, 3), "b"), ((1, None), "c")]
)
def test_mcnemar_invalid_input(args: tuple[Any, ...], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        mcnemar_exact(*args)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((0, 0, 1), "n"),
        ((-1, 0, 1), "n"),
        ((5, 6, 1), "c"),
        ((5, -1, 1), "c"),
        ((5, 2, 0), "k"),
        ((5, 2, 6), "k"),
        ((5, 2, -1), "k"),
        ((5.0, 2, 1), "n"),
    ],
)
def test_pass_at_k_invalid_input(args: tuple[Any, ...], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        pass_at_k(*args)


@pytest.mark.parametrize(
    ("pvalues", "name"),
    [
        ([0.1, 1.5], r"pvalues\[1\]"),
        ([-0.1], r"pvalues\[0\]"),
        ([float("nan")], r"pvalues\[0\]"),
        (["x"], "pvalues"),
    ],
)
def test_holm_invalid_input(pvalues: list[Any], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        holm_adjust(pvalues)


@pytest.mark.parametrize(
    ("args", "name"),
    [((1.5, 4, 0.5), "k"), ((1, -4, 0.5), "n"), ((1, 4, 1.1), "p"), ((1, 4, float("nan")), "p")],
)
def test_binomial_cdf_invalid_input(args: tuple[Any, ...], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        binomial_cdf(*args)


# --------------------------------------------------------------------------- properties


@given(counts(), confidences)
def test_wilson_contains_point_estimate_and_stays_in_unit_interval(
    xn: tuple[int, int], confidence: float
) -> None:
    x, n = xn
    low, high = wilson_interval(x, n, confidence)
    assert 0.0 <= low <= x / n <= high <= 1.0


@given(counts(), confidences)
def test_wilson_mirror_symmetry(xn: tuple[int, int], confidence: float) -> None:
    x, n = xn
    low, high = wilson_interval(x, n, confidence)
    mirror_low, mirror_high = wilson_interval(n - x, n, confidence)
    assert mirror_low == pytest.approx(1 - high, abs=1e-15)
    assert mirror_high == pytest.approx(1 - low, abs=1e-15)


@given(counts(), confidences)
def test_clopper_pearson_contains_point_estimate_and_stays_in_unit_interval(
    xn: tuple[int, int], confidence: float
) -> None:
    x, n = xn
    low, high = clopper_pearson_interval(x, n, confidence)
    assert 0.0 <= low <= x / n <= high <= 1.0


@given(counts(), confidences)
def test_clopper_pearson_mirror_symmetry(xn: tuple[int, int], confidence: float) -> None:
    x, n = xn
    low, high = clopper_pearson_interval(x, n, confidence)
    mirror_low, mirror_high = clopper_pearson_interval(n - x, n, confidence)
    assert mirror_low == pytest.approx(1 - high, abs=1e-15)
    assert mirror_high == pytest.approx(1 - low, abs=1e-15)


@given(counts(max_n=200), st.floats(min_value=0.5, max_value=0.99), st.floats(min_value=0.5, max_value=0.99))
def test_intervals_widen_with_confidence(xn: tuple[int, int], c1: float, c2: float) -> None:
    x, n = xn
    lo_conf, hi_conf = sorted((c1, c2))
    for func in (wilson_interval, clopper_pearson_interval):
        narrow = func(x, n, lo_conf)
        wide = func(x, n, hi_conf)
        assert wide.low <= narrow.low + 1e-15
        assert wide.high >= narrow.high - 1e-15


def test_clopper_pearson_contains_wilson_for_small_n() -> None:
    # At 95% the exact interval contains the Wilson interval (and is strictly wider) for every
    # x when n <= 45; from n = 46 Wilson's bound at x = 0 (or n) is the wider one, so the
    # claim is deliberately checked only on this grid.
    for n in range(1, 46):
        for x in range(n + 1):
            wilson = wilson_interval(x, n)
            exact = clopper_pearson_interval(x, n)
            assert exact.low <= wilson.low
            assert wilson.high <= exact.high
            assert exact.high - exact.low > wilson.high - wilson.low
            assert exact.low <= x / n <= exact.high


@given(st.integers(min_value=0, max_value=300), st.integers(min_value=0, max_value=300))
def test_mcnemar_symmetric_and_in_unit_interval(b: int, c: int) -> None:
    p = mcnemar_exact(b, c)
    assert p == mcnemar_exact(c, b)
    assert 0.0 < p <= 1.0


@given(st.integers(min_value=0, max_value=200), st.integers(min_value=1, max_value=50))
def test_mcnemar_more_imbalance_is_more_significant(small: int, extra: int) -> None:
    assert mcnemar_exact(small, small + extra + 1) <= mcnemar_exact(small, small + extra)


@given(pvalue_lists)
def test_holm_bounds_and_monotone(pvalues: list[float]) -> None:
    adjusted = holm_adjust(pvalues)
    assert len(adjusted) == len(pvalues)
    for raw, adj in zip(pvalues, adjusted, strict=True):
        assert raw <= adj <= 1.0
    for i, j in itertools.product(range(len(pvalues)), repeat=2):
        if pvalues[i] <= pvalues[j]:
            assert adjusted[i] <= adjusted[j]


@given(pvalue_lists, st.sampled_from([0.01, 0.05, 0.1, 0.2]))
def test_holm_adjusted_values_reproduce_step_down_procedure(pvalues: list[float], alpha: float) -> None:
    m = len(pvalues)
    # Avoid float ties at a threshold, where "p <= alpha/j" and "j*p <= alpha" may round apart.
    assume(all(abs(p * j - alpha) > 1e-12 for p in pvalues for j in range(1, m + 1)))
    adjusted = holm_adjust(pvalues)
    assert {i for i, a in enumerate(adjusted) if a <= alpha} == holm_step_down_rejections(pvalues, alpha)


@given(pvalue_lists)
def test_holm_is_permutation_equivariant(pvalues: list[float]) -> None:
    reversed_adjusted = holm_adjust(list(reversed(pvalues)))
    assert list(reversed(reversed_adjusted)) == holm_adjust(pvalues)


@given(st.integers(min_value=1, max_value=60), st.data())
def test_pass_at_k_bounds_and_monotonicity(n: int, data: st.DataObject) -> None:
    c = data.draw(st.integers(min_value=0, max_value=n))
    k = data.draw(st.integers(min_value=1, max_value=n))
    value = pass_at_k(n, c, k)
    assert 0.0 <= value <= 1.0
    if c < n:
        assert pass_at_k(n, c + 1, k) >= value
    if k < n:
        assert pass_at_k(n, c, k + 1) >= value
    if k == 1:
        assert value == pytest.approx(c / n, rel=1e-15)


@given(st.integers(min_value=0, max_value=60), st.integers(min_value=-2, max_value=62), st.integers(0, 64))
def test_binomial_cdf_matches_exact_sum_for_dyadic_p(n: int, k: int, numerator: int) -> None:
    p = Fraction(numerator, 64)
    expected = float(exact_binomial_cdf(k, n, p))
    assert binomial_cdf(k, n, float(p)) == pytest.approx(expected, rel=1e-11, abs=1e-300)


# --------------------------------------------------------------------------- scipy cross-checks
# scipy is an independent reference only; the module under test never imports it.


@pytest.fixture(scope="module")
def scipy_stats() -> Any:
    """scipy.stats, imported once (its first import is too slow for a hypothesis deadline)."""
    return pytest.importorskip("scipy.stats")


@pytest.fixture(scope="module")
def scipy_special() -> Any:
    """scipy.special, imported once."""
    return pytest.importorskip("scipy.special")


@settings(max_examples=200, deadline=None)
@given(counts(max_n=500), st.sampled_from([0.01, 0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 1 - 1e-9]))
def test_clopper_pearson_matches_scipy_beta_quantiles(
    scipy_stats: Any, xn: tuple[int, int], confidence: float
) -> None:
    # Upper bound via isf(alpha/2): ppf(1 - alpha/2) would round the tail to 1e-16 absolute,
    # which at confidence 1 - 1e-12 costs scipy (not us) ~1e-6 relative accuracy.
    stats = scipy_stats
    x, n = xn
    alpha = 1 - confidence
    expected_low = 0.0 if x == 0 else float(stats.beta.ppf(alpha / 2, x, n - x + 1))
    expected_high = 1.0 if x == n else float(stats.beta.isf(alpha / 2, x + 1, n - x))
    low, high = clopper_pearson_interval(x, n, confidence)
    assert low == pytest.approx(expected_low, rel=1e-9, abs=1e-12)
    assert high == pytest.approx(expected_high, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(("x", "n"), [(1, 10**6), (500_000, 10**6), (3, 20_000), (19_990, 20_000)])
def test_clopper_pearson_large_n_matches_scipy(scipy_stats: Any, x: int, n: int) -> None:
    stats = scipy_stats
    low, high = clopper_pearson_interval(x, n)
    assert low == pytest.approx(float(stats.beta.ppf(0.025, x, n - x + 1)), rel=1e-9)
    assert high == pytest.approx(float(stats.beta.isf(0.025, x + 1, n - x)), rel=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    st.floats(min_value=0.05, max_value=400),
    st.floats(min_value=0.05, max_value=400),
    st.floats(min_value=0.0, max_value=1.0),
)
@example(0.5, 0.5, 1.0 - 2.0**-53)  # where scipy's betainc, not ours, lost 3e-9
def test_incomplete_beta_matches_scipy(scipy_special: Any, a: float, b: float, x: float) -> None:
    # Each side is checked against scipy's direct computation of the smaller tail, the one it
    # (like us) carries with full relative accuracy: near x = 1, betainc(0.5, 0.5, 1 - 2**-53)
    # is off by 3e-9 while betaincc, and (2/pi) asin(sqrt(1 - x)), agree with our 6.708e-9.
    special = scipy_special
    value, complement = _betainc_pair(a, b, x)
    assert _betainc(a, b, x) == value
    lower, upper = float(special.betainc(a, b, x)), float(special.betaincc(a, b, x))
    if lower <= upper:
        assert value == pytest.approx(lower, rel=1e-9, abs=1e-13)
        assert complement == pytest.approx(1.0 - lower, rel=1e-9, abs=1e-13)
    else:
        assert complement == pytest.approx(upper, rel=1e-9, abs=1e-13)
        assert value == pytest.approx(1.0 - upper, rel=1e-9, abs=1e-13)


def test_incomplete_beta_near_one_keeps_its_small_tail() -> None:
    # I_x(1/2, 1/2) = (2/pi) asin(sqrt(x)); its complement at x = 1 - 2**-53 is tiny and exact.
    import math

    x = 1.0 - 2.0**-53
    value, complement = _betainc_pair(0.5, 0.5, x)
    assert complement == pytest.approx(2 / math.pi * math.asin(math.sqrt(2.0**-53)), rel=1e-12)
    assert value == pytest.approx(1.0 - complement, rel=1e-15)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=400), st.integers(min_value=-1, max_value=401), st.floats(0.0, 1.0))
def test_binomial_cdf_matches_scipy(scipy_stats: Any, n: int, k: int, p: float) -> None:
    stats = scipy_stats
    expected = float(stats.binom.cdf(k, n, p))
    assert binomial_cdf(k, n, p) == pytest.approx(expected, rel=1e-9, abs=1e-13)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=400))
def test_mcnemar_matches_scipy_binomtest(scipy_stats: Any, b: int, c: int) -> None:
    stats = scipy_stats
    assume(b + c > 0)
    expected = float(stats.binomtest(min(b, c), b + c, 0.5, alternative="two-sided").pvalue)
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12, abs=1e-300)


@settings(max_examples=100, deadline=None)
@given(counts(max_n=500), st.floats(min_value=0.5, max_value=0.999))
def test_wilson_z_matches_scipy_norm_ppf(scipy_stats: Any, xn: tuple[int, int], confidence: float) -> None:
    stats = scipy_stats
    x, n = xn
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    ref_low, ref_high = textbook_wilson(x, n, z)
    low, high = wilson_interval(x, n, confidence)
    assert low == pytest.approx(max(0.0, ref_low), abs=1e-12)
    assert high == pytest.approx(min(1.0, ref_high), abs=1e-12)


# --------------------------------------------------------------------------- median interval


@pytest.mark.parametrize(("n", "confidence", "ranks"), [
    # Conover (1999) section 3.2 and the usual sign-test tables: 1-based ranks of the bounds.
    (6, 0.95, (1, 6)), (9, 0.95, (2, 8)), (11, 0.95, (2, 10)), (15, 0.95, (4, 12)),
    (20, 0.95, (6, 15)), (21, 0.95, (6, 16)), (100, 0.95, (40, 61)),
    (10, 0.99, (1, 10)), (20, 0.99, (4, 17)), (10, 0.9, (2, 9)),
])
def test_median_interval_published_ranks(n: int, confidence: float, ranks: tuple[int, int]) -> None:
    values = [10.0 * i for i in range(1, n + 1)]
    assert median_interval(values, confidence) == (10.0 * ranks[0], 10.0 * ranks[1])


def test_median_interval_needs_enough_draws() -> None:
    # [min, max] of five draws covers the median only 1 - 2 / 32 = 93.75% of the time.
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None
    assert median_interval([1.0]) is None
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0], 0.9) == (1.0, 5.0)
    assert median_interval([5.0, 1.0, 4.0, 2.0, 6.0, 3.0]) == (1.0, 6.0)


def test_median_interval_reads_values_in_any_order_with_ties() -> None:
    runs = [1.21, 0.94, 1.06, 1.33, 0.73, 1.06, 1.10, 0.98, 1.06, 1.02, 1.15]
    assert median_interval(runs) == (0.94, 1.21)
    assert median_interval(list(reversed(runs))) == (0.94, 1.21)
    assert median_interval([2.0] * 11) == (2.0, 2.0)


@pytest.mark.parametrize(("values", "confidence", "name"), [
    ([], 0.95, "values"), ([1.0, float("nan"), 2.0, 3.0, 4.0, 5.0], 0.95, "values"),
    ([1.0] * 10, 1.0, "confidence"), ([1.0] * 10, 0.0, "confidence"), ([1.0] * 10, float("nan"), "confidence"),
])
def test_median_interval_invalid_input(values: list[float], confidence: float, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        median_interval(values, confidence)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=300), st.sampled_from([0.5, 0.8, 0.9, 0.95, 0.99, 0.999]))
def test_median_interval_ranks_match_scipy_binomial(scipy_stats: Any, n: int, confidence: float) -> None:
    # The widest rank k whose two tails stay within 1 - confidence, and no wider.
    alpha = 1 - confidence
    k = 0
    while k < n // 2 and 2 * float(scipy_stats.binom.cdf(k, n, 0.5)) <= alpha:
        k += 1
    got = median_interval([float(i) for i in range(1, n + 1)], confidence)
    if k == 0:
        assert got is None
        return
    assert got == (float(k), float(n + 1 - k))
    assert 1 - 2 * float(scipy_stats.binom.cdf(k - 1, n, 0.5)) >= confidence - 1e-12

