"""Small-sample statistics for honest agent scorecards.

Every function here is pure: no I/O, no clock, no randomness, standard library only.
Rates over an empty denominator are refused (``ValueError``), never reported as 0/0.

Public API
----------
``Interval``
    ``NamedTuple(low, high)``, a closed interval inside [0, 1].
``wilson_interval(successes, n, confidence=0.95)``
    Wilson score interval for a binomial proportion (Wilson 1927).
``clopper_pearson_interval(successes, n, confidence=0.95)``
    Exact (conservative) interval for a binomial proportion (Clopper & Pearson 1934).
``binomial_cdf(k, n, p)``
    ``P(X <= k)`` for ``X ~ Binomial(n, p)``, via the regularized incomplete beta function.
``mcnemar_exact(b, c)``
    Exact conditional two-sided McNemar test on the discordant counts (McNemar 1947).
``holm_adjust(pvalues)``
    Holm-Bonferroni step-down adjusted p-values (Holm 1979; Wright 1992).
``mcnemar_power(n, discordant, difference, alpha)``
    Power of the exact McNemar test on ``n`` paired tasks, unconditionally, by summing the
    exact conditional test over the binomial number of discordant tasks.
``min_detectable_difference(n, discordant, alpha, power=0.8)``
    The smallest difference in pass rates that test finds with that power on ``n`` tasks.
``tasks_needed(discordant, difference, alpha, power=0.8)``
    About how many paired tasks a difference needs to be found with that power.
``pass_at_k(n, c, k)``
    Unbiased pass@k estimator (Chen et al. 2021).
``median_interval(values, confidence=0.95)``
    Distribution-free interval for a median from independent draws (the sign test's order
    statistics); None when there are too few draws for one.

Invalid arguments raise ``ValueError`` whose message names the offending argument; callers
that need sealbench's exception hierarchy translate it where it enters (see ``errors.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from statistics import NormalDist
from typing import NamedTuple

__all__ = [
    "Interval",
    "binomial_cdf",
    "clopper_pearson_interval",
    "holm_adjust",
    "mcnemar_exact",
    "mcnemar_power",
    "median_interval",
    "min_detectable_difference",
    "pass_at_k",
    "tasks_needed",
    "wilson_interval",
]

# Continued-fraction constants (Numerical Recipes 3rd ed., section 6.4 / 5.2).
_FPMIN = 1e-300
_CF_EPS = 1e-15
# Bisection stops when the bracket can no longer be halved in double precision, far tighter
# than 1e-12; this cap is only a guard (worst case, a subnormal root, needs ~1075 halvings).
_BISECT_MAX_ITER = 2000


class Interval(NamedTuple):
    """A closed interval ``[low, high]`` with ``0 <= low <= high <= 1``."""

    low: float
    high: float


# --------------------------------------------------------------------------- validation


def _check_count(name: str, value: object) -> int:
    """Return ``value`` as a non-negative ``int`` or raise ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def _check_successes_n(successes: object, n: object) -> tuple[int, int]:
    """Validate a (successes, n) pair: ints with ``n >= 1`` and ``0 <= successes <= n``."""
    n_int = _check_count("n", n)
    if n_int == 0:
        raise ValueError("n must be >= 1: a rate over an empty denominator is refused")
    x = _check_count("successes", successes)
    if x > n_int:
        raise ValueError(f"successes must be <= n, got successes={x}, n={n_int}")
    return x, n_int


def _check_confidence(confidence: object) -> float:
    """Return ``confidence`` as a float strictly inside (0, 1) or raise ``ValueError``."""
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
        raise ValueError(f"confidence must be a float in (0, 1), got {confidence!r}")
    conf = float(confidence)
    if not 0.0 < conf < 1.0:  # also rejects NaN
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")
    return conf


