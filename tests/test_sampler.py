"""The sampler on a simulated device and a fake clock: deterministic stopping, calibration,
cold samples and discard accounting."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from pytest_charz.errors import UsageError
from pytest_charz.measure.sampler import Measurement, SamplerSettings, sample


def test_steady_function_stops_on_noise_target(fake_device):
    device = fake_device(cost_ns=lambda: 2_000)           # 2 us a call, no noise
    m = sample(device, lambda: None, SamplerSettings(noise_target=0.01, max_time_s=5.0))
    assert m.stop_reason == "noise-target"
    assert m.noise_met
    assert m.median_s == pytest.approx(2e-6)
    assert len(m.samples_s) >= 10
    # The batch was grown until it lasts at least min_batch_s (1e-4 s) = 50 calls.
    assert m.inner_loops >= 50
    assert m.inner_loops * 2e-6 >= 1e-4


def test_noisy_function_runs_out_of_budget_and_is_flagged(fake_device):
    rng = np.random.default_rng(7)
    device = fake_device(cost_ns=lambda: 1_000_000 * rng.lognormal(0.0, 0.5))
    m = sample(device, lambda: None, SamplerSettings(noise_target=0.001, max_time_s=0.5))
    assert m.stop_reason == "time-budget"
    assert not m.noise_met
    assert m.rel_ci_halfwidth > 0.001
    assert m.elapsed_s == pytest.approx(0.5, abs=0.02)


def test_cold_mode_flushes_before_every_sample_and_uses_single_calls(fake_device):
    device = fake_device(cost_ns=lambda: 50_000)
    m = sample(device, lambda: None, SamplerSettings(mode="cold", max_time_s=1.0))
    assert m.inner_loops == 1
    assert device.flushes == m.warmup_calls + len(m.samples_s)


def test_discarded_samples_are_counted_not_hidden(fake_device):
    device = fake_device(cost_ns=lambda: 10_000,
                         discard=lambda n: "sm-clock-below-threshold" if n % 3 == 0 else None)
    m = sample(device, lambda: None, SamplerSettings(max_time_s=2.0))
    assert m.discarded["sm-clock-below-threshold"] >= 1
    assert m.to_json()["taken"] == len(m.samples_s) + m.discarded_total


def test_all_samples_discarded_gives_no_median(fake_device):
    device = fake_device(cost_ns=lambda: 10_000, discard=lambda n: "throttled")
    m = sample(device, lambda: None, SamplerSettings(max_time_s=1.0))
    assert m.stop_reason == "all-discarded"
    assert m.median_s is None and not m.noise_met


def test_max_samples_cap(fake_device):
    costs = itertools.cycle([1_000_000, 3_000_000])     # alternating: the CI never closes
    device = fake_device(cost_ns=lambda: next(costs))
    m = sample(device, lambda: None, SamplerSettings(noise_target=1e-6, max_samples=40, max_time_s=100.0,
                                                     min_batch_s=0.0))
    assert m.stop_reason == "max-samples"
    assert len(m.samples_s) == 40


def test_measurement_json_round_trip(fake_device):
    device = fake_device(cost_ns=lambda: 5_000)
    m = sample(device, lambda: None, SamplerSettings(max_time_s=0.5))
    again = Measurement.from_json(m.to_json())
    assert again == m


@pytest.mark.parametrize("bad", [dict(noise_target=0), dict(mode="warm"), dict(max_time_s=-1),
                                 dict(min_samples=0), dict(ci_level=1.5)])
def test_bad_settings_are_usage_errors(bad):
    with pytest.raises(UsageError):
        SamplerSettings(**bad)


@pytest.mark.parametrize("mode", ["hot", "cold"])
def test_every_batch_hands_the_case_work_to_the_device(fake_device, mode):
    from pytest_charz.work import Work

    device = fake_device(cost_ns=lambda: 20_000)
    work = Work(flops=4e6, dtype="fp32", bytes=1e5, op="fma")
    m = sample(device, lambda: None, SamplerSettings(mode=mode, max_time_s=0.5), work=work)
    # warm-up, calibration and sampling batches: each one saw the case's Work, and only it
    assert len(device.works) >= m.warmup_calls + len(m.samples_s)
    assert all(seen is work for seen in device.works)


def test_without_work_the_device_gets_an_empty_work(fake_device):
    from pytest_charz.work import Work

    device = fake_device(cost_ns=lambda: 20_000)
    sample(device, lambda: None, SamplerSettings(max_time_s=0.2))
    assert device.works and all(seen == Work() for seen in device.works)


# ---------------------------------------------------------------- budgets that hold


def test_a_call_longer_than_the_whole_budget_stops_the_case_after_that_call(fake_device, fake_clock):
    from pytest_charz.measure.sampler import OverBudget

    device = fake_device(cost_ns=lambda: 48e9)              # one call: 48 s
    start = fake_clock.now_ns()
    with pytest.raises(OverBudget, match=r"one call 48 s: over the 2 s budget") as raised:
        sample(device, lambda: None, SamplerSettings(max_time_s=2.0))
    assert len(device.works) == 1                           # that call only, no warm-up or sizing after it
    assert (fake_clock.now_ns() - start) / 1e9 == pytest.approx(48.0)
    assert raised.value.call_s == pytest.approx(48.0) and raised.value.budget_s == 2.0


@pytest.mark.parametrize("call_s", [2e-6, 1e-3, 0.05, 0.3, 0.6, 0.99])
@pytest.mark.parametrize("mode", ["hot", "cold"])
def test_a_case_ends_within_twice_its_budget_whatever_one_call_costs(fake_device, call_s, mode):
    device = fake_device(cost_ns=lambda: call_s * 1e9)
    m = sample(device, lambda: None, SamplerSettings(max_time_s=1.0, noise_target=1e-9, mode=mode))
    assert m.elapsed_s <= 2.0 * 1.0 + 1e-9
    assert m.samples_s
    if m.elapsed_s > 1.0 + max(call_s * m.inner_loops, 1e-3) + 1e-9:
        # more than one batch past the budget only to reach the samples a CI needs, and no further
        assert len(m.samples_s) <= 6
        assert m.elapsed_s + call_s > 2.0


def test_a_call_of_a_tenth_of_the_budget_still_gets_a_ci(fake_device):
    device = fake_device(cost_ns=lambda: 0.1e9)             # budget 0.4 s: 3 samples, then 3 more
    m = sample(device, lambda: None, SamplerSettings(max_time_s=0.4, noise_target=1e-9))
    assert len(m.samples_s) == 6 and m.ci_known
    assert m.elapsed_s == pytest.approx(0.7)


def test_a_warm_up_call_as_long_as_a_batch_is_not_timed_again_for_sizing(fake_device):
    device = fake_device(cost_ns=lambda: 0.3e9)             # 0.3 s a call, far above min_batch_s
    m = sample(device, lambda: None, SamplerSettings(max_time_s=1.0, noise_target=1e-9))
    assert m.inner_loops == 1
    assert len(device.works) == m.warmup_calls + len(m.samples_s)


def test_one_sample_has_an_unknown_ci_and_never_meets_the_noise_target(fake_device):
    device = fake_device(cost_ns=lambda: 0.7e9)             # warm-up 0.7 s, one sample; a second would end past 2x
    m = sample(device, lambda: None, SamplerSettings(max_time_s=1.0))
    assert len(m.samples_s) == 1
    assert m.ci_s is None and m.rel_ci_halfwidth is None
    assert not m.ci_known and not m.noise_met
    assert m.to_json()["noise_met"] is False and m.to_json()["rel_ci_halfwidth"] is None
    assert any("CI unknown: 1 sample(s)" in note and "at least 6" in note for note in m.notes)
    assert Measurement.from_json(m.to_json()) == m


def test_an_old_one_sample_record_with_a_zero_width_ci_is_not_noise_met(fake_device):
    device = fake_device(cost_ns=lambda: 0.7e9)
    data = sample(device, lambda: None, SamplerSettings(max_time_s=1.0)).to_json()
    median = data["samples_s"][0]
    # what runs recorded before: the range of one sample as its "CI", a half-width of 0.0
    data.update(ci_s=[median, median], rel_ci_halfwidth=0.0, noise_met=True)
    old = Measurement.from_json(data)
    assert not old.ci_known and not old.noise_met


def test_the_noise_check_waits_for_enough_samples_for_a_ci(fake_device):
    device = fake_device(cost_ns=lambda: 2_000)            # no noise at all: any CI is zero-wide
    m = sample(device, lambda: None, SamplerSettings(min_samples=1, min_time_s=0.0, max_time_s=5.0))
    assert m.stop_reason == "noise-target"
    assert len(m.samples_s) == 6                            # 95% needs 6; fewer have no CI


def test_a_target_out_of_reach_says_what_would_reach_it(fake_device):
    rng = np.random.default_rng(3)
    device = fake_device(cost_ns=lambda: 1_000_000 * rng.lognormal(0.0, 0.4))
    m = sample(device, lambda: None, SamplerSettings(noise_target=0.005, max_time_s=0.5))
    assert m.stop_reason == "time-budget" and not m.noise_met
    note = next(note for note in m.notes if "out of reach" in note)
    assert f"{len(m.samples_s)} samples" in note and "+-0.5%" in note
    wanted = int(note.split("about ")[1].split(" samples")[0])
    assert wanted == pytest.approx(len(m.samples_s) * (m.rel_ci_halfwidth / 0.005) ** 2, rel=0.01)
