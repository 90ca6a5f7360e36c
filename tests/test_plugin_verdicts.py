"""Verdicts end to end: a tiny suite whose cost per call (on a fake clock, with seeded noise) is
set by the test, run several times against the same baseline store."""
from __future__ import annotations

import json

import pytest

SUITE = '''
import os
import numpy as np
import pytest
from pytest_charz import Work
from pytest_charz.measure import clock

@pytest.mark.charz(noise=0.005, max_time=1.0)
def test_case(charz):
    fake = clock.current()
    cost_ns = float(os.environ["CHARZ_TEST_COST_NS"])
    sigma = float(os.environ.get("CHARZ_TEST_SIGMA", "0.01"))
    rng = np.random.default_rng(int(os.environ.get("CHARZ_TEST_SEED", "1")))
    charz.measure(lambda: fake.advance(cost_ns * rng.lognormal(0.0, sigma)),
                  work=Work(flops=1e6, dtype="fp64", op="fma"))
'''


@pytest.fixture
def suite(pytester, fake_clock, quiet_host, monkeypatch):
    pytester.makepyfile(test_suite=SUITE)

    def run(cost_ns, *args, sigma=0.01, seed=1):
        monkeypatch.setenv("CHARZ_TEST_COST_NS", str(cost_ns))
        monkeypatch.setenv("CHARZ_TEST_SIGMA", str(sigma))
        monkeypatch.setenv("CHARZ_TEST_SEED", str(seed))
        result = pytester.runpytest("--target=cpu", "--charz-out=run.json", *args)
        case = json.loads((pytester.path / "run.json").read_text())["cases"][0]
        return result, case

    return run


def settle(suite, cost_ns=100_000):
    """Three clean sessions: the reference settles and drift is judged from then on."""
    for seed in (11, 12, 13):
        suite(cost_ns, seed=seed)


def baseline_files(pytester):
    return sorted((pytester.path / "baselines").rglob("*.json"))


def test_first_run_saves_a_reference_and_the_same_cost_passes(suite, pytester):
    result, case = suite(100_000)
    result.assert_outcomes(passed=1)
    assert case["verdict"]["outcome"] == "new"
    assert "saved: new case" in case["verdict"]["message"]
    files = baseline_files(pytester)
    assert len(files) == 1 and files[0].parent.name.startswith("cpu-")
    result, case = suite(100_000, seed=2)
    result.assert_outcomes(passed=1)
    assert case["verdict"]["outcome"] == "pass"
    assert case["prediction"]["model"].startswith("opclass")  # the default model


def test_ten_percent_more_work_is_drift_and_fails_with_the_evidence(suite):
    settle(suite)
    result, case = suite(110_000, seed=2)
    result.assert_outcomes(failed=1)
    assert case["verdict"]["outcome"] == "drift"
    assert case["verdict"]["ratio"] == pytest.approx(1.10, rel=0.01)
    result.stdout.fnmatch_lines(["*charz drift*", "verdicts: 1 drift"])
    assert "reference" in result.stdout.str()


def test_drift_is_accepted_only_with_a_reason_kept_in_history(suite, pytester):
    settle(suite)
    result, case = suite(110_000, "--charz-accept=new BLAS build", seed=2)
    result.assert_outcomes(passed=1)
    stored = json.loads(baseline_files(pytester)[0].read_text())
    entry = next(iter(stored["cases"].values()))
    assert [h["reason"] for h in entry["history"]] == ["new case", "reference session 2 of 3",
                                                       "reference session 3 of 3", "new BLAS build"]
    assert entry["reference"]["median_s"] == pytest.approx(110e-6, rel=0.01)
    result, case = suite(110_000, seed=3)
    assert case["verdict"]["outcome"] == "pass"