def _check_probability(name: str, value: object) -> float:
    """Return ``value`` as a float in [0, 1] or raise ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a float in [0, 1], got {value!r}")
    v = float(value)
    if not 0.0 <= v <= 1.0:  # also rejects NaN
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return v


# --------------------------------------------------------------------------- Wilson


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for a binomial proportion.

    With ``p = x/n``, ``q = 1 - p`` and ``z`` the ``(1 + confidence)/2`` standard normal
    quantile, the score bounds are (Wilson 1927; Brown, Cai & DasGupta 2001)::

        (p + z^2/(2n) -+ z * sqrt(p*q/n + z^2/(4n^2))) / (1 + z^2/n)

    The lower bound is evaluated in the algebraically equal, cancellation-free form
    ``p^2 / (p + z^2/(2n) + z*sqrt(p*q/n + z^2/(4n^2)))`` and the upper bound as one minus
    the lower bound of the mirrored count ``n - x``; both are clamped to [0, 1], with
    ``low = 0`` exactly when ``x = 0`` and ``high = 1`` exactly when ``x = n``.

    ``z`` comes from ``statistics.NormalDist().inv_cdf`` (Wichura 1988, algorithm AS 241,
    accurate to about 1e-16).

    References:
        E. B. Wilson (1927), "Probable inference, the law of succession, and statistical
        inference", J. Amer. Statist. Assoc. 22(158):209-212.
        L. D. Brown, T. T. Cai, A. DasGupta (2001), "Interval estimation for a binomial
        proportion", Statistical Science 16(2):101-133.

    Args:
        successes: number of successes ``x``, ``0 <= x <= n``.
        n: number of trials, ``n >= 1``.
        confidence: two-sided confidence level, strictly between 0 and 1.

    Returns:
        ``Interval(low, high)`` with ``0 <= low <= x/n <= high <= 1``.

    Raises:
        ValueError: if ``n == 0`` (empty denominator), a count is negative or not an int,
            ``successes > n``, or ``confidence`` is not strictly inside (0, 1).
    """
    x, n_int = _check_successes_n(successes, n)
    conf = _check_confidence(confidence)
    z = NormalDist().inv_cdf(0.5 + conf / 2.0)
    z2 = z * z
    # p*q/n = x*(n-x)/n^3 from exact integers: symmetric in x <-> n-x, correctly rounded.
    spread = z * math.sqrt(x * (n_int - x) / n_int**3 + z2 / (4 * n_int * n_int))
    shift = z2 / (2 * n_int)

    def lower(count: int) -> float:
        if count == 0:
            return 0.0
        p = count / n_int
        return min(1.0, max(0.0, p * p / (p + shift + spread)))

    low = lower(x)
    high = 1.0 - lower(n_int - x)
    return Interval(low, min(1.0, max(0.0, high)))


