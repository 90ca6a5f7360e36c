"""Property tests of the pure statistics."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from pytest_charz.measure import stats

samples = st.lists(st.floats(min_value=1e-9, max_value=1e3, allow_nan=False), min_size=1, max_size=200)


@given(samples)
def test_median_lies_inside_its_ci_and_the_range(xs):
    med = stats.median(xs)
    lo, hi = stats.median_ci(xs)
    assert min(xs) <= lo <= med <= hi <= max(xs)


@given(st.integers(min_value=6, max_value=2000), st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_median_ci_ranks_have_at_least_the_asked_coverage_and_are_tightest(n, level):
    ranks = stats.median_ci_ranks(n, level)
    if ranks is None:
        # too few samples: even the full range does not reach the level
        assert 1 - 2 * binom.cdf(0, n, 0.5) < level
        return
    lo, hi = ranks
    coverage = binom.cdf(hi, n, 0.5) - binom.cdf(lo, n, 0.5)
    assert coverage >= level - 1e-12
    # one rank narrower on each side would fall below the level
    if hi - lo > 2:
        narrower = binom.cdf(hi - 1, n, 0.5) - binom.cdf(lo + 1, n, 0.5)
        assert narrower < level


@given(samples, st.floats(min_value=0.1, max_value=10.0))
def test_ci_scales_with_the_samples(xs, factor):
    lo, hi = stats.median_ci(xs)
    lo2, hi2 = stats.median_ci([x * factor for x in xs])
    assert lo2 == pytest.approx(lo * factor, rel=1e-9)
    assert hi2 == pytest.approx(hi * factor, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), st.floats(min_value=0.5, max_value=2.0))
def test_bootstrap_ratio_ci_is_equivariant_under_scaling(seed, factor):
    xs = np.random.default_rng(seed).lognormal(0.0, 0.05, 60)
    same = stats.bootstrap_ratio_ci(xs, xs, seed=seed)
    scaled = stats.bootstrap_ratio_ci(xs, xs * factor, seed=seed)
    assert scaled.ratio == pytest.approx(factor)
    assert same.low <= 1.0 <= same.high
    assert scaled.low == pytest.approx(same.low * factor) and scaled.high == pytest.approx(same.high * factor)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_bootstrap_ci_contains_the_ratio_and_is_deterministic(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.lognormal(0.0, 0.1, 50), rng.lognormal(0.1, 0.1, 50)
    first = stats.bootstrap_ratio_ci(a, b, seed=3)
    assert first.low <= first.ratio <= first.high
    assert stats.bootstrap_ratio_ci(a, b, seed=3) == first


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_mann_whitney_is_symmetric_and_separates_shifted_samples(seed):
    rng = np.random.default_rng(seed)
    a = rng.lognormal(0.0, 0.01, 40)
    assert stats.mann_whitney_u(a, a * 1.2).p_value < 1e-6
    p_ab = stats.mann_whitney_u(a, a[::-1] * 1.001).p_value
    p_ba = stats.mann_whitney_u(a[::-1] * 1.001, a).p_value
    assert p_ab == pytest.approx(p_ba)


def test_identical_constant_samples_have_no_difference():
    assert stats.mann_whitney_u([1.0] * 10, [1.0] * 10).p_value == 1.0
    assert stats.relative_halfwidth(stats.median_ci([2.0] * 20), 2.0) == 0.0


def test_empty_inputs_raise():
    for fn in (stats.median, stats.iqr, stats.median_ci):
        with pytest.raises(ValueError):
            fn([])


@given(samples)
def test_tukey_outliers_never_exceed_the_sample_count(xs):
    assert 0 <= stats.tukey_outliers(xs) <= len(xs)


@pytest.mark.parametrize("level, fewest", [(0.8, 4), (0.9, 5), (0.95, 6), (0.99, 8)])
def test_a_ci_of_the_median_needs_a_few_samples(level, fewest):
    assert stats.ci_min_samples(level) == fewest
    assert stats.median_ci_ranks(fewest - 1, level) is None
    assert stats.median_ci_ranks(fewest, level) is not None
    # fewer samples: even the full range covers the median less often than asked
    assert 1 - 2 * binom.cdf(0, fewest - 1, 0.5) < level <= 1 - 2 * binom.cdf(0, fewest, 0.5)


@given(samples)
def test_known_median_ci_is_none_below_the_fewest_samples(xs):
    ci = stats.known_median_ci(xs)
    if len(xs) < stats.ci_min_samples(0.95):
        assert ci is None
    else:
        assert ci == stats.median_ci(xs)


def test_one_sample_has_no_known_ci():
    assert stats.known_median_ci([1e-3]) is None
    assert stats.median_ci([1e-3]) == (1e-3, 1e-3)        # the range, whose coverage is 0


@given(st.floats(min_value=1e-4, max_value=10.0), st.integers(min_value=1, max_value=10_000),
       st.floats(min_value=1e-4, max_value=1.0))
def test_samples_for_a_halfwidth_scale_as_the_square(rel, n, target):
    wanted = stats.samples_for_halfwidth(rel, n, target)
    assert wanted >= n
    if rel > target:
        assert wanted == pytest.approx(n * (rel / target) ** 2, rel=1e-6, abs=1)
    assert stats.samples_for_halfwidth(2 * rel, n, target) >= wanted
