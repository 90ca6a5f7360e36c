"""A grouped GEMM (``torch._grouped_mm``, a mixture of experts' expert products) on a CPU is its
groups' calls, as PyTorch's fallback runs it; on an accelerator it stays one kernel."""
from __future__ import annotations

import os

import pytest

from pytest_charz.calibration.predictor import Predictor
from pytest_charz.models.ceilings import Ceilings
from pytest_charz.models.opclass import OpClassModel, dispatch_s
from pytest_charz.models.opclass_costs import OpCosts
from pytest_charz.run import load_run
from pytest_charz.targets.catalogue import resolve
from pytest_charz.targets.spec import Figure
from pytest_charz.work import Work

RUN = os.path.join(os.path.dirname(__file__), "data", "runs", "amd-epyc-zen5-kvm-2vcpu.run.json.gz")
DISPATCH_S = 0.7e-6


def cpu_core() -> Predictor:
    spec = load_run(RUN).target.spec
    assert spec is not None
    model = OpClassModel().with_costs(OpCosts(dispatch_s={"torch": Figure(DISPATCH_S, "measured")}))
    bandwidths = {"l1": 150e9, "l2": 90e9, "l3": 50e9, "dram": 18e9}   # the recorded spec has none of its own
    return Predictor.of(model, Ceilings.from_spec(spec).with_overrides(bandwidth_bytes_per_s=bandwidths))


def grouped(rows: int, groups: int, n: int = 512, k: int = 128) -> Work:
    # as the capture records it: the rows' FLOPs, every expert's weights among the bytes
    return Work(flops={"fp32": 2.0 * rows * n * k}, bytes={"dram": 4.0 * (groups * k * n + rows * (k + n))},
                launches=1, op="gemm", shape={"m": rows, "n": n, "k": k, "groups": groups, "module_calls": 0})


def test_a_grouped_gemm_on_a_cpu_is_one_call_per_group_and_a_kernel_per_group_with_rows() -> None:
    # Mixtral's decode step: one token, its two experts of four (the workload suite's replay
    # measured 14.6 us where one GEMM of the work's FLOPs was priced at 7.3)
    core = cpu_core()
    work = grouped(rows=2, groups=4)
    one = core.predict(Work(flops={"fp32": 2.0 * 512 * 128}, bytes={"dram": work.bytes["dram"] / 4}, launches=1,
                            op="gemm", shape={"m": 1, "n": 512, "k": 128, "module_calls": 0}))
    kernel_s = one.time_s - dispatch_s(one)
    assert kernel_s > 0
    predicted = core.predict(work)
    # the op's own dispatch, four calls, two kernels
    assert predicted.time_s == pytest.approx(DISPATCH_S + 4 * DISPATCH_S + 2 * kernel_s)
    assert dispatch_s(predicted) == pytest.approx(5 * DISPATCH_S)
    assert any("4 calls" in note and "2 with rows" in note for note in predicted.notes)
    # more experts, the same rows: the calls are added (and each group's share of the rows'
    # activations, among its bytes, is a little smaller)
    assert core.predict(grouped(rows=2, groups=8)).time_s == pytest.approx(predicted.time_s + 4 * DISPATCH_S, rel=0.01)
    # rows past the groups share them: every group has rows
    many = core.predict(grouped(rows=16, groups=4))
    assert any("4 with rows (4 each)" in note for note in many.notes)
    # one group is a plain GEMM
    single = grouped(rows=2, groups=1)
    assert core.predict(single) == core.model.predict(single, core.ceilings)


def test_a_grouped_gemm_on_a_gpu_stays_one_kernel() -> None:
    core = Predictor.of(OpClassModel(), Ceilings.from_spec(resolve("h100-sxm")))
    work = grouped(rows=2, groups=4)
    assert core.predict(work) == core.model.predict(work, core.ceilings)