# --------------------------------------------------------------------------- incomplete beta


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function, modified Lentz method.

    This is ``betacf`` of Numerical Recipes (Press et al. 2007, 3rd ed., section 6.4;
    Lentz's method as modified by Thompson & Barnett 1986, NR section 5.2).
    Converges rapidly for ``x < (a + 1)/(a + b + 2)``; the number of terms grows like
    ``sqrt(max(a, b))``, so the iteration cap scales with it.

    Args:
        a: first shape parameter, ``a > 0``.
        b: second shape parameter, ``b > 0``.
        x: argument in (0, 1).

    Returns:
        The value of the continued fraction.

    Raises:
        ArithmeticError: if the continued fraction fails to converge (not expected for
            parameters reachable from the public functions).
    """
    qab = a + b
    qap = a + 1.0
    qam = a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    if abs(d) < _FPMIN:
        d = _FPMIN
    d = 1.0 / d
    h = d
    max_iter = 300 + 20 * math.isqrt(math.ceil(max(a, b)))
    for m in range(1, max_iter + 1):
        m2 = 2 * m
        # Even step.
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        if abs(d) < _FPMIN:
            d = _FPMIN
        c = 1.0 + aa / c
        if abs(c) < _FPMIN:
            c = _FPMIN
        d = 1.0 / d
        h *= d * c
        # Odd step.
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        if abs(d) < _FPMIN:
            d = _FPMIN
        c = 1.0 + aa / c
        if abs(c) < _FPMIN:
            c = _FPMIN
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) <= _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def _betainc_pair(a: float, b: float, x: float) -> tuple[float, float]:
    """Regularized incomplete beta ``I_x(a, b)`` and its complement ``1 - I_x(a, b)``.

    Numerical Recipes 3rd ed., section 6.4: the prefactor
    ``x^a (1-x)^b / (a B(a, b))`` is computed in log space with ``math.lgamma`` and
    ``math.log1p``; the continued fraction is applied directly when
    ``x < (a + 1)/(a + b + 2)`` and otherwise to the mirrored ``I_{1-x}(b, a)``
    (symmetry ``I_x(a, b) = 1 - I_{1-x}(b, a)``, Abramowitz & Stegun 26.5.2). Whichever
    member of the pair is computed directly carries full relative accuracy, so small tails
    are not lost to cancellation.

    Args:
        a: first shape parameter, ``a > 0``.
        b: second shape parameter, ``b > 0``.
        x: argument in [0, 1].

    Returns:
        ``(I_x(a, b), 1 - I_x(a, b))``.

    Raises:
        ValueError: if ``a`` or ``b`` is not positive or ``x`` is outside [0, 1].
        ArithmeticError: if the continued fraction fails to converge.
    """
    if not (a > 0.0 and b > 0.0):
        raise ValueError(f"a and b must be > 0, got a={a!r}, b={b!r}")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be in [0, 1], got {x!r}")
    if x == 0.0:
        return 0.0, 1.0
    if x == 1.0:
        return 1.0, 0.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        value = min(1.0, front * _betacf(a, b, x) / a)
        return value, 1.0 - value
    complement = min(1.0, front * _betacf(b, a, 1.0 - x) / b)
    return 1.0 - complement, complement


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function ``I_x(a, b)`` (see ``_betainc_pair``).

    Args:
        a: first shape parameter, ``a > 0``.
        b: second shape parameter, ``b > 0``.
        x: argument in [0, 1].

    Returns:
        ``I_x(a, b)``.

    Raises:
        ValueError: if ``a`` or ``b`` is not positive or ``x`` is outside [0, 1].
        ArithmeticError: if the continued fraction fails to converge.
    """
    return _betainc_pair(a, b, x)[0]


def binomial_cdf(k: int, n: int, p: float) -> float:
    """Cumulative binomial probability ``P(X <= k)`` for ``X ~ Binomial(n, p)``.

    Uses the identity ``sum_{s=a}^{n} C(n, s) p^s (1-p)^(n-s) = I_p(a, n - a + 1)``
    (Abramowitz & Stegun 1964, eq. 26.5.24), so ``P(X <= k) = 1 - I_p(k + 1, n - k)``,
    evaluated with the complement-accurate incomplete beta of Numerical Recipes 6.4.
    Relative accuracy is about 1e-13 or better for moderate ``n``.

    Args:
        k: the cut-off; any int (``k < 0`` gives 0, ``k >= n`` gives 1).
        n: number of trials, ``n >= 0``.
        p: success probability in [0, 1].

    Returns:
        ``P(X <= k)`` in [0, 1].

    Raises:
        ValueError: if ``k`` is not an int, ``n`` is negative or not an int, or ``p`` is
            outside [0, 1] (or NaN).
    """
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"k must be an int, got {k!r}")
    n_int = _check_count("n", n)
    prob = _check_probability("p", p)
    if k < 0:
        return 0.0
    if k >= n_int:
        return 1.0
    if prob == 0.0:
        return 1.0
    if prob == 1.0:
        return 0.0
    return _betainc_pair(float(k + 1), float(n_int - k), prob)[1]


# --------------------------------------------------------------------------- Clopper-Pearson


def _clopper_pearson_lower(x: int, n: int, tail: float) -> float:
    """Lower Clopper-Pearson bound: the root ``p`` of ``I_p(x, n - x + 1) = tail``.

    By A&S 26.5.24, ``I_p(x, n - x + 1) = P(X >= x | p)``, the upper binomial tail, which
    increases monotonically in ``p``; the root is found by bisection on [0, 1] until the
    bracket cannot be split in double precision (well below the 1e-12 target). The lower
    end of the final bracket is returned, so rounding only ever widens the interval.

    Args:
        x: successes, ``0 <= x <= n``.
        n: trials, ``n >= 1``.
        tail: the one-sided tail probability ``(1 - confidence)/2``, in (0, 1/2).

    Returns:
        The lower bound in [0, 1]; exactly 0 when ``x == 0``.

    Raises:
        ArithmeticError: if the incomplete beta continued fraction fails to converge.
    """
    if x == 0:
        return 0.0
    a = float(x)
    b = float(n - x + 1)
    lo, hi = 0.0, 1.0
    for _ in range(_BISECT_MAX_ITER):
        mid = lo + (hi - lo) / 2.0
        if not lo < mid < hi:
            break
        if _betainc(a, b, mid) < tail:
            lo = mid
        else:
            hi = mid
    return lo


