"""What-if sweeps: axes, grid order, the Pareto front, the sensitivity ranking, the parallel and
Dask runners (on a small analytical evaluation of this file), and `charz sweep` on the simulator."""
from __future__ import annotations

import json
from typing import Mapping

import pytest

from pytest_charz.errors import UsageError
from pytest_charz.sim.sweep import Axis, SweepPoint, SweepResult, grid, pareto_front, parse_axis, sensitivity
from pytest_charz.sim.sweep_run import run_configs

KNOWN = ("memory_bandwidth", "compute_units", "clock_mhz", "power_cap_w")


class Roofline:
    """A toy step: compute time over units x clock, memory time over bandwidth, static power
    over the step plus a cost per unit; deterministic and picklable."""

    def __init__(self, flops: float, bytes_moved: float) -> None:
        self.flops, self.bytes_moved = flops, bytes_moved

    def __call__(self, values: Mapping[str, float]) -> SweepPoint:
        units = values.get("compute_units", 100.0)
        clock_mhz = values.get("clock_mhz", 1000.0)
        bandwidth = values.get("memory_bandwidth", 1e12)
        latency = max(self.flops / (units * clock_mhz * 1e6 * 1000.0), self.bytes_moved / bandwidth) + 5e-6
        power = 50.0 + 2.0 * units + bandwidth / 1e11
        return SweepPoint(dict(values), latency, power * latency, power,
                          bottleneck="compute" if self.flops / (units * clock_mhz * 1e9) > self.bytes_moved / bandwidth
                          else "memory")


def test_axis_forms() -> None:
    assert parse_axis("memory_bandwidth=1e12:3e12:3", KNOWN).values == pytest.approx((1e12, 2e12, 3e12))
    log = parse_axis("compute_units=16:256:5:log", KNOWN).values
    assert log == pytest.approx((16, 32, 64, 128, 256))
    assert parse_axis("clock_mhz=1000,1500", KNOWN).values == (1000.0, 1500.0)
    assert parse_axis("clock_mhz=1500:1500:1", KNOWN).values == (1500.0,)


