"""The op-graph IR (``pytest_charz.workloads.graph``): construction checks, totals by op class,
the critical path, and the versioned JSON form."""
from __future__ import annotations

import json

import pytest

from pytest_charz.errors import FormatError, UsageError
from pytest_charz.work import Collective, Work
from pytest_charz.workloads.graph import Graph, Op, TensorSpec, sequential


def op(name: str, op_class: str = "elementwise", flops: float = 1e6, moved: float = 1e6, deps: tuple[str, ...] = (),
       stream: int = 0) -> Op:
    return Op(name, op_class, Work(flops, moved, launches=1, op=op_class), deps=deps, stream=stream)


def test_op_names_are_unique() -> None:
    with pytest.raises(UsageError, match="two ops are named 'a'"):
        Graph("g", "forward", (op("a"), op("a")))


def test_dependencies_must_name_earlier_ops() -> None:
    with pytest.raises(UsageError, match="op 'a' depends on b, which is not an earlier op"):
        Graph("g", "forward", (op("a", deps=("b",)), op("b")))
    with pytest.raises(UsageError, match="not an earlier op"):
        Graph("g", "forward", (op("a", deps=("missing",)),))
    Graph("g", "forward", (op("a"), op("b", deps=("a",))))   # an earlier op is fine


def test_unknown_phase_and_op_class_are_refused() -> None:
    with pytest.raises(UsageError, match="phase must be one of"):
        Graph("g", "inference", ())
    with pytest.raises(UsageError, match="op class must be one of"):
        op("a", op_class="matmul")


def test_by_class_shares_sum_to_one_and_add_up_to_the_totals() -> None:
    graph = Graph("g", "forward", sequential([
        op("proj", "gemm", flops=8e9, moved=3e6), op("act", "elementwise", flops=1e6, moved=2e6),
        op("norm", "norm", flops=5e6, moved=2e6), op("out", "gemm", flops=8e9, moved=3e6)]))
    rows = graph.by_class()
    assert [row.op_class for row in rows] == ["gemm", "elementwise", "norm"]      # OP_CLASSES order
    assert sum(row.flops_share for row in rows) == pytest.approx(1.0)
    assert sum(row.bytes_share for row in rows) == pytest.approx(1.0)
    assert rows[0].ops == 2 and rows[0].flops == pytest.approx(16e9)
    assert sum(row.bytes for row in rows) == pytest.approx(graph.total_bytes) == pytest.approx(10e6)
    assert graph.launches == 4


def test_critical_path_of_a_diamond_takes_the_longer_branch() -> None:
    # a -> (b: 5, c: 2) -> d, b and c on their own streams so only the dependencies order them.
    graph = Graph("diamond", "forward", (
        op("a"), op("b", deps=("a",), stream=1), op("c", deps=("a",), stream=2), op("d", deps=("b", "c"))))
    cost = {"a": 1.0, "b": 5.0, "c": 2.0, "d": 1.0}
    path, total = graph.critical_path(lambda o: cost[o.name])
    assert path == ("a", "b", "d") and total == pytest.approx(7.0)
    cost["c"] = 9.0
    assert graph.critical_path(lambda o: cost[o.name]) == (("a", "c", "d"), pytest.approx(11.0))


def test_critical_path_follows_stream_order_without_dependencies() -> None:
    # No dependencies at all: ops on one stream still run one after the other.
    one_stream = Graph("g", "forward", (op("a"), op("b"), op("c")))
    assert one_stream.critical_path(lambda o: 2.0) == (("a", "b", "c"), pytest.approx(6.0))
    two_streams = Graph("g", "forward", (op("a"), op("b", stream=1), op("c")))
    path, total = two_streams.critical_path(lambda o: 2.0)
    assert path == ("a", "c") and total == pytest.approx(4.0)
    assert Graph("empty", "forward", ()).critical_path(lambda o: 1.0) == ((), 0.0)


def test_json_round_trip_keeps_every_field() -> None:
    collective = Collective("all-reduce", 8192.0, 8)
    ops = (Op("embed", "embedding", Work(0, 4096, launches=1, op="embedding"),
              inputs=(TensorSpec((1, 16), "int64"),), outputs=(TensorSpec((1, 16, 64), "bf16"),), source="built"),
           Op("reduce", "collective", Work(launches=1, collectives=(collective,), op="collective"), deps=("embed",),
              stream=1, attrs={"layer": 0, "ranks": 8}))
    graph = Graph("tiny", "prefill", ops, params={"batch": 1, "seq": 16, "tp": 8}, notes=("hand-built",))
    document = json.loads(json.dumps(graph.to_json()))
    assert document["kind"] == "charz-graph" and document["version"] == 1
    again = Graph.from_json(document)
    assert again == graph
    assert again.collective_bytes() == pytest.approx(8192.0)
    assert again.op("embed").outputs[0].nbytes == 16 * 64 * 2


def test_a_document_of_another_kind_or_version_is_refused() -> None:
    document = Graph("g", "forward", (op("a"),)).to_json()
    with pytest.raises(FormatError, match="not a charz workload graph"):
        Graph.from_json({**document, "kind": "charz-run"}, "g.json")
    with pytest.raises(FormatError, match="version 99 is not supported"):
        Graph.from_json({**document, "version": 99}, "g.json")
    with pytest.raises(FormatError, match="malformed"):
        Graph.from_json({**document, "ops": [{"name": "a"}]}, "g.json")
