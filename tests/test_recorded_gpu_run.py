"""Recorded GPU runs through ``charz profile`` and ``charz calibrate``, and the GEMM model
against their kernels.

``data/runs/nvidia-h200-sxm-gpu-check.run.json.gz`` is the run ``benchmarks/gpu_check.sh`` wrote
on one NVIDIA H200 SXM (driver 580, CUDA 13.0, PyTorch 2.11, CuPy 14.2; the GPU suites in quick
mode, 72 cases); ``nvidia-h200-sxm-full.run.json.gz`` the GPU suites in full on the same machine
(138 cases: GEMMs of five sizes, the finer sweeps, GPT-2, Mistral-7B and ViT-B/16 at their full
depth), minutes later. Every expectation is a fact of those runs or of the H200's spec, never of
the host the tests run on. Each one about the quick run failed on the code before the fix it
names (design notes: "The GPU check on an H200"). Nothing is fitted on either run.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_charz import cli

RUN = Path(__file__).parent / "data" / "runs" / "nvidia-h200-sxm-gpu-check.run.json.gz"
FULL_RUN = RUN.with_name("nvidia-h200-sxm-full.run.json.gz")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("h200")
    assert cli.main(["profile", str(RUN), "-o", str(out), "--name", "h200"]) == 0
    assert cli.main(["calibrate", str(RUN), "--out", str(out / "calibration.json")]) == 0
    with gzip.open(RUN, "rt", encoding="utf-8") as handle:
        run = json.load(handle)
    return {"run": run, "profile": json.loads((out / "h200.json").read_text(encoding="utf-8")),
            "calibration": json.loads((out / "calibration.json").read_text(encoding="utf-8"))}


def _ceiling(profile: dict[str, Any], name: str) -> dict[str, Any]:
    ceilings = profile["ceilings"]
    return next(c for c in (ceilings if isinstance(ceilings, list) else ceilings.values()) if c["name"] == name)


def _cases(run: dict[str, Any], op: str) -> list[dict[str, Any]]:
    return [c for c in run["cases"] if c["work"].get("op") == op]


def test_the_stream_cases_cover_their_arrays_and_set_the_dram_bandwidth(recorded: dict[str, Any]) -> None:
    streams = _cases(recorded["run"], "stream")
    assert {c["work"]["shape"]["kernel"] for c in streams} == {"copy", "scale", "add", "triad"}
    for case in streams:       # one double2 per thread (the covering grid), not one wave that loops
        shape = case["work"]["shape"]
        assert 2 * shape["threads"] * 8 >= shape["array_bytes"]
    dram = _ceiling(recorded["profile"], "bandwidth:dram")
    best = max(c["achieved"]["bytes_per_s"]["dram"] for c in streams)
    assert dram["value"] == pytest.approx(best)
    assert 0.85 * dram["spec"] < dram["value"] <= dram["spec"]      # 4.26 of 4.8 TB/s


def test_a_device_copy_reads_no_faster_than_half_the_dram(recorded: dict[str, Any]) -> None:
    # the 16 MiB copy (6.8 us against a fitted 4.8 us latency) once set 5.2 TB/s for this run
    d2d = _ceiling(recorded["profile"], "transfer:d2d")
    assert d2d["spec"] == pytest.approx(2.4e12)
    assert 0.8 * d2d["spec"] < d2d["value"] <= d2d["spec"]


def test_the_calibrated_launch_overhead_is_the_profiles_launch(recorded: dict[str, Any]) -> None:
    # the chase cases (a millisecond of dependent loads each) once set it at 1.15 ms, and then the
    # median of the launch and dispatch cases (3.9 us, a launch from Python) against the
    # profile's 0.70 us
    per_launch = [c["measurement"]["median_s"] / c["work"]["launches"]
                  for c in recorded["run"]["cases"] if c["work"].get("op") == "launch"]
    launch = recorded["calibration"]["ceilings"]["launch_overhead_s"]["value"]
    assert launch == pytest.approx(min(per_launch)) == pytest.approx(_ceiling(recorded["profile"], "launch")["value"])
    assert launch < 1e-6


def test_every_case_recorded_nvml_energy(recorded: dict[str, Any]) -> None:
    cases = recorded["run"]["cases"]
    assert len(cases) == 72
    assert all(c["energy"]["source"] == "nvml" and c["energy"]["missing"] is None for c in cases)


def _gemm_kernels(phase: str) -> list[tuple[dict[str, Any], float, float]]:
    """(shape, kernel seconds, spec-only prediction) of each GEMM of the full run's Llama-2-7B
    ``phase``, its time as torch.profiler read it (the aten op's CUDA kernels)."""
    from pytest_charz.models.opclass_costs import op_class_of
    from pytest_charz.prediction import predict
    from pytest_charz.run import load_run
    from pytest_charz.validation.workloads import merge_workload_cases, op_work, split_runs

    _, workloads = split_runs([load_run(str(FULL_RUN))])
    case = next(c for c in merge_workload_cases(workloads) if f"llama-2-7b-{phase}" in c.record.id)
    out = []
    for op, time_s in zip(case.record.ops, case.op_times):
        work = op_work(op.work, op.source)
        if op_class_of(work) == "gemm":
            out.append((dict(work.shape), time_s, predict(work, target="h200").time_s))
    return out


def test_the_full_runs_finer_chase_finds_the_l1(tmp_path: Path) -> None:
    # the quick run's chase steps by 4x and read 512 KiB (its 256 KiB point between L1 and L2)
    assert cli.main(["profile", str(FULL_RUN), "-o", str(tmp_path), "--name", "full"]) == 0
    l1 = _ceiling(json.loads((tmp_path / "full.json").read_text(encoding="utf-8")), "capacity:l1")
    assert 0.75 * l1["spec"] <= l1["value"] <= l1["spec"]


def test_spec_only_gemms_price_a_real_h200s_prefill_and_decode() -> None:
    # Llama-2-7B at 512 tokens, bf16, two layers: the prefill's GEMMs (m = 512) measured 24-65 us
    # and read -3..-14% spec-only; the decode step's GEMVs of 64 MiB of weights or more (m = 1)
    # -4..-16% and the LM head +2%
    prefill = _gemm_kernels("prefill")
    assert len(prefill) == 15 and all(shape["m"] == 512 for shape, _, _ in prefill)
    assert all(-0.20 < predicted / measured - 1 < 0.05 for _, measured, predicted in prefill)
    decode = [(s, m, p) for s, m, p in _gemm_kernels("decode") if 2 * s["n"] * s["k"] >= 64 * 2**20]
    assert len(decode) == 7
    assert all(-0.20 < predicted / measured - 1 < 0.10 for _, measured, predicted in decode)