def clopper_pearson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Clopper-Pearson "exact" interval for a binomial proportion.

    With ``alpha = 1 - confidence`` the bounds are beta quantiles (Clopper & Pearson
    1934; Brown, Cai & DasGupta 2001)::

        low  = B^-1(alpha/2;     x,     n - x + 1)     (0 if x == 0)
        high = B^-1(1 - alpha/2; x + 1, n - x)         (1 if x == n)

    ``B^-1`` is the inverse of the regularized incomplete beta function ``I_p(a, b)``,
    itself evaluated by the Numerical Recipes continued fraction (Press et al. 2007,
    section 6.4) and inverted by bisection to full double precision. The upper bound is
    computed as ``1 - low(n - x)`` (symmetry ``I_p(a, b) = 1 - I_{1-p}(b, a)``), so
    the interval is exactly mirror-symmetric up to one rounding of ``1 - .``.

    References:
        C. J. Clopper, E. S. Pearson (1934), "The use of confidence or fiducial limits
        illustrated in the case of the binomial", Biometrika 26(4):404-413.
        L. D. Brown, T. T. Cai, A. DasGupta (2001), "Interval estimation for a binomial
        proportion", Statistical Science 16(2):101-133.
        W. H. Press et al. (2007), Numerical Recipes, 3rd ed., section 6.4.
        M. Abramowitz, I. A. Stegun (1964), Handbook of Mathematical Functions, 26.5.24.

    Args:
        successes: number of successes ``x``, ``0 <= x <= n``.
        n: number of trials, ``n >= 1``.
        confidence: two-sided confidence level, strictly between 0 and 1.

    Returns:
        ``Interval(low, high)`` with ``0 <= low <= high <= 1``; ``low == 0`` when
        ``x == 0`` and ``high == 1`` when ``x == n``.

    Raises:
        ValueError: if ``n == 0`` (empty denominator), a count is negative or not an int,
            ``successes > n``, or ``confidence`` is not strictly inside (0, 1).
        ArithmeticError: if the incomplete beta continued fraction fails to converge
            (not expected for realistic ``n``).
    """
    x, n_int = _check_successes_n(successes, n)
    conf = _check_confidence(confidence)
    tail = (1.0 - conf) / 2.0
    low = _clopper_pearson_lower(x, n_int, tail)
    high = 1.0 if x == n_int else 1.0 - _clopper_pearson_lower(n_int - x, n_int, tail)
    return Interval(low, high)


# --------------------------------------------------------------------------- McNemar


def mcnemar_exact(b: int, c: int) -> float:
    """Exact (conditional) two-sided McNemar test on the discordant pair counts.

    Under the null hypothesis of marginal homogeneity the discordant pairs split as
    ``X ~ Binomial(b + c, 1/2)``, and the two-sided p-value is (McNemar 1947; exact
    conditional form as in Fagerland, Lydersen & Laake 2013)::

        p = min(1, 2 * P(X <= min(b, c)))

    This is the conservative exact test, NOT the mid-p variant. The tail is summed in
    exact integer arithmetic (binomial coefficients over ``2^(b+c)`` as a ``Fraction``)
    and converted to float once, rounding *upward* when the exact value is not
    representable: the result is the smallest float ``>=`` the exact p-value, so it is
    exact whenever the p-value is a float (e.g. ``9/128``), never understated, and never
    underflows to 0 (an extreme split of more than ~1074 pairs gives ``5e-324``). Cost is
    ``O(min(b, c))`` big-integer additions of ``b + c`` bits.

    References:
        Q. McNemar (1947), "Note on the sampling error of the difference between
        correlated proportions or percentages", Psychometrika 12(2):153-157.
        M. W. Fagerland, S. Lydersen, P. Laake (2013), "The McNemar test for binary
        matched-pairs data: mid-p and asymptotic are better than exact conditional",
        BMC Medical Research Methodology 13:91.

    Args:
        b: count of pairs where only the first condition succeeded, ``b >= 0``.
        c: count of pairs where only the second condition succeeded, ``c >= 0``.

    Returns:
        The two-sided p-value in (0, 1]; ``1.0`` when ``b + c == 0``. Symmetric in
        ``b`` and ``c``.

    Raises:
        ValueError: if ``b`` or ``c`` is negative or not an int.
    """
    b_int = _check_count("b", b)
    c_int = _check_count("c", c)
    total = b_int + c_int
    if total == 0:
        return 1.0
    smaller = min(b_int, c_int)
    if 2 * smaller >= total:  # b == c: the two tails cover every outcome
        return 1.0
    term = 1  # C(total, 0)
    tail = 0
    for i in range(smaller + 1):
        tail += term
        term = term * (total - i) // (i + 1)  # C(total, i + 1), exact integer division
    exact = min(Fraction(1), Fraction(2 * tail, 2**total))
    result = float(exact)
    if Fraction(result) < exact:  # round up: never report a p-value below the exact one
        result = math.nextafter(result, math.inf)
    return result


# --------------------------------------------------------------------------- Holm


def holm_adjust(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values, in the input order.

    With the ``m`` p-values sorted ascending ``p_(1) <= ... <= p_(m)`` the adjusted
    values are (Holm 1979; adjusted-p form of Wright 1992)::

        adj_(i) = min(1, max_{j <= i} (m - j + 1) * p_(j))

    so rejecting every hypothesis with ``adj <= alpha`` is exactly Holm's sequentially
    rejective procedure at family-wise level ``alpha``. Ties keep their input order
    (stable sort) and receive equal adjusted values.

    References:
        S. Holm (1979), "A simple sequentially rejective multiple test procedure",
        Scandinavian Journal of Statistics 6(2):65-70.
        S. P. Wright (1992), "Adjusted P-values for simultaneous inference",
        Biometrics 48(4):1005-1013.

    Args:
        pvalues: raw p-values, each a float in [0, 1]; may be empty.

    Returns:
        Adjusted p-values aligned with ``pvalues``; each ``>=`` its raw value and ``<= 1``,
        and monotone in the raw values.

    Raises:
        ValueError: if any entry is not a number in [0, 1] (the message names its index).
    """
    values = [_check_probability(f"pvalues[{i}]", p) for i, p in enumerate(pvalues)]
    m = len(values)
    order = sorted(range(m), key=values.__getitem__)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * values[index]))
        adjusted[index] = running
    return adjusted


