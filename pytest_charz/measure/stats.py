"""Statistics as pure functions over sequences of samples (seconds, or any positive figure).

No pytest, no I/O. The confidence interval of the median is distribution-free (order statistics
of the binomial), as timing distributions are skewed and heavy-tailed; ratios of medians get a
bootstrap interval; changes are tested with Mann-Whitney U.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


SAMPLE_DIGITS = 7        # significant digits kept per sample: far below any timing noise


def order_statistics(samples_s: Sequence[float], limit: int) -> tuple[float, ...]:
    """At most ``limit`` samples: evenly spaced order statistics of ``samples_s``.

    Returns the samples (seconds, any order) sorted and rounded to 7 significant digits; with
    more than ``limit`` of them, a quantile grid of ``limit`` including both extremes, which keeps
    the distribution's shape (median, quantiles) for rank tests and bootstraps and makes tests on
    it conservative.
    """
    ordered = np.sort(np.asarray(samples_s, dtype=float))
    if ordered.size > limit:
        ordered = ordered[np.round(np.linspace(0, ordered.size - 1, limit)).astype(int)]
    return tuple(float(f"{v:.{SAMPLE_DIGITS}g}") for v in ordered)


def median(samples: Sequence[float]) -> float:
    """Median of ``samples`` (raises ValueError when empty)."""
    if len(samples) == 0:
        raise ValueError("median of no samples")
    return float(np.median(np.asarray(samples, dtype=float)))


def iqr(samples: Sequence[float]) -> tuple[float, float]:
    """First and third quartiles (linear interpolation), as a ``(q1, q3)`` pair."""
    if len(samples) == 0:
        raise ValueError("IQR of no samples")
    q1, q3 = np.percentile(np.asarray(samples, dtype=float), [25.0, 75.0])
    return float(q1), float(q3)


@functools.lru_cache(maxsize=256)
def _half_binomial_cdf(n: int) -> np.ndarray:
    """P(B <= k) for k = 0..n, B ~ Binomial(n, 1/2), exact up to float rounding.

    Computed with numpy from log binomial coefficients (no SciPy: this runs inside the sampling
    loop, where importing scipy.stats would cost a second).
    """
    j = np.arange(1, n + 1, dtype=float)
    log_choose = np.concatenate(([0.0], np.cumsum(np.log((n - j + 1.0) / j))))
    cdf = np.cumsum(np.exp(log_choose - n * math.log(2.0)))
    return np.minimum(cdf, 1.0)


@functools.lru_cache(maxsize=4096)
def median_ci_ranks(n: int, level: float = 0.95) -> tuple[int, int] | None:
    """0-based ranks ``(lo, hi)`` of the sorted sample bounding a distribution-free ``level``
    confidence interval of the median, or None when ``n`` is too small for that level.

    The interval [x_(lo), x_(hi)] covers the population median with probability at least
    ``level``: P(lo < B <= hi) with B ~ Binomial(n, 1/2).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    if n < 1:
        return None
    cdf = _half_binomial_cdf(n)
    alpha = 1.0 - level
    # k = number of order statistics left out on each side: the largest k with
    # P(B <= k - 1) <= alpha / 2; then x_(k) and x_(n-k+1) (1-based) bound the interval.
    k = int(np.searchsorted(cdf, alpha / 2.0, side="right"))
    if k < 1:
        return None
    lo = k - 1            # 0-based rank of x_(k)
    hi = n - k            # 0-based rank of x_(n-k+1)
    if hi <= lo:
        return None
    return lo, hi


@functools.lru_cache(maxsize=64)
def ci_min_samples(level: float = 0.95) -> int:
    """The fewest samples whose distribution-free ``level`` CI of the median exists: 6 at 95%,
    8 at 99%. With fewer, even the full range (min, max) covers the median with a probability
    below ``level`` (1 - 2 / 2**n), so the CI at that level is unknown, not zero or the range."""
    n = 1
    while median_ci_ranks(n, level) is None:
        n += 1
    return n


