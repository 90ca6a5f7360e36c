"""Models with hand-counted numbers: rooflines, latency, GEMM quantization, alpha-beta, launch,
composite, ceilings from specs and profiles, calibration data and the predict API."""
from __future__ import annotations

import math
import sys
import types

import pytest

from pytest_charz.calibration.efficiency import ModelFit, EfficiencyTable, conformal_interval, fit_efficiency
from pytest_charz.errors import FormatError, UsageError
from pytest_charz.models import (
    MODELS, AlphaBeta, Ceilings, Composite, Gemm, GemmParams, HierarchicalRoofline, Launch, Model, Prediction,
    Roofline, gemm_tiling, get_model, regime_of,
)
from pytest_charz.models.gemm import GEMM_RAMP_S, gemm_schedule
from pytest_charz import load_target
from pytest_charz.prediction import predict
from pytest_charz.targets.spec import Compute, Figure, Identity, Link, MemoryLevel, TargetSpec
from pytest_charz.work import Collective, Work

GiB = 2.0**30
KiB = 2.0**10
MiB = 2.0**20


def f(value: float) -> Figure:
    return Figure(value, "test")


def h100_like() -> Ceilings:
    """H100 SXM-like figures (dense peaks, HBM3 3.35 TB/s, 132 SMs) plus measured-looking ones."""
    return Ceilings(
        target_id="h100-like", kind="gpu", origin="test",
        peak_flops={"bf16": f(989e12), "fp32": f(67e12), "fp64": f(67e12)},
        vector_peak_flops={"fp64": f(34e12)},
        bandwidth_bytes_per_s={"dram": f(3.35e12), "l2": f(1e13)},
        capacity_bytes={"l1": f(256 * KiB), "l2": f(50 * MiB), "dram": f(80 * GiB)},
        latency_s={"l1": f(30e-9), "l2": f(270e-9), "dram": f(600e-9)},
        link_bandwidth_bytes_per_s={"h2d": f(64e9), "peer": f(450e9)},
        link_latency_s={"h2d": f(2e-6), "peer": f(5e-6)},
        launch_overhead_s=f(4e-6),
        compute_units=f(132),
    )


# -- rooflines ------------------------------------------------------------------------------------
def test_one_tflop_bf16_gemm_takes_at_least_1_01_ms() -> None:
    prediction = Roofline().predict(Work(1e12, dtype="bf16", op="gemm"), h100_like())
    assert prediction.covered
    assert prediction.time_s == pytest.approx(1e12 / 989e12)
    assert prediction.time_s == pytest.approx(1.0111e-3, rel=1e-4)
    assert prediction.bound == "compute:bf16" and prediction.regime == "compute"
    assert prediction.interval_s == (prediction.time_s, prediction.time_s)


def test_stream_triad_of_3_gib_is_memory_bound_at_hbm_bandwidth() -> None:
    triad = Work(2 * 2**27, 3 * GiB, dtype="fp64", op="stream")  # 2^27 doubles per array
    prediction = Roofline("empirical-roofline").predict(triad, h100_like())
    assert prediction.time_s == pytest.approx(3 * GiB / 3.35e12)
    assert prediction.time_s == pytest.approx(0.9616e-3, rel=1e-4)
    assert prediction.bound == "memory:dram" and prediction.regime == "memory"
    assert prediction.model == "empirical-roofline"
    assert prediction.breakdown["compute:fp64"] == pytest.approx(2 * 2**27 / 34e12)  # vector peak


def test_flops_of_several_dtypes_add_up() -> None:
    work = Work({"bf16": 1e12, "fp32": 67e9})
    prediction = Roofline().predict(work, h100_like())
    assert prediction.time_s == pytest.approx(1e12 / 989e12 + 1e-3)
    assert prediction.bound == "compute:bf16"


def test_matrix_ops_get_the_matrix_peak_and_vector_ops_the_vector_peak() -> None:
    ceilings = h100_like()
    assert Roofline().predict(Work(67e9, dtype="fp64", op="gemm"), ceilings).time_s == pytest.approx(1e-3)
    assert Roofline().predict(Work(34e9, dtype="fp64", op="fma"), ceilings).time_s == pytest.approx(1e-3)


