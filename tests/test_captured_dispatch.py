"""A captured op's host dispatch follows what it is: a bare aten op of the root's ``forward`` pays
the framework's bare dispatch, the first op of an ``nn.Module`` call and the ops of a submodule's
code the module dispatch (eager module code's per-op cost)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_charz.models import Ceilings  # noqa: E402
from pytest_charz.models.ceilings_profile import read_op_costs  # noqa: E402
from pytest_charz.models.opclass import OpClassModel  # noqa: E402
from pytest_charz.models.opclass_costs import host_framework, pays_module_call  # noqa: E402
from pytest_charz.validation.workloads import op_work  # noqa: E402
from pytest_charz.work import Work  # noqa: E402
from pytest_charz.workloads.capture import capture  # noqa: E402

TORCH_S, SCALAR_S, MODULE_S = 1.5e-6, 3.0e-6, 30e-6
PROFILE = {"kind": "charz-profile", "version": 1, "target": {"id": "cpu", "kind": "cpu", "compute_units": 2},
           "ceilings": [{"name": "flops:fp32", "value": 200e9, "unit": "FLOP/s"},
                        {"name": "bandwidth:dram", "value": 20e9, "unit": "B/s"},
                        {"name": "dispatch:torch", "value": TORCH_S, "unit": "s"},
                        {"name": "dispatch:torch-scalar", "value": SCALAR_S, "unit": "s"},
                        {"name": "dispatch:torch-module", "value": MODULE_S, "unit": "s"}]}
CHAIN = 200


class Chain(torch.nn.Module):
    """A forward of bare scalar adds, then one submodule call."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(CHAIN):
            x = x + 1.0
        return self.proj(x)


def _capture() -> list:
    return list(capture(Chain(), torch.zeros(2, 8)).ops)


def test_the_capture_counts_the_module_calls_before_each_op() -> None:
    ops = _capture()
    calls = [op.work.shape["module_calls"] for op in ops]
    # the root's call before the first add, none between the adds, the Linear's before its GEMM
    assert calls == [1] + [0] * (CHAIN - 1) + [1]
    nested = [op.work.shape["module_calls"]
              for op in capture(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), torch.zeros(2, 8)).ops]
    assert nested == [2, 1]         # Sequential and Linear, then ReLU


def test_the_ops_of_a_submodules_code_pay_the_module_dispatch() -> None:
    # a submodule's forward is model code: its ops pay eager module code's per-op cost, as the
    # module dispatch case measures it per op of small transformer blocks
    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Chain()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

    ops = capture(Outer(), torch.zeros(2, 8)).ops
    assert not any(op.work.shape.get("root_op") for op in ops)
    assert {host_framework(op_work(op.work, op.source)) for op in ops} == {"torch-module"}


def test_a_bare_aten_op_in_forward_pays_the_aten_dispatch_and_a_module_call_the_module_dispatch() -> None:
    # failure kind: dispatch:torch-module charged to every op of a forward of 200 scalar adds (+309%)
    model = OpClassModel().with_costs(read_op_costs(PROFILE))
    ceilings = Ceilings.from_profile(PROFILE)
    ops = _capture()
    dispatch = []
    for op in ops:
        work = op_work(op.work, op.source)
        breakdown = model.predict(work, ceilings).breakdown
        # the framework's own dispatch comes first, a variant's extra (module, scalar) after it
        dispatch.append([name for name in breakdown if name.startswith("dispatch:")][-1])
    assert dispatch[0] == "dispatch:torch-module"                  # the root's call begins here
    assert set(dispatch[1:CHAIN]) == {"dispatch:torch-scalar"}      # bare adds with a Python scalar
    assert dispatch[-1] == "dispatch:torch-module"                 # the Linear's call
    total = sum(model.predict(op_work(op.work, op.source), ceilings).time_s for op in ops)
    assert total == pytest.approx(2 * MODULE_S + (CHAIN - 1) * SCALAR_S, rel=0.05)
    # replayed alone, no op pays module code
    assert all("dispatch:torch-module" not in model.predict(op_work(op.work, op.source, module_code=False),
                                                            ceilings).breakdown for op in ops)


def test_a_capture_that_did_not_count_model_code_keeps_the_module_dispatch() -> None:
    old = Work(flops=64.0, bytes=512.0, launches=1, op="elementwise", shape={"elements": 64})
    assert pays_module_call(old) and host_framework(old) == "torch-module"
    assert op_work(old, "aten.add.Tensor").shape["framework"] == "torch-module"
    bare = Work(flops=64.0, bytes=512.0, launches=1, op="elementwise",
                shape={"elements": 64, "module_calls": 0, "root_op": 1})
    assert not pays_module_call(bare) and "framework" not in op_work(bare, "aten.add.Tensor").shape
    assert host_framework(bare) == "torch"
    # an op whose Work names its framework pays that framework's dispatch
    assert host_framework(Work(launches=1, op="elementwise", shape={"framework": "numpy"})) == "numpy"


