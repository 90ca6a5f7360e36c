from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pytest

from charz_factories import make_case
from pytest_charz.errors import UsageError
from pytest_charz.measure.sampler import Measurement, SamplerSettings, summarize
from pytest_charz.models.base import Prediction
from pytest_charz.records import CaseRecord
from pytest_charz.store import InMemoryStore, Reference, evaluate_case, thin_samples
from pytest_charz.verdict import Verdict, judge

BASE_S = 1e-3
CLEAN: dict[str, Any] = {"flags": []}
PROVENANCE: dict[str, Any] = {"libraries": {"numpy": "1.26.4", "torch": "2.4.1"}, "os": {"release": "6.8.0"},
                              "device": {"versions": {"driver": "580.65"}}, "suite_git": {"commit": "abc"}}
TARGET, SUITE, CASE = "cpu-test", "suites/test_memory.py", "suites/test_memory.py::test_triad[1MiB]"


def draw(seed: int, scale: float = 1.0, sigma: float = 0.01, n: int = 150) -> list[float]:
    return list(BASE_S * scale * np.random.default_rng(seed).lognormal(0.0, sigma, n))


def measurement(samples: Sequence[float], discarded: dict[str, int] | None = None, mode: str = "hot") -> Measurement:
    med, ci, quartiles, rel, outliers = summarize(list(samples), SamplerSettings())
    return Measurement(tuple(samples), 8, mode, discarded or {}, 3, "noise-target" if samples else "all-discarded",
                       0.5, 0.01, 0.95, med, ci, quartiles, rel, outliers, 1e-9)


def reference_of(samples: Sequence[float], mode: str = "hot") -> Reference:
    m = measurement(samples, mode=mode)
    assert m.median_s is not None and m.ci_s is not None
    # a settled reference: three sessions that agreed exactly
    return Reference(m.median_s, m.ci_s, thin_samples(samples), 0.01, mode, "stream", dict(CLEAN),
                     {"libraries": {"numpy": "1.26.4", "torch": "2.4.1"}, "device_versions": {"driver": "580.65"}},
                     "2025-01-01T00:00:00+00:00", (m.median_s,) * 3)


def prediction(time_s: float = BASE_S) -> Prediction:
    return Prediction.of_terms("roofline", time_s, "memory:dram", {"memory:dram": time_s})


BAND = {"lo": -0.1, "hi": 0.1}


def judge_against(samples: Sequence[float], ref: Reference | None, interval: dict[str, Any] = CLEAN,
                  provenance: dict[str, Any] = PROVENANCE, pred: Any = None, band: Any = None, **kw: Any) -> Verdict:
    return judge(measurement(samples), pred, band, ref, interval, ref.conditions if ref else None, provenance,
                 ref.provenance if ref else None, **kw)


def test_ten_percent_slower_with_tight_noise_is_drift() -> None:
    verdict = judge_against(draw(2, scale=1.10), reference_of(draw(1)))
    assert verdict.outcome == "drift" and verdict.fails
    assert verdict.ratio == pytest.approx(1.10, abs=0.01)
    assert verdict.ratio_ci is not None and verdict.ratio_ci[0] > 1.05
    assert verdict.p_value is not None and verdict.p_value < 1e-10
    assert verdict.message.startswith("drift: 1")
    assert "slower than the reference" in verdict.message and "Mann-Whitney p=" in verdict.message
    assert "\nmeasured 1.099 ms (median; 95% CI" in verdict.message


def test_faster_is_drift_too() -> None:
    verdict = judge_against(draw(2, scale=0.85), reference_of(draw(1)))
    assert verdict.outcome == "drift"
    assert "faster than the reference" in verdict.message


def test_same_distribution_passes() -> None:
    verdict = judge_against(draw(2), reference_of(draw(1)), pred=prediction(), band=BAND)
    assert verdict.outcome == "pass" and not verdict.fails
    assert verdict.ratio_ci is not None and 0.95 < verdict.ratio_ci[0] < 1.0 < verdict.ratio_ci[1] < 1.05
    assert "within the model's band" in verdict.message


def test_per_case_threshold_decides() -> None:
    slower = draw(2, scale=1.10)
    assert judge_against(slower, reference_of(draw(1)), threshold=0.2).outcome == "pass"
    assert judge_against(slower, reference_of(draw(1)), threshold=0.05).outcome == "drift"