@pytest.mark.parametrize("text, message", [
    ("memory_bandwith=1:2:3", "known parameters: clock_mhz, compute_units, memory_bandwidth, power_cap_w; "
                              "did you mean 'memory_bandwidth'"),
    ("memory_bandwidth=2:1:3", "HI (1) is below LO (2)"),
    ("memory_bandwidth=1:2:1", "N must be at least 2"),
    ("memory_bandwidth=1:2:x", "N must be an integer"),
    ("memory_bandwidth=0:2:3:log", "a log axis needs LO > 0"),
    ("memory_bandwidth=1:2:3:cubic", "spacing must be one of lin, log"),
    ("memory_bandwidth", "expected PARAM=LO:HI:N"),
    ("clock_mhz=1,nan", "not a finite number"),
    ("clock_mhz=1,1", "listed twice"),
])
def test_bad_axes(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_axis(text, KNOWN)


def test_grid_order_and_guards() -> None:
    axes = [Axis("compute_units", (1.0, 2.0)), Axis("clock_mhz", (10.0, 20.0, 30.0))]
    configs = grid(axes)
    assert len(configs) == 6
    assert configs[:3] == [{"compute_units": 1.0, "clock_mhz": c} for c in (10.0, 20.0, 30.0)]
    with pytest.raises(UsageError, match="varied twice"):
        grid([Axis("clock_mhz", (1.0,)), Axis("clock_mhz", (2.0,))])
    with pytest.raises(UsageError, match="at least one --vary"):
        grid([])


def _point(latency: float, energy: float) -> SweepPoint:
    return SweepPoint({}, latency, energy, energy / latency)


def test_pareto_front_is_the_non_dominated_set() -> None:
    points = [_point(1.0, 10.0), _point(2.0, 5.0), _point(2.0, 6.0), _point(3.0, 5.0), _point(0.5, 20.0),
              _point(4.0, 1.0), _point(1.0, 10.0)]
    front = pareto_front(points)
    assert front == (4, 0, 1, 5)
    for i, point in enumerate(points):
        beaten = any(q.latency_s <= point.latency_s and q.energy_j <= point.energy_j and j != i
                     for j, q in enumerate(points))
        assert (i in front) == (not beaten or i == 0), i     # 6 repeats 0: the first in grid order is kept


def test_sensitivity_ranks_what_moves_the_time() -> None:
    memory_bound = Roofline(flops=1e9, bytes_moved=1e10)
    axes = [parse_axis("memory_bandwidth=1e12:4e12:4", KNOWN), parse_axis("compute_units=50:200:4", KNOWN)]
    points = run_configs(grid(axes), memory_bound)
    ranking = sensitivity(axes, points)
    assert [s.parameter for s in ranking] == ["memory_bandwidth", "compute_units"]
    bandwidth = ranking[0]
    assert bandwidth.latency_high_s < bandwidth.latency_low_s
    assert bandwidth.elasticity == pytest.approx(-1.0, abs=0.01)        # time ~ 1 / bandwidth
    assert ranking[1].swing == pytest.approx(0.0, abs=1e-12)           # the units never matter here


def test_parallel_runs_give_the_table_of_the_serial_run() -> None:
    axes = [parse_axis("memory_bandwidth=1e12:4e12:7", KNOWN), parse_axis("compute_units=8:256:9:log", KNOWN)]
    evaluate = Roofline(flops=4e11, bytes_moved=4e9)
    configs = grid(axes)
    seen: list[int] = []
    serial = run_configs(configs, evaluate, progress=seen.append)
    parallel = run_configs(configs, evaluate, jobs=2)
    assert parallel == serial
    assert seen[-1] == len(configs) and seen == sorted(seen)
    with pytest.raises(UsageError, match="jobs must be a positive integer"):
        run_configs(configs, evaluate, jobs=0)


def test_result_json_round_trip_and_identity() -> None:
    axes = [parse_axis("memory_bandwidth=1e12:2e12:3", KNOWN), parse_axis("clock_mhz=800:1600:3", KNOWN)]
    evaluate = Roofline(flops=3e11, bytes_moved=2e9)
    first = SweepResult.of({"model": "toy"}, "toy", "toy-machine", axes, run_configs(grid(axes), evaluate))
    second = SweepResult.of({"model": "toy"}, "toy", "toy-machine", axes, run_configs(grid(axes), evaluate, jobs=2))
    assert json.dumps(first.to_json(), sort_keys=True) == json.dumps(second.to_json(), sort_keys=True)
    again = SweepResult.from_json(json.loads(json.dumps(first.to_json())))
    assert again == first
    assert first.front and all(0 <= i < len(first.points) for i in first.front)


def test_dask_cluster_runs_the_sweep() -> None:
    import distributed        # the sweep extra, which scripts/setup installs: this must run in CI, never skip
    axes = [parse_axis("memory_bandwidth=1e12:4e12:5", KNOWN), parse_axis("compute_units=8:64:4", KNOWN)]
    evaluate = Roofline(flops=1e11, bytes_moved=3e9)
    configs = grid(axes)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        seen: list[int] = []
        on_cluster = run_configs(configs, evaluate, scheduler=cluster.scheduler_address, progress=seen.append)
    assert on_cluster == run_configs(configs, evaluate)
    assert seen[-1] == len(configs)


def test_dask_unreachable_scheduler_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="cannot connect"):
        run_configs([{"clock_mhz": 1.0}], Roofline(1.0, 1.0), scheduler="tcp://127.0.0.1:9")


# ---------------------------------------------------------------- on the simulator


def _graph(phase: str, **tokens: int):
    from pytest_charz.workloads.builders import build

    return build("llama-2-7b", phase, batch=1, num_layers=2, **tokens)


def _h100():
    from pytest_charz.sim import Machine
    from pytest_charz.targets.catalogue import resolve

    return Machine.from_spec(resolve("h100-sxm"))