def test_hierarchical_roofline_names_the_limiting_level() -> None:
    work = Work(1e9, {"l2": 1e10, "dram": 1.675e9}, dtype="fp32")
    prediction = HierarchicalRoofline().predict(work, h100_like())
    assert prediction.time_s == pytest.approx(1e-3)
    assert prediction.bound == "memory:l2"
    assert prediction.breakdown["memory:dram"] == pytest.approx(0.5e-3)
    assert Roofline().predict(work, h100_like()).bound == "memory:dram"


@pytest.mark.parametrize(
    ("working_set_bytes", "level", "latency_s"),
    [(100 * KiB, "l1", 30e-9), (1 * MiB, "l2", 270e-9), (1 * GiB, "dram", 600e-9)],
)
def test_dependent_loads_pay_the_latency_of_the_level_the_working_set_fits(
    working_set_bytes: float, level: str, latency_s: float
) -> None:
    chase = Work(op="chase", accesses=1_000_000, shape={"working_set_bytes": working_set_bytes})
    prediction = HierarchicalRoofline().predict(chase, h100_like())
    assert prediction.time_s == pytest.approx(1e6 * latency_s)
    assert prediction.bound == f"latency:{level}" and prediction.regime == "latency"


def test_a_level_without_capacity_is_skipped_and_latency_never_drops_outward() -> None:
    chase = Work(op="chase", accesses=1000, shape={"working_set_bytes": 1 * MiB})
    no_l2_size = h100_like().with_overrides(capacity_bytes={"l2": None})
    assert HierarchicalRoofline().predict(chase, no_l2_size).bound == "latency:dram"
    noisy = h100_like().with_overrides(latency_s={"l2": 20e-9})  # measured below l1's 30 ns
    assert HierarchicalRoofline().predict(chase, noisy).time_s == pytest.approx(1000 * 30e-9)


def test_dependent_loads_without_a_working_set_are_not_covered() -> None:
    prediction = HierarchicalRoofline().predict(Work(op="chase", accesses=10), h100_like())
    assert not prediction.covered
    assert "working_set_bytes" in prediction.reason


# -- GEMM -----------------------------------------------------------------------------------------
def gemm(m: int, n: int, k: int, dram_bytes: float = 0.0) -> Work:
    return Work(2.0 * m * n * k, dram_bytes, dtype="bf16", op="gemm", shape={"m": m, "n": n, "k": k})


DATA_PARALLEL = GemmParams(stream_k=frozenset(), ramp_s={})   # whole waves only, no fixed ramp


def test_one_tile_more_than_the_units_nearly_doubles_a_data_parallel_gemm() -> None:
    ceilings = h100_like()
    full = gemm(12 * 128, 11 * 128, 4096)        # 12 x 11 = 132 tiles of 128x128: one wave
    spill = gemm(12 * 128, 11 * 128 + 1, 4096)   # 12 x 12 = 144 tiles: two waves
    assert gemm_tiling(full, ceilings, DATA_PARALLEL)[1] == 1
    assert gemm_tiling(spill, ceilings, DATA_PARALLEL)[1] == 2
    one_wave = Gemm(params=DATA_PARALLEL).predict(full, ceilings)
    two_waves = Gemm(params=DATA_PARALLEL).predict(spill, ceilings)
    assert one_wave.time_s == pytest.approx(full.total_flops / 989e12)  # a perfect wave: the roofline
    assert two_waves.time_s / one_wave.time_s == pytest.approx(2.0)
    assert spill.total_flops / full.total_flops < 1.001


def test_stream_k_spreads_the_spilled_tiles_over_every_unit() -> None:
    ceilings = h100_like()
    full = gemm(12 * 128, 11 * 128, 4096)
    spill = gemm(12 * 128, 11 * 128 + 1, 4096)
    schedule = gemm_schedule(spill, ceilings, GemmParams())
    assert schedule.schedule == "stream-k" and 1.0 < schedule.waves < 1.2
    assert gemm_schedule(full, ceilings, GemmParams()).schedule == "data-parallel"   # a perfect wave stays
    ramp = GEMM_RAMP_S["gpu"]
    ratio = (Gemm().predict(spill, ceilings).time_s - ramp) / (Gemm().predict(full, ceilings).time_s - ramp)
    assert 1.05 < ratio < 1.2                     # 144 tiles' work on 132 units, not two waves