def test_very_noisy_is_inconclusive_not_a_failure() -> None:
    verdict = judge_against(draw(2, scale=1.10, sigma=0.3, n=40), reference_of(draw(1)))
    assert verdict.outcome == "inconclusive" and not verdict.fails
    assert "too noisy" in verdict.message
    assert judge_against(draw(2, scale=1.10, sigma=0.3, n=40), reference_of(draw(1)), strict=True).fails


def test_change_straddling_the_threshold_is_inconclusive() -> None:
    verdict = judge_against(draw(2, scale=1.05, n=200), reference_of(draw(1, n=200)))
    assert verdict.outcome == "inconclusive" and not verdict.fails
    assert verdict.ratio_ci is not None and verdict.ratio_ci[0] < 1.05 < verdict.ratio_ci[1]
    assert "may or may not exceed" in verdict.message


def test_all_samples_discarded_is_inconclusive() -> None:
    verdict = judge(measurement([], discarded={"throttled": 12}), prediction(), BAND, reference_of(draw(1)),
                    CLEAN, None, PROVENANCE, None)
    assert verdict.outcome == "inconclusive" and not verdict.fails
    assert "all samples discarded (12 throttled)" in verdict.message


def test_drift_under_other_load_is_explained() -> None:
    interval = {"flags": ["other-load"], "other_cpu_s_per_s": 1.9,
                "top_other_processes": [{"pid": 1234, "name": "stress-ng", "cpu_s": 1.8}]}
    verdict = judge_against(draw(2, scale=1.10), reference_of(draw(1)), interval=interval)
    assert verdict.outcome == "explained" and not verdict.fails
    assert verdict.cause == "other-load: 1.9 CPU-s/s by stress-ng (pid 1234)"
    assert "conditions: other-load" in verdict.message


def test_drift_after_a_library_upgrade_is_explained() -> None:
    upgraded = {**PROVENANCE, "libraries": {"numpy": "2.1.0", "torch": "2.4.1"}}
    verdict = judge_against(draw(2, scale=1.10), reference_of(draw(1)), provenance=upgraded)
    assert verdict.outcome == "explained"
    assert verdict.cause == "library numpy 1.26.4 -> 2.1.0"
    assert verdict.fails is False
    assert judge_against(draw(2, scale=1.10), reference_of(draw(1)), provenance=upgraded, strict=True).fails


def test_outside_the_band_is_model_error() -> None:
    verdict = judge_against(draw(2, scale=1.25), None, pred=prediction(), band=BAND)
    assert verdict.outcome == "model-error" and verdict.fails
    assert verdict.model_error == pytest.approx(0.25, abs=0.01)
    assert "predicted 1 ms" in verdict.message and "band -10.0%..+10.0%" in verdict.message


def test_model_error_under_a_disturbance_is_explained() -> None:
    verdict = judge_against(draw(2, scale=1.25), None, pred=prediction(), band=BAND,
                            interval={"flags": ["throttled"], "throttle_reasons": ["sw_thermal"]})
    assert verdict.outcome == "explained" and verdict.cause == "throttled: sw_thermal"


def test_model_error_is_not_judged_without_coverage_or_band() -> None:
    uncovered = Prediction.not_covered("roofline", "no fp8 peak on this target")
    verdict = judge_against(draw(2, scale=3.0), None, pred=uncovered, band=BAND)
    assert verdict.outcome == "new" and verdict.model_error is None
    assert "model roofline does not cover this case: no fp8 peak on this target" in verdict.message
    unbanded = judge_against(draw(2, scale=3.0), None, pred=prediction(), band=None)
    assert unbanded.outcome == "new" and unbanded.model_error == pytest.approx(2.0, abs=0.05)
    assert "no validated band" in unbanded.message


def test_median_just_outside_the_band_with_ci_inside_is_inconclusive() -> None:
    samples = draw(2, sigma=0.02, n=60)
    verdict = judge_against(samples, None, pred=prediction(float(np.median(samples)) / 1.101), band=BAND)
    assert verdict.outcome == "inconclusive"
    assert "band's edge" in verdict.message


def test_new_case_within_band() -> None:
    verdict = judge_against(draw(2), None, pred=prediction(), band=BAND)
    assert verdict.outcome == "new" and not verdict.fails and not judge_against(draw(2), None, strict=True).fails