def test_more_bandwidth_shortens_a_decode_step_and_not_a_prefill() -> None:
    from pytest_charz.sim import PARAMETERS
    from pytest_charz.sim.sweep import GraphEvaluator

    machine = _h100()
    base = machine.param("memory_bandwidth")
    axes = [parse_axis(f"memory_bandwidth={base}:{2 * base}:3", PARAMETERS)]
    decode = run_configs(grid(axes), GraphEvaluator(machine, _graph("decode", context=512)))
    prefill = run_configs(grid(axes), GraphEvaluator(machine, _graph("prefill", seq=2048)))
    assert decode[0].bottleneck.startswith("memory") and prefill[0].bottleneck == "compute"
    assert decode[0].latency_s > decode[1].latency_s > decode[2].latency_s
    # Twice the bandwidth: the memory-bound step loses over a fifth of its time (launch and
    # dispatch gaps stay); the compute-bound prefill only its memory-bound ops' share (its norms,
    # rotary and elementwise ops: about 7% of 2048 tokens of Llama on an H100), under half the
    # decode step's gain.
    assert decode[2].latency_s < 0.8 * decode[0].latency_s
    assert 1.0 - prefill[2].latency_s / prefill[0].latency_s < 0.5 * (1.0 - decode[2].latency_s / decode[0].latency_s)
    assert prefill[2].latency_s > 0.9 * prefill[0].latency_s
    ranking = sensitivity(axes + [Axis("clock_mhz", (machine.param("clock_mhz"),))], decode)
    assert ranking[0].parameter == "memory_bandwidth" and ranking[0].elasticity < 0


def _sweep(tmp_path, name: str, *extra: str) -> int:
    from pytest_charz import cli

    return cli.main(["sweep", "llama-2-7b", "--phase", "decode", "--context", "256", "--num-layers", "2",
                     "--target", "h100-sxm", "-o", str(tmp_path / name), "--no-progress", *extra])


def test_two_sweeps_with_the_same_inputs_write_the_same_table(tmp_path, capsys) -> None:
    vary = ["--vary", "memory_bandwidth=2e12:4e12:5", "--vary", "compute_units=66:132:3"]
    assert _sweep(tmp_path, "one", *vary) == 0
    assert _sweep(tmp_path, "two", *vary, "--jobs", "2") == 0
    first = (tmp_path / "one" / "sweep.json").read_text()
    assert first == (tmp_path / "two" / "sweep.json").read_text()
    document = SweepResult.from_json(json.loads(first))
    assert len(document.points) == 15 and document.front and document.ranking[0].parameter == "memory_bandwidth"
    assert (tmp_path / "one" / "sweep.md").read_text().startswith("# Sweep: llama-2-7b decode")
    page = (tmp_path / "one" / "sweep.html").read_text()
    assert "<svg" in page and "Pareto front" in page and "http" not in page.replace("http://www.w3.org", "")
    assert "Most sensitive: memory_bandwidth" in capsys.readouterr().out


@pytest.mark.parametrize("vary, message", [
    ("memory_bandwdth=1e12:2e12:2", "unknown sweep parameter 'memory_bandwdth'; known parameters: clock_mhz, "
                                    "compute_units"),
    ("memory_bandwidth=-1e12:2e12:2", "memory_bandwidth must be > 0"),
    ("compute_units=0,66", "compute_units must be a positive whole number"),
])
def test_bad_sweeps_are_usage_errors(tmp_path, capsys, vary: str, message: str) -> None:
    assert _sweep(tmp_path, "bad", "--vary", vary) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "bad" / "sweep.json").exists()


def test_a_workload_that_does_not_fit_says_what_it_needs(tmp_path, capsys) -> None:
    from pytest_charz import cli

    assert cli.main(["sweep", "llama-2-70b", "--phase", "decode", "--context", "512", "--target", "h100-sxm",
                     "--vary", "memory_bandwidth=2e12:4e12:2", "-o", str(tmp_path / "big"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "needs 128.6 GiB per device" in err and "h100-sxm has 80 GiB of DRAM" in err


def test_a_sweep_on_a_local_dask_cluster_of_processes_matches_the_local_run() -> None:
    import distributed        # the sweep extra, which scripts/setup installs: this must run in CI, never skip
    from pytest_charz.sim import PARAMETERS
    from pytest_charz.sim.sweep import GraphEvaluator

    evaluate = GraphEvaluator(_h100(), _graph("decode", context=128))
    configs = grid([parse_axis("memory_bandwidth=2e12:4e12:4", PARAMETERS),
                    parse_axis("dispatch_overhead=2e-6:1e-5:3", PARAMETERS)])
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        on_cluster = run_configs(configs, evaluate, scheduler=cluster.scheduler_address)
    assert on_cluster == run_configs(configs, evaluate)