def test_gemm_efficiency_curve_derates_the_quantized_time() -> None:
    # 4096^3: 32 x 32 = 1024 tiles of 128x128 on 132 SMs -> 8 waves = 1056 tile slots.
    executed = 1056 * 2.0 * 128 * 128 * 4096
    params = GemmParams(eff_max=0.5, half_flops=1e12, stream_k=frozenset(), ramp_s={})
    prediction = Gemm(params=params).predict(gemm(4096, 4096, 4096), h100_like())
    assert prediction.time_s == pytest.approx((executed + 1e12) / (989e12 * 0.5))
    assert params.efficiency(1e12) == pytest.approx(0.25)
    assert Gemm(params=DATA_PARALLEL).predict(gemm(4096, 4096, 4096), h100_like()).time_s == pytest.approx(
        executed / 989e12)
    # the library's default: stream-K deals the 7.76 waves' k-steps evenly, plus the kernel's ramp
    default = Gemm().predict(gemm(4096, 4096, 4096), h100_like()).time_s
    assert 2.0 * 4096**3 / 989e12 + GEMM_RAMP_S["gpu"] < default < executed / 989e12 + GEMM_RAMP_S["gpu"]


def test_gemm_is_never_faster_than_the_memory_roofline() -> None:
    prediction = Gemm().predict(gemm(128, 128, 128, dram_bytes=3.35e9), h100_like())
    assert prediction.time_s == pytest.approx(1e-3)
    assert prediction.bound == "memory:dram"


@pytest.mark.parametrize(
    ("work", "ceilings", "reason"),
    [
        (Work(1e9, dtype="bf16", op="conv", shape={"m": 1, "n": 1, "k": 1}), h100_like(), "op 'gemm' only"),
        (Work({"bf16": 1.0, "fp32": 1.0}, op="gemm", shape={"m": 1, "n": 1, "k": 1}), h100_like(), "one dtype"),
        (Work(1e9, dtype="bf16", op="gemm", shape={"m": 64, "n": 64}), h100_like(), "shape['k']"),
        (gemm(64, 64, 64), h100_like().with_overrides(compute_units=None), "compute unit"),
        (gemm(64, 64, 64), h100_like().with_overrides(kind="fpga"), "tile table"),
        (gemm(64, 64, 64), h100_like().with_overrides(peak_flops={"bf16": None}), "bf16"),
    ],
)
def test_gemm_says_what_it_cannot_predict(work: Work, ceilings: Ceilings, reason: str) -> None:
    prediction = Gemm().predict(work, ceilings)
    assert not prediction.covered and reason in prediction.reason
    assert math.isnan(prediction.time_s)


def test_gemm_params_round_trip_and_reject_bad_values() -> None:
    params = GemmParams(eff_max=0.8, half_flops=2e9, tiles={"gpu": ((64, 64),)}, ramp_s={"gpu": 2e-6})
    assert GemmParams.from_json(params.to_json()) == params
    legacy = {"version": 1, "eff_max": 0.8, "half_flops": 2e9, "tiles": {"gpu": [[64, 64]]}}
    assert GemmParams.from_json(legacy) == GemmParams(0.8, 2e9, {"gpu": ((64, 64),)}, frozenset(), ramp_s={})
    assert GemmParams.from_json({**params.to_json(), "version": 2}) == params   # written before the tile cost
    # version 3 wrote the per-tile cost it always had (fp8, elements of k): it is the target's now
    assert GemmParams.from_json({**params.to_json(), "version": 3, "tile_fixed_k": {"gpu:fp8": 656.0}}) == params
    with pytest.raises(FormatError, match="gemm_tile_us"):   # another one is refused, not dropped
        GemmParams.from_json({**params.to_json(), "version": 3, "tile_fixed_k": {"gpu:bf16": 300.0}})
    with pytest.raises(UsageError):
        GemmParams(ramp_s={"gpu": -1e-6})
    with pytest.raises(UsageError):
        GemmParams(eff_max=0)
    with pytest.raises(UsageError):
        GemmParams(tiles={"gpu": ((0, 64),)})
    with pytest.raises(FormatError):
        GemmParams.from_json({**params.to_json(), "version": 99})