# --------------------------------------------------------------------------- McNemar power

_TAIL = 1e-17
"""Binomial mass left out of a power sum: each end stops below it, far under the 1e-9 the
power is checked to."""
TASKS_NEEDED_LIMIT = 100_000
"""Most tasks :func:`tasks_needed` considers."""


def _binomial_pmf(d: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 1.0 if d == 0 else 0.0
    if p >= 1.0:
        return 1.0 if d == n else 0.0
    return math.exp(math.lgamma(n + 1) - math.lgamma(d + 1) - math.lgamma(n - d + 1)
                    + d * math.log(p) + (n - d) * math.log1p(-p))


def _rejects(k: int, d: int, alpha: float) -> bool:
    """Does the exact McNemar test reject the split ``k`` to ``d - k`` at ``alpha``?"""
    if 2 * k >= d:
        return False
    p = 2.0 * binomial_cdf(k, d, 0.5)
    if abs(p - alpha) <= 1e-9 * alpha:  # at the edge the float cannot tell: decide it exactly
        return mcnemar_exact(k, d - k) <= alpha
    return p <= alpha


def _critical(d: int, alpha: float) -> int:
    """The largest smaller count ``k`` the test rejects among ``d`` discordant tasks; -1 if none."""
    low, high = -1, (d - 1) // 2  # _rejects is monotone in k: true up to the critical value
    if high < 0 or not _rejects(0, d, alpha):
        return -1
    low = 0
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if _rejects(mid, d, alpha) else (low, mid - 1)
    return low


def mcnemar_power(n: int, discordant: float, difference: float, alpha: float) -> float:
    """Power of the two-sided exact McNemar test (:func:`mcnemar_exact`) on ``n`` paired tasks.

    The number of discordant tasks is ``D ~ Binomial(n, discordant)``; given ``D = d``, the
    first run's share of them is ``Binomial(d, pi)`` with ``pi = (discordant + difference) /
    (2 * discordant)``, and the test rejects when the smaller count is at most the critical
    value of ``d``. The power is that rejection probability summed over ``d`` (Fagerland,
    Lydersen & Laake 2013 give the same unconditional form); the ends of the sum whose mass is
    below 1e-17 are left out.

    Args:
        n: paired tasks, ``n >= 0``.
        discordant: the probability that a task is discordant (one run passes it, the other
            not), in [0, 1].
        difference: the difference in pass rates, ``|difference| <= discordant``.
        alpha: the test's level, in (0, 1).

    Raises:
        ValueError: an argument outside its range.
    """
    n = _check_count("n", n)
    psi = _check_probability("discordant", discordant)
    delta = abs(float(difference))
    alpha = _check_probability("alpha", alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if delta > psi + 1e-12:
        raise ValueError(f"difference {difference!r} cannot exceed the discordant probability {discordant!r}")
    if n == 0 or psi == 0.0:
        return 0.0
    pi = min(1.0, (psi + delta) / (2.0 * psi))
    mode = min(n, int((n + 1) * psi))
    total = 0.0
    for step in (1, -1):
        d = mode if step == 1 else mode - 1
        k = -2  # not yet known for this walk
        while 0 <= d <= n:
            weight = _binomial_pmf(d, n, psi)
            if weight < _TAIL and abs(d - mode) > 1:
                break
            k = _critical(d, alpha) if k == -2 else _next_critical(k, d, alpha, step)
            if k >= 0:
                total += weight * (binomial_cdf(k, d, pi) + binomial_cdf(k, d, 1.0 - pi))
            d += step
    return min(1.0, total)


def _next_critical(k: int, d: int, alpha: float, step: int) -> int:
    """The critical value of ``d`` from that of ``d - step``: it moves by at most one."""
    if step == 1:
        return k + 1 if _rejects(k + 1, d, alpha) else k
    return k if k < 0 or _rejects(k, d, alpha) else k - 1


def _discordance(observed: float, delta: float) -> float:
    # A difference of delta needs at least delta of the tasks discordant.
    return max(observed, delta)


def min_detectable_difference(n: int, discordant: float, alpha: float, power: float = 0.8) -> float | None:
    """The smallest difference in pass rates the exact McNemar test finds with ``power`` on
    ``n`` paired tasks, at ``alpha``, when a share ``discordant`` of the tasks is discordant
    (raised to the difference where that is larger); None when no difference up to 1 is.

    Power grows with the difference, so it is found by bisection to about 1e-13.

    Raises:
        ValueError: an argument outside its range.
    """
    psi = _check_probability("discordant", discordant)
    target = _check_probability("power", power)

    def found(delta: float) -> bool:
        return mcnemar_power(n, _discordance(psi, delta), delta, alpha) >= target

    if not found(1.0):
        return None
    low, high = 0.0, 1.0
    for _ in range(_BISECT_MAX_ITER):
        mid = (low + high) / 2
        if mid in (low, high) or high - low < 1e-13:
            break
        low, high = (low, mid) if found(mid) else (mid, high)
    return high


def tasks_needed(discordant: float, difference: float, alpha: float, power: float = 0.8,
                 limit: int = TASKS_NEEDED_LIMIT) -> int | None:
    """About how many paired tasks the exact McNemar test needs to find ``difference`` with
    ``power`` at ``alpha``, with a share ``discordant`` of the tasks discordant: an ``N`` with
    power below ``power`` at ``N - 1`` and at least ``power`` at ``N`` (power is not monotone
    in the number of tasks, so a smaller ``N`` may exist); None for no difference, or when
    more than ``limit`` tasks would be needed.

    Raises:
        ValueError: an argument outside its range.
    """
    psi = _check_probability("discordant", discordant)
    target = _check_probability("power", power)
    delta = abs(float(difference))
    if delta == 0.0:
        return None
    psi = _discordance(psi, delta)

    def found(n: int) -> bool:
        return mcnemar_power(n, psi, delta, alpha) >= target

    low, high = 0, 8
    while not found(high):
        if high >= limit:
            return None
        low, high = high, min(limit, high * 2)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if found(mid) else (mid, high)
    return high


# --------------------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator from ``n`` samples of which ``c`` are correct.

    Chen et al. (2021), eq. 1::

        pass@k = 1 - C(n - c, k) / C(n, k)

    evaluated in exact rational arithmetic (``math.comb`` and ``Fraction``) and rounded
    once, so it stays exact for large ``n`` where the float product form
    ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` would accumulate rounding. When ``n - c < k``
    every size-``k`` subset contains a correct sample and the result is exactly 1.

    References:
        M. Chen et al. (2021), "Evaluating Large Language Models Trained on Code",
        arXiv:2107.03374, section 2.1, eq. 1.

    Args:
        n: number of samples drawn, ``n >= 1``.
        c: number of correct samples, ``0 <= c <= n``.
        k: the k of pass@k, ``1 <= k <= n``.

    Returns:
        The estimate in [0, 1]: 0 when ``c == 0``, 1 when ``n - c < k``.

    Raises:
        ValueError: if any argument is not an int, ``n < 1``, ``c`` is outside [0, n] or
            ``k`` is outside [1, n].
    """
    n_int = _check_count("n", n)
    if n_int == 0:
        raise ValueError("n must be >= 1: pass@k over zero samples is refused")
    c_int = _check_count("c", c)
    if c_int > n_int:
        raise ValueError(f"c must be <= n, got c={c_int}, n={n_int}")
    k_int = _check_count("k", k)
    if not 1 <= k_int <= n_int:
        raise ValueError(f"k must satisfy 1 <= k <= n, got k={k_int}, n={n_int}")
    if c_int == 0:
        return 0.0
    if n_int - c_int < k_int:
        return 1.0
    return float(1 - Fraction(math.comb(n_int - c_int, k_int), math.comb(n_int, k_int)))


# --------------------------------------------------------------------------- median interval


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free confidence interval for the median of the population that ``values``
    were drawn from, independently (repeated timings of one workload, say).

    The interval is ``[x_(k), x_(n+1-k)]`` of the sorted values, with ``k`` the largest rank
    such that ``2 * P(B <= k - 1) <= 1 - confidence`` for ``B ~ Binomial(n, 1/2)``: the median
    lies below ``x_(k)`` only if fewer than ``k`` draws fell below it, which happens with
    probability ``P(B <= k - 1)``, and likewise above. The coverage is at least ``confidence``
    whatever the distribution (exactly ``1 - 2 P(B <= k - 1)`` for a continuous one). The tail
    is summed in exact rational arithmetic, so no rank is chosen by a rounding error.

    References:
        W. J. Conover (1999), "Practical Nonparametric Statistics", 3rd ed., section 3.2
        (confidence interval for a quantile).

    Args:
        values: the draws, in any order; at least one.
        confidence: in (0, 1).

    Returns:
        ``(low, high)``, or None when ``n`` is too small for any such interval (fewer than six
        draws at 95%: even ``[min, max]`` covers only ``1 - 2^(1-n)``).

    Raises:
        ValueError: if ``values`` is empty or holds a NaN, or ``confidence`` is outside (0, 1).
    """
    conf = _check_confidence(confidence)
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    if n == 0:
        raise ValueError("values must hold at least one value")
    if any(math.isnan(v) for v in ordered):
        raise ValueError("values must not hold NaN")
    alpha = Fraction(1) - Fraction(conf)
    total = 2**n
    k, tail = 0, Fraction(0)  # tail = P(B <= k - 1)
    while k < n // 2:
        nxt = tail + Fraction(math.comb(n, k), total)  # P(B <= k)
        if 2 * nxt > alpha:
            break
        k, tail = k + 1, nxt
    if k == 0:
        return None
    return ordered[k - 1], ordered[n - k]
