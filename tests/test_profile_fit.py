"""Level detection, latency staircases and alpha-beta fits on synthetic curves of known parameters."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_charz.curves.links import fit_alpha_beta, link_figures
from pytest_charz.curves.plateaus import detect_levels
from pytest_charz.errors import UsageError

KIB = 1024
MIB = 1024 * KIB
CAPACITIES = [48 * KIB, 2 * MIB, 32 * MIB]


def staircase(sizes: np.ndarray, capacities: list[float], levels: list[float], width: float = 0.12) -> np.ndarray:
    """Levels joined by smooth steps (logistic in log size) that start at each capacity."""
    log_y = np.full(sizes.shape, math.log(levels[0]))
    for capacity, (before, after) in zip(capacities, zip(levels, levels[1:])):
        weight = 1 / (1 + np.exp(-(np.log(sizes) - math.log(capacity) - 0.3) / width))
        log_y += weight * (math.log(after) - math.log(before))
    return np.exp(log_y)


def within_factor(found: float, expected: float, factor: float = 2.0) -> bool:
    return expected / factor <= found <= expected * factor


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_bandwidth_plateaus_give_capacities_within_a_factor_of_two(seed):
    rng = np.random.default_rng(seed)
    sizes = np.geomspace(4 * KIB, 1024 * MIB, 36)
    levels = [400e9, 150e9, 60e9, 20e9]
    bandwidth = staircase(sizes, CAPACITIES, levels) * np.exp(rng.normal(0, 0.04, sizes.size))
    fit = detect_levels(sizes, bandwidth)
    assert len(fit.boundaries) == 3
    for boundary, capacity in zip(fit.boundaries, CAPACITIES):
        assert within_factor(boundary.capacity_bytes, capacity)
        assert boundary.lower_size_bytes < boundary.capacity_bytes <= boundary.upper_size_bytes
        assert boundary.ratio < 0.8
    for plateau, level in zip(fit.plateaus, levels):
        assert plateau.value == pytest.approx(level, rel=0.08)


def test_sizes_in_any_order_give_the_same_levels():
    sizes = np.geomspace(4 * KIB, 1024 * MIB, 30)
    bandwidth = staircase(sizes, CAPACITIES, [400e9, 150e9, 60e9, 20e9])
    order = np.random.default_rng(5).permutation(sizes.size)
    shuffled = detect_levels(sizes[order], bandwidth[order])
    ordered = detect_levels(sizes, bandwidth)
    assert [b.capacity_bytes for b in shuffled.boundaries] == pytest.approx([b.capacity_bytes for b in ordered.boundaries])
    assert list(shuffled.sizes_bytes) == sorted(shuffled.sizes_bytes)


def test_latency_staircase_steps_up():
    rng = np.random.default_rng(7)
    sizes = np.geomspace(4 * KIB, 1024 * MIB, 40)
    latency_s = staircase(sizes, CAPACITIES, [1.2e-9, 4.5e-9, 16e-9, 95e-9]) * np.exp(rng.normal(0, 0.03, sizes.size))
    fit = detect_levels(sizes, latency_s)
    assert [p.value for p in fit.plateaus] == pytest.approx([1.2e-9, 4.5e-9, 16e-9, 95e-9], rel=0.06)
    assert all(b.ratio > 1.25 for b in fit.boundaries)
    assert all(within_factor(b.capacity_bytes, c) for b, c in zip(fit.boundaries, CAPACITIES))


def test_one_size_per_level_still_finds_every_step():
    sizes = np.array([16 * KIB, 256 * KIB, 4 * MIB, 64 * MIB, 512 * MIB])
    bandwidth = np.array([400e9, 150e9, 60e9, 20e9, 20.5e9])
    fit = detect_levels(sizes, bandwidth)
    assert [p.value for p in fit.plateaus][:3] == pytest.approx([400e9, 150e9, 60e9])
    # No point lies inside a step: the capacity is the geometric midpoint of the bracket.
    assert fit.boundaries[0].capacity_bytes == pytest.approx(math.sqrt(16 * KIB * 256 * KIB))


def test_flat_noisy_curve_has_one_level():
    rng = np.random.default_rng(3)
    sizes = np.geomspace(4 * KIB, 64 * MIB, 30)
    fit = detect_levels(sizes, 100e9 * np.exp(rng.normal(0, 0.05, sizes.size)))
    assert len(fit.plateaus) == 1 and fit.boundaries == ()


def test_small_steps_are_not_levels():
    sizes = np.geomspace(4 * KIB, 64 * MIB, 24)
    bandwidth = np.where(sizes < MIB, 100e9, 90e9)     # a 10% drop: below the 20% threshold
    assert detect_levels(sizes, bandwidth).boundaries == ()
    assert len(detect_levels(sizes, bandwidth, min_step_ratio=1.05).boundaries) == 1


@settings(max_examples=30, deadline=None)
@given(capacity_log2=st.integers(min_value=14, max_value=28), ratio=st.floats(min_value=1.5, max_value=20))
def test_one_sharp_step_is_found_near_its_capacity(capacity_log2, ratio):
    sizes = np.geomspace(2**10, 2**32, 45)
    capacity = 2.0**capacity_log2
    bandwidth = np.where(sizes <= capacity, 100e9, 100e9 / ratio)
    fit = detect_levels(sizes, bandwidth)
    assert len(fit.boundaries) == 1
    assert within_factor(fit.boundaries[0].capacity_bytes, capacity)


@pytest.mark.parametrize("factor", [1.35, 0.6])
def test_one_disturbed_point_is_not_a_level(factor):
    # A point above (or below) both neighbouring levels, as a disturbed case gives, joins a level.
    sizes = np.geomspace(16 * KIB, 2048 * MIB, 35)
    bandwidth = staircase(sizes, CAPACITIES, [550e9, 320e9, 50e9, 28e9])
    spike = int(np.searchsorted(sizes, 3 * MIB))      # on the L2-to-L3 step, and also inside a plateau
    for index in (spike, 10):
        disturbed = bandwidth.copy()
        disturbed[index] *= factor
        fit = detect_levels(sizes, disturbed)
        assert len(fit.plateaus) == 4, [p.value for p in fit.plateaus]
        for boundary, capacity in zip(fit.boundaries, CAPACITIES):
            assert within_factor(boundary.capacity_bytes, capacity)


def test_detect_levels_rejects_bad_input():
    with pytest.raises(UsageError, match="positive"):
        detect_levels([1.0, 2.0], [1.0, -1.0])
    with pytest.raises(UsageError, match="equal length"):
        detect_levels([1.0, 2.0], [1.0])
    with pytest.raises(UsageError, match="min_step_ratio"):
        detect_levels([1.0, 2.0], [1.0, 1.0], min_step_ratio=1.0)


def test_alpha_beta_recovers_latency_and_bandwidth():
    rng = np.random.default_rng(11)
    sizes = np.geomspace(64, 1 << 30, 28)
    times = (2.0e-6 + sizes / 25e9) * np.exp(rng.normal(0, 0.02, sizes.size))
    fit = fit_alpha_beta(sizes, times)
    assert fit.latency_s == pytest.approx(2.0e-6, rel=0.03)
    assert fit.bandwidth_bytes_per_s == pytest.approx(25e9, rel=0.03)
    assert fit.r2 > 0.99 and fit.points == 28
    assert fit.predict_s(1e6) == pytest.approx(2.0e-6 + 1e6 / 25e9, rel=0.03)


def test_alpha_beta_weights_small_sizes():
    # Unweighted least squares would let the 1 GiB points swamp the microsecond ones.
    sizes = np.array([8, 64, 512, 4096, 1 << 20, 1 << 30], dtype=float)
    times = 5e-6 + sizes / 10e9
    fit = fit_alpha_beta(sizes, times)
    assert fit.latency_s == pytest.approx(5e-6, rel=1e-6)
    assert fit.bandwidth_bytes_per_s == pytest.approx(10e9, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0)


def test_alpha_beta_never_returns_a_negative_latency():
    sizes = np.array([1e6, 2e6, 4e6, 8e6])
    times = sizes / 10e9 - 1e-6          # pure bandwidth with a spurious negative offset
    fit = fit_alpha_beta(sizes, times)
    assert fit.latency_s == 0.0
    assert fit.bandwidth_bytes_per_s == pytest.approx(10e9, rel=0.15)


def test_alpha_beta_without_growth_has_no_bandwidth():
    fit = fit_alpha_beta([1e3, 1e6, 1e9], [3e-6, 3e-6, 2.9e-6])
    assert fit.bandwidth_bytes_per_s is None
    assert fit.latency_s == pytest.approx(2.97e-6, rel=0.02)


def test_alpha_beta_needs_two_sizes():
    with pytest.raises(UsageError, match="two distinct sizes"):
        fit_alpha_beta([1e6, 1e6], [1e-3, 1.1e-3])
    with pytest.raises(UsageError, match="times"):
        fit_alpha_beta([1e3, 1e6], [0.0, 1e-3])


def test_link_figures_take_bandwidth_from_the_largest_transfers():
    sizes = [4 * KIB * 4**i for i in range(10)]                        # 4 KiB .. 1 GiB
    times = [3e-6 + s / (40e9 if s <= 4 * MIB else 12e9) for s in sizes]
    link = link_figures(sizes, times)
    assert link.bandwidth_bytes_per_s == pytest.approx(12e9, rel=0.01)
    assert link.large_transfers == 3 and link.large_from_bytes == 64 * MIB
    assert link.fit is not None and link.fit.bandwidth_bytes_per_s > 15e9   # the single line overshoots
    exact = link_figures([1e3, 1e6, 1e9], [2e-6 + s / 25e9 for s in (1e3, 1e6, 1e9)])
    assert (exact.latency_s, exact.bandwidth_bytes_per_s) == (pytest.approx(2e-6), pytest.approx(25e9))


def test_link_bandwidth_ignores_large_transfers_that_are_mostly_latency():
    # an H200's device-to-device copies (run of the GPU check): the 16 MiB copy took 7.1 us, the
    # fitted latency is 5.6 us; counted, it read 11.6 TB/s and the median of the two 6.8 TB/s
    sizes = [4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB]
    rates = [0.620e9, 10.19e9, 164.2e9, 2365e9, 1938e9]
    link = link_figures(sizes, [s / r for s, r in zip(sizes, rates)])
    assert link.latency_s == pytest.approx(5.65e-6, rel=0.02)
    assert link.large_transfers == 1
    assert link.bandwidth_bytes_per_s == pytest.approx(256 * MIB / (256 * MIB / 1938e9 - link.latency_s))
    assert link.bandwidth_bytes_per_s < 2.1e12


def test_link_figures_with_one_size_or_flat_times():
    one = link_figures([1e6, 1e6], [1e-4, 2e-4])
    assert one.latency_s is None and one.fit is None and one.bandwidth_bytes_per_s == pytest.approx(1e10)
    flat = link_figures([1e3, 1e6], [5e-6, 5e-6])
    assert flat.bandwidth_bytes_per_s is None and flat.latency_s == pytest.approx(5e-6)


# -- levels read from both curves and the OS's caches (profile.consensus) -------------------------
def _consensus_profile(bandwidth_capacities, bandwidth_levels, latency_capacities, latency_levels, caches,
                       dip=None):
    """The profile of a run with a 2-thread read sweep and a page-local chase, with a spec whose
    l1 and l2 are per core and l3 shared (``caches``: the OS's capacities in bytes)."""
    from test_profile import make_case, run_dict

    from pytest_charz.profile import build_profile
    from pytest_charz.records import Run
    from pytest_charz.targets.spec import Figure, MemoryLevel, TargetSpec

    rng = np.random.default_rng(3)
    sizes = np.geomspace(16 * KIB, 1024 * MIB, 34)
    bandwidth = staircase(sizes, bandwidth_capacities, bandwidth_levels) * np.exp(rng.normal(0, 0.015, sizes.size))
    if dip is not None:
        low, high, factor = dip
        bandwidth[(sizes >= low) & (sizes <= high)] *= factor
    latency = staircase(sizes, latency_capacities, latency_levels)
    cases = []
    for size, rate, per_load in zip(sizes, bandwidth, latency):
        size = float(round(size))
        cases.append(make_case(f"test_read[{int(size)}]", "read", 1e9 / rate, bytes_={"l1": 1e9},
                               shape={"working_set_bytes": size, "threads": 2}))
        cases.append(make_case(f"test_chase[page-local-{int(size)}]", "chase", per_load * 1e6, accesses=1_000_000,
                               shape={"working_set_bytes": size, "line_bytes": 64, "pattern": "page-local"}))
    data = run_dict(cases)
    spec = TargetSpec.from_json(data["target"]["spec"])
    memory = tuple(MemoryLevel(name, name.upper(), scope, Figure(float(capacity), "sysfs"), None, None)
                   for name, scope, capacity in zip(("l1", "l2", "l3"), ("unit", "unit", "socket"), caches))
    data["target"]["spec"] = TargetSpec(spec.identity, spec.compute, memory + (spec.memory[-1],), spec.host_link,
                                        spec.peer_links, spec.power, spec.sources, spec.origin).to_json()
    return build_profile([Run.from_json(data, "synthetic")], ["r.json"])


def _value(profile, name):
    return next(c for c in profile["ceilings"] if c["name"] == name)


def test_xeon_shaped_curves_give_each_level_and_a_guest_sized_l3():
    # A Xeon guest: L1 48 KiB and L2 2 MiB per core, an L3 the OS says is 480 MiB (the host's) of
    # which this guest's curves both see about 30 MiB.
    found = _consensus_profile([2 * 48 * KIB, 2 * 2 * MIB, 30 * MIB], [1.2e12, 0.45e12, 0.2e12, 0.03e12],
                               [48 * KIB, 2 * MIB, 30 * MIB], [1.2e-9, 4.5e-9, 30e-9, 120e-9],
                               (48 * KIB, 2 * MIB, 480 * MIB))
    assert within_factor(_value(found, "capacity:l1")["value"], 48 * KIB)
    assert within_factor(_value(found, "capacity:l2")["value"], 2 * MIB)
    l3 = _value(found, "capacity:l3")
    assert within_factor(l3["value"], 30 * MIB, 1.5)
    assert any("sees only part of the cache" in c for c in l3["caveats"])
    bandwidths = [_value(found, f"bandwidth:{lv}")["value"] for lv in ("l1", "l2", "l3", "dram")]
    assert bandwidths == sorted(bandwidths, reverse=True)
    assert not any("not physical" in c for c in found["caveats"])


def test_a_bandwidth_dip_inside_a_level_is_not_a_boundary():
    # The recorded Zen 5 shape: L1 48 KiB, L2 1 MiB per core, L3 32 MiB; the 2-thread read curve
    # dips inside L2 (128-256 KiB of total working set) and rises again before L2 ends.
    found = _consensus_profile([2 * 48 * KIB, 2 * 1 * MIB, 24 * MIB], [1.08e12, 0.5e12, 0.22e12, 0.06e12],
                               [48 * KIB, 1 * MIB, 24 * MIB], [1.2e-9, 3.5e-9, 11e-9, 130e-9],
                               (48 * KIB, 1 * MIB, 32 * MIB), dip=(120 * KIB, 300 * KIB, 0.55))
    for level, capacity in (("l1", 48 * KIB), ("l2", 1 * MIB), ("l3", 32 * MIB)):
        assert within_factor(_value(found, f"capacity:{level}")["value"], capacity)
    l2 = _value(found, "bandwidth:l2")
    assert l2["value"] > _value(found, "bandwidth:l3")["value"]
    assert any("not flat inside the level" in c for c in l2["caveats"])


def test_the_recorded_zen5_run_reads_its_levels_within_2x_of_sysfs():
    from pathlib import Path

    from pytest_charz.profile import build_profile
    from pytest_charz.run import load_run

    path = Path(__file__).parent / "data" / "runs" / "amd-epyc-zen5-kvm-2vcpu.run.json.gz"
    found = build_profile([load_run(str(path))], [path.name])
    for level, capacity in (("l1", 48 * KIB), ("l2", 1 * MIB), ("l3", 32 * MIB)):
        assert within_factor(_value(found, f"capacity:{level}")["value"], capacity)
    bandwidths = [_value(found, f"bandwidth:{lv}")["value"] for lv in ("l1", "l2", "l3", "dram")]
    assert bandwidths == sorted(bandwidths, reverse=True)
    latencies = [_value(found, f"latency:{lv}")["value"] for lv in ("l1", "l2", "l3", "dram")]
    assert latencies == sorted(latencies)
    # the L3 boundaries of the two curves differ by 1.7x: said, not hidden
    assert any("disagree" in c for c in _value(found, "capacity:l3")["caveats"])
