"""Runtime behaviour of the simulator: the host thread, streams and events, the launch queue,
synchronization, graph replay, copy engines, shared bandwidth, the bottleneck, determinism and
agreement with the graph predictor."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_charz.errors import UsageError
from pytest_charz.sim import Machine, SimCapacityError, SimOptions, simulate_graph
from pytest_charz.targets.catalogue import resolve
from pytest_charz.work import Work
from pytest_charz.workloads.builders import build
from pytest_charz.workloads.graph import Graph, Op
from pytest_charz.workloads.predict import kernel_work, predict_graph


@pytest.fixture(scope="module")
def h100() -> Machine:
    return Machine.from_spec(resolve("h100-sxm"))


def stream_op(name: str, moved: float, stream: int = 0, deps: tuple[str, ...] = (), **attrs: object) -> Op:
    return Op(name=name, op_class="elementwise", work=Work(bytes=moved, launches=1, op="elementwise"),
              stream=stream, deps=deps, attrs=dict(attrs))


def graph_of(*ops: Op) -> Graph:
    return Graph(name="toy", phase="forward", ops=ops)


def small_llama(phase: str, **sizes: int) -> Graph:
    return build("llama-2-7b", phase, num_layers=2, **sizes)


def test_small_batch_decode_with_slow_host_dispatch_is_host_bound(h100: Machine) -> None:
    graph = small_llama("decode", batch=1, context=1024)
    slow = simulate_graph(graph, h100, SimOptions(host_dispatch_s=50e-6))
    fast = simulate_graph(graph, h100, SimOptions(host_dispatch_s=0.5e-6))
    assert slow.bottleneck == "host" and slow.utilization["host"] > 0.9
    issued_s = len(graph.ops) * 50e-6
    assert issued_s < slow.latency_s < issued_s + 0.2e-3   # the host's issue time, then the last op
    assert fast.bottleneck == "memory:dram"
    assert slow.bottleneck_detail.critical_path_s["host"] > 0.9 * slow.latency_s


def test_memory_bandwidth_shortens_a_memory_bound_decode_but_not_a_compute_bound_prefill(h100: Machine) -> None:
    more = h100.with_params({"memory_bandwidth": 2 * h100.param("memory_bandwidth")})
    options = SimOptions(host_dispatch_s=0.5e-6)
    decode = small_llama("decode", batch=1, context=2048)
    prefill = small_llama("prefill", batch=4, seq=2048)
    assert simulate_graph(decode, more, options).latency_s < 0.75 * simulate_graph(decode, h100, options).latency_s
    traced = SimOptions(host_dispatch_s=0.5e-6, record_ops=True)
    base, faster = simulate_graph(prefill, h100, traced), simulate_graph(prefill, more, traced)
    assert base.bottleneck == "compute"
    assert faster.latency_s > 0.9 * base.latency_s      # only its few memory-bound ops (norms, adds) speed up
    compute_bound = [(a.end_s - a.start_s, b.end_s - b.start_s) for a, b in zip(base.ops, faster.ops)
                     if a.bound == "compute"]
    assert compute_bound and all(after == pytest.approx(before) for before, after in compute_bound)


def test_the_host_runs_ahead_until_the_launch_queue_is_full(h100: Machine) -> None:
    ops = [stream_op(f"op{i}", 3.35e8) for i in range(6)]   # ~0.1 ms each at DRAM speed
    deep = simulate_graph(graph_of(*ops), h100, SimOptions(record_ops=True, host_dispatch_s=1e-6))
    shallow = simulate_graph(graph_of(*ops), h100, SimOptions(record_ops=True, host_dispatch_s=1e-6,
                                                               launch_queue_depth=1))
    assert deep.ops[-1].issue_s == pytest.approx(6e-6)
    # With room for one waiting launch, op 5 is issued only once op 4 has started (op 3 ended).
    assert shallow.ops[5].issue_s >= shallow.ops[3].end_s
    assert shallow.latency_s == pytest.approx(deep.latency_s, rel=0.01)


def test_a_sync_point_makes_the_host_wait_for_the_op(h100: Machine) -> None:
    ops = [stream_op("a", 3.35e8, sync=True), stream_op("b", 1e3, deps=("a",))]
    result = simulate_graph(graph_of(*ops), h100, SimOptions(record_ops=True, host_dispatch_s=1e-6))
    assert result.ops[1].issue_s == pytest.approx(result.ops[0].end_s + 1e-6)


def test_graph_replay_issues_one_launch_and_frees_a_host_bound_graph(h100: Machine) -> None:
    graph = small_llama("decode", batch=1, context=1024)
    eager = simulate_graph(graph, h100, SimOptions(host_dispatch_s=20e-6))
    replay = simulate_graph(graph, h100, SimOptions(graph_replay=True, host_dispatch_s=20e-6))
    assert eager.bottleneck == "host"
    assert replay.latency_s < 0.6 * eager.latency_s and replay.bottleneck != "host"
    assert replay.bottleneck_detail.busy_s["host"] == pytest.approx(20e-6)


def test_concurrent_memory_bound_ops_share_dram_and_compute_overlaps_memory(h100: Machine) -> None:
    moved = 3.35e9
    alone = simulate_graph(graph_of(stream_op("a", moved)), h100, SimOptions(host_dispatch_s=0.0)).latency_s
    two = simulate_graph(graph_of(stream_op("a", moved), stream_op("b", moved, stream=1)), h100,
                         SimOptions(host_dispatch_s=0.0))
    assert two.latency_s == pytest.approx(2 * alone, rel=0.01)        # the bandwidth is shared, not doubled
    gemm = Op(name="g", op_class="gemm", stream=1,
              work=Work(flops=2.0 * 4096**3, bytes=3 * 2 * 4096**2, dtype="bf16", launches=1, op="gemm",
                        shape={"m": 4096, "n": 4096, "k": 4096}))
    gemm_alone = simulate_graph(graph_of(gemm), h100, SimOptions(host_dispatch_s=0.0)).latency_s
    both = simulate_graph(graph_of(stream_op("a", moved), gemm), h100, SimOptions(host_dispatch_s=0.0)).latency_s
    # The GEMM runs at its compute speed beside the stream, taking only the DRAM bandwidth it needs.
    assert both < alone + gemm_alone
    assert both == pytest.approx(alone + 3 * 2 * 4096**2 / h100.param("memory_bandwidth"), rel=0.01)


def test_an_op_waits_for_its_dependency_on_another_stream(h100: Machine) -> None:
    ops = [stream_op("a", 3.35e8), stream_op("b", 1e3, stream=1, deps=("a",))]
    result = simulate_graph(graph_of(*ops), h100, SimOptions(record_ops=True, host_dispatch_s=1e-6))
    assert result.ops[1].start_s == pytest.approx(result.ops[0].end_s)


def test_copies_beyond_the_copy_engines_wait(h100: Machine) -> None:
    copies = [Op(name=f"c{i}", op_class="copy", stream=i,
                 work=Work(transfers={"h2d": 64e6}, launches=1, op="copy")) for i in range(3)]
    result = simulate_graph(graph_of(*copies), h100, SimOptions(record_ops=True, host_dispatch_s=0.0))
    starts = sorted(op.start_s for op in result.ops)
    assert starts[2] >= min(op.end_s for op in result.ops) - 1e-12
    wider = simulate_graph(graph_of(*copies), h100.with_params({"copy_engines": 3}),
                           SimOptions(record_ops=True, host_dispatch_s=0.0))
    assert max(op.start_s for op in wider.ops) < 1e-5


def test_runs_are_bit_identical(h100: Machine) -> None:
    graph = build("llama-2-70b", "decode", batch=1, context=4096, tp=8)
    first = simulate_graph(graph, h100, SimOptions(trace=True))
    again = simulate_graph(build("llama-2-70b", "decode", batch=1, context=4096, tp=8),
                           Machine.from_spec(resolve("h100-sxm")), SimOptions(trace=True))
    assert json.dumps(first.to_json()) == json.dumps(again.to_json())
    assert first.trace_events() == again.trace_events()


def test_the_simulator_agrees_with_the_graph_predictor_on_a_serial_graph(h100: Machine) -> None:
    graph = build("llama-2-7b", "decode", batch=1, context=4096, num_layers=4)
    for dispatch_s in (1e-6, 20e-6):
        predicted = predict_graph(graph, "h100-sxm", host_dispatch_s=dispatch_s)
        simulated = simulate_graph(graph, h100, SimOptions(host_dispatch_s=dispatch_s))
        # One core, one schedule: a serial graph has no contention, so the two are the same timeline.
        assert simulated.latency_s == pytest.approx(predicted.latency_s, rel=1e-9)
        assert simulated.bound == predicted.bound


def test_a_workload_that_does_not_fit_says_what_it_needs_and_what_there_is() -> None:
    l4 = Machine.from_spec(resolve("l4"))
    with pytest.raises(SimCapacityError, match=r"needs 1\d\d\.\d GiB per device .* l4 has 24 GiB"):
        simulate_graph(build("llama-2-70b", "decode", batch=1, context=4096), l4)
    assert issubclass(SimCapacityError, UsageError)
    with pytest.raises(UsageError, match="needs 8 devices"):
        simulate_graph(build("llama-2-70b", "decode", batch=1, context=4096, tp=8), l4)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(1e3, 1e9), st.integers(0, 2), st.booleans()), min_size=1, max_size=12),
       st.floats(0.0, 2e-5), st.integers(1, 4))
def test_work_is_conserved_and_time_runs_forward(spec: list[tuple[float, int, bool]], dispatch_s: float,
                                                 depth: int) -> None:
    machine = Machine.from_spec(resolve("h100-sxm"))
    ops = []
    for index, (moved, stream, depends) in enumerate(spec):
        deps = (f"op{index - 1}",) if depends and index else ()
        ops.append(stream_op(f"op{index}", moved, stream=stream, deps=deps))
    result = simulate_graph(graph_of(*ops), machine,
                            SimOptions(record_ops=True, host_dispatch_s=dispatch_s, launch_queue_depth=depth))
    # The device does exactly the work the prediction core priced, however the ops shared DRAM.
    assert machine.predictor is not None
    priced = sum(machine.predictor.predict(kernel_work(op.work)).time_s for op in ops)
    assert result.bottleneck_detail.busy_s["memory:dram"] == pytest.approx(priced, rel=1e-6)
    by_name = {op.name: op for op in result.ops}
    last_end: dict[int, float] = {}
    for op, source in zip(result.ops, ops):
        assert op.issue_s <= op.start_s + 1e-15 and op.start_s <= op.end_s
        assert op.start_s >= last_end.get(op.stream, 0.0) - 1e-15
        last_end[op.stream] = op.end_s
        for dep in source.deps:
            assert op.start_s >= by_name[dep].end_s - 1e-15
    assert result.latency_s == pytest.approx(max(op.end_s for op in result.ops))


def test_on_the_host_cpu_the_host_waits_for_every_op() -> None:
    cpu = Machine.from_spec(resolve("cpu"))
    graph = build("llama-2-7b", "decode", batch=1, context=128, num_layers=2, dtype="fp32")
    result = simulate_graph(graph, cpu, SimOptions(record_ops=True, host_dispatch_s=5e-6))
    for before, after in zip(result.ops, result.ops[1:]):
        assert after.issue_s == pytest.approx(before.end_s + 5e-6)
    assert result.latency_s == pytest.approx(predict_graph(graph, "cpu", host_dispatch_s=5e-6).latency_s, rel=1e-9)