def test_a_graphs_host_pays_each_ops_own_dispatch() -> None:
    # failure kind: the schedule charged every op of a CPU graph dispatch:torch-module (+407% on
    # a held-out chain of 24 small ops in sim:cpu)
    from pytest_charz.sim import Machine, simulate_graph
    from pytest_charz.targets.catalogue import resolve
    from pytest_charz.workloads.graph import Graph, Op, sequential
    from pytest_charz.workloads.predict import predict_graph

    def op(i: int, calls: int) -> Op:
        return Op(name=f"add#{i}", op_class="elementwise", work=Work(
            flops=64.0, bytes=768.0, launches=1, op="elementwise",
            shape={"elements": 64, "scalar_operand": 1, "module_calls": calls, "root_op": 1}))

    bare = Graph(name="bare", phase="forward", ops=sequential([op(i, 1 if i == 0 else 0) for i in range(10)]))
    coded = Graph(name="coded", phase="forward", ops=sequential([op(i, 1) for i in range(10)]))
    for latency in (lambda g: predict_graph(g, "cpu", profile=PROFILE).latency_s,
                    lambda g: simulate_graph(g, Machine.from_profile(PROFILE, resolve("cpu"))).latency_s):
        assert latency(coded) - latency(bare) == pytest.approx(9 * (MODULE_S - SCALAR_S), rel=0.02)


CALL_S = 12e-6
WITH_CALLS = {**PROFILE, "ceilings": [*PROFILE["ceilings"],
                                      {"name": "dispatch:torch-module-call", "value": CALL_S, "unit": "s"}]}


def test_an_op_of_model_code_pays_each_module_call_it_begins() -> None:
    # failure kind: model code charged per op alone (a toy block's 6.2 us): captured BERT, ViT and
    # GPT-2 steps, with more module calls than ops or nearly, simulated 51-56% too fast on a Xeon
    from pytest_charz.sim import Machine, simulate_graph
    from pytest_charz.targets.catalogue import resolve
    from pytest_charz.workloads.graph import Graph, Op, sequential
    from pytest_charz.workloads.predict import predict_graph

    def op(i: int, calls: int) -> Op:
        return Op(name=f"add#{i}", op_class="elementwise", work=Work(
            flops=64.0, bytes=512.0, launches=1, op="elementwise", shape={"elements": 64, "module_calls": calls}))

    few = Graph(name="few", phase="forward", ops=sequential([op(i, 1) for i in range(10)]))
    many = Graph(name="many", phase="forward", ops=sequential([op(i, 3) for i in range(10)]))
    for profile, extra in ((WITH_CALLS, 10 * 2 * CALL_S), (PROFILE, 0.0)):     # an older profile: per op only
        for latency in (lambda g: predict_graph(g, "cpu", profile=profile).latency_s,
                        lambda g: simulate_graph(g, Machine.from_profile(profile, resolve("cpu"))).latency_s):
            assert latency(many) - latency(few) == pytest.approx(extra, rel=0.02, abs=1e-9)
    # the same op priced alone, as the workload validation scores an end to end, pays the same
    model = OpClassModel().with_costs(read_op_costs(WITH_CALLS))
    ceilings = Ceilings.from_profile(WITH_CALLS)
    alone = {calls: model.predict(op_work(op(0, calls).work, "aten.add.Tensor"), ceilings) for calls in (1, 3)}
    assert alone[3].breakdown["dispatch:torch-module-call"] == pytest.approx(3 * CALL_S)
    assert alone[3].time_s - alone[1].time_s == pytest.approx(2 * CALL_S, rel=1e-9)


def _model_code_case(family: str, ops: int, calls: int, replayed_s: float, code_s: float) -> dict:
    from charz_factories import case_json

    work = Work(launches=ops, op="dispatch", shape={"kind": f"torch-module-{family}", "framework": "torch-module",
                                                    "family": family, "ops": ops, "module_calls": calls,
                                                    "replayed_s": replayed_s})
    return case_json(f"suites/test_runtime.py::test_module_dispatch_cpu[{family}]", work.to_json(),
                     replayed_s + code_s)


