"""``predict_graph``: op-by-op prediction and the host/device schedule, on hand-built graphs; and
the ``charz workload`` commands in process."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_charz import cli
from pytest_charz.prediction import predict
from pytest_charz.work import Work
from pytest_charz.workloads.graph import Graph, Op, sequential
from pytest_charz.workloads.predict import (DEFAULT_HOST_DISPATCH_S, DEFAULT_LAUNCH_OVERHEAD_S, kernel_work,
                                            predict_graph)

TARGET = "h100-sxm"


def gemm(name: str, n: int = 4096, deps: tuple[str, ...] = (), stream: int = 0) -> Op:
    """A bf16 n x n x n GEMM: about 0.14 ms on an H100 at n=4096, compute-bound."""
    work = Work(2.0 * n**3, 3.0 * 2 * n * n, dtype="bf16", launches=1, op="gemm", shape={"m": n, "n": n, "k": n})
    return Op(name, "gemm", work, deps=deps, stream=stream)


def tiny(name: str) -> Op:
    return Op(name, "elementwise", Work(64, 512, dtype="bf16", launches=1, op="elementwise"))


def kernel_s(op: Op) -> float:
    return predict(kernel_work(op.work), TARGET).time_s


def test_a_chain_runs_op_after_op_with_a_launch_each() -> None:
    ops = sequential([gemm("a"), gemm("b", 2048), gemm("c")])
    result = predict_graph(Graph("chain", "forward", ops), TARGET)
    assert [op.name for op in result.ops] == ["a", "b", "c"]
    for before, after in zip(result.ops, result.ops[1:]):
        assert after.start_s == pytest.approx(before.end_s)
    for op, predicted in zip(ops, result.ops):
        assert predicted.time_s == pytest.approx(kernel_s(op) + DEFAULT_LAUNCH_OVERHEAD_S)
        assert predicted.bound == "compute:bf16" and predicted.regime == "compute"
    busy = sum(op.time_s for op in result.ops)
    # The first op waits for its dispatch; the device runs the rest back to back.
    assert result.latency_s == pytest.approx(DEFAULT_HOST_DISPATCH_S + busy)
    assert result.bound == "device" and result.complete
    assert sum(op.share for op in result.ops) == pytest.approx(1.0)
    assert result.by_class[0].op_class == "gemm" and result.by_class[0].share == pytest.approx(1.0)
    assert result.tokens_per_s is None                     # not an LLM phase


def test_two_streams_overlap_until_a_dependency_joins_them() -> None:
    apart = Graph("two", "forward", (gemm("a"), gemm("b", stream=1)))
    result = predict_graph(apart, TARGET, host_dispatch_s=1e-6)
    a, b = result.ops
    assert b.start_s < a.end_s                             # b runs while a does
    assert result.latency_s == pytest.approx(max(a.end_s, b.end_s))
    assert result.latency_s < 0.6 * (a.time_s + b.time_s)
    joined = predict_graph(Graph("two", "forward", (gemm("a"), gemm("b", deps=("a",), stream=1))), TARGET,
                           host_dispatch_s=1e-6)
    assert joined.ops[1].start_s == pytest.approx(joined.ops[0].end_s)
    assert joined.latency_s == pytest.approx(1e-6 + a.time_s + b.time_s)


def test_tiny_ops_are_host_bound_at_the_dispatch_rate() -> None:
    count, dispatch_s = 200, 20e-6
    result = predict_graph(Graph("tiny", "decode", sequential([tiny(f"t{i}") for i in range(count)]),
                                 params={"batch": 4}), TARGET, host_dispatch_s=dispatch_s)
    last = result.ops[-1]
    assert last.time_s < dispatch_s                        # every op is done before the next is issued
    assert result.latency_s == pytest.approx(count * dispatch_s + last.time_s)
    assert result.host_s == pytest.approx(count * dispatch_s)
    assert result.bound == "host" and result.device_idle_s > 0.9 * count * dispatch_s - result.device_s
    assert all(op.bound == "launch" for op in result.ops)  # the launch outweighs each tiny kernel
    assert result.tokens_per_s == pytest.approx(4 / result.latency_s)
    # With dispatch made free the same graph is device-bound, at its launches.
    free = predict_graph(Graph("tiny", "decode", sequential([tiny(f"t{i}") for i in range(count)])), TARGET,
                         host_dispatch_s=0.0)
    assert free.bound == "device" and free.latency_s == pytest.approx(free.device_s)


def test_a_synchronous_runtime_adds_dispatch_to_every_op() -> None:
    ops = sequential([gemm("a", 1024), tiny("b"), gemm("c", 1024)])
    result = predict_graph(Graph("sync", "forward", ops), TARGET, host_dispatch_s=5e-6, asynchronous=False)
    assert not result.asynchronous
    assert result.latency_s == pytest.approx(3 * 5e-6 + sum(op.time_s for op in result.ops))


def test_an_uncovered_op_is_listed_with_its_reason_and_keeps_its_launch() -> None:
    odd = Op("count", "other", Work(1e9, dtype="int32", launches=1, op="other"))   # no int32 peak on an H100
    result = predict_graph(Graph("g", "forward", sequential([gemm("a"), odd, gemm("b")])), TARGET)
    assert not result.complete
    assert result.uncovered == (("count", result.op("count").prediction.reason),)
    assert "int32" in result.uncovered[0][1]
    assert result.op("count").time_s == pytest.approx(DEFAULT_LAUNCH_OVERHEAD_S)
    assert [op.name for op in result.ops] == ["a", "count", "b"]      # never dropped
    document = json.loads(json.dumps(result.to_json(), allow_nan=False))
    assert document["kind"] == "charz-graph-prediction" and document["version"] == 1
    assert document["complete"] is False and document["uncovered"][0]["name"] == "count"


def test_a_profile_launch_figure_sets_launch_and_dispatch() -> None:
    profile = {"kind": "charz-profile", "version": 1, "target": {"id": TARGET},
               "ceilings": [{"name": "launch", "value": 4.0, "unit": "us", "source": "runtime suite"}]}
    result = predict_graph(Graph("t", "forward", sequential([tiny("a"), tiny("b")])), TARGET, profile=profile)
    assert result.launch_overhead_s == pytest.approx(4e-6) and result.host_dispatch_s == pytest.approx(4e-6)
    assert result.ops[0].time_s == pytest.approx(4e-6 + kernel_s(tiny("a")))


def test_a_graph_that_does_not_fit_the_device_is_refused_with_what_it_needs_and_what_there_is() -> None:
    from pytest_charz.workloads.builders import build
    from pytest_charz.workloads.capacity import CapacityError

    with pytest.raises(CapacityError, match=r"needs 31\.06 TiB per device \(weights 128\.5 GiB, KV cache .*\) but "
                                            r"h100-sxm has 80 GiB of DRAM"):
        predict_graph(build("llama-2-70b", "decode", batch=100000, context=1024), TARGET)
    assert predict_graph(build("llama-2-70b", "decode", batch=1, context=1024, tp=8), TARGET).latency_s > 0


def test_prefill_tokens_per_second_counts_every_token() -> None:
    result = predict_graph(Graph("p", "prefill", (gemm("a"),), params={"batch": 2, "seq": 512}), TARGET)
    assert result.tokens_per_s == pytest.approx(2 * 512 / result.latency_s)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(1e3, 1e13), min_size=1, max_size=6), st.integers(0, 5), st.floats(1.0, 100.0))
def test_more_work_in_one_op_never_predicts_less_time(flops: list[float], which: int, factor: float) -> None:
    def graph(scale: float) -> Graph:
        ops = [Op(f"op{i}", "gemm", Work(f * (scale if i == which % len(flops) else 1.0), f / 50, dtype="bf16",
                                         launches=1, op="matmul"), stream=i % 2)
               for i, f in enumerate(flops)]
        return Graph("g", "forward", ops)

    base, more = predict_graph(graph(1.0), TARGET), predict_graph(graph(factor), TARGET)
    assert more.latency_s >= base.latency_s * (1 - 1e-12)
    assert more.busy_s >= base.busy_s * (1 - 1e-12)


# ---------------------------------------------------------------- the CLI


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_workload_list_names_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "workload", "list")
    assert status == 0
    for name in ("llama-2-7b", "llama-2-70b", "mixtral-8x7b", "bert-base", "vit-b-16", "gpt2"):
        assert name in out


def test_workload_show_prints_ops_totals_and_classes(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "workload", "show", "llama-2-7b", "--phase", "decode", "--context", "512")
    assert status == 0
    assert "% FLOPs" in out and "total:" in out and "gemm" in out
    assert "x32" in out                                   # 32 layers collapse into one row per op
    status, out, _ = run_cli(capsys, "workload", "show", "gpt2", "--phase", "prefill", "--seq", "64", "--json")
    assert status == 0
    document = json.loads(out)
    assert document["kind"] == "charz-graph" and document["phase"] == "prefill"


def test_workload_predict_70b_tp8_decode_is_quick(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    status, out, err = run_cli(capsys, "workload", "predict", "llama-2-70b", "--target", "h100-sxm",
                               "--phase", "decode", "--tp", "8")
    elapsed = time.perf_counter() - started
    assert status == 0, err
    assert elapsed < 10.0
    assert "x80" in out and "end-to-end:" in out and "tokens/s" in out
    assert "-bound" in out.splitlines()[-1]


def test_workload_predict_json_is_a_graph_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "workload", "predict", "llama-2-7b", "--target", "h100", "--phase", "decode",
                             "--json")
    assert status == 0
    document = json.loads(out)
    assert document["kind"] == "charz-graph-prediction" and document["bound"] in ("host", "device")
    assert document["latency_s"] > 0 and document["tokens_per_s"] == pytest.approx(1 / document["latency_s"])


@pytest.mark.parametrize(("argv", "message"), [
    (("show", "llama-2-7c"), "did you mean 'llama-2-7b'"),
    (("show", "llama-2-7b", "--phase", "decoding"), "--phase must be one of"),
    (("show", "llama-2-7b", "--dtype", "bf17"), "dtype must be one of"),
    (("show", "llama-2-7b", "--batch", "-1"), "--batch must be a positive integer"),
    (("predict", "llama-2-7b", "--target", "h900"), "h900"),
])
def test_workload_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str) -> None:
    status, _, err = run_cli(capsys, "workload", *argv)
    assert status == 2
    assert err.startswith("charz: error: ") and message in err


def test_op_patterns_collapse_layer_indices() -> None:
    from pytest_charz.report.workload_command import group_ops, op_pattern

    assert op_pattern("layers.12.mlp.up_proj") == "layers.*.mlp.up_proj"
    assert op_pattern("model.layers.3.self_attn.mm#41") == "model.layers.*.self_attn.mm"
    groups = group_ops(["embed", "layers.0.mlp", "layers.1.mlp", "norm"], collapse=True)
    assert [(g.label, g.members) for g in groups] == [("embed", (0,)), ("layers.*.mlp x2", (1, 2)), ("norm", (3,))]
    assert len(group_ops(["a", "b"], collapse=False)) == 2