def test_reference_of_another_mode_is_not_compared() -> None:
    verdict = judge_against(draw(2, scale=1.5), reference_of(draw(1), mode="cold"))
    assert verdict.outcome == "inconclusive" and "not comparable" in verdict.message


def test_arguments_are_checked() -> None:
    with pytest.raises(UsageError, match="drift threshold"):
        judge_against(draw(2), None, threshold=5)
    with pytest.raises(UsageError, match="lo <= hi"):
        judge_against(draw(2), None, pred=prediction(), band={"lo": 0.1, "hi": -0.1})


def test_verdict_json_round_trips() -> None:
    verdict = judge_against(draw(2, scale=1.10), reference_of(draw(1)), pred=prediction(), band=BAND)
    data = verdict.to_json()
    assert data["version"] == 1 and data["outcome"] == "drift"
    assert Verdict.from_json(data) == verdict


@pytest.mark.parametrize("seed", range(200))
def test_same_distribution_never_fails(seed: int) -> None:
    rng = np.random.default_rng(10_000 + seed)
    sigma = float(rng.uniform(0.01, 0.03))
    n_ref, n_new = (int(v) for v in rng.integers(50, 201, size=2))
    ref = reference_of(list(BASE_S * rng.lognormal(0.0, sigma, n_ref)))
    new = list(BASE_S * rng.lognormal(0.0, sigma, n_new))
    verdict = judge_against(new, ref, pred=prediction(), band=BAND)
    assert verdict.outcome not in ("drift", "model-error", "explained"), verdict.message
    assert not verdict.fails


# -- evaluate_case: the store's rules around a verdict ---------------------------------------------
def case(samples: Sequence[float], flags: Sequence[str] = (), case_id: str = CASE) -> CaseRecord:
    conditions = {"before": {"governor": "performance", "cpu_freq_mhz": [3000.0]}, "after": {},
                  "interval": {"flags": list(flags), "steal_fraction": 0.2 if "steal" in flags else 0.0}}
    return make_case(case_id, {"op": "stream"}, None, suite=SUITE, measurement=measurement(samples).to_json(),
                     conditions=conditions, peak_fraction={"bandwidth:dram": 0.62})


def evaluate(store: InMemoryStore, samples: Sequence[float], record: CaseRecord | None = None,
             **kw: Any) -> Verdict:
    options: dict[str, Any] = dict(prediction=prediction(), band=None, provenance=PROVENANCE, threshold=0.05,
                                   strict=False, accept_reason=None, save_new=True)
    options.update(kw)
    return evaluate_case(record if record is not None else case(samples), store, TARGET, **options)


def test_new_case_is_saved_then_judged_against() -> None:
    store = InMemoryStore()
    first = evaluate(store, draw(1), band=BAND)
    assert first.outcome == "new" and first.baseline == "saved: new case"
    assert "achieved 62.0% of the bandwidth:dram peak" in first.message
    entry = store.entry(TARGET, SUITE, CASE)
    assert entry is not None and entry.band == BAND and len(entry.history) == 1
    assert entry.reference.provenance["device_versions"] == {"driver": "580.65"}
    again = evaluate(store, draw(2))
    assert again.outcome == "pass" and again.baseline == "added as reference session 2 of 3"
    assert "band -10.0%..+10.0%" in again.message        # the stored band is used
    evaluate(store, draw(3))
    settled = evaluate(store, draw(4))
    assert settled.outcome == "pass" and settled.baseline == "kept"


def test_drift_keeps_the_reference_unless_accepted() -> None:
    store = InMemoryStore()
    for seed in (1, 5, 6):                      # three clean sessions settle the reference
        evaluate(store, draw(seed))
    drifted = evaluate(store, draw(2, scale=1.10))
    assert drifted.outcome == "drift" and drifted.fails and drifted.baseline == "kept"
    reference = store.get(TARGET, SUITE, CASE)
    assert reference is not None and reference.median_s == pytest.approx(BASE_S, rel=0.01)

    accepted = evaluate(store, draw(2, scale=1.10), accept_reason="driver 580 -> 590")
    assert accepted.outcome == "drift" and not accepted.fails
    assert accepted.baseline == "accepted: driver 580 -> 590"
    entry = store.entry(TARGET, SUITE, CASE)
    assert entry is not None and entry.reference.median_s == pytest.approx(1.10 * BASE_S, rel=0.01)
    assert [h.reason for h in entry.history] == ["new case", "reference session 2 of 3", "reference session 3 of 3",
                                                 "driver 580 -> 590"]
    assert evaluate(store, draw(3, scale=1.10)).outcome == "pass"


