"""The simulator scored like a model: a recorded workloads run of a 2-vCPU Zen 4 guest against
``sim:cpu`` from that guest's own profile (end to end and per op), the committed table of
published GPU figures, and ``charz validate --sim``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_charz.formats import PROFILE
from pytest_charz.run import load_run
from pytest_charz.sim import Machine, simulate_graph, simulate_work
from pytest_charz.sim.validate import case_graph, score_published, score_runs, summary
from pytest_charz.targets.catalogue import resolve

DATA = Path(__file__).parent / "data"
RUN = DATA / "runs" / "amd-epyc-zen4-kvm-2vcpu-workloads.run.json.gz"
PROFILE_PATH = DATA / "profiles" / "amd-epyc-zen4-kvm-2vcpu.profile.json.gz"


@pytest.fixture(scope="module")
def run():
    return load_run(str(RUN))


@pytest.fixture(scope="module")
def profile():
    return PROFILE.load(PROFILE_PATH)


def test_every_workload_case_is_scored_end_to_end_and_per_op(run, profile) -> None:
    scores = score_runs([run], profile)
    workloads = [c for c in run.cases if c.work.op == "workload" and c.ops]
    assert len(workloads) == 7
    end_to_end = {s.id: s for s in scores if s.kind == "end-to-end"}
    assert set(end_to_end) == {c.id for c in workloads}                 # the dispatch cases are not workloads
    assert sum(1 for s in scores if s.kind == "op") == sum(sum(1 for op in c.ops if op.time_s > 0) for c in workloads)
    machine = Machine.from_profile(profile, resolve("cpu"))
    case = workloads[0]
    graph = case_graph(case)
    assert [op.name for op in graph.ops] == [op.name for op in case.ops]
    assert all(op.deps == (graph.ops[i - 1].name,) for i, op in enumerate(graph.ops) if i)   # one stream, in order
    score = end_to_end[case.id]
    assert score.measured_s == case.median_s
    assert score.simulated_s == pytest.approx(simulate_graph(graph, machine).latency_s, rel=1e-12)
    assert score.error == pytest.approx(score.simulated_s / case.median_s - 1.0)
    op = case.ops[0]
    (op_score,) = [s for s in scores if s.id == f"{case.id}::{op.name}"]
    assert op_score.simulated_s == pytest.approx(simulate_work(op.work, machine).latency_s, rel=1e-12)


def test_the_profile_is_the_machine_that_is_simulated(run, profile) -> None:
    with_profile = {s.id: s.simulated_s for s in score_runs([run], profile) if s.kind == "end-to-end"}
    from_spec = {s.id: s.simulated_s for s in score_runs([run], None) if s.kind == "end-to-end"}
    assert with_profile.keys() == from_spec.keys()
    assert with_profile != from_spec


def test_published_rows_of_three_catalogue_gpus_are_simulated() -> None:
    from pytest_charz.published import load_measurements
    from pytest_charz.published.score import gemm_work
    from pytest_charz.targets.catalogue import catalogue

    rows = {row.id: row for row in load_measurements()}
    scores = score_published()
    assert [s.id for s in scores] == list(rows)
    known = {name for spec in catalogue().values() for name in (spec.id, *spec.identity.aliases)}
    for score in scores:
        row = rows[score.id]
        assert score.measured_s == pytest.approx(row.measured_time_s())
        assert score.source == row.source and score.role == row.role
        if row.target in known:
            assert score.simulated_s is not None and score.simulated_s > 0, score
        else:
            assert score.simulated_s is None and "not a catalogue target" in score.reason
    for kind in ("gemm", "serving-latency"):
        targets = {s.target for s in scores if s.detail == kind and s.simulated_s is not None}
        assert len(targets) >= 3, (kind, targets)
    gemm = next(s for s in scores if s.detail == "gemm" and s.simulated_s is not None)
    expected = simulate_work(gemm_work(rows[gemm.id].case), Machine.from_spec(resolve(gemm.target))).latency_s
    assert gemm.simulated_s == pytest.approx(expected, rel=1e-12)


def test_summary_groups_and_figures() -> None:
    from pytest_charz.sim.validate import SimScore

    scores = [SimScore("a", "end-to-end", "cpu", 1.0, 1.1), SimScore("b", "end-to-end", "cpu", 1.0, 0.8),
              SimScore("c", "published", "h100-sxm", 2.0, 2.0, "gemm", role="held-out"),
              SimScore("d", "published", "gh200", 2.0, None, "gemm", reason="not a catalogue target")]
    figures = summary(scores)
    assert set(figures) == {"end-to-end", "published", "published:gemm", "published:held-out"}
    assert figures["end-to-end"]["n"] == 2
    assert figures["end-to-end"]["median_abs"] == pytest.approx(0.15)
    assert figures["published"]["n"] == 1 and figures["published"]["median_abs"] == pytest.approx(0.0)


def test_per_op_scores_are_summarised_per_op_class() -> None:
    from pytest_charz.sim.validate import SimScore

    scores = [SimScore("w::a", "op", "cpu", 1.0, 1.5, "gemm"), SimScore("w::b", "op", "cpu", 1.0, 1.1, "gemm"),
              SimScore("w::c", "op", "cpu", 2.0, 1.0, "norm")]
    figures = summary(scores)
    assert set(figures) == {"op", "op:gemm", "op:norm"}
    assert figures["op:gemm"]["n"] == 2 and figures["op:gemm"]["median_abs"] == pytest.approx(0.3)
    assert figures["op:norm"]["median_abs"] == pytest.approx(0.5) and figures["op"]["n"] == 3


def test_charz_validate_sim_writes_the_simulator_report(tmp_path, capsys) -> None:
    from pytest_charz import cli

    assert cli.main(["validate", str(RUN), "-o", str(tmp_path), "--sim", "--sim-profile", str(PROFILE_PATH)]) == 0
    out = capsys.readouterr().out
    assert "simulator error (simulated / measured - 1):" in out and "end-to-end" in out
    document = json.loads((tmp_path / "validation-sim.json").read_text())
    assert document["kind"] == "charz-sim-validation" and document["version"] == 1
    assert document["summary"]["end-to-end"]["n"] == 7 and document["profile"] == str(PROFILE_PATH)
    text = (tmp_path / "validation-sim.md").read_text()
    assert "## Published figures" in text and "## Measured workloads, end to end" in text


def test_with_a_calibration_the_simulator_prices_ops_by_the_calibrated_core(tmp_path) -> None:
    # One core: charz validate --sim --sim-calibration C prices each simulated op as predict()
    # does with C (the recorded Zen 3 run, calibrated on its microbenchmarks alone).
    from pytest_charz.calibration.file import calibrate
    from pytest_charz.formats import atomic_write_json
    from pytest_charz.prediction import load_predictor
    from pytest_charz.profile.build import build_profile
    from pytest_charz.sim.validate import simulated_machine

    zen3_path = str(DATA / "runs" / "amd-epyc-zen3-kvm-2vcpu.run.json.gz")
    zen3 = load_run(zen3_path)
    calibration = tmp_path / "calibration-opclass.json"
    atomic_write_json(str(calibration), calibrate([zen3_path], model="opclass", holdout=None).to_json())
    zen3_profile = build_profile([zen3], [zen3_path])
    machine = simulated_machine(zen3.target.id, zen3_profile, str(calibration))
    assert machine.predictor is not None and machine.predictor.calibration is not None
    core = load_predictor(None, profile=zen3_profile, calibration=str(calibration))
    case = next(c for c in zen3.cases if c.work.op == "workload" and c.ops)
    op = case.ops[0]
    assert machine.predictor.predict(op.work).time_s == pytest.approx(core.predict(op.work).time_s, rel=1e-12)
    calibrated = {s.id: s.simulated_s for s in score_runs([zen3], zen3_profile, str(calibration))}
    uncalibrated = {s.id: s.simulated_s for s in score_runs([zen3], zen3_profile)}
    assert calibrated.keys() == uncalibrated.keys() and calibrated != uncalibrated
