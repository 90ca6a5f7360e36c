"""``charz export``: a run as pytest-benchmark JSON (read back by pytest-benchmark's own code), as
CSV and as Parquet; and ``--junitxml`` carrying each measured case's verdict as properties."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from charz_factories import case_json, make_run, measurement_json, run_json
from hypothesis import given
from hypothesis import strategies as st

from pytest_charz import cli
from pytest_charz.errors import MissingExtraError
from pytest_charz.report.export import (
    benchmark_stats,
    pytest_benchmark_document,
    row_columns,
)

#: pytest-benchmark's own command line (what its ``pytest-benchmark`` console script runs).
PYTEST_BENCHMARK = [sys.executable, "-c", "import sys; from pytest_benchmark.cli import main; sys.exit(main())"]
SAMPLES = [1.0e-3, 1.1e-3, 0.9e-3, 1.05e-3, 0.95e-3, 1.3e-3, 1.0e-3]


def verdict_json(outcome: str = "pass", ratio: float | None = 1.02, model_error: float | None = 0.1) -> dict[str, Any]:
    return {"outcome": outcome, "fails": False, "message": "ok", "ratio": ratio, "model_error": model_error}


def prediction_json(time_s: float = 0.9e-3) -> dict[str, Any]:
    return {"model": "roofline", "time_s": time_s, "interval_s": [time_s, time_s], "bound": "compute:fp64",
            "breakdown": {"compute:fp64": time_s}, "covered": True}


def sample_run_json() -> dict[str, Any]:
    """Three cases: one judged and parametrized, one named measurement, one with nothing kept."""
    gemm = case_json("test_gemm[fp64-64]", {"flops": {"fp64": 2 * 64**3}, "bytes": {"dram": 3 * 64**2 * 8},
                                            "op": "gemm"}, 1.0e-3,
                     measurement=measurement_json(1.0e-3, samples_s=SAMPLES), params={"dtype": "fp64", "n": 64},
                     prediction=prediction_json(), verdict=verdict_json(), flags=["steal"])
    copy = case_json("suites/test_synth.py::test_copy::h2d", {"transfers": {"h2d": 1e6}, "op": "transfer"},
                     2.0e-4, nodeid="suites/test_synth.py::test_copy", test="test_copy", label="h2d", measurement=measurement_json(2.0e-4, kept=5),
                     verdict=verdict_json("new", ratio=None, model_error=None))
    lost = case_json("test_lost", {"launches": 1, "op": "launch"}, None,
                     measurement=measurement_json(None, discarded={"steal": 3}, noise_met=False))
    return run_json([gemm, copy, lost], provenance={
        "host": "box-a", "os": {"system": "Linux", "release": "6.8", "platform": "Linux-6.8"},
        "cpu": {"model": "Test CPU 9000", "machine": "x86_64", "logical_cpus": 8},
        "python": {"version": "3.11.2", "implementation": "CPython"},
        "suite_git": {"commit": "abc123", "dirty": True, "branch": "main"}})


@pytest.fixture
def run_path(tmp_path: Path) -> Path:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(sample_run_json()))
    return path


# -- pytest-benchmark -----------------------------------------------------------------------------

@given(st.lists(st.floats(min_value=1e-9, max_value=1.0), min_size=1, max_size=40))
def test_stats_are_the_ones_pytest_benchmark_computes(samples: list[float]) -> None:
    from pytest_benchmark.stats import Stats

    theirs = Stats()
    for sample in samples:
        theirs.update(sample)
    ours = benchmark_stats(samples, iterations=3)
    for name, value in theirs.as_dict().items():
        assert ours[name] == (value if isinstance(value, (str, int)) and not isinstance(value, float)
                              else pytest.approx(value, rel=1e-12, abs=1e-18)), name
    assert ours["data"] == samples and ours["iterations"] == 3


def test_document_has_pytest_benchmarks_layout_and_the_charz_figures() -> None:
    document = pytest_benchmark_document(make_run(**_run_kwargs()))
    assert set(document) == {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    assert document["machine_info"]["node"] == "box-a"
    assert document["machine_info"]["cpu"]["brand_raw"] == "Test CPU 9000"
    assert document["commit_info"]["id"] == "abc123" and document["commit_info"]["dirty"] is True
    assert document["datetime"] == "2026-01-01T00:00:00+00:00"
    # the case with every sample discarded has no stats to give
    by_name = {b["fullname"]: b for b in document["benchmarks"]}
    assert sorted(by_name) == ["suites/test_synth.py::test_copy::h2d", "suites/test_synth.py::test_gemm[fp64-64]"]
    gemm = by_name["suites/test_synth.py::test_gemm[fp64-64]"]
    assert gemm["group"] == "suites/test_synth.py" and gemm["name"] == "test_gemm[fp64-64]"
    assert gemm["params"] == {"dtype": "fp64", "n": 64} and gemm["param"] == "fp64-64"
    assert gemm["stats"]["median"] == pytest.approx(1.0e-3) and gemm["stats"]["rounds"] == len(SAMPLES)
    assert gemm["stats"]["ops"] == pytest.approx(len(SAMPLES) / sum(SAMPLES))
    extra = gemm["extra_info"]
    assert extra["verdict"] == "pass" and extra["ratio"] == pytest.approx(1.02)
    assert extra["model_error"] == pytest.approx(0.1) and extra["predicted_s"] == pytest.approx(0.9e-3)
    assert extra["median_ci_s"] == pytest.approx([0.99e-3, 1.01e-3]) and extra["flags"] == ["steal"]
    assert extra["work"]["flops"] == {"fp64": 2 * 64**3}
    assert by_name["suites/test_synth.py::test_copy::h2d"]["extra_info"]["ratio"] is None


def _run_kwargs() -> dict[str, Any]:
    data = sample_run_json()
    return {"cases": data["cases"], "provenance": data["provenance"]}


def test_pytest_benchmark_compare_reads_the_exported_file(run_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["export", str(run_path), "--format", "pytest-benchmark"]) == 0
    out, err = capsys.readouterr()
    exported = run_path.with_name("run.benchmark.json")
    assert f"wrote {exported}" in out and "test_lost: every sample was discarded" in err
    done = subprocess.run([*PYTEST_BENCHMARK, "compare", str(exported)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # pytest-benchmark only warns on a file it cannot load: the table itself is the proof
    assert "Failed to load" not in done.stdout + done.stderr
    assert "benchmark 'suites/test_synth.py': 2 tests" in done.stdout
    assert "test_gemm[fp64-64]" in done.stdout and "test_copy::h2d" in done.stdout


def test_pytest_benchmark_histogram_of_the_exported_file(run_path: Path, tmp_path: Path) -> None:
    pytest.importorskip("pygal", reason="pytest-benchmark's --histogram needs pygal")
    out = tmp_path / "bench.json"
    assert cli.main(["export", str(run_path), "--format", "pytest-benchmark", "-o", str(out)]) == 0
    done = subprocess.run([*PYTEST_BENCHMARK, "compare", str(out),
                           f"--histogram={tmp_path / 'hist'}"], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.glob("hist*.svg"))


# -- rows -----------------------------------------------------------------------------------------

def test_csv_has_one_row_per_case_with_its_figures(run_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "cases.csv"
    assert cli.main(["export", str(run_path), "--format", "csv", "-o", str(out)]) == 0
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["id"].split("::", 1)[1] for r in rows] == ["test_gemm[fp64-64]", "test_copy::h2d", "test_lost"]
    assert list(rows[0]) == row_columns(make_run(**_run_kwargs()))
    gemm, copy, lost = rows
    assert json.loads(gemm["params"]) == {"dtype": "fp64", "n": 64}
    assert float(gemm["flops:fp64"]) == pytest.approx(2 * 64**3) and gemm["op"] == "gemm"
    assert float(gemm["median_s"]) == pytest.approx(1e-3) and float(gemm["ci_low_s"]) == pytest.approx(0.99e-3)
    assert gemm["outcome"] == "pass" and float(gemm["ratio"]) == pytest.approx(1.02)
    assert float(gemm["model_error"]) == pytest.approx(0.1) and float(gemm["predicted_s"]) == pytest.approx(0.9e-3)
    assert gemm["bound"] == "compute:fp64" and gemm["regime"] == "compute" and gemm["flags"] == "steal"
    assert int(gemm["samples_kept"]) == len(SAMPLES) and gemm["noise_met"] == "True"
    assert copy["label"] == "h2d" and float(copy["transfers:h2d"]) == pytest.approx(1e6) and copy["ratio"] == ""
    assert lost["median_s"] == "" and int(lost["samples_discarded"]) == 3 and lost["samples_kept"] == "0"


def _csv_field(value: Any) -> Any:
    """A Parquet cell as the CSV writes the same figure, to compare the two files cell by cell."""
    return "" if value is None else value


def test_parquet_holds_the_csvs_rows_and_values_with_their_types(run_path: Path, tmp_path: Path) -> None:
    """The extra ``export`` is installed by ``scripts/setup``: this runs wherever the tests do."""
    pytest.importorskip("pyarrow", reason="Parquet export needs the extra: pip install 'pytest-charz[export]'")
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet, csv_path = tmp_path / "cases.parquet", tmp_path / "cases.csv"
    assert cli.main(["export", str(run_path), "--format", "parquet", "-o", str(parquet)]) == 0
    assert cli.main(["export", str(run_path), "--format", "csv", "-o", str(csv_path)]) == 0
    table = pq.read_table(parquet)
    with open(csv_path, newline="") as handle:
        csv_rows = list(csv.DictReader(handle))
    assert table.column_names == list(csv_rows[0]) == row_columns(make_run(**_run_kwargs()))
    rows = table.to_pylist()
    assert len(rows) == len(csv_rows) == 3                    # one row per case
    for parquet_row, csv_row in zip(rows, csv_rows):
        for column, value in parquet_row.items():
            text = csv_row[column]
            if isinstance(value, float):
                assert float(text) == pytest.approx(value, rel=1e-15), column
            elif isinstance(value, bool) or value is None:
                assert text == str(_csv_field(value)), column
            else:
                assert type(value)(text) == value, column
    # figures stay numbers, unknown figures are nulls (not NaN, not empty strings)
    schema = table.schema
    assert pa.types.is_floating(schema.field("median_s").type) and pa.types.is_integer(schema.field("samples_kept").type)
    assert pa.types.is_boolean(schema.field("noise_met").type)
    assert rows[2]["median_s"] is None and rows[1]["ratio"] is None and rows[0]["transfers:h2d"] is None
    assert rows[0]["flops:fp64"] == pytest.approx(2 * 64**3) and rows[1]["transfers:h2d"] == pytest.approx(1e6)
    assert json.loads(rows[0]["params"]) == {"dtype": "fp64", "n": 64}


def test_parquet_without_the_extra_names_it(run_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)    # import pandas now raises ImportError
    from pytest_charz.report.export_command import export_command

    args = type("Args", (), {"run": str(run_path), "format": "parquet", "out": None})()
    with pytest.raises(MissingExtraError, match=r"pytest-charz\[export\]"):
        export_command(args)
    assert cli.main(["export", str(run_path), "--format", "parquet"]) == 2
    assert "pytest-charz[export]" in capsys.readouterr().err
    assert not run_path.with_name("run.cases.parquet").exists()


# -- JUnit XML ------------------------------------------------------------------------------------

JUNIT_SUITE = '''
from pytest_charz import Work
from pytest_charz.measure import clock

def test_one(charz):
    fake = clock.current()
    charz.measure(lambda: fake.advance(2000), work=Work(flops=2000.0, dtype="fp64"))

def test_two(charz):
    fake = clock.current()
    charz.measure(lambda: fake.advance(1000), work=Work(flops=1000.0, dtype="fp64"), name="small")
    charz.measure(lambda: fake.advance(3000), work=Work(flops=3000.0, dtype="fp64"), name="large")
'''


def test_junitxml_carries_each_cases_verdict(pytester: pytest.Pytester, fake_clock: Any, quiet_host: None) -> None:
    pytester.makepyfile(test_suite=JUNIT_SUITE)
    result = pytester.runpytest("--target=cpu", "--charz-out=run.json", "--junitxml=out.xml")
    result.assert_outcomes(passed=2)
    cases = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in ET.parse(pytester.path / "out.xml").getroot().iter("testcase")}
    one, two = cases["test_one"], cases["test_two"]
    assert one["charz.outcome"] == "new"    # first run: no baseline, so no ratio to give
    assert "charz.ratio" not in one
    assert float(one["charz.median_s"]) == pytest.approx(2e-6)
    assert float(one["charz.predicted_s"]) > 0 and "charz.model_error" in one
    assert float(two["charz.small.median_s"]) == pytest.approx(1e-6)
    assert float(two["charz.large.median_s"]) == pytest.approx(3e-6)
    assert two["charz.small.outcome"] == two["charz.large.outcome"] == "new"
    assert not any(name.startswith("charz.") and name.count(".") == 1 for name in two)
    # a second run judges against the first run's baseline: now the ratio is there
    result = pytester.runpytest("--target=cpu", "--charz-out=run2.json", "--junitxml=out2.xml")
    result.assert_outcomes(passed=2)
    again = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in ET.parse(pytester.path / "out2.xml").getroot().iter("testcase")}
    assert float(again["test_one"]["charz.ratio"]) == pytest.approx(1.0, abs=0.05)
