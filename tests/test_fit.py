"""Calibration over runs (pytest_charz.calibration) on synthetic runs with known efficiency."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np
import pytest

from charz_factories import case_json, measurement_json, run_json
from pytest_charz.calibration.file import Calibration, band_for, calibrate, load_calibration
from pytest_charz.calibration.observations import ceilings_from_run, observations, split_cases
from pytest_charz.errors import FormatError, UsageError
from pytest_charz.models import Ceilings, Composite
from pytest_charz.records import Run, RunTarget
from pytest_charz.targets.catalogue import resolve
from pytest_charz.work import Work

GEMM_SIZES = [int(round(256 * 2 ** (i / 8))) for i in range(49)]           # 256 .. 16384
COPY_SIZES = [int(4096 * 2 ** (i / 2)) for i in range(41)]                   # 4 KiB .. 4 GiB


def linear_efficiency(low: float, high: float, log10_lo: float, log10_hi: float) -> Callable[[float], float]:
    """Efficiency rising linearly in log10(size) from ``low`` to ``high`` over [log10_lo, log10_hi]."""
    def efficiency(size: float) -> float:
        fraction = min(1.0, max(0.0, (math.log10(size) - log10_lo) / (log10_hi - log10_lo)))
        return low + (high - low) * fraction
    return efficiency


GEMM_EFF = linear_efficiency(0.2, 0.8, math.log10(2 * 256.0**3), math.log10(2 * 16384.0**3))
COPY_EFF = linear_efficiency(0.4, 0.9, math.log10(2 * 4096.0), math.log10(2 * 4096.0 * 2**20))


def gemm_work(n: int) -> Work:
    return Work(flops=2.0 * n**3, bytes=3.0 * n * n * 2, dtype="bf16", op="gemm", shape={"m": n, "n": n, "k": n})


def copy_work(size: int) -> Work:
    return Work(bytes={"dram": 2.0 * size}, op="copy", shape={"working_set_bytes": 2.0 * size})


def synthetic_run_json(target: str = "h100-sxm", seed: int = 0, sigma: float = 0.05,
                       gemm_sizes: Sequence[int] = GEMM_SIZES, copy_sizes: Sequence[int] = COPY_SIZES,
                       gemm_eff: Callable[[float], float] = GEMM_EFF, copy_eff: Callable[[float], float] = COPY_EFF,
                       spec_json: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run file's JSON (docs/run-format.md) whose measured median is the composite model's
    uncalibrated prediction divided by a known efficiency, times lognormal noise."""
    spec = resolve(target)
    ceilings = Ceilings.from_spec(spec)
    rng = np.random.default_rng(seed)
    model = Composite()
    cases = []
    works = [(f"suites/test_compute.py::test_gemm[{n}-bf16]", gemm_work(n), gemm_eff) for n in gemm_sizes]
    works += [(f"suites/test_memory.py::test_copy[{s}]", copy_work(s), copy_eff) for s in copy_sizes]
    for case_id, work, efficiency in works:
        size = work.total_flops if work.flops else work.total_bytes
        predicted = model.predict(work, ceilings).time_s
        median_s = predicted / efficiency(size) * math.exp(sigma * rng.standard_normal())
        cases.append(case_json(case_id, work.to_json(), median_s, measurement=measurement_json(median_s, kept=5)))
    data = run_json(cases, target_id=spec.id, name=spec.identity.name, kind=spec.identity.kind,
                    spec=spec_json if spec_json is not None else spec.to_json(),
                    created=f"2025-01-0{1 + seed % 9}T00:00:00+00:00")
    data["device"] = {"backend": "sim"}
    return data


def as_run(data: dict[str, Any], path: str = "") -> Run:
    """The typed Run of a run file's JSON, as read from ``path``."""
    return replace(Run.from_json(data, path or "synthetic run"), path=path)


def synthetic_run(*args: Any, path: str = "", **kwargs: Any) -> Run:
    """The typed Run of :func:`synthetic_run_json`."""
    return as_run(synthetic_run_json(*args, **kwargs), path)


def write_run(path: Any, run: Run) -> str:
    path.write_text(json.dumps(run.to_json()))
    return str(path)


def test_ceilings_from_run_rebuild_the_recorded_spec() -> None:
    run = synthetic_run(gemm_sizes=[512], copy_sizes=[4096])
    assert ceilings_from_run(run).to_json() == Ceilings.from_spec(resolve("h100-sxm")).to_json()
    host = replace(run, target=RunTarget("cpu", "host", "cpu", "test", None))
    with pytest.raises(FormatError, match="no target spec"):
        ceilings_from_run(host)


def test_calibration_recovers_the_efficiency() -> None:
    calfile = calibrate([synthetic_run(sigma=0.01)], model="composite", holdout=None)
    for name, truth in (("gemm:bf16", GEMM_EFF), ("copy", COPY_EFF)):
        table = calfile.calibration.tables[name]
        for log10_size, fitted in zip(table.log10_sizes, table.efficiency):
            assert fitted == pytest.approx(truth(10**log10_size), rel=0.03)
    # the pooled op table serves ModelFit.apply for a work of the same op without its dtype key
    assert calfile.calibration.tables["gemm"].size == "flops"
    assert calfile.calibration.tables["copy"].size == "bytes"
    prediction = calfile.predict(gemm_work(4096))
    assert prediction.model == "composite+calibration"
    measured = Composite().predict(gemm_work(4096), calfile.ceilings).time_s / GEMM_EFF(2 * 4096.0**3)
    assert prediction.time_s == pytest.approx(measured, rel=0.03)
    low, high = prediction.interval_s
    assert low < prediction.time_s < high


