"""The simulated hardware: machines from specs and profiles, what-if parameters, compute with
wave quantization, memory levels and on-chip reuse, links and collective algorithms."""
from __future__ import annotations

import math

import pytest

from pytest_charz.errors import UsageError
from pytest_charz.models.ceilings import Ceilings
from pytest_charz.models.comm import COLLECTIVE_LIBRARIES, nccl_algorithms
from pytest_charz.models.gemm import GEMM_RAMP_S, GemmParams, gemm_schedule
from pytest_charz.sim import PARAMETERS, Machine, simulate_work
from pytest_charz.sim.hardware import collective_plan, op_cost, resources
from pytest_charz.sim.pricing import SimNotPriced
from pytest_charz.targets.catalogue import catalogue, resolve
from pytest_charz.work import Collective, Work


@pytest.fixture(scope="module")
def h100() -> Machine:
    return Machine.from_spec(resolve("h100-sxm"))


def index_of(machine: Machine) -> dict[str, int]:
    return {name: slot for slot, name in enumerate(resources(machine))}


@pytest.mark.parametrize("target", sorted(catalogue()))
def test_every_catalogue_target_builds_a_machine_with_the_models_figures(target: str) -> None:
    spec = resolve(target)
    machine = Machine.from_spec(spec)
    ceilings = Ceilings.from_spec(spec)
    assert machine.id == spec.id and machine.units == spec.compute.units.value
    assert machine.param("memory_bandwidth") == pytest.approx(ceilings.bandwidth("dram"))
    for dtype in ceilings.peak_flops:
        assert machine.peak(dtype, "gemm") == pytest.approx(ceilings.peak(dtype, "gemm"))
    assert machine.devices >= 1 and set(PARAMETERS) >= {"memory_bandwidth", "compute_units", "clock_mhz", "l2_bytes",
                                                        "link_bandwidth", "link_latency", "host_link_bandwidth",
                                                        "dispatch_overhead", "launch_overhead", "power_cap_w"}
    assert all(machine.sources.get(name) for name in ("compute_units", "memory_bandwidth", "dispatch_overhead"))


def test_topologies_follow_the_peer_links(h100: Machine) -> None:
    assert (h100.topology, h100.devices) == ("switch", 8)
    assert Machine.from_spec(resolve("mi300x")).topology == "mesh"
    assert (Machine.from_spec(resolve("h100-pcie")).topology, Machine.from_spec(resolve("h100-pcie")).devices) == \
        ("pair", 2)
    assert Machine.from_spec(resolve("l4")).devices == 1


def test_parameters_read_back_and_bad_values_are_usage_errors(h100: Machine) -> None:
    faster = h100.with_params({"memory_bandwidth": 5e12, "compute_units": 100, "l2_bytes": 2**27})
    assert faster.param("memory_bandwidth") == 5e12 and faster.param("compute_units") == 100
    assert faster.param("l2_bytes") == 2**27 and h100.param("memory_bandwidth") != 5e12
    assert faster.sources["memory_bandwidth"] == "what-if parameter"
    with pytest.raises(UsageError, match="known: .*memory_bandwidth"):
        h100.with_params({"hbm_speed": 1.0})
    with pytest.raises(UsageError, match="memory_bandwidth must be > 0"):
        h100.with_params({"memory_bandwidth": -1e12})
    with pytest.raises(UsageError, match="compute_units must be a positive whole number"):
        h100.with_params({"compute_units": 0})
    with pytest.raises(UsageError, match="link_bandwidth must be > 0"):
        h100.with_params({"link_bandwidth": -5.0})
    with pytest.raises(UsageError, match="has no peer links"):
        Machine.from_spec(resolve("l4")).with_params({"link_bandwidth": 1e9})


def test_clock_and_units_scale_the_peak(h100: Machine) -> None:
    base = h100.peak("bf16", "gemm")
    assert base is not None
    assert h100.with_params({"clock_mhz": h100.clock_mhz / 2}).peak("bf16", "gemm") == pytest.approx(base / 2)
    assert h100.with_params({"compute_units": 66}).peak("bf16", "gemm") == pytest.approx(base / 2)
    assert h100.peak("bf16", "elementwise") == pytest.approx(133.8e12)  # vector ops at the vector peak


