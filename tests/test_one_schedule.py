"""One prediction core, one schedule: ``charz workload predict`` (``predict_graph``) and ``charz sim``
(``simulate_graph``) price every op with the same core and lay the ops out with the same schedule,
so on a graph without contention they agree; calibrations, profiles and what-if figures reach
the simulator's prices; both refuse what does not belong together or does not fit."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from pytest_charz import cli
from pytest_charz.formats import read_json
from pytest_charz.prediction import load_predictor
from pytest_charz.report.sim_command import machine_from_args
from pytest_charz.report.workload_command import graph_from_args
from pytest_charz.sim import Machine, SimCapacityError, SimOptions, simulate_graph
from pytest_charz.targets.catalogue import resolve
from pytest_charz.workloads.builders import build
from pytest_charz.workloads.capacity import CapacityError
from pytest_charz.workloads.predict import kernel_work, predict_graph

MODELS = ("llama-2-7b", "llama-2-70b")
PHASES = ("prefill", "decode")
TPS = (1, 8)
TARGETS = ("h100-sxm", "mi300x")
#: How far apart the two commands may be on a graph whose ops never run at once.
AGREEMENT = 0.02
CPU_PROFILE = Path(__file__).parent / "data" / "profiles" / "amd-epyc-zen4-kvm-2vcpu.profile.json.gz"


def graph_args(name: str, phase: str, tp: int) -> argparse.Namespace:
    """The graph options both commands parse (``add_graph_options``), small enough to be quick."""
    return argparse.Namespace(name=name, phase=phase, batch=1, seq=128 if phase == "prefill" else None,
                              context=256 if phase == "decode" else None, dtype=None, tp=tp, unfused=False,
                              num_layers=None)


def sim_args(target: str, **given: Any) -> argparse.Namespace:
    """``charz sim``'s machine options (``add_sim_options``)."""
    return argparse.Namespace(**{"target": target, "model": None, "profile": None, "calibration": None, "set": [],
                                 **given})


@pytest.fixture(scope="module")
def graphs() -> dict[tuple[str, str, int], Any]:
    return {(name, phase, tp): graph_from_args(graph_args(name, phase, tp))
            for name in MODELS for phase in PHASES for tp in TPS}


@pytest.fixture(scope="module")
def machines() -> dict[str, Machine]:
    return {target: machine_from_args(sim_args(target)) for target in TARGETS}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tp", TPS)
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("name", MODELS)
def test_workload_predict_and_sim_agree_on_latency_and_bound(graphs: dict[tuple[str, str, int], Any],
                                                             machines: dict[str, Machine], name: str, phase: str,
                                                             tp: int, target: str) -> None:
    graph = graphs[(name, phase, tp)]
    try:
        predicted = predict_graph(graph, target=target, model=None, profile=None, calibration=None)
    except CapacityError as refused:
        # 70B at tp 1 does not fit an 80 GB H100: both refuse it, with the same need and capacity.
        with pytest.raises(SimCapacityError) as simulated_refusal:
            simulate_graph(graph, machines[target], SimOptions())
        assert str(simulated_refusal.value) == str(refused)
        assert (name, tp, target) == ("llama-2-70b", 1, "h100-sxm")
        return
    simulated = simulate_graph(graph, machines[target], SimOptions())
    assert simulated.latency_s == pytest.approx(predicted.latency_s, rel=AGREEMENT)
    assert simulated.bound == predicted.bound
    assert simulated.host_s == pytest.approx(predicted.host_s) and simulated.device_s == pytest.approx(
        predicted.device_s, rel=AGREEMENT)
    assert simulated.complete and predicted.complete


def test_the_simulator_prices_each_op_at_the_core_s_kernel_time(machines: dict[str, Machine]) -> None:
    graph = build("llama-2-7b", "decode", batch=1, context=256, num_layers=2)
    machine = machines["h100-sxm"]
    core = load_predictor("h100-sxm")
    simulated = simulate_graph(graph, machine, SimOptions(record_ops=True))
    for op, timed in zip(graph.ops, simulated.ops):
        kernel_s = core.predict(kernel_work(op.work)).time_s
        assert timed.end_s - timed.start_s == pytest.approx(kernel_s + op.work.launches * machine.launch_overhead_s,
                                                            rel=1e-9, abs=1e-15)


