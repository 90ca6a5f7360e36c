"""A recorded GPU run through ``charz profile`` and ``charz calibrate``.

``data/runs/nvidia-h200-sxm-gpu-check.run.json.gz`` is the run ``benchmarks/gpu_check.sh`` wrote
on one NVIDIA H200 SXM (driver 580, CUDA 13.0, PyTorch 2.11, CuPy 14.2; the GPU suites in quick
mode, 72 cases). Every expectation is a fact of that run or of the H200's spec, never of the host
the tests run on. Each one failed on the code before the fix it names (design notes: "The GPU
check on an H200").
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_charz import cli

RUN = Path(__file__).parent / "data" / "runs" / "nvidia-h200-sxm-gpu-check.run.json.gz"


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


def test_the_calibrated_launch_overhead_is_a_launch_cases_figure(recorded: dict[str, Any]) -> None:
    # the chase cases (a millisecond of dependent loads each) once set it at 1.15 ms
    per_launch = [c["measurement"]["median_s"] / c["work"]["launches"]
                  for c in recorded["run"]["cases"] if c["work"].get("op") in ("launch", "dispatch")]
    launch = recorded["calibration"]["ceilings"]["launch_overhead_s"]["value"]
    assert min(per_launch) <= launch <= max(per_launch) < 20e-6


def test_every_case_recorded_nvml_energy(recorded: dict[str, Any]) -> None:
    cases = recorded["run"]["cases"]
    assert len(cases) == 72
    assert all(c["energy"]["source"] == "nvml" and c["energy"]["missing"] is None for c in cases)