def test_gemm_waves_are_quantized_over_the_compute_units(h100: Machine) -> None:
    # 266 tiles of 128x128: three waves on 132 SMs, two on 133 (each SM a wave's tile at a time).
    gemm = Work(flops=2.0 * 128 * (133 * 256) * 8192, bytes=1.0, dtype="bf16", op="gemm",
                shape={"m": 128, "n": 133 * 256, "k": 8192})
    three_waves = simulate_work(gemm, h100).latency_s
    two_waves = simulate_work(gemm, h100.with_params({"compute_units": 133})).latency_s
    # as the GEMM library schedules it (models.gemm): stream-K deals the third wave's k-steps out
    # to every SM, so one SM more saves the executed FLOPs' difference, not a whole wave
    machines = (h100, h100.with_params({"compute_units": 133}))
    schedule = [gemm_schedule(gemm, m.ceilings, GemmParams()) for m in machines]
    expected = [s.executed_flops / m.ceilings.peak("bf16", "gemm") + GEMM_RAMP_S["gpu"]   # type: ignore[operator]
                for s, m in zip(schedule, machines)]
    assert (three_waves, two_waves) == (pytest.approx(expected[0], rel=1e-9), pytest.approx(expected[1], rel=1e-9))
    assert schedule[1].waves == 2.0 and 2.0 < schedule[0].waves < 3.0
    assert simulate_work(gemm, h100).bottleneck == "compute"


def test_memory_bound_work_takes_its_bytes_over_the_bandwidth(h100: Machine) -> None:
    stream = Work(bytes=1e9, op="stream")
    result = simulate_work(stream, h100)
    assert result.latency_s == pytest.approx(1e9 / h100.param("memory_bandwidth"))
    assert result.bottleneck == "memory:dram"
    doubled = simulate_work(stream, h100.with_params({"memory_bandwidth": 2 * h100.param("memory_bandwidth")}))
    assert doubled.latency_s == pytest.approx(result.latency_s / 2)


def test_launch_only_work_is_launch_bound(h100: Machine) -> None:
    result = simulate_work(Work(launches=100, op="launch"), h100)
    assert result.latency_s == pytest.approx(100 * h100.launch_overhead_s)
    assert result.bottleneck == "launch"


def test_inputs_from_dependencies_that_fit_l2_are_read_from_l2(h100: Machine) -> None:
    index = index_of(h100)
    work = Work(bytes=100e6, op="elementwise")
    cold = op_cost(work, h100, index)
    warm = op_cost(work, h100, index, reused_bytes=20e6)       # fits the 50 MiB L2
    too_big = op_cost(work, h100, index, reused_bytes=80e6)    # does not
    moved = {name: dict(cost.moved).get(index[name], 0.0) for name, cost in
             (("memory:dram", cold),)}
    assert moved["memory:dram"] == 100e6
    assert dict(warm.moved)[index["memory:dram"]] == pytest.approx(80e6)
    assert dict(warm.moved)[index["memory:l2"]] == pytest.approx(20e6)
    assert dict(too_big.moved) == dict(cold.moved)
    assert warm.energy_j < cold.energy_j


def test_small_collectives_take_the_tree_and_large_ones_the_ring(h100: Machine) -> None:
    small = collective_plan("all-reduce", 16e3, 8, h100)
    large = collective_plan("all-reduce", 1e9, 8, h100)
    # an NVSwitch H100 system runs them as NCCL does (models.comm): LL tree small, NVLS large
    assert (small.algorithm, large.algorithm) == ("tree/LL", "nvls/Simple")
    link = h100.peer_link
    assert link is not None
    library = COLLECTIVE_LIBRARIES["nvlink4"]
    for plan, n in ((small, 16e3), (large, 1e9)):
        assert plan.time_s == pytest.approx(nccl_algorithms("all-reduce", n, 8, link.total_bytes_per_s,
                                                            library)[plan.algorithm])
    assert collective_plan("all-reduce", 1e9, 1, h100).time_s == 0.0
    with pytest.raises(UsageError, match="needs 16 devices"):
        collective_plan("all-reduce", 1e6, 16, h100)
    with pytest.raises(UsageError, match="is not one of"):
        collective_plan("all-sum", 1e6, 2, h100)