def test_the_profile_fits_model_code_per_op_and_per_call_over_the_model_code_cases() -> None:
    from charz_factories import case_json, make_run
    from pytest_charz.profile.build import build_profile

    per_op, per_call = 3e-6, 7e-6
    shapes = [("a", 36, 28), ("b", 62, 31), ("c", 91, 32), ("d", 39, 45), ("e", 28, 33)]
    cases = [_model_code_case(f, n, c, 1e-6 * n, per_op * n + per_call * c) for f, n, c in shapes]
    # one whose replay a neighbour slowed: three times its forward's model code more; left out
    cases.append(_model_code_case("f", 67, 24, 67e-6 + 3 * (per_op * 67 + per_call * 24), per_op * 67 + per_call * 24))
    bare = Work(launches=1, op="dispatch", shape={"kind": "torch-add", "elements": 1})
    cases.append(case_json("suites/test_runtime.py::test_dispatch_cpu[torch-add]", bare.to_json(), TORCH_S))
    profile = build_profile([make_run(cases)], ["r.json"])
    figures = {c["name"]: c["value"] for c in profile["ceilings"]}
    assert figures["dispatch:torch-module"] == pytest.approx(TORCH_S + per_op, rel=1e-6)
    assert figures["dispatch:torch-module-call"] == pytest.approx(per_call, rel=1e-6)

    # the calibration reads the same cases the same way (one fit, two readers)
    from pytest_charz.calibration.observations import Observation, measured_op_costs

    run = make_run(cases)
    costs = measured_op_costs([Observation(c.id, "cpu", c.work, c.median_s) for c in run.cases])
    assert costs.dispatch("torch-module") == pytest.approx(TORCH_S + per_op, rel=1e-6)
    assert costs.dispatch("torch-module-call") == pytest.approx(per_call, rel=1e-6)


BROADCAST_S = 1.8e-6


def test_an_op_of_two_operands_of_different_shapes_pays_the_broadcast_dispatch() -> None:
    # failure kind: a norm's `x * rsqrt(var)` and `weight * x`, and a rotary `q * cos`, broadcast
    # their operands on every call (0.78 against 0.69 us for 128 floats on a Xeon core): priced at
    # the plain add's dispatch, the workload suite's replayed muls read +18%
    from pytest_charz.models.opclass_costs import framework_of

    class Norm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scaled = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))   # (2, 8) by (2, 1)
            return self.weight * scaled + scaled                          # (8,) by (2, 8); same shapes

    with torch.inference_mode():
        ops = list(capture(Norm(), torch.rand(2, 8) + 0.5).ops)
    marked = {(op.source.split(".")[1], bool(op.work.shape.get("broadcast"))) for op in ops}
    assert marked == {("pow", False), ("mean", False), ("rsqrt", False), ("mul", True), ("add", False)}
    mul = next(op.work for op in ops if op.source.startswith("aten.mul"))
    assert framework_of(mul) == "torch-broadcast"
    # a number beside a tensor is the scalar variant, never a broadcast
    assert framework_of(Work(launches=1, op="elementwise", shape={"scalar_operand": 1, "broadcast": 1})) == "torch-scalar"

    with_broadcast = {**PROFILE, "ceilings": [*PROFILE["ceilings"],
                                              {"name": "dispatch:torch-broadcast", "value": BROADCAST_S, "unit": "s"}]}
    bare = Work(flops=8.0, bytes=96.0, launches=1, op="elementwise",
                shape={"elements": 8, "broadcast": 1, "module_calls": 0, "root_op": 1})
    model = OpClassModel().with_costs(read_op_costs(with_broadcast))
    breakdown = model.predict(bare, Ceilings.from_profile(with_broadcast)).breakdown
    # the framework's own dispatch, then the variant's extra as its dispatch case measured it
    assert breakdown["dispatch:torch"] == pytest.approx(TORCH_S)
    assert breakdown["dispatch:torch-broadcast"] == pytest.approx(BROADCAST_S - TORCH_S)
    # a profile without the variant's figure: the framework's own dispatch, in the model and in a
    # graph's host alike
    plain = OpClassModel().with_costs(read_op_costs(PROFILE)).predict(bare, Ceilings.from_profile(PROFILE))
    assert plain.breakdown.get("dispatch:torch") == pytest.approx(TORCH_S) and "dispatch:torch-broadcast" not in plain.breakdown
    from pytest_charz.workloads.runtime import runtime_of

    host = runtime_of(Ceilings.from_profile(PROFILE), PROFILE)
    assert host.op_dispatch_s("torch-broadcast") == pytest.approx(TORCH_S)