def test_what_if_figures_change_the_core_s_price() -> None:
    h100 = Machine.from_spec(resolve("h100-sxm"))
    decode = build("llama-2-7b", "decode", batch=1, context=2048, num_layers=2)
    prefill = build("llama-2-7b", "prefill", batch=4, seq=1024, num_layers=2)
    options = SimOptions(host_dispatch_s=0.5e-6)
    base_decode, base_prefill = (simulate_graph(g, h100, options).latency_s for g in (decode, prefill))
    faster_memory = h100.with_params({"memory_bandwidth": 2 * h100.param("memory_bandwidth")})
    assert simulate_graph(decode, faster_memory, options).latency_s < 0.75 * base_decode
    slower_clock = h100.with_params({"clock_mhz": h100.clock_mhz / 2})
    assert simulate_graph(prefill, slower_clock, options).latency_s > 1.6 * base_prefill
    fewer_units = h100.with_params({"compute_units": 66})
    assert simulate_graph(prefill, fewer_units, options).latency_s > 1.6 * base_prefill
    # Unchanged figures: the core's own price, nothing else.
    assert simulate_graph(prefill, h100.with_params({"idle_power_w": 10.0}), options).latency_s == base_prefill


def test_a_calibration_reaches_the_simulator(graphs: dict[tuple[str, str, int], Any]) -> None:
    ceilings = load_predictor("h100-sxm", "composite").ceilings
    gemm_at_half = {"version": 1, "op": "gemm", "size": "flops", "log10_sizes": [6.0], "efficiency": [0.5]}
    calibration = {"version": 1, "kind": "charz-calibration", "target": "h100-sxm", "model": "composite",
                   "created": "test", "ceilings": ceilings.to_json(), "bands": {}, "fitted_on": {}, "held_out": [],
                   "calibration": {"version": 1, "model": "composite", "level": 0.9, "interval": [1.0, 1.0],
                                   "tables": {"gemm": gemm_at_half}}}
    graph = graphs[("llama-2-7b", "decode", 1)]
    uncalibrated = simulate_graph(graph, machine_from_args(sim_args("h100-sxm")), SimOptions())
    calibrated = simulate_graph(graph, machine_from_args(sim_args("h100-sxm", calibration=calibration)), SimOptions())
    predicted = predict_graph(graph, "h100-sxm", calibration=calibration)
    assert calibrated.latency_s == pytest.approx(predicted.latency_s, rel=AGREEMENT)
    assert calibrated.latency_s > 1.2 * uncalibrated.latency_s      # the GEMMs take twice as long
    assert "calibrated" in calibrated.model and predicted.model == "composite"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("command", [("sim",), ("workload", "predict")])
def test_a_profile_of_another_target_is_a_usage_error_in_both_commands(capsys: pytest.CaptureFixture[str],
                                                                       command: tuple[str, ...]) -> None:
    status, out, err = run(capsys, *command, "llama-2-7b", "--target", "h100", "--phase", "decode", "--num-layers", "2",
                           "--profile", str(CPU_PROFILE))
    assert status == 2 and out == ""
    assert err.startswith("charz: error: the profile is of 'cpu', not of target 'h100-sxm'")


def test_both_commands_refuse_a_workload_that_does_not_fit_with_the_same_message(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("llama-2-70b", "--target", "h100-sxm", "--phase", "decode", "--batch", "100000")
    predicted = run(capsys, "workload", "predict", *argv)
    simulated = run(capsys, "sim", *argv)
    assert predicted[0] == simulated[0] == 2 and predicted[2] == simulated[2]
    assert "needs 31.06 TiB per device" in predicted[2] and "h100-sxm has 80 GiB of DRAM" in predicted[2]


def test_both_commands_take_a_calibration_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    ceilings = load_predictor("h100-sxm", "composite").ceilings
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"version": 1, "kind": "charz-calibration", "target": "h100-sxm", "model": "composite",
                                "created": "test", "ceilings": ceilings.to_json(), "bands": {}, "fitted_on": {},
                                "held_out": [], "calibration": {"version": 1, "model": "composite", "level": 0.9,
                                                                "interval": [1.0, 1.0], "tables": {}}}))
    argv = ("llama-2-7b", "--target", "h100-sxm", "--phase", "decode", "--num-layers", "2", "--calibration", str(path))
    status, out, err = run(capsys, "workload", "predict", *argv)
    assert status == 0, err
    assert "on h100-sxm (composite" in out
    status, out, err = run(capsys, "sim", *argv)
    assert status == 0, err
    assert f"calibrated ({path})" in out
    status, _, err = run(capsys, "sim", *argv[:2], "mi300x", *argv[3:])
    assert status == 2 and "is of target 'h100-sxm', not 'mi300x'" in err


def test_on_a_cpu_target_both_wait_for_each_op() -> None:
    profile = dict(read_json(CPU_PROFILE))
    graph = build("llama-2-7b", "decode", batch=1, context=64, num_layers=1, dtype="fp32")
    predicted = predict_graph(graph, "cpu", profile=profile)
    machine = Machine.from_profile(profile, resolve("cpu"))
    simulated = simulate_graph(graph, machine, SimOptions(record_ops=True))
    assert not predicted.asynchronous and predicted.launch_overhead_s == 0.0 == machine.launch_overhead_s
    assert simulated.latency_s == pytest.approx(predicted.latency_s, rel=1e-9) and simulated.bound == predicted.bound
    for before, after in zip(simulated.ops, simulated.ops[1:]):
        assert after.issue_s == pytest.approx(before.end_s + predicted.host_dispatch_s)