def test_a_full_mesh_reduces_directly_over_every_link() -> None:
    mi300x = Machine.from_spec(resolve("mi300x"))
    link = mi300x.peer_link
    assert link is not None
    plan = collective_plan("all-reduce", 1e9, 8, mi300x)
    assert plan.algorithm == "direct"
    assert plan.time_s == pytest.approx(2 * link.latency_s + 2 * 7 / 8 * 1e9 / (7 * link.bandwidth_bytes_per_s))


def test_a_collective_work_runs_over_the_peer_link(h100: Machine) -> None:
    work = Work(collectives=(Collective("all-reduce", 1e9, 8),), op="collective")
    result = simulate_work(work, h100)
    assert result.latency_s == pytest.approx(collective_plan("all-reduce", 1e9, 8, h100).time_s)
    assert result.bottleneck == "link:nvlink4"
    faster = simulate_work(work, h100.with_params({"link_bandwidth": 2 * h100.param("link_bandwidth")}))
    assert faster.latency_s < result.latency_s


def test_transfers_use_the_host_link(h100: Machine) -> None:
    result = simulate_work(Work(transfers={"h2d": 64e9}, op="copy"), h100)
    assert result.latency_s == pytest.approx(h100.param("host_link_latency") + 64e9 / h100.param("host_link_bandwidth"))
    assert result.bottleneck.startswith("link:")


def test_a_profile_replaces_the_spec_figures_it_measured() -> None:
    profile = {"kind": "charz-profile", "version": 1, "target": {"id": "h100-sxm", "kind": "gpu"},
               "ceilings": [{"name": "bandwidth:dram", "value": 3.0e12, "unit": "B/s"},
                            {"name": "launch", "value": 4e-6, "unit": "s"},
                            {"name": "gemm:bf16", "value": 7.0e14, "unit": "FLOP/s"}]}
    machine = Machine.from_profile(profile)
    assert machine.param("memory_bandwidth") == 3.0e12
    assert machine.param("launch_overhead") == 4e-6 and machine.param("dispatch_overhead") == 4e-6
    assert machine.peak("bf16", "gemm") == pytest.approx(7.0e14)
    assert "measured" in machine.sources["memory_bandwidth"]
    assert machine.param("l2_bytes") == Machine.from_spec(resolve("h100-sxm")).param("l2_bytes")
    with pytest.raises(UsageError, match="names no target"):
        Machine.from_profile({"version": 1, "ceilings": []})


def test_a_dtype_the_target_lacks_is_a_usage_error() -> None:
    tpu = Machine.from_spec(resolve("tpu-v5e"))
    # The prediction core prices the case; one it cannot price is refused with the model's reason.
    with pytest.raises(SimNotPriced, match="cannot price fma on tpu-v5e: .*fp64"):
        simulate_work(Work(flops=1e9, dtype="fp64", op="fma"), tpu)
    assert issubclass(SimNotPriced, UsageError)
    assert math.isnan(tpu.param("l2_bytes"))


def test_a_cpu_profile_s_module_code_dispatch_is_the_host_s_cost_per_op() -> None:
    from pathlib import Path

    from pytest_charz.formats import read_json
    from pytest_charz.sim import defaults

    path = Path(__file__).parent / "data" / "profiles" / "amd-epyc-zen4-kvm-2vcpu.profile.json.gz"
    profile = dict(read_json(path))
    without = Machine.from_profile(profile)
    # No module-code figure: the bare dispatch:torch the profile measured, the one rule predict_graph
    # follows too (workloads.runtime.runtime_of); no launch gap, the op runs on the dispatching thread.
    assert without.param("dispatch_overhead") == pytest.approx(1.081555e-06) != defaults.HOST_DISPATCH_S
    assert without.sources["dispatch_overhead"].endswith("dispatch:torch")
    assert without.param("launch_overhead") == 0.0
    profile["ceilings"] = [*profile["ceilings"], {"name": "dispatch:torch-module", "value": 1.07e-5, "unit": "s"}]
    measured = Machine.from_profile(profile)
    assert measured.param("dispatch_overhead") == pytest.approx(1.07e-5)
    assert "dispatch:torch-module" in measured.sources["dispatch_overhead"]