# -- alpha-beta, launch, composite ----------------------------------------------------------------
def test_transfer_costs_alpha_plus_bytes_over_beta() -> None:
    prediction = AlphaBeta().predict(Work(transfers={"h2d": GiB}), h100_like())
    assert prediction.time_s == pytest.approx(2e-6 + GiB / 64e9)
    assert prediction.bound == "link:h2d" and prediction.regime == "transfer"


@pytest.mark.parametrize(
    ("op", "expected_s"),
    [
        ("all-reduce", 2 * 7 / 8 * GiB / 450e9 + 2 * 7 * 5e-6),
        ("all_reduce", 2 * 7 / 8 * GiB / 450e9 + 2 * 7 * 5e-6),
        ("all-gather", 7 / 8 * GiB / 450e9 + 7 * 5e-6),
        ("reduce-scatter", 7 / 8 * GiB / 450e9 + 7 * 5e-6),
        ("broadcast", GiB / 450e9 + 7 * 5e-6),
        ("p2p", GiB / 450e9 + 5e-6),
    ],
)
def test_collectives_follow_the_ring_formulas(op: str, expected_s: float) -> None:
    work = Work(collectives=(Collective(op, GiB, 8),))
    prediction = AlphaBeta().predict(work, h100_like())
    assert prediction.time_s == pytest.approx(expected_s)
    assert prediction.regime == "transfer"


def test_a_collective_over_one_rank_is_free_and_an_unknown_one_uncovered() -> None:
    single = AlphaBeta().predict(Work(collectives=(Collective("all-reduce", GiB, 1),)), h100_like())
    assert single.covered and single.time_s == pytest.approx(0.0)
    unknown = AlphaBeta().predict(Work(collectives=(Collective("scan", GiB, 4),)), h100_like())
    assert not unknown.covered and "all-reduce" in unknown.reason


def test_transfers_need_both_link_figures() -> None:
    no_alpha = h100_like().with_overrides(link_latency_s={"h2d": None})
    prediction = AlphaBeta().predict(Work(transfers={"h2d": 1e6}), no_alpha)
    assert not prediction.covered and "h2d link latency" in prediction.reason


def test_launches_cost_the_launch_overhead_each() -> None:
    prediction = Launch().predict(Work(launches=1000), h100_like())
    assert prediction.time_s == pytest.approx(4e-3)
    assert prediction.bound == "launch" and prediction.regime == "launch"
    missing = Launch().predict(Work(launches=1), h100_like().with_overrides(launch_overhead_s=None))
    assert not missing.covered and "launch overhead" in missing.reason


def small_step() -> Work:
    # 1e9 fp32 FLOPs (14.9 us) + 10 launches (40 us) + 1 MB h2d (2 us + 15.6 us)
    return Work(1e9, dtype="fp32", launches=10, transfers={"h2d": 1e6})


def test_composite_adds_launches_and_transfers_by_default() -> None:
    prediction = Composite().predict(small_step(), h100_like())
    assert prediction.time_s == pytest.approx(1e9 / 67e12 + 10 * 4e-6 + 2e-6 + 1e6 / 64e9)
    assert prediction.bound == "launch"
    assert set(prediction.breakdown) == {"compute:fp32", "launch", "link:h2d"}


def test_composite_overlap_hides_what_runs_beside_the_longest_part() -> None:
    overlapped = Composite(overlap=True).predict(small_step(), h100_like())
    assert overlapped.time_s == pytest.approx(10 * 4e-6)  # short kernels wait on dispatch
    long_kernels = Work(67e9, dtype="fp32", launches=10, transfers={"h2d": 1e6}, shape={"overlap": 1})
    prediction = Composite().predict(long_kernels, h100_like())  # the work says it overlaps
    assert prediction.time_s == pytest.approx(1e-3) and prediction.bound == "compute:fp32"


def test_composite_uses_gemm_quantization_for_gemm_work() -> None:
    spill = gemm(12 * 128, 11 * 128 + 1, 4096)
    assert Composite().predict(spill, h100_like()).time_s == pytest.approx(Gemm().predict(spill, h100_like()).time_s)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_refuses_a_dtype_without_a_peak(name: str) -> None:
    work = Work(1e12, dtype="fp8", op="gemm", shape={"m": 1024, "n": 1024, "k": 1024})
    prediction = get_model(name).predict(work, h100_like())
    assert not prediction.covered
    assert "fp8" in prediction.reason and "h100-like" in prediction.reason
    assert prediction.to_json()["time_s"] is None


