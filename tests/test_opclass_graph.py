"""Graph predictions on a CPU with the op-class model: the measured PyTorch dispatch per op, and a
latency interval summed from the ops' calibrated intervals."""
from __future__ import annotations

import pytest

from pytest_charz.calibration.classes import ClassFit
from pytest_charz.calibration.efficiency import ModelFit, EfficiencyTable
from pytest_charz.work import Work
from pytest_charz.workloads.graph import Graph, Op, sequential
from pytest_charz.workloads.predict import DEFAULT_HOST_DISPATCH_S, predict_graph

from test_opclass import PROFILE


def chain() -> Graph:
    ops = [Op(f"add{i}", "elementwise", Work(64, 768, launches=1, op="elementwise", shape={"elements": 64}))
           for i in range(10)]
    ops.append(Op("mm", "gemm", Work(2.0 * 256**3, 3 * 4 * 256**2, launches=1, op="gemm",
                                     shape={"m": 256, "n": 256, "k": 256})))
    return Graph("tiny", "forward", sequential(ops))


def test_a_cpu_graph_uses_the_measured_torch_dispatch_not_the_default() -> None:
    # failure kind: CPU graph predictions kept the 10 us default though the profile measured dispatch
    result = predict_graph(chain(), "cpu", model="opclass", profile=PROFILE)
    assert result.host_dispatch_s == pytest.approx(1.07e-6)
    assert result.host_dispatch_s != DEFAULT_HOST_DISPATCH_S
    assert result.launch_overhead_s == 0.0
    assert result.complete


def test_the_latency_interval_sums_the_ops_intervals() -> None:
    flat = lambda key, size: ClassFit(key, EfficiencyTable(key, size, (3.0,), (1.0,)), (2.0, 9.0), 5,  # noqa: E731
                                      ("x",), (0.8, 1.3), "conformal")
    calibration = ModelFit("opclass", {}, (1.0, 1.0), 0.9,
                              {"elementwise:fp32": flat("elementwise:fp32", "bytes"), "gemm:fp32": flat("gemm:fp32", "flops")})
    from pytest_charz.calibration.file import Calibration
    from pytest_charz.prediction import load_predictor

    # the class fits as a calibration file of this host's ceilings (the ones it is fitted against)
    fitted_on = load_predictor("cpu", "opclass", PROFILE).ceilings
    calibration_file = Calibration(fitted_on.target_id, "opclass", calibration, fitted_on, {}, {}, (), "")
    result = predict_graph(chain(), "cpu", model="opclass", profile=PROFILE, calibration=calibration_file)
    low, high = result.interval_s
    assert low < result.latency_s < high
    uncalibrated = predict_graph(chain(), "cpu", model="opclass", profile=PROFILE)
    assert uncalibrated.interval_s == (pytest.approx(uncalibrated.latency_s), pytest.approx(uncalibrated.latency_s))


def test_a_graph_of_model_code_pays_the_measured_per_op_cost_of_module_code() -> None:
    # The ops of a captured model run from nn.Module code: module calls and the views the graph
    # folds away cost their host about 10 us per op, against 1 us for a bare torch.add.
    with_module = {**PROFILE, "ceilings": [*PROFILE["ceilings"],
                                           {"name": "dispatch:torch-module", "value": 1.07e-5, "unit": "s"}]}
    result = predict_graph(chain(), "cpu", model="opclass", profile=with_module)
    assert result.host_dispatch_s == pytest.approx(1.07e-5)
    # a synchronous host: each of the 11 ops' dispatch comes before its kernel
    assert result.latency_s >= 11 * 1.07e-5


def test_captured_ops_are_scored_as_module_code_and_held_out_ones_as_written() -> None:
    from pytest_charz.validation.workloads import HELDOUT, op_work
    from pytest_charz.models.opclass_costs import framework_of

    captured = Work(64, 768, launches=1, op="elementwise", shape={"elements": 64})
    assert framework_of(op_work(captured, "aten::add.Tensor")) == "torch-module"
    assert framework_of(op_work(captured, HELDOUT)) == "torch"
    written = Work(64, 768, launches=1, op="elementwise", shape={"elements": 64, "framework": "torch"})
    assert framework_of(op_work(written, "aten::add.Tensor")) == "torch"


@pytest.mark.parametrize("source", ["aten.gelu.default", "aten::gelu", "gelu", "aten.tanh_.default"])
def test_a_captured_op_bound_by_its_math_is_scored_as_transcendental(source: str) -> None:
    # the capture names its ops "aten.gelu.default": read as "aten", no captured gelu, tanh or
    # rsqrt was ever scored as the transcendental op it is
    from pytest_charz.validation.workloads import op_work
    from pytest_charz.models.opclass_costs import op_class_of

    captured = Work(64, 512, launches=1, op="elementwise", shape={"elements": 64})
    marked = op_work(captured, source)
    assert op_class_of(marked) == "transcendental"
    assert marked.shape["function"] == source.replace("::", ".").split(".")[1 if "aten" in source else 0].rstrip("_")
    assert op_class_of(op_work(captured, "aten.add.Tensor")) == "elementwise"
