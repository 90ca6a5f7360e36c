"""Honest power: per case the smallest change the gate can detect now, and the session's lines
about it: how many cases can be judged at the threshold, and a threshold below what the
machine allows said once, not as a silent stream of inconclusive cases."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from charz_factories import make_case
from pytest_charz.gate_power import case_powers, power_lines
from pytest_charz.measure.sampler import Measurement, SamplerSettings, summarize
from pytest_charz.measure.stats import session_spread
from pytest_charz.records import CaseRecord
from pytest_charz.reference_change import SESSION_LEVEL
from pytest_charz.store import Reference, thin_samples
from pytest_charz.verdict import Verdict, judge

BASE_S = 1e-3


def draw(seed: int, scale: float = 1.0, sigma: float = 0.01, n: int = 150) -> list[float]:
    return list(BASE_S * scale * np.random.default_rng(seed).lognormal(0.0, sigma, n))


def measurement(samples: list[float]) -> Measurement:
    med, ci, quartiles, rel, outliers = summarize(samples, SamplerSettings())
    return Measurement(tuple(samples), 8, "hot", {}, 3, "noise-target", 0.5, 0.01, 0.95, med, ci, quartiles, rel,
                       outliers, 1e-9)


def reference(sessions: tuple[float, ...]) -> Reference:
    m = measurement(draw(1))
    assert m.median_s is not None and m.ci_s is not None
    return Reference(m.median_s, m.ci_s, thin_samples(m.samples_s), 0.01, "hot", "copy", {"flags": []}, {},
                     "2026-01-01T00:00:00+00:00", tuple(m.median_s * s for s in sessions))


def verdict_of(samples: list[float], ref: Reference | None, threshold: float = 0.05) -> Verdict:
    return judge(measurement(samples), None, None, ref, {"flags": []}, None, {}, None, threshold=threshold)


def record(case_id: str, verdict: Verdict | None) -> CaseRecord:
    extra: dict[str, Any] = {"verdict": verdict.to_json()} if verdict is not None else {}
    return make_case(f"suites/test_x.py::{case_id}", {}, BASE_S, **extra)


def test_session_spread_is_at_least_the_largest_distance_and_widens_few_sessions() -> None:
    assert session_spread([1.0]) == 0.0
    assert session_spread([1.0, 1.0, 1.0]) == pytest.approx(0.0)
    three = session_spread([0.98, 1.0, 1.02])
    assert three > 0.02 * 3                      # three sessions say little: a fourth may fall far
    many = session_spread(list(np.exp(np.random.default_rng(3).normal(0.0, 0.01, 30))))
    assert 0.02 < many < 0.04                    # thirty say about two standard deviations (1% each)


def test_the_detectable_change_is_what_the_rule_calls_drift() -> None:
    ref = reference((0.98, 1.0, 1.02))
    verdict = verdict_of(draw(2), ref)
    # three sessions 2% apart cannot rule out a 5% change at 99%: not "no drift", but the figure
    assert verdict.outcome == "inconclusive"
    assert verdict.resolution is not None and verdict.detectable_change is not None
    spread = session_spread([0.98, 1.0, 1.02], SESSION_LEVEL)
    assert verdict.resolution == pytest.approx(spread, abs=0.01)          # plus the comparison's CI, ~0.5%
    assert verdict.detectable_change == pytest.approx(1.05 * (1 + verdict.resolution) - 1)
    assert f"smallest change detectable here now {verdict.detectable_change:.1%}" in verdict.message
    # a change a little beyond it is drift; one a little short of it is not
    assert verdict_of(draw(3, scale=1.0 + 1.1 * verdict.detectable_change), ref).outcome == "drift"
    assert verdict_of(draw(3, scale=1.0 + 0.85 * verdict.detectable_change), ref).outcome == "inconclusive"


def test_a_reference_still_gathering_sessions_has_no_detectable_change_yet() -> None:
    verdict = verdict_of(draw(2), reference((1.0, 1.01)))
    assert verdict.detectable_change is None and verdict.resolution is None
    assert "smallest detectable change unknown until the reference has settled (2 of 3 sessions)" in verdict.message
    assert verdict_of(draw(2), None).detectable_change is None


def test_the_summary_counts_the_cases_judgeable_at_the_threshold_and_says_a_too_low_one_once() -> None:
    tight = reference((1.0, 1.0, 1.0))
    loose = reference((0.9, 1.0, 1.1))                  # sessions 10% apart: about 70% after three
    cases = [record(f"test_tight[{i}]", verdict_of(draw(10 + i), tight)) for i in range(3)]
    cases += [record(f"test_loose[{i}]", verdict_of(draw(20 + i), loose)) for i in range(4)]
    cases += [record("test_gathering", verdict_of(draw(30), reference((1.0, 1.01)))),
              record("test_new", verdict_of(draw(31), None)), record("test_unjudged", None)]
    # unchanged, the loose cases pass; 8% slower, which the tight ones call drift, they cannot tell
    assert verdict_of(draw(40, scale=1.08), tight).outcome == "drift"
    assert verdict_of(draw(40, scale=1.08), loose).outcome == "inconclusive"
    lines = power_lines(cases)
    assert len(lines) == 2
    assert lines[0].startswith("gate power: 3 of 7 cases can be judged at the 5.0% threshold (smallest detectable"
                               " change ")
    assert lines[0].endswith("; 1 more gathers reference sessions")
    below = [line for line in lines if "below what this machine allows" in line]
    assert len(below) == 1 and below[0].startswith("the 5.0% threshold is below what this machine allows now for 4 cases")
    loose_resolution = max(p.resolution or 0.0 for p in case_powers(cases))
    assert f"--charz-threshold={np.ceil(loose_resolution * 100) / 100:.2f}" in below[0]
    # a threshold the machine allows: no such line
    assert not [line for line in power_lines(cases[:3]) if "below" in line]


def test_cases_at_other_thresholds_are_counted_at_theirs() -> None:
    loose = reference((0.9, 1.0, 1.1))
    cases = [record("test_a", verdict_of(draw(1), loose, threshold=0.05)),
             record("test_b", verdict_of(draw(2), loose, threshold=0.9))]
    lines = power_lines(cases)
    assert [line.split(" (")[0] for line in lines if line.startswith("gate power")] == [
        "gate power: 0 of 1 cases can be judged at the 5.0% threshold",
        "gate power: 1 of 1 cases can be judged at the 90.0% threshold"]
    assert power_lines([record("test_new", verdict_of(draw(3), None))]) == []


def test_no_drift_is_said_only_where_the_reference_sessions_allow_it() -> None:
    # The same unchanged session against a reference of ten sessions within +-0.3% and one of
    # three sessions 2% apart: the first can rule out a 5% change, the second cannot (its new
    # session may fall 20% away), so it is inconclusive, never "no drift".
    tight = reference(tuple(1.0 + 0.001 * d for d in (-3, -2, -1, 0, 0, 1, 1, 2, 3, 0)))
    loose = reference((0.98, 1.0, 1.02))
    samples = draw(2)
    assert verdict_of(samples, tight).outcome == "pass"
    loose_verdict = verdict_of(samples, loose)
    assert loose_verdict.outcome == "inconclusive"
    assert loose_verdict.detectable_change is not None and loose_verdict.detectable_change > 0.2