def test_an_op_the_core_cannot_price_is_listed_by_both_and_takes_no_time(machines: dict[str, Machine]) -> None:
    from pytest_charz.work import Work
    from pytest_charz.workloads.graph import Graph, Op, sequential

    def gemm(name: str) -> Op:
        return Op(name, "gemm", Work(2.0 * 2048**3, 3 * 2 * 2048**2, dtype="bf16", launches=1, op="gemm",
                                     shape={"m": 2048, "n": 2048, "k": 2048}))

    odd = Op("count", "other", Work(1e9, dtype="int32", launches=1, op="other"))   # no int32 peak on an H100
    graph = Graph("g", "forward", sequential([gemm("a"), odd, gemm("b")]))
    predicted = predict_graph(graph, "h100-sxm")
    simulated = simulate_graph(graph, machines["h100-sxm"], SimOptions())
    assert not predicted.complete and not simulated.complete
    assert simulated.uncovered == predicted.uncovered and "int32" in simulated.uncovered[0][1]
    assert simulated.latency_s == pytest.approx(predicted.latency_s, rel=1e-9)
    assert any("lower bound" in note for note in simulated.notes)


def test_a_cpu_op_costs_the_same_in_a_graph_as_alone_under_a_calibration() -> None:
    # failure kind: a class's efficiency at its small sizes holds the kernel's fixed cost (a
    # 128-float mean 2.4 us, 0.65 of it dispatch); the graph priced the op's kernel Work without
    # its launch by that efficiency and kept almost none of it (0.014 us against 3.2 alone)
    from pytest_charz.calibration.classes import ClassFit
    from pytest_charz.calibration.efficiency import EfficiencyTable, ModelFit
    from pytest_charz.calibration.predictor import Predictor
    from pytest_charz.models import Ceilings
    from pytest_charz.models.ceilings_profile import read_op_costs
    from pytest_charz.models.opclass_costs import OpCosts
    from pytest_charz.models.registry import get_model
    from pytest_charz.targets.spec import Figure
    from pytest_charz.work import Work
    from pytest_charz.workloads.graph import Graph, Op, sequential

    profile = {"kind": "charz-profile", "version": 1, "target": {"id": "cpu", "kind": "cpu", "compute_units": 2},
               "ceilings": [{"name": "flops:fp32", "value": 200e9, "unit": "FLOP/s"},
                            {"name": "bandwidth:dram", "value": 20e9, "unit": "B/s"},
                            {"name": "dispatch:torch", "value": 0.65e-6, "unit": "s"}]}
    mean = EfficiencyTable("reduction.mean:fp32", "bytes", (2.7, 7.2), (0.2, 0.9))
    fitted = ClassFit("reduction.mean:fp32", mean, (2.7, 7.2), 5, ("reduction",), (0.8, 1.25), "normalized")
    ceilings = Ceilings.from_profile(profile)
    # the calibration's own dispatch figure (the median of its rounds) is not the profile's: the
    # graph's host issues with the core's, as the core prices the op alone and as charz sim does
    # (predict_graph took the profile's: a captured Mixtral decode step 2.7% apart from its ops)
    calibrated = OpCosts(dispatch_s={"torch": Figure(0.72e-6, "calibration")})
    core = Predictor.of(get_model("opclass"), ceilings,
                        ModelFit("opclass", classes={fitted.key: fitted}, costs=calibrated),
                        op_costs=read_op_costs(profile))
    ops = [Op(f"mean#{i}", "reduction", Work(flops=float(n), bytes=4.0 * n, dtype="fp32", launches=1, op="reduction",
                                             shape={"elements": n, "function": "mean", "outputs": 1, "root_op": 1,
                                                    "module_calls": 0}))
           for i, n in enumerate((128, 4096, 1 << 20))]
    alone = [core.predict(op.work) for op in ops]
    graph = predict_graph(Graph("g", "forward", sequential(ops)), "cpu", profile=profile, predictor=core)
    assert graph.latency_s == pytest.approx(sum(p.time_s for p in alone), rel=1e-9)
    simulated = simulate_graph(Graph("g", "forward", sequential(ops)),
                               Machine.from_profile(profile, resolve("cpu"), core), SimOptions())
    assert simulated.latency_s == pytest.approx(graph.latency_s, rel=1e-9)
    # the small op's kernel keeps the fixed cost its class's efficiency holds
    assert graph.ops[0].kernel_s > 0.5 * (alone[0].time_s - 0.72e-6)