def test_new_references_are_not_saved_from_doubtful_measurements() -> None:
    store = InMemoryStore()
    assert evaluate(store, draw(1), save_new=False).baseline == "not saved: saving new references is off"
    noisy = evaluate(store, draw(1, sigma=0.3, n=30))
    assert noisy.outcome == "inconclusive" and noisy.baseline == "not saved: the measurement is inconclusive"
    disturbed = evaluate(store, draw(1), record=case(draw(1), flags=["steal"]))
    assert disturbed.outcome == "new" and disturbed.baseline == "not saved: measured under steal"
    assert store.get(TARGET, SUITE, CASE) is None
    forced = evaluate(store, draw(1), record=case(draw(1), flags=["steal"]), accept_reason="shared CI runner")
    assert forced.baseline == "accepted: shared CI runner"
    assert store.get(TARGET, SUITE, CASE) is not None


def test_a_reference_of_one_session_does_not_judge_drift_and_an_outlier_session_is_outvoted() -> None:
    store = InMemoryStore()
    evaluate(store, draw(1, scale=1.25))          # the first session ran slow (a neighbour, turbo)
    provisional = evaluate(store, draw(2))
    assert provisional.outcome == "inconclusive" and not provisional.fails
    assert "holds 1 of 3 sessions" in provisional.message
    evaluate(store, draw(3))
    reference = store.get(TARGET, SUITE, CASE)
    assert reference is not None and reference.settled
    assert reference.median_s == pytest.approx(BASE_S, rel=0.01)      # the median of the three sessions
    assert reference.spread == pytest.approx(0.25, abs=0.02)


def test_a_change_within_the_sessions_spread_is_not_drift() -> None:
    samples = draw(1)
    base = reference_of(samples)
    spread_out = Reference(base.median_s, base.ci_s, base.samples_s, 0.01, "hot", "stream", dict(CLEAN), {},
                           "2025-01-01T00:00:00+00:00", (base.median_s * 0.92, base.median_s, base.median_s * 1.08))
    assert judge_against(draw(2, scale=1.10), base).outcome == "drift"
    assert judge_against(draw(2, scale=1.10), spread_out).outcome == "inconclusive"
    # Three sessions 8% either side of their median: a fourth may fall 50% away or more (the 99%
    # prediction interval of a new session, capped at 50%), so 30% slower is not yet drift, 60% is.
    apart = judge_against(draw(2, scale=1.30), spread_out)
    assert apart.outcome == "inconclusive" and apart.detectable_change is not None
    assert 0.50 < apart.detectable_change < 0.65 and f"{apart.detectable_change:.1%}" in apart.message
    assert judge_against(draw(2, scale=1.60), spread_out).outcome == "drift"
    # 6% slower: beyond the 5% threshold but within the 8% its sessions were apart: undecidable
    within = judge_against(draw(2, scale=1.06), spread_out)
    assert within.outcome == "inconclusive" and "up to 8.0% apart" in within.message
    # 2% slower: inside the threshold, but sessions 8% apart cannot rule out a 5% change: not
    # "no drift" (the same 2% against the one tight session is)
    assert judge_against(draw(2, scale=1.02), spread_out).outcome == "inconclusive"
    assert judge_against(draw(2, scale=1.02), base).outcome == "pass"


def test_an_undecided_change_beyond_the_threshold_with_a_cause_is_explained() -> None:
    base = reference_of(draw(1))
    noisy_now = draw(2, scale=1.07, sigma=0.05, n=40)          # ~8% slower, its CI reaches under 5%
    loaded = {**CLEAN, "flags": ["other-load"], "other_cpu_s_per_s": 1.0,
              "top_other_processes": [{"pid": 7, "name": "hog", "cpu_s": 1.0}]}
    assert judge_against(noisy_now, base).outcome == "inconclusive"
    explained = judge_against(noisy_now, base, interval=loaded)
    assert explained.outcome == "explained" and "hog" in (explained.cause or "")


def test_a_bad_threshold_names_the_case_and_leaves_the_store_alone() -> None:
    store = InMemoryStore()
    with pytest.raises(UsageError, match=r"test_triad\[1MiB\]: drift threshold must be a fraction in \(0, 1\)"):
        evaluate(store, draw(1), threshold=1.5)
    assert store.get(TARGET, SUITE, CASE) is None