def test_drift_under_interfering_load_is_explained(suite, monkeypatch):
    settle(suite)
    from pytest_charz.measure import conditions

    readings = iter([0.0, 5.0] * 10)
    monkeypatch.setattr(conditions, "read_busy_processes",
                        lambda *a, **k: ({"pid": 4242, "name": "stream-hog", "cpu_s": next(readings)},))
    result, case = suite(110_000, seed=2)
    result.assert_outcomes(passed=1)
    assert case["verdict"]["outcome"] == "explained"
    assert "other-load" in case["verdict"]["cause"] and "stream-hog" in case["verdict"]["cause"]


def test_too_noisy_is_inconclusive_and_fails_only_when_strict(suite):
    settle(suite)
    # ~100 samples of a very noisy cost: the CI of the median is far wider than the threshold
    result, case = suite(100_000, "--charz-max-time=0.012", sigma=0.5, seed=2)
    result.assert_outcomes(passed=1)
    assert case["verdict"]["outcome"] == "inconclusive"
    assert case["measurement"]["rel_ci_halfwidth"] > 0.025
    result, case = suite(100_000, "--charz-max-time=0.012", "--charz-strict", sigma=0.5, seed=3)
    assert case["verdict"]["outcome"] == "inconclusive"
    result.assert_outcomes(failed=1)


def test_a_corrupt_baseline_names_the_file_and_is_not_overwritten(suite, pytester):
    suite(100_000)
    path = baseline_files(pytester)[0]
    path.write_text("{ this is not json")
    result, _ = suite(100_000, seed=2)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{path.name}*"])
    assert path.read_text() == "{ this is not json"


def test_quick_runs_do_not_save_references(suite, pytester):
    result, case = suite(100_000, "--charz-quick")
    assert case["verdict"]["outcome"] == "new"
    assert baseline_files(pytester) == []


def test_drift_after_the_core_clock_changed_is_explained(suite, monkeypatch):
    settle(suite)                                    # reference measured with the core at 3000 MHz
    from pytest_charz.measure import conditions

    monkeypatch.setattr(conditions, "read_core_clock_mhz", lambda: 2700.0)
    result, case = suite(110_000, seed=2)           # 11% slower clock: explains up to 11% + threshold
    result.assert_outcomes(passed=1)
    assert case["verdict"]["outcome"] == "explained"
    assert "3000 -> 2700 MHz" in case["verdict"]["cause"]


def test_a_clock_change_during_the_case_is_flagged(suite, monkeypatch):
    from pytest_charz.measure import conditions

    readings = iter([3000.0, 3600.0] * 10)
    monkeypatch.setattr(conditions, "read_core_clock_mhz", lambda: next(readings))
    result, case = suite(100_000, "--charz-no-save")
    assert "cpu-clock-changed" in case["flags"]
    assert case["conditions"]["interval"]["cpu_freq_change"] == pytest.approx(0.2)


def write_calibration(pytester, band):
    """A calibration of the default model on this host with the given compute-regime band."""
    from pytest_charz.store import store_target_key
    from pytest_charz.calibration.efficiency import ModelFit
    from pytest_charz.calibration.file import Calibration
    from pytest_charz.models.ceilings import Ceilings
    from pytest_charz.formats import atomic_write_json
    from pytest_charz.targets.catalogue import resolve

    spec = resolve("cpu")
    from pytest_charz.models.registry import DEFAULT_MODEL

    calfile = Calibration(target="cpu", model=DEFAULT_MODEL, calibration=ModelFit(DEFAULT_MODEL),
                              ceilings=Ceilings.from_spec(spec),
                              bands={"compute": {"lo": band[0], "hi": band[1], "n": 20, "level": 0.9,
                                                 "coverage": 0.9, "method": "conformal"}},
                              fitted_on={"runs": [], "cases": []}, held_out=(), created="2026-11-30T00:00:00+00:00")
    path = pytester.path / "baselines" / store_target_key(spec) / f"calibration-{DEFAULT_MODEL}.json"
    atomic_write_json(str(path), calfile.to_json())
    return calfile