def test_alternate_split_holds_out_interior_sizes() -> None:
    cases = observations([synthetic_run(gemm_sizes=[256, 512, 1024, 2048], copy_sizes=[4096, 8192, 16384])])
    calibration, held = split_cases(cases)
    held_ids = {c.case_id for c in held}
    assert held_ids == {"suites/test_compute.py::test_gemm[512-bf16]", "suites/test_memory.py::test_copy[8192]"}
    assert {c.case_id for c in calibration} | held_ids == {c.case_id for c in cases}
    chosen, rest = split_cases(cases, "*test_copy*")
    assert {c.work.op for c in chosen} == {"copy"} and {c.work.op for c in rest} == {"gemm"}


def test_conformal_bands_cover_held_out_cases_near_the_level() -> None:
    level = 0.9
    coverages = []
    for seed in range(20):
        calfile = calibrate([synthetic_run(seed=seed, sigma=0.1)], level=level)
        for regime in ("compute", "memory"):
            band = band_for(calfile, regime)
            assert band is not None and band["method"] == "conformal" and band["lo"] < 0 < band["hi"]
            coverages.append(band["coverage"])
    # split-conformal guarantees >= level on average; per seed the held-out fraction varies
    assert float(np.mean(coverages)) >= level - 0.05
    assert min(coverages) >= 0.5


def test_bands_follow_the_regime_noise() -> None:
    # GEMMs from 1448^3 up: below, the GPU GEMM model's fixed ramp dominates, and this generator
    # divides it by the efficiency too, which a real device does not; the class fit then misses
    # held-out small GEMMs by itself (a known gap, docs/design-notes.md). The check is of noise.
    sizes = [int(round(1448 * 2 ** (i / 8))) for i in range(49)]
    noisy_copy = synthetic_run_json(seed=3, sigma=0.02, gemm_sizes=sizes)
    rng = np.random.default_rng(7)
    for case in noisy_copy["cases"]:
        if case["work"]["op"] == "copy":
            case["measurement"]["median_s"] *= math.exp(0.3 * rng.standard_normal())
    calfile = calibrate([as_run(noisy_copy)])
    compute, memory = band_for(calfile, "compute"), band_for(calfile, "memory")
    assert memory["hi"] - memory["lo"] > 4 * (compute["hi"] - compute["lo"])
    assert band_for(calfile, "latency") is None


def test_missing_spec_figures_come_from_calibration_cases() -> None:
    spec_json = resolve("h100-sxm").to_json()
    for level in spec_json["memory"]:
        level["bandwidth_bytes_per_s"] = None
    run = synthetic_run(spec_json=spec_json, gemm_sizes=[1024, 2048, 4096], copy_sizes=[4096, 2**20, 2**28])
    calfile = calibrate([run], holdout=None)
    best = max(2.0 * s / c.median_s for s, c in zip([4096, 2**20, 2**28], run.cases[3:]))
    figure = calfile.ceilings.bandwidth_bytes_per_s["dram"]
    assert figure.value == pytest.approx(best)
    assert "calibration case" in figure.source
    assert calfile.predict(copy_work(2**24)).covered


def test_calibration_file_round_trip_and_version(tmp_path: Any) -> None:
    calfile = calibrate([synthetic_run(gemm_sizes=GEMM_SIZES[:6], copy_sizes=COPY_SIZES[:6])])
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(calfile.to_json()))
    loaded = load_calibration(path)
    assert loaded.to_json() == calfile.to_json()
    assert loaded.held_out and set(loaded.held_out).isdisjoint(loaded.fitted_on["cases"])
    assert loaded.fitted_on["runs"][0]["created"] == "2025-01-01T00:00:00+00:00"
    data = calfile.to_json()
    data["version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(FormatError, match="version 99"):
        load_calibration(path)
    path.write_text(json.dumps({**calfile.to_json(), "kind": "charz-run"}))
    with pytest.raises(FormatError, match="not a charz calibration"):
        load_calibration(path)
    with pytest.raises(FormatError):
        Calibration.from_json({**calfile.to_json(), "bands": {"compute": {"lo": "x"}}})


def test_calibrate_refuses_mixed_targets_and_uncovering_models() -> None:
    runs = [synthetic_run(gemm_sizes=[512, 1024], copy_sizes=[4096]),
            synthetic_run("mi300x", gemm_sizes=[512, 1024], copy_sizes=[4096])]
    with pytest.raises(UsageError, match="several targets"):
        calibrate(runs)
    assert calibrate(runs, target="mi300x", holdout=None).target == "mi300x"
    with pytest.raises(UsageError, match="covers none"):
        calibrate([synthetic_run(gemm_sizes=[], copy_sizes=[4096, 8192])], model="gemm")


def test_op_classes_separate_thread_counts_and_kernels() -> None:
    from pytest_charz.calibration.efficiency import calibration_key
    from pytest_charz.work import Work

    one = Work(bytes={"l2": 1e6}, op="read", shape={"threads": 1, "working_set_bytes": 1e6})
    two = Work(bytes={"l2": 1e6}, op="read", shape={"threads": 2, "working_set_bytes": 1e6})
    triad = Work(flops=2e6, bytes=24e6, dtype="fp64", op="stream", shape={"kernel": "triad", "threads": 2})
    assert calibration_key(one) != calibration_key(two)
    assert calibration_key(triad) == "stream:fp64@kernel=triad,threads=2"
    assert calibration_key(Work(flops=1.0, dtype="fp32", op="gemm", shape={"m": 4})) == "gemm:fp32"