def test_models_with_nothing_to_count_say_so() -> None:
    assert not Roofline().predict(Work(launches=3), h100_like()).covered
    assert not Composite().predict(Work(), h100_like()).covered


# -- Prediction -----------------------------------------------------------------------------------
def test_prediction_json_round_trip_and_versions() -> None:
    prediction = Composite().predict(small_step(), h100_like()).with_interval(1e-5, 1e-4)
    assert Prediction.from_json(prediction.to_json()) == prediction
    uncovered = Prediction.not_covered("gemm", "no units")
    again = Prediction.from_json(uncovered.to_json())
    assert not again.covered and again.reason == "no units" and math.isnan(again.time_s)
    with pytest.raises(FormatError):
        Prediction.from_json({**prediction.to_json(), "version": 2})
    with pytest.raises(FormatError):
        Prediction.from_json({**prediction.to_json(), "regime": "memory"})


def test_prediction_checks_its_values() -> None:
    with pytest.raises(UsageError):
        Prediction(1.0, (2.0, 1.0), "launch", {}, "m")
    with pytest.raises(UsageError):
        Prediction(1.0, (1.0, 1.0), "warp:divergence", {}, "m")
    with pytest.raises(UsageError):
        Prediction.not_covered("m", "")
    assert [regime_of(b) for b in ("link:peer", "collective:all-reduce", "latency:l1")] == [
        "transfer", "transfer", "latency"]


# -- Ceilings -------------------------------------------------------------------------------------
def tiny_spec(kind: str = "gpu") -> TargetSpec:
    return TargetSpec(
        identity=Identity(id="tiny", name="Tiny", vendor="test", kind=kind, backend="sim"),
        compute=Compute(units=f(8), unit_name="SM", clock_base_mhz=None, clock_boost_mhz=None,
                        peak_flops={"fp32": f(1e12)}, vector_peak_flops={"fp32": f(5e11)}),
        memory=(MemoryLevel("l2", "L2", "device", f(4 * MiB), f(2e12), f(200.0)),
                MemoryLevel("dram", "HBM", "device", f(16 * GiB), f(1e12), None)),
        host_link=Link("pcie4-x16", f(32e9), latency_us=f(1.5)),
        peer_links=(Link("nvlink", f(25e9), count=4),),
        power=None,
        sources={"test": "test figures"},
    )


def test_ceilings_from_spec_convert_units_and_derive_links() -> None:
    ceilings = Ceilings.from_spec(tiny_spec())
    assert (ceilings.target_id, ceilings.kind, ceilings.units()) == ("tiny", "gpu", 8)
    assert ceilings.peak("fp32") == pytest.approx(1e12)
    assert ceilings.peak("fp32", "stream") == pytest.approx(5e11)
    assert ceilings.latency("l2") == pytest.approx(200e-9)
    assert ceilings.latency("dram") is None
    assert ceilings.link_latency("h2d") == pytest.approx(1.5e-6)
    assert ceilings.link_bandwidth("d2h") == pytest.approx(32e9)
    assert ceilings.link_bandwidth("d2d") == pytest.approx(0.5e12)
    assert ceilings.link_bandwidth("peer") == pytest.approx(100e9)
    assert ceilings.link_bandwidth("host") is None
    assert ceilings.launch_overhead() is None
    assert "4 x nvlink" in ceilings.link_bandwidth_bytes_per_s["peer"].source
    assert Ceilings.from_spec(tiny_spec("cpu")).link_bandwidth("host") == pytest.approx(0.5e12)


def profile(**extra: object) -> dict:
    return {
        "kind": "charz-profile",
        "version": 1,
        "target": {"id": "tiny", "kind": "gpu"},
        "ceilings": [
            {"name": "flops:fp32", "value": 0.9, "unit": "TFLOP/s", "source": "fma suite"},
            {"name": "flops:fp32:vector", "value": 4e11},
            {"name": "bandwidth:dram", "value": 800, "unit": "GB/s"},
            {"name": "latency:l1", "value": 1.2, "unit": "ns"},
            {"name": "capacity:l2", "value": 4, "unit": "MiB"},
            {"name": "transfer:h2d", "bandwidth": 25e9, "latency_s": 3e-6},
            {"name": "launch", "value": 2.5, "unit": "us"},
            {"name": "bandwidth:l2", "value": None},
            {"name": "contention:dram", "value": 0.7},
        ],
        **extra,
    }