def median_ci(samples: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free ``level`` confidence interval of the median.

    With fewer than :func:`ci_min_samples` samples no interval reaches that level: the full
    range (min, max) is returned, whose coverage is below ``level`` (one sample: a zero-width
    "interval" that says nothing). Callers that report a CI use :func:`known_median_ci`, which
    says None there.
    """
    if len(samples) == 0:
        raise ValueError("CI of no samples")
    ordered = np.sort(np.asarray(samples, dtype=float))
    ranks = median_ci_ranks(len(ordered), level)
    if ranks is None:
        return float(ordered[0]), float(ordered[-1])
    return float(ordered[ranks[0]]), float(ordered[ranks[1]])


def known_median_ci(samples: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """The ``level`` CI of the median (:func:`median_ci`), or None when there are too few
    samples for one (fewer than :func:`ci_min_samples`): the CI is then unknown."""
    if len(samples) < ci_min_samples(level):
        return None
    return median_ci(samples, level)


def samples_for_halfwidth(rel_halfwidth: float, samples: int, target: float) -> int:
    """About how many samples bring a relative CI half-width of ``rel_halfwidth``, measured on
    ``samples`` samples, down to ``target``: the half-width of the median's CI shrinks as
    1 / sqrt(n) for independent samples, so n * (rel / target) ** 2 (at least ``samples``)."""
    if not (target > 0 and samples > 0) or not math.isfinite(rel_halfwidth):
        raise ValueError(f"need a finite half-width, samples > 0 and target > 0; got {rel_halfwidth}, "
                         f"{samples}, {target}")
    return max(samples, int(math.ceil(samples * (rel_halfwidth / target) ** 2)))


def relative_halfwidth(ci: tuple[float, float], center: float) -> float:
    """Half the CI's width relative to ``center`` (inf when the center is not positive)."""
    if not center > 0:
        return math.inf
    return (ci[1] - ci[0]) / 2.0 / center


@dataclass(frozen=True)
class RatioCI:
    ratio: float          # median(b) / median(a)
    low: float
    high: float
    level: float


def bootstrap_ratio_ci(
    a: Sequence[float], b: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> RatioCI:
    """Percentile-bootstrap ``level`` CI of median(b) / median(a), deterministic for a seed."""
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    if xa.size == 0 or xb.size == 0:
        raise ValueError("ratio of medians needs samples on both sides")
    rng = np.random.default_rng(seed)
    ma = np.median(xa[rng.integers(0, xa.size, size=(resamples, xa.size))], axis=1)
    mb = np.median(xb[rng.integers(0, xb.size, size=(resamples, xb.size))], axis=1)
    ratios = mb / ma
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(ratios, [tail, 100.0 - tail])
    return RatioCI(float(np.median(xb) / np.median(xa)), float(lo), float(hi), level)


@dataclass(frozen=True)
class UTest:
    statistic: float
    p_value: float


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> UTest:
    """Two-sided Mann-Whitney U test of ``a`` against ``b`` (p = 1 when either side is empty)."""
    if len(a) == 0 or len(b) == 0:
        return UTest(0.0, 1.0)
    from scipy.stats import mannwhitneyu

    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    if np.all(xa == xa[0]) and np.all(xb == xa[0]):
        return UTest(float(xa.size * xb.size) / 2.0, 1.0)
    result = mannwhitneyu(xa, xb, alternative="two-sided")
    return UTest(float(result.statistic), float(result.pvalue))


def tukey_outliers(samples: Sequence[float]) -> int:
    """Number of samples beyond 1.5 IQR from the quartiles (counted, never removed)."""
    if len(samples) < 4:
        return 0
    q1, q3 = iqr(samples)
    span = q3 - q1
    x = np.asarray(samples, dtype=float)
    return int(np.count_nonzero((x < q1 - 1.5 * span) | (x > q3 + 1.5 * span)))


def session_spread(values: Sequence[float], level: float = 0.95) -> float:
    """How far from the median of ``values`` (one figure per session of an unchanged case) a new
    session may fall, relative: the largest distance seen, or the half-width of the ``level``
    prediction interval of a new session (Student t on the logs), whichever is larger; 0 below
    two sessions.

    Three sessions show less than their machine's spread (a fourth falls outside their range
    half the time): the prediction interval says how much less, so a gate that widens by it
    does not call the next unchanged session a change.
    """
    n = len(values)
    if n < 2:
        return 0.0
    x = np.asarray(values, dtype=float)
    center = float(np.median(x))
    largest = float(np.max(np.abs(x / center - 1.0)))
    from scipy.stats import t as student_t

    sd = float(np.std(np.log(x), ddof=1))
    half = float(student_t.ppf(0.5 + level / 2.0, n - 1)) * sd * math.sqrt(1.0 + 1.0 / n)
    return max(largest, math.expm1(half))
