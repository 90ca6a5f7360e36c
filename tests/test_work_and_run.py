"""Work values and the run file: validation, JSON round trips, atomic writes, journals."""
from __future__ import annotations

import json
import os

import pytest

from pytest_charz import Work
from pytest_charz.errors import FormatError, UsageError
from pytest_charz.formats import atomic_write_json
from pytest_charz.records import Run, RunTarget
from pytest_charz.run import RunWriter, journal_path, load_run
from pytest_charz.work import achieved_rates

from charz_factories import make_case


def test_work_normalizes_numbers_and_round_trips():
    work = Work(2e9, 1.5e6, dtype="bf16", launches=3, transfers={"h2d": 4096}, op="gemm", shape={"m": 64})
    assert work.flops == {"bf16": 2e9} and work.bytes == {"dram": 1.5e6}
    assert Work.from_json(json.loads(json.dumps(work.to_json()))) == work
    assert work.intensity() == pytest.approx(2e9 / 1.5e6)


@pytest.mark.parametrize("kwargs", [dict(flops=-1), dict(bytes={"l9": 1}), dict(dtype="fp7"),
                                    dict(launches=-2), dict(flops="many")])
def test_work_rejects_bad_values(kwargs):
    with pytest.raises(UsageError):
        Work(**kwargs)


def test_achieved_rates_per_dtype_level_and_access():
    rates = achieved_rates(Work(flops={"fp64": 1e9}, bytes={"l1": 2e9}, accesses=1000), 0.5)
    assert rates["flop_per_s"]["fp64"] == pytest.approx(2e9)
    assert rates["bytes_per_s"]["l1"] == pytest.approx(4e9)
    assert rates["latency_s"]["access"] == pytest.approx(5e-4)


def _run() -> Run:
    return Run(target=RunTarget("cpu", "host", "cpu", "test", None), device={}, provenance={}, settings={},
               created="2026-11-30T00:00:00+00:00")


def test_run_writer_journals_cases_and_finishes_atomically(tmp_path):
    path = str(tmp_path / "runs" / "r.json")
    writer = RunWriter(path, _run())
    writer.add_case(make_case("a", {"op": "fma", "flops": {"fp32": 1e6}}, 1e-6))
    assert os.path.exists(journal_path(path)) and not os.path.exists(path)
    # a session killed now leaves the journal, which loads as an interrupted run
    recovered = load_run(journal_path(path))
    assert recovered.status == "interrupted" and [c.id for c in recovered.cases] == ["suites/test_synth.py::a"]
    writer.finish("complete")
    data = json.loads(open(path).read())
    assert data["version"] == 2 and data["kind"] == "charz-run" and data["status"] == "complete"
    assert [(c["kind"], c["work"]["kind"], c["measurement"]["kind"]) for c in data["cases"]] == [
        ("charz-case", "charz-work", "charz-measurement")]
    assert load_run(path).cases == writer.run.cases
    assert not os.path.exists(journal_path(path))
    assert [p for p in os.listdir(tmp_path / "runs") if p.startswith(".tmp-")] == []


def test_torn_last_journal_line_is_dropped(tmp_path):
    path = str(tmp_path / "r.json")
    writer = RunWriter(path, _run())
    writer.add_case(make_case("a", {"op": "fma"}, 1e-6))
    with open(journal_path(path), "a") as handle:
        handle.write('{"id": "b", "meas')
    assert [c.id for c in load_run(path).cases] == ["suites/test_synth.py::a"]


def test_unknown_version_and_corrupt_files_are_format_errors(tmp_path):
    bad_version = tmp_path / "v.json"
    bad_version.write_text(json.dumps({"kind": "charz-run", "version": 99, "cases": []}))
    with pytest.raises(FormatError, match="version 99"):
        load_run(str(bad_version))
    corrupt = tmp_path / "c.json"
    corrupt.write_text("{not json")
    with pytest.raises(FormatError, match="c.json"):
        load_run(str(corrupt))


def test_atomic_write_keeps_the_old_file_when_serialization_fails(tmp_path):
    path = str(tmp_path / "x.json")
    atomic_write_json(path, {"kind": "k", "version": 1, "a": 1})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"kind": "k", "version": 1, "a": object()})
    assert json.loads(open(path).read()) == {"kind": "k", "version": 1, "a": 1}
    assert os.listdir(tmp_path) == ["x.json"]


def test_unwritable_run_path_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match="cannot create"):
        RunWriter(str(blocker / "sub" / "r.json"), _run())


def test_only_stamped_documents_are_written(tmp_path):
    with pytest.raises(ValueError, match="kind"):
        atomic_write_json(str(tmp_path / "x.json"), {"a": 1})
    assert os.listdir(tmp_path) == []


def test_a_version_1_run_migrates_on_load(tmp_path):
    from charz_factories import case_json, run_json

    path = tmp_path / "old.json"
    unstamped = case_json("a", {"op": "fma", "flops": {"fp32": 2e6}}, 1e-6)
    path.write_text(json.dumps(run_json([unstamped], version=1)))
    run = load_run(str(path))
    assert run.cases[0].work.flops == {"fp32": 2e6} and run.to_json()["version"] == 2


def test_a_nested_record_of_another_kind_is_a_format_error_naming_the_file(tmp_path):
    from charz_factories import case_json, run_json

    case = case_json("a", {"op": "fma"}, 1e-6)
    case["work"] = {**case["work"], "kind": "charz-measurement", "version": 1}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(run_json([case])))
    with pytest.raises(FormatError, match="bad.json.*Work"):
        load_run(str(path))


def test_per_op_timings_of_a_workload_case_round_trip(tmp_path):
    from dataclasses import replace

    from pytest_charz.records import OpTiming

    timings = (OpTiming("model.layers.0.mlp.up_proj.mm#0", "gemm", "aten.mm.default", 2.5e-5,
                        Work(flops={"fp32": 2e6}, bytes=3e5, launches=1, op="gemm")),)
    case = replace(make_case("w", {"op": "workload", "flops": {"fp32": 2e6}}, 1e-4), ops=timings)
    path = str(tmp_path / "r.json")
    writer = RunWriter(path, _run())
    writer.add_case(case)
    writer.finish("complete")
    assert load_run(path).cases[0].ops == timings
    assert "ops" not in make_case("plain", {"op": "fma"}, 1e-6).to_json()   # microbenchmarks carry none
