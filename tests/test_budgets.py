"""Budgets that hold and noise a machine can meet, end to end: a case whose one call is over its
budget skips saying so; a one-sample case reports its CI as unknown and is not saved; the
terminal summary shows the time per suite file and why cases got no reference; the suites'
bf16 GEMM sizes follow the bf16 rate of a CPU without native bf16; the suite-time benchmark
reads a run file and pytest's JUnit XML. Every time here is on the fake clock."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from charz_factories import load_suite_module

from pytest_charz.targets.host import HostTexts, derive_host_spec

ROOT = Path(__file__).resolve().parent.parent

SUITE = '''
import os
import pytest
from pytest_charz import Work
from pytest_charz.measure import clock

@pytest.mark.charz(max_time=2.0)
def test_slow_call(charz):
    fake = clock.current()
    charz.measure(lambda: fake.advance(48e9), work=Work(flops=1e9, dtype="bf16", op="gemm"))

@pytest.mark.charz(max_time=1.0)
def test_one_sample(charz):
    fake = clock.current()
    charz.measure(lambda: fake.advance(0.7e9), work=Work(flops=1e6, dtype="fp64", op="fma"))

@pytest.mark.charz(max_time=0.5, noise=0.02)
def test_steady(charz):
    fake = clock.current()
    charz.measure(lambda: fake.advance(1e6), work=Work(flops=1e6, dtype="fp64", op="fma"))
'''


@pytest.fixture
def suites(pytester: pytest.Pytester, fake_clock: Any, quiet_host: Any) -> pytest.Pytester:
    """A tiny suite with the repository's suite conftest (its over-budget skip), on the fake clock."""
    pytester.makeconftest((ROOT / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_budget=SUITE)
    return pytester


def test_a_case_whose_one_call_is_over_its_budget_skips_after_that_call(suites: pytest.Pytester, fake_clock: Any) -> None:
    start = fake_clock.now_ns()
    result = suites.runpytest("--target=cpu", "--charz-out=run.json", "-rs", "-k", "slow_call")
    result.assert_outcomes(skipped=1, deselected=2)
    result.stdout.fnmatch_lines(["*SKIPPED*one call 48 s: over the 2 s budget*"])
    # one call of 48 s and nothing after it: the budget held, nothing was recorded or saved
    assert (fake_clock.now_ns() - start) / 1e9 == pytest.approx(48.0, abs=0.5)
    assert not (suites.path / "run.json").exists()
    assert not list((suites.path / "baselines").rglob("*.json")) if (suites.path / "baselines").exists() else True


def test_a_one_sample_case_reports_an_unknown_ci_and_is_not_saved(suites: pytest.Pytester) -> None:
    result = suites.runpytest("--target=cpu", "--charz-out=run.json", "-k", "one_sample or steady", "--charz-table")
    result.assert_outcomes(passed=2, deselected=1)
    cases = {c["test"]: c for c in json.loads((suites.path / "run.json").read_text())["cases"]}
    one = cases["test_one_sample"]
    m = one["measurement"]
    assert m["kept"] == 1 and m["ci_s"] is None and m["rel_ci_halfwidth"] is None and m["noise_met"] is False
    assert one["verdict"]["outcome"] == "inconclusive"
    assert one["verdict"]["baseline"] == "not saved: the measurement is inconclusive"
    stored = "".join(path.read_text() for path in (suites.path / "baselines").rglob("*.json"))
    assert "test_steady" in stored and "test_one_sample" not in stored
    out = result.stdout.str()
    row = next(line for line in out.splitlines() if line.startswith("test_one_sample"))
    assert "unknown" in row and "±0.0%" not in row
    assert "1 case(s) with too few samples for a CI of the median: CI unknown" in out
    result.stdout.fnmatch_lines(["no reference for 1 case(s):",
                                 "  1 inconclusive: CI of the median unknown: test_one_sample"])


def test_the_summary_shows_the_time_of_each_suite_file(suites: pytest.Pytester) -> None:
    suites.makepyfile(test_other='''
        import pytest
        from pytest_charz import Work
        from pytest_charz.measure import clock

        @pytest.mark.charz(max_time=0.3, noise=0.02)
        def test_other(charz):
            fake = clock.current()
            fake.advance(2e9)                       # two seconds of setup before measuring
            charz.measure(lambda: fake.advance(1e5), work=Work(flops=1e6, dtype="fp64", op="fma"))
    ''')
    result = suites.runpytest("--target=cpu", "--charz-out=run.json", "-k", "steady or other")
    result.assert_outcomes(passed=2, deselected=2)
    lines = result.stdout.str().splitlines()
    start = lines.index(next(line for line in lines if line.startswith("time per suite file")))
    rows = {line.split()[0]: line.split() for line in lines[start + 1:start + 4]}
    other, everything = rows["test_other.py"], rows["all"]
    # the case's setup counts in its suite file's wall time, not in its measuring time
    assert float(other[4]) == pytest.approx(2.0 + float(other[7]), abs=0.05)
    assert float(other[7]) <= 0.3 * 2
    assert float(everything[4]) == pytest.approx(float(rows["test_budget.py"][4]) + float(other[4]), abs=0.05)


# ---------------------------------------------------------------- the bf16 GEMM sizes of a CPU


@pytest.fixture
def compute() -> Any:
    """``suites/test_compute.py`` under a name of its own."""
    return load_suite_module("test_compute")


def _host(flags: str) -> Any:
    cpuinfo = "\n\n".join(f"processor\t: {n}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7763\n"
                          f"physical id\t: 0\ncore id\t: {n}\ncpu MHz\t: 2450.0\nflags\t: {flags}" for n in range(2))
    return derive_host_spec(HostTexts(cpuinfo=cpuinfo, machine="x86_64"))


def test_without_native_bf16_the_sizes_follow_the_measured_rate(compute: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    zen3 = _host("fma avx avx2")
    assert compute.no_native_bf16(zen3) and "no native bf16" in compute.no_native_bf16(zen3)
    assert compute.no_native_bf16(_host("fma avx avx2 avx512f avx512_bf16")) is None
    # The Zen 3 guest's bf16 GEMM at 256-cubed: 25.5 ms a call, 1.32 GFLOP/s.
    rate = 2 * 256**3 / 25.5e-3
    assert compute.predicted_bf16_call_s(256, rate) == pytest.approx(25.5e-3)
    assert compute.predicted_bf16_call_s(2048, rate) > 2.0      # its real call took 48 s
    skips = {}
    for _, dtype, n, _ in compute.CPU_GEMM:
        call_s = compute.predicted_bf16_call_s(n, rate)
        if dtype == "bf16" and call_s > compute.GEMM_CALL_FRACTION * compute.gemm_budget_s(n):
            skips[(dtype, n)] = "too slow"
    assert sorted(skips) == [("bf16", 1024), ("bf16", 2048)]
    params = {p.id: p for p in compute.cpu_gemm_params(skips)}
    marks = {name: {m.name for m in p.marks} for name, p in params.items()}
    assert "skip" in marks["torch-bf16-2048"] and "skip" in marks["torch-bf16-1024"]
    # the one bf16 size left runs in quick runs too, so a quick run still has a bf16 case
    assert "skip" not in marks["torch-bf16-256"] and "charz_slow" not in marks["torch-bf16-256"]
    assert {m.name for m in params["numpy-fp64-2048"].marks} == {"charz", "charz_slow"}


def test_the_limits_name_the_cause_and_keep_every_size_with_native_bf16(compute: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compute, "bf16_probe_rate", lambda device: 2 * 256**3 / 25.5e-3)
    skips = compute.host_gemm_limits(_host("fma avx avx2"), None)
    assert sorted(skips) == [("bf16", 1024), ("bf16", 2048)]
    assert skips[("bf16", 2048)].startswith("one call about ")
    assert "over 1/20 of the 2 s budget; no native bf16 on this CPU" in skips[("bf16", 2048)]
    assert compute.host_gemm_limits(_host("fma avx avx2 avx512f avx512_bf16"), None) == {}


def test_the_bf16_probe_times_one_small_gemm_on_the_device(compute: Any, fake_device: Any) -> None:
    pytest.importorskip("torch")
    device = fake_device(cost_ns=lambda: 25.5e6)             # the Zen 3 guest's 256-cubed bf16 call
    rate = compute.bf16_probe_rate(device)
    assert rate == pytest.approx(2 * 256**3 / 25.5e-3)
    assert len(device.works) == 3 and all(set(w.flops) == {"bf16"} for w in device.works)


# ---------------------------------------------------------------- the suite-time benchmark


@pytest.fixture
def bench() -> Any:
    spec = importlib.util.spec_from_file_location("suite_time", ROOT / "benchmarks" / "suite_time.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["suite_time"] = module          # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("suite_time", None)


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
<testcase classname="suites.test_memory" name="test_read_cpu[16KiB]" time="0.50"/>
<testcase classname="suites.test_memory" name="test_read_cpu[32KiB]" time="0.25"><skipped message="one call 3 s: over the 1 s budget"/></testcase>
<testcase classname="suites.test_compute" name="test_gemm_cpu[x]" time="4.00"><failure message="boom"/></testcase>
<testcase classname="suites.test_memory" name="test_chase_cpu[1MiB]" time="1.25"/>
</testsuite></testsuites>"""


def test_the_benchmark_times_each_suite_file_and_finds_cases_over_budget(bench: Any, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    files = bench.file_times(str(junit))
    assert [(f.path, f.tests, f.skipped, f.failed) for f in files] == [("suites/test_memory.py", 3, 1, 0),
                                                                      ("suites/test_compute.py", 1, 0, 1)]
    assert files[0].wall_s == pytest.approx(2.0) and files[1].wall_s == pytest.approx(4.0)
    assert bench.skip_reasons(str(junit)) == [("suites.test_memory::test_read_cpu[32KiB]",
                                               "one call 3 s: over the 1 s budget")]
    cases = [bench.CaseTime("suites/test_memory.py::a", "suites/test_memory.py", 0.4, 0.35),
             bench.CaseTime("suites/test_compute.py::b", "suites/test_compute.py", 7.0, 2.0)]
    assert [c.id for c in bench.over_budget(cases)] == ["suites/test_compute.py::b"]
    lines = bench.report_lines(files, cases, total_s=9.0, limit_s=180.0, factor=3.0, load_before=(1.0, 1.0, 1.0),
                               load_after=(2.0, 1.5, 1.0))
    text = "\n".join(lines)
    assert "collection, start-up and exit" in text and "   3.0" in text      # 9 s total, 6 s in tests
    assert "(limit 180 s: within)" in text and "suites/test_compute.py::b: 7.00 s, budget 2 s (3.5x)" in text
    assert bench.exit_status(9.0, 180.0, cases, 3.0) == 1                  # a case over 3x its budget
    assert bench.exit_status(9.0, 180.0, cases[:1], 3.0) == 0
    assert bench.exit_status(31.0, 30.0, cases[:1], 3.0) == 1              # over the total's limit
    command = bench.pytest_command("/venv/python", tmp_path, quick=True)
    assert command[:4] == ["/venv/python", "-m", "pytest", "suites/"] and "--charz-quick" in command
    assert f"--charz-baselines={tmp_path / 'baselines'}" in command and f"--charz-out={tmp_path / 'run.json'}" in command
