"""Full runs and smoke runs: a smoke run (quick mode, a -k/-m/node-id selection, a session told
to stop early) is copied to latest-smoke.json and never replaces the full run's latest.json,
which the README's commands read; the run file says its scope and why."""
from __future__ import annotations

import json

import pytest

from pytest_charz.scope import latest_name, scope_of_run, smoke_reasons_of_argv

SUITE = '''
import pytest
from pytest_charz import Work
from pytest_charz.measure import clock

@pytest.mark.parametrize("cost_ns", [1000, 4000])
def test_steady(charz, cost_ns):
    fake = clock.current()
    charz.measure(lambda: fake.advance(cost_ns), work=Work(flops=2000.0, dtype="fp64", bytes=8000.0))
'''


@pytest.fixture
def suite(pytester, fake_clock, quiet_host):
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _latest(pytester, name):
    return json.loads((pytester.path / ".charz" / "runs" / name).read_text())


def test_a_smoke_run_after_a_full_run_leaves_latest_json_to_the_full_run(suite):
    suite.runpytest("--target=cpu").assert_outcomes(passed=2)
    full = _latest(suite, "latest.json")
    assert full["settings"]["scope"] == "full" and len(full["cases"]) == 2
    assert not (suite.path / ".charz" / "runs" / "latest-smoke.json").exists()

    suite.runpytest("--target=cpu", "-k", "1000").assert_outcomes(passed=1, deselected=1)
    assert _latest(suite, "latest.json") == full
    smoke = _latest(suite, "latest-smoke.json")
    assert smoke["settings"]["scope"] == "smoke" and len(smoke["cases"]) == 1
    assert smoke["settings"]["scope_reasons"] == ["a -k selection ('1000')"]


@pytest.mark.parametrize(("options", "reason"), [
    (["--charz-quick"], "--charz-quick"),
    (["test_suite.py::test_steady[1000]"], "1 node id(s) selected (e.g. test_suite.py::test_steady[1000])"),
    (["-x"], "stops after 1 failure(s) (-x/--maxfail)"),
])
def test_each_kind_of_smoke_run_goes_to_latest_smoke(suite, options, reason):
    result = suite.runpytest("--target=cpu", *options)
    assert result.ret == 0
    assert not (suite.path / ".charz" / "runs" / "latest.json").exists()
    assert reason in _latest(suite, "latest-smoke.json")["settings"]["scope_reasons"]


def test_charz_out_writes_no_latest_copy_but_records_the_scope(suite):
    suite.runpytest("--target=cpu", "--charz-out=run.json", "-m", "not slow").assert_outcomes(passed=2)
    assert not (suite.path / ".charz").exists()
    run = json.loads((suite.path / "run.json").read_text())
    assert run["settings"]["scope"] == "smoke" and run["settings"]["scope_reasons"] == ["a -m selection ('not slow')"]


@pytest.mark.parametrize(("argv", "reasons"), [
    (["suites/"], []),
    (["suites/", "--target=h100", "-q", "-p", "no:cacheprovider"], []),
    (["suites/", "-kgemm"], ["a -k selection ('gemm')"]),
    (["suites/", "-m", "not charz_slow"], ["a -m selection ('not charz_slow')"]),
    (["suites/", "--deselect=suites/test_memory.py::x", "--lf"],
     ["1 case(s) deselected (--deselect)", "only the last failures (--lf)"]),
    (["suites/", "--maxfail=3", "--sw"], ["a stepwise session (--sw)", "stops after 3 failure(s) (-x/--maxfail)"]),
    (["suites/test_runtime.py::test_dispatch_cpu"], ["1 node id(s) selected (e.g. suites/test_runtime.py::test_dispatch_cpu)"]),
])
def test_the_scope_of_a_recorded_command_line(argv, reasons):
    assert smoke_reasons_of_argv(argv, quick=False) == reasons


def test_a_run_recorded_before_the_scope_is_placed_from_its_quick_setting_and_command():
    legacy = {"settings": {"quick": False}, "provenance": {"command": [".venv/bin/python", "-m", "pytest", "suites/"]}}
    assert scope_of_run(legacy) == ("full", [])
    quick = {"settings": {"quick": True}, "provenance": {"command": ["pytest", "suites/"]}}
    assert scope_of_run(quick) == ("smoke", ["--charz-quick"])
    recorded = {"settings": {"scope": "smoke", "scope_reasons": ["a -k selection ('x')"]}, "provenance": {}}
    assert scope_of_run(recorded) == ("smoke", ["a -k selection ('x')"])


def test_an_interrupted_full_run_is_never_the_latest_full_run():
    assert latest_name("full") == "latest.json"
    assert latest_name("full", interrupted=True) == "latest-smoke.json"
    assert latest_name("smoke") == "latest-smoke.json"