def test_ceilings_from_profile_read_the_documented_contract() -> None:
    ceilings = Ceilings.from_profile(profile())
    assert ceilings.peak("fp32") == pytest.approx(0.9e12)
    assert ceilings.peak_flops["fp32"].source == "fma suite"
    assert ceilings.peak("fp32", "fma") == pytest.approx(4e11)
    assert ceilings.bandwidth("dram") == pytest.approx(800e9)
    assert ceilings.bandwidth("l2") is None
    assert ceilings.latency("l1") == pytest.approx(1.2e-9)
    assert ceilings.capacity("l2") == pytest.approx(4 * MiB)
    assert (ceilings.link_bandwidth("h2d"), ceilings.link_latency("h2d")) == (pytest.approx(25e9), pytest.approx(3e-6))
    assert ceilings.launch_overhead() == pytest.approx(2.5e-6)
    assert ceilings.units() is None and ceilings.origin == "profile:tiny"
    assert Ceilings.from_profile({"version": 1, "target": {"compute_units": 132}}).units() == 132
    counted = {"version": 1, "ceilings": [{"name": "compute_units", "value": 16}]}
    assert Ceilings.from_profile(counted).units() == 16


@pytest.mark.parametrize(
    "bad",
    [
        {"version": 2, "ceilings": []},
        {"version": 1, "ceilings": [{"name": "bandwidth:hbm", "value": 1.0}]},
        {"version": 1, "ceilings": [{"name": "bandwidth:dram", "value": 1.0, "unit": "furlongs"}]},
        {"version": 1, "ceilings": [{"name": "launch", "value": 1e-6}, {"name": "launch", "value": 2e-6}]},
        {"version": 1, "ceilings": [{"name": "flops:fp32", "value": -1.0}]},
        {"version": 1, "ceilings": [{"name": "flops:fp32", "value": "fast"}]},
        {"version": 1, "target": {"compute_units": "many"}},
    ],
)
def test_malformed_profiles_are_format_errors(bad: dict) -> None:
    with pytest.raises(FormatError):
        Ceilings.from_profile(bad)


def test_overrides_merge_remove_and_reject_unknown_figures() -> None:
    base = h100_like()
    changed = base.with_overrides(bandwidth_bytes_per_s={"dram": 4e12, "l2": None}, launch_overhead_s=1e-6)
    assert changed.bandwidth("dram") == pytest.approx(4e12)
    assert changed.bandwidth("l2") is None
    assert changed.bandwidth_bytes_per_s["dram"].source == "override"
    assert changed.launch_overhead() == pytest.approx(1e-6)
    assert base.bandwidth("dram") == pytest.approx(3.35e12)
    with pytest.raises(UsageError):
        base.with_overrides(hbm_bandwidth=1.0)
    with pytest.raises(UsageError):
        base.with_overrides(peak_flops={"fp4": 1.0})


def test_ceilings_json_round_trip_and_fill_from_spec() -> None:
    assert Ceilings.from_json(h100_like().to_json()) == h100_like()
    with pytest.raises(FormatError):
        Ceilings.from_json({**h100_like().to_json(), "version": 0})
    filled = Ceilings.from_profile(profile()).filled_from(Ceilings.from_spec(tiny_spec()))
    assert filled.bandwidth("dram") == pytest.approx(800e9)  # measured wins
    assert filled.units() == 8 and filled.bandwidth("l2") == pytest.approx(2e12)  # spec fills gaps


# -- calibration data -----------------------------------------------------------------------------
TRUE_TABLE = EfficiencyTable("gemm", "flops", (6.0, 8.0, 10.0, 12.0), (0.2, 0.5, 0.8, 0.9))


