"""Validation of models on runs (pytest_charz.validation.models), its report and the charz commands."""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any

import pytest

from pytest_charz.cli import main
from pytest_charz.calibration.file import band_for, load_calibration
from pytest_charz.validation.models import error_summary, validate
from pytest_charz.report.validation import render_html, render_markdown
from test_fit import COPY_SIZES, GEMM_SIZES, as_run, linear_efficiency, synthetic_run, synthetic_run_json, write_run

SMALL = {"gemm_sizes": GEMM_SIZES[::4], "copy_sizes": COPY_SIZES[::3]}


def test_error_summary_statistics() -> None:
    summary = error_summary([0.1, -0.2, 0.3, -0.4], [True, False, True, None])
    assert summary["n"] == 4
    assert summary["mape"] == pytest.approx(0.25)
    assert summary["median_abs"] == pytest.approx(0.25)
    assert summary["bias"] == pytest.approx(-0.05)
    assert summary["coverage"] == pytest.approx(2 / 3)
    assert summary["p90_abs"] == pytest.approx(0.37)
    assert error_summary([], [])["median_abs"] is None


def test_validate_tables_per_model_and_regime() -> None:
    report = validate([synthetic_run(sigma=0.03, **SMALL)], models=["composite", "gemm"]).to_json()
    assert report["kind"] == "charz-validation" and report["version"] == 1
    composite = report["tables"]["composite"]
    held = report["calibrations"]["composite"]["h100-sxm"]["held_out"]
    assert composite["all"]["n"] == len(held)
    assert composite["compute"]["n"] + composite["memory"]["n"] == len(held)
    assert composite["all"]["median_abs"] < 0.06
    assert abs(composite["all"]["bias"]) < 0.05
    # gemm covers only the GEMM cases: the copies are listed as not covered, never scored
    assert set(report["tables"]["gemm"]) == {"all", "compute"}
    assert {m["case"] for m in report["not_covered"]["gemm"]} == {h for h in held if "copy" in h}
    assert all(c["kind"] == "held-out" for c in report["cases"])


def test_held_out_error_is_measured_not_fitted() -> None:
    # a step the log-size efficiency cannot interpolate: copies beyond 1 MiB run 3x slower
    run = synthetic_run_json(sigma=0.01, **SMALL)
    for case in run["cases"]:
        if case["work"]["op"] == "copy" and case["work"]["bytes"]["dram"] > 2 * 2**20:
            case["measurement"]["median_s"] *= 3.0
    report = validate([as_run(run)], models=["composite"]).to_json()
    table = report["tables"]["composite"]
    assert table["memory"]["p90_abs"] > 0.1 and table["compute"]["p90_abs"] < 0.05
    # the leave-one-out residuals see the step too: the memory band widens, the compute one does not
    bands = report["calibrations"]["composite"]["h100-sxm"]["bands"]
    assert bands["memory"]["hi"] - bands["memory"]["lo"] > 1.5 * (bands["compute"]["hi"] - bands["compute"]["lo"])
    outside = report["outside_interval"]["composite"]
    assert all(c["inside"] is False for c in outside)


def test_transfer_table_between_two_targets() -> None:
    slow_copy = linear_efficiency(0.2, 0.45, math.log10(2 * 4096.0), math.log10(2 * 4096.0 * 2**20))
    runs = [synthetic_run("h100-sxm", sigma=0.02, **SMALL),
            synthetic_run("mi300x", seed=1, sigma=0.02, copy_eff=slow_copy, **SMALL)]
    report = validate(runs, models=["composite"]).to_json()
    rows = {(t["calibrated_on"], t["tested_on"], t["regime"]): t for t in report["transfer"]}
    assert set(rows) == {("h100-sxm", "mi300x", "compute"), ("h100-sxm", "mi300x", "memory"),
                         ("mi300x", "h100-sxm", "compute"), ("mi300x", "h100-sxm", "memory")}
    # the same GEMM efficiency on both: transfers; copies half as efficient on mi300x: 2x slower
    assert rows[("h100-sxm", "mi300x", "compute")]["median_abs"] < 0.1
    assert rows[("h100-sxm", "mi300x", "memory")]["bias"] == pytest.approx(1.0, abs=0.15)
    assert rows[("mi300x", "h100-sxm", "memory")]["bias"] == pytest.approx(-0.5, abs=0.1)
    stops = report["stops_transferring"]["composite"]
    moved = [c for c in stops if c["kind"] == "transfer"]
    assert len(moved) == 2 * len(SMALL["copy_sizes"]) and all(c["regime"] == "memory" for c in moved)
    assert all(abs(c["error"]) > c["limit"] and c["inside"] is False for c in moved)
    assert [abs(c["error"]) for c in stops] == sorted((abs(c["error"]) for c in stops), reverse=True)


def test_transfer_between_two_runs_of_one_target() -> None:
    runs = [synthetic_run(sigma=0.02, path="a.json", **SMALL), synthetic_run(seed=5, sigma=0.02, path="b.json", **SMALL)]
    report = validate(runs, models=["composite"]).to_json()
    pairs = {(t["calibrated_on"], t["tested_on"]) for t in report["transfer"]}
    assert pairs == {("a.json#0", "b.json#1"), ("b.json#1", "a.json#0")}
    assert all(t["median_abs"] < 0.1 for t in report["transfer"])


def test_html_report_is_self_contained() -> None:
    pytest.importorskip("matplotlib")
    report = validate([synthetic_run(sigma=0.05, **SMALL)], models=["composite", "spec-roofline"]).to_json()
    page = render_html(report)
    assert not re.search(r"https?://", page)
    assert page.count("<svg") == 3            # a scatter per model and the error CDF
    assert "composite: predicted vs measured" in page
    markdown = render_markdown(report)
    assert "| composite | all |" in markdown and "Transfer" in markdown


def test_calibrate_and_validate_commands(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = write_run(tmp_path / "run.json", synthetic_run(sigma=0.05, **SMALL))
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", path]) == 0
    calfile = load_calibration(tmp_path / "baselines" / "h100-sxm" / "calibration-opclass.json")
    assert calfile.model == "opclass" and calfile.held_out  # the default model
    band = band_for(calfile, "memory")
    assert band is not None and band["lo"] < 0 < band["hi"]
    assert "held out" in capsys.readouterr().out

    assert main(["calibrate", path, "--model", "gemm", "--out", str(tmp_path / "g.json"), "--no-holdout"]) == 0
    assert load_calibration(tmp_path / "g.json").held_out == ()
    assert main(["calibrate", path, "--model", "nope"]) == 2

    out_dir = tmp_path / "report"
    assert main(["validate", path, "-o", str(out_dir), "--models", "composite",
                 "--calibrate-on", "*test_gemm*"]) == 0
    printed = capsys.readouterr().out
    assert "composite" in printed and "median |err|" in printed
    report = json.loads((out_dir / "validation.json").read_text())
    assert report["split"].startswith("case ids matching")
    # the GEMMs calibrate; the copies are held out and their op class was never calibrated
    assert report["tables"]["composite"]["all"]["n"] == len(SMALL["copy_sizes"])
    assert os.path.getsize(out_dir / "validation.html") > 0 and (out_dir / "validation.md").exists()