def test_a_measurement_outside_the_validated_band_is_model_error(suite, pytester):
    calfile = write_calibration(pytester, (-0.10, 0.10))
    from pytest_charz import Work

    predicted_s = calfile.predict(Work(flops=1e6, dtype="fp64", op="fma")).time_s
    result, case = suite(3 * predicted_s * 1e9)                   # three times the prediction
    result.assert_outcomes(failed=1)
    assert case["verdict"]["outcome"] == "model-error"
    assert case["verdict"]["model_error"] == pytest.approx(2.0, rel=0.05)
    result.stdout.fnmatch_lines(["*charz model-error*", "*predicted*"])
    result, case = suite(predicted_s * 1e9, "--charz-no-save", seed=5)   # at the prediction: inside the band
    assert case["verdict"]["outcome"] != "model-error"
    assert case["verdict"]["model_error"] == pytest.approx(0.0, abs=0.05)


def test_a_marker_threshold_outside_0_1_fails_the_case_naming_it(pytester, fake_clock, quiet_host, monkeypatch):
    pytester.makepyfile(test_suite=SUITE.replace("max_time=1.0)", "max_time=1.0, threshold=1.5)"))
    monkeypatch.setenv("CHARZ_TEST_COST_NS", "100000")
    result = pytester.runpytest("--target=cpu", "--charz-no-save")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_suite.py::test_case: drift threshold must be a fraction in (0, 1)*1.5*"])
    assert not (pytester.path / "baselines").exists()


CLOCKED_CONFTEST = '''
import importlib
import os

import pytest


class ClockedPace:
    """The CPU's reference kernel on the fake clock: 30 us at clock 1.0 (CHARZ_TEST_CLOCK)."""

    kind = "core-clock"
    units = 100_000.0
    unit = "adds"

    def run_once(self):
        from pytest_charz.measure import clock

        clock.current().advance(30_000 / float(os.environ["CHARZ_TEST_CLOCK"]))


@pytest.fixture(autouse=True)
def clocked_reference_kernel(monkeypatch):
    # the module the plugin runs in this session (pytester re-imports the package per run)
    context = importlib.import_module("pytest_charz.context")
    monkeypatch.setattr(context, "reference_kernel", lambda backend, work: ClockedPace())
'''


@pytest.fixture
def clocked_suite(suite, pytester, monkeypatch):
    """The suite on a machine whose core clock moves between sessions: the case and the reference
    kernel both take 1 / clock as long."""
    pytester.makeconftest(CLOCKED_CONFTEST)

    def run(clock, work=1.0, seed=1, *args):
        monkeypatch.setenv("CHARZ_TEST_CLOCK", str(clock))
        return suite(100_000 * work / clock, *args, seed=seed)

    return run


def test_a_session_on_a_slower_clock_passes_on_normalised_times_and_a_regression_fails(clocked_suite):
    for seed, clock in ((11, 1.0), (12, 0.9), (13, 1.1)):
        clocked_suite(clock, seed=seed)
    # An unchanged case in a process on a 28% slower clock: 39% slower raw, unchanged normalised.
    result, case = clocked_suite(0.72, seed=2)
    result.assert_outcomes(passed=1)
    verdict = case["verdict"]
    assert verdict["outcome"] == "pass" and verdict["basis"] == "normalised", verdict["message"]
    assert verdict["raw_ratio"] == pytest.approx(1 / 0.72, rel=0.02)
    assert verdict["normalised_ratio"] == pytest.approx(1.0, abs=0.01)
    assert case["measurement"]["pace"]["kind"] == "core-clock"
    # 10% more work on a 15% faster clock: faster raw, a drift normalised, and it fails.
    result, case = clocked_suite(1.15, 1.10, 3)
    result.assert_outcomes(failed=1)
    assert case["verdict"]["outcome"] == "drift"
    assert case["verdict"]["normalised_ratio"] == pytest.approx(1.10, abs=0.01)
    assert case["verdict"]["detectable_change"] is not None and case["verdict"]["detectable_change"] < 0.10
    result.stdout.fnmatch_lines(["*charz drift*normalised by the core-clock reference kernel*"])