# ---------------------------------------------------------------- CI unknown, and why a case is too noisy


def test_one_sample_is_inconclusive_with_its_ci_unknown_and_never_saved() -> None:
    one = measurement([BASE_S])
    assert one.ci_s is None and one.rel_ci_halfwidth is None and not one.noise_met
    verdict = judge(one, prediction(), BAND, None, CLEAN, None, PROVENANCE, None)
    assert verdict.outcome == "inconclusive" and not verdict.fails
    assert verdict.message.startswith("inconclusive: CI of the median unknown (1 sample(s) kept; a 95% CI needs at least 6)")
    assert "+-0.0" not in verdict.message and "±0.0" not in verdict.message
    # the store's rule refuses it: no reference from a measurement whose CI is unknown
    store = InMemoryStore()
    saved = evaluate_case(case([BASE_S]), store, TARGET, prediction(), None, PROVENANCE)
    assert saved.baseline == "not saved: the measurement is inconclusive"
    assert store.get(TARGET, SUITE, CASE) is None


def test_five_samples_have_no_95_percent_ci_either() -> None:
    five = measurement(draw(1, n=5))
    assert not five.ci_known
    assert judge(five, None, None, None, CLEAN, None, PROVENANCE, None).outcome == "inconclusive"
    six = measurement(draw(1, n=6))
    assert six.ci_known and six.rel_ci_halfwidth is not None


def test_a_noise_target_looser_than_half_the_threshold_is_named_as_the_reason() -> None:
    samples = draw(1, sigma=0.15, n=40)
    m = measurement(samples)
    assert m.rel_ci_halfwidth is not None and 0.025 < m.rel_ci_halfwidth
    loose = Measurement(m.samples_s, m.inner_loops, m.mode, {}, 3, "noise-target", 0.5, 0.03 + m.rel_ci_halfwidth,
                        0.95, m.median_s, m.ci_s, m.iqr_s, m.rel_ci_halfwidth, m.outliers, 1e-9)
    assert loose.noise_met
    verdict = judge(loose, None, None, None, CLEAN, None, PROVENANCE, None)
    assert verdict.outcome == "inconclusive" and "too noisy to decide" in verdict.message
    assert "is looser than +-2.50%, half the 5.0% threshold" in verdict.message
    missed = Measurement(m.samples_s, m.inner_loops, m.mode, {}, 3, "time-budget", 0.5, 0.01, 0.95, m.median_s,
                         m.ci_s, m.iqr_s, m.rel_ci_halfwidth, m.outliers, 1e-9,
                         notes=("noise target +-1.0% out of reach in the 500 ms budget here: ...",))
    reason = judge(missed, None, None, None, CLEAN, None, PROVENANCE, None).message
    assert "why: noise target +-1.0% out of reach in the 500 ms budget here" in reason


def test_the_zen3_runs_one_sample_cases_are_now_refused_as_references() -> None:
    """The recorded Zen 3 run saved its one-sample cases (bf16 GEMMs of 48 s and 2.4 s a call,
    the 256 MiB reduce-scatter) as references with a "+-0.0%" CI; judged again they are not."""
    from pathlib import Path

    from pytest_charz.run import load_run

    run = load_run(str(Path(__file__).parent / "data" / "runs" / "amd-epyc-zen3-kvm-2vcpu.run.json.gz"))
    ones = [c for c in run.cases if len(c.measurement.samples_s) == 1]
    assert {c.id.rsplit("::", 1)[-1] for c in ones} >= {"test_gemm_cpu[torch-bf16-2048]", "test_gemm_cpu[torch-bf16-1024]"}
    saved_then = {c.id.rsplit("::", 1)[-1] for c in ones if c.verdict is not None and c.verdict.baseline == "saved: new case"}
    assert {"test_gemm_cpu[torch-bf16-2048]", "test_gemm_cpu[torch-bf16-1024]"} <= saved_then     # what happened then
    store = InMemoryStore()
    for c in ones:
        assert not c.measurement.noise_met and not c.measurement.ci_known
        verdict = evaluate_case(c, store, "cpu-zen3", None, None, PROVENANCE)
        assert verdict.outcome == "inconclusive" and "CI of the median unknown" in verdict.message
        assert verdict.baseline == "not saved: the measurement is inconclusive"
        assert store.get("cpu-zen3", c.suite, c.id) is None
