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