def test_efficiency_table_is_piecewise_linear_in_log_size_and_flat_outside() -> None:
    assert TRUE_TABLE.at(1e9) == pytest.approx(0.65)
    assert TRUE_TABLE.at(1e3) == pytest.approx(0.2)
    assert TRUE_TABLE.at(1e15) == pytest.approx(0.9)
    assert EfficiencyTable.from_json(TRUE_TABLE.to_json()) == TRUE_TABLE
    with pytest.raises(UsageError):
        EfficiencyTable("gemm", "flops", (2.0, 1.0), (0.5, 0.5))


def test_fit_efficiency_recovers_a_known_table() -> None:
    points = [(10.0**x, TRUE_TABLE.at(10.0**x) * 1e-3, 1e-3) for x in (6, 7, 8, 9, 10, 11, 12)]
    fitted = fit_efficiency(points, op="gemm", size="flops")
    assert fitted.log10_sizes == pytest.approx(TRUE_TABLE.log10_sizes)
    assert fitted.efficiency == pytest.approx(TRUE_TABLE.efficiency, rel=1e-6)


def test_conformal_interval_takes_the_conformal_order_statistics() -> None:
    residuals = [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]
    assert conformal_interval(residuals, 0.5) == (pytest.approx(math.exp(-2)), pytest.approx(math.exp(2)))
    nineteen = [0.1 * i for i in range(19)]
    assert conformal_interval(nineteen, 0.9) == (pytest.approx(1.0), pytest.approx(math.exp(1.8)))
    with pytest.raises(UsageError, match="at least 19"):
        conformal_interval(nineteen[:18], 0.9)


def test_calibration_divides_by_efficiency_but_never_beats_the_roofline() -> None:
    work = gemm(1000, 1000, 1000)  # 2e9 FLOPs: efficiency 0.65
    raw = Composite().predict(work, h100_like())
    calibration = ModelFit("composite", {"gemm": TRUE_TABLE}, interval=(0.9, 1.2), level=0.9)
    adjusted = calibration.apply(raw, work, floor_s=0.0)
    assert adjusted.time_s == pytest.approx(raw.time_s / TRUE_TABLE.at(2e9))
    assert adjusted.interval_s == (pytest.approx(0.9 * adjusted.time_s), pytest.approx(1.2 * adjusted.time_s))
    assert adjusted.model == "composite+calibration"
    optimistic = ModelFit("composite", {"": EfficiencyTable("", "flops", (0.0,), (50.0,))})
    assert optimistic.apply(raw, work, floor_s=raw.time_s / 2).time_s == pytest.approx(raw.time_s / 2)
    assert ModelFit.from_json(calibration.to_json()) == calibration


# -- API ------------------------------------------------------------------------------------------
def test_registry_models_follow_the_protocol_and_unknown_names_list_the_known() -> None:
    for name in MODELS:
        model = get_model(name)
        assert isinstance(model, Model) and model.name == name
    with pytest.raises(UsageError, match="composite"):
        get_model("ecm")


@pytest.fixture
def fake_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    """A catalogue that knows only ``tiny``, so API tests do not depend on the real files."""
    module = types.ModuleType("pytest_charz.targets.catalogue")

    def resolve(name: str) -> TargetSpec:
        if name != "tiny":
            raise UsageError(f"unknown target {name!r}")
        return tiny_spec()

    module.resolve = resolve  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pytest_charz.targets.catalogue", module)


@pytest.mark.usefixtures("fake_catalogue")
def test_predict_takes_one_work_or_many() -> None:
    one = predict(Work(1e12, dtype="fp32"), target="tiny", model="spec-roofline")
    assert isinstance(one, Prediction) and one.time_s == pytest.approx(1.0)
    many = predict([Work(1e12, dtype="fp32"), Work(bytes=2e12)], target="tiny", model="spec-roofline")
    assert [p.time_s for p in many] == [pytest.approx(1.0), pytest.approx(2.0)]


@pytest.mark.usefixtures("fake_catalogue")
def test_predict_with_a_profile_and_a_calibration(tmp_path) -> None:
    import json

    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile()))
    measured = predict(Work(bytes=8e11), target="tiny", model="empirical-roofline", profile=str(path))
    assert measured.time_s == pytest.approx(1.0)  # 800 GB/s measured, not the 1 TB/s datasheet
    datasheet = predict(Work(bytes=8e11), target="tiny", model="spec-roofline", profile=profile())
    assert datasheet.time_s == pytest.approx(0.8)
    with pytest.raises(UsageError, match="profile="):
        predict(Work(bytes=1.0), target="tiny", model="empirical-roofline")
    from pytest_charz.calibration.file import Calibration
    from pytest_charz.models.ceilings import Ceilings

    # a calibration predicts on the ceilings it was fitted against: here the profile's
    fitted_on = Ceilings.from_profile(profile()).filled_from(Ceilings.from_spec(tiny_spec()))
    calibration = Calibration("tiny", "composite", ModelFit("composite", {"": EfficiencyTable(
        "", "bytes", (0.0,), (0.5,))}), fitted_on, {}, {}, (), "").to_json()
    slowed = predict(Work(bytes=8e11), target="tiny", profile=profile(), calibration=calibration)
    assert slowed.time_s == pytest.approx(2.0)
    assert predict(Work(bytes=8e11), calibration=calibration).time_s == pytest.approx(2.0)  # the file's target
    with pytest.raises(UsageError, match="of model 'composite', not 'gemm'"):
        predict(Work(bytes=1.0), target="tiny", model="gemm", calibration=calibration)
    with pytest.raises(UsageError, match="target='other'"):
        predict(Work(bytes=1.0), target="tiny", profile=profile(target={"id": "other"}))


def test_predict_on_the_catalogue_h100() -> None:
    prediction = predict(Work(1e12, dtype="bf16", op="gemm", shape={"m": 8192, "n": 8192, "k": 7451}),
                         target="h100-sxm", model="spec-roofline")
    assert prediction.covered and prediction.bound == "compute:bf16"
    assert 0.9e-3 < prediction.time_s < 1.2e-3  # ~989 dense bf16 TFLOP/s on the datasheet


def test_profile_fma_peak_is_the_vector_peak_and_gemm_raises_the_matrix_peak() -> None:
    from pytest_charz.models.ceilings import Ceilings

    profile = {"version": 1, "target": {"id": "h200", "kind": "gpu"}, "ceilings": [
        {"name": "flops:fp16", "value": 1.2e14, "unit": "FLOP/s"},
        {"name": "gemm:fp16", "value": 7.0e14, "unit": "FLOP/s"},
        {"name": "flops:fp64", "value": 6.0e13, "unit": "FLOP/s"},
        {"name": "gemm:fp64", "value": 5.0e13, "unit": "FLOP/s"},
        {"name": "gemm:bf16", "value": 7.2e2, "unit": "TFLOP/s"},
    ]}
    ceilings = Ceilings.from_profile(profile)
    assert ceilings.peak("fp16", "gemm") == pytest.approx(7.0e14)
    assert ceilings.peak("fp16", "fma") == pytest.approx(1.2e14)
    assert ceilings.peak("fp64", "gemm") == pytest.approx(6.0e13)       # FMA chains beat the GEMM
    assert ceilings.peak("bf16", "gemm") == pytest.approx(7.2e14)


def test_a_one_row_gemm_is_padded_to_the_mma_granule_not_the_tile() -> None:
    # The decode step of Llama-2-70B at tp=8: x (1 x 8192) @ W (8192 x 3584), bf16 weights.
    m, n, k = 1, 3584, 8192
    work = Work(flops=2.0 * m * n * k, bytes=2.0 * (k * n + m * k + m * n), dtype="bf16", op="gemm",
                shape={"m": m, "n": n, "k": k})
    prediction = predict(work, target="h100-sxm", model="gemm")
    ceilings = Ceilings.from_spec(load_target("h100-sxm"))
    (tile_m, _), _, executed = gemm_tiling(work, ceilings, GemmParams())
    assert tile_m == 16                                    # the smallest tensor-core MMA, not a 128-row tile
    assert prediction.bound == "memory:dram"               # reading 58.7 MB of weights is the cost
    assert prediction.time_s == pytest.approx(work.bytes["dram"] / ceilings.bandwidth("dram"), rel=1e-6)
    square = Work(flops=2.0 * 4096**3, bytes=3 * 2.0 * 4096**2, dtype="bf16", op="gemm",
                  shape={"m": 4096, "n": 4096, "k": 4096})
    assert gemm_tiling(square, ceilings, GemmParams())[0][0] >= 128   # large GEMMs keep the library's tiles
