"""The plugin end to end with pytester: a tiny suite on the host CPU whose measured function
moves a fake clock, so every figure in the run file is known in advance."""
from __future__ import annotations

import json

import pytest

SUITE = '''
import pytest
from pytest_charz import Work
from pytest_charz.measure import clock

@pytest.mark.parametrize("cost_ns", [1000, 4000])
def test_steady(charz, cost_ns):
    fake = clock.current()
    charz.measure(lambda: fake.advance(cost_ns), work=Work(flops=2000.0, dtype="fp64", bytes=8000.0))

def test_plain_test_is_untouched():
    assert True
'''


@pytest.fixture
def suite(pytester, fake_clock, quiet_host):
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def run_file(pytester, name="run.json"):
    return json.loads((pytester.path / name).read_text())


def test_run_file_holds_every_case_with_its_evidence(suite):
    result = suite.runpytest("--target=cpu", "--charz-out=run.json")
    result.assert_outcomes(passed=3)
    run = run_file(suite)
    assert run["version"] == 2 and run["kind"] == "charz-run" and run["status"] == "complete"
    assert run["target"]["id"] == "cpu"
    for key in ("host", "os", "cpu", "python", "libraries", "command", "seeds"):
        assert key in run["provenance"]
    assert run["provenance"]["libraries"]["pytest"]
    cases = {c["params"]["cost_ns"]: c for c in run["cases"]}
    assert sorted(cases) == [1000, 4000]
    case = cases[4000]
    assert case["nodeid"] == "test_suite.py::test_steady[4000]"
    assert case["work"]["flops"] == {"fp64": 2000.0}
    m = case["measurement"]
    assert m["median_s"] == pytest.approx(4e-6)
    assert m["ci_s"][0] <= m["median_s"] <= m["ci_s"][1]
    assert m["noise_met"] is True and m["stop_reason"] == "noise-target"
    assert m["taken"] == m["kept"] + sum(m["discarded"].values())
    assert case["achieved"]["flop_per_s"]["fp64"] == pytest.approx(2000.0 / 4e-6)
    assert case["achieved"]["bytes_per_s"]["dram"] == pytest.approx(8000.0 / 4e-6)
    assert set(case["conditions"]) == {"before", "after", "interval"}
    assert case["conditions"]["before"]["cpu_times"]["total"] > 0
    # the host spec has an fp64 peak, so the achieved rate is placed against it
    assert 0 < case["peak_fraction"]["flops:fp64"]


def test_terminal_summary_lists_cases_with_rates(suite):
    result = suite.runpytest("--target=cpu", "--charz-out=run.json", "--charz-table")
    result.stdout.fnmatch_lines([
        "*charz: measurements*",
        "*case*median*CI95*samples*achieved*% peak*flags*",
        "*test_steady[[]1000[]]*1 us*GFLOP/s fp64*",
        "run file: *run.json",
    ])


def test_noise_target_missed_is_flagged_not_hidden(pytester, fake_clock, quiet_host):
    pytester.makepyfile(test_noisy='''
        import itertools
        from pytest_charz import Work
        from pytest_charz.measure import clock

        def test_noisy(charz):
            fake = clock.current()
            costs = itertools.cycle([1_000_000, 1_900_000, 1_300_000, 2_500_000])
            charz.measure(lambda: fake.advance(next(costs)), work=Work(flops=1.0), noise=0.001, max_time=0.3)
    ''')
    result = pytester.runpytest("--target=cpu", "--charz-out=run.json")
    result.assert_outcomes(passed=1)
    case = run_file(pytester)["cases"][0]
    assert case["measurement"]["noise_met"] is False
    assert case["measurement"]["stop_reason"] == "time-budget"
    assert "noisy" in case["flags"]
    result.stdout.fnmatch_lines(["*noisy*", "*1 case(s) missed the noise target*"])


def test_marker_and_command_line_settings(pytester, fake_clock, quiet_host, monkeypatch):
    from pytest_charz.devices.cpu import CpuDevice

    flushes = []
    monkeypatch.setattr(CpuDevice, "flush_caches", lambda self: flushes.append(1))
    pytester.makepyfile(test_marked='''
        import pytest
        from pytest_charz import Work
        from pytest_charz.measure import clock

        @pytest.mark.charz(mode="cold", noise=0.05, max_time=0.7)
        def test_cold(charz):
            fake = clock.current()
            charz.measure(lambda: fake.advance(200_000), work=Work(bytes=1e6))
    ''')
    result = pytester.runpytest("--target=cpu", "--charz-out=run.json", "--charz-max-time=0.4")
    result.assert_outcomes(passed=1)
    case = run_file(pytester)["cases"][0]
    assert case["settings"]["mode"] == "cold" and case["settings"]["noise_target"] == 0.05
    assert case["settings"]["max_time_s"] == 0.4          # the command line wins over the marker
    assert case["measurement"]["inner_loops"] == 1
    assert len(flushes) == case["measurement"]["warmup_calls"] + case["measurement"]["taken"]


def test_unknown_marker_setting_is_reported(pytester, fake_clock, quiet_host):
    pytester.makepyfile(test_bad='''
        import pytest
        @pytest.mark.charz(nosie=0.1)
        def test_x(charz):
            charz.measure(lambda: None)
    ''')
    result = pytester.runpytest("--target=cpu", "--charz-out=run.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*unknown @pytest.mark.charz setting 'nosie'*known: *noise*"])


def test_unknown_target_is_a_usage_error_with_the_nearest_match(pytester):
    pytester.makepyfile(test_any="def test_x(charz):\n    pass\n")
    result = pytester.runpytest("--target=h100-sxn")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str() + result.stdout.str()
    assert "h100-sxm" in text and "mi300x" in text
    assert "Traceback" not in text


def test_known_target_that_is_not_visible_is_a_usage_error(pytester):
    pytester.makepyfile(test_any="def test_x(charz):\n    pass\n")
    result = pytester.runpytest("--target=mi300")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert "mi300x" in text and "not visible" in text and "cpu:0" in text
    assert "Traceback" not in text


def test_unwritable_run_file_is_a_usage_error(pytester, tmp_path):
    blocker = tmp_path / "plain-file"
    blocker.write_text("")
    pytester.makepyfile(test_any="def test_x(charz):\n    pass\n")
    result = pytester.runpytest("--target=cpu", f"--charz-out={blocker}/sub/run.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "cannot create" in result.stderr.str()


def test_interrupted_session_keeps_the_cases_already_measured(pytester, fake_clock, quiet_host):
    pytester.makepyfile(test_interrupt='''
        from pytest_charz import Work
        from pytest_charz.measure import clock

        def test_a(charz):
            fake = clock.current()
            charz.measure(lambda: fake.advance(1000), work=Work(flops=1.0))

        def test_b():
            raise KeyboardInterrupt

        def test_c(charz):
            charz.measure(lambda: None)
    ''')
    result = pytester.runpytest("--target=cpu", "--charz-out=run.json", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    run = run_file(pytester)
    assert run["status"] == "interrupted"
    assert [c["test"] for c in run["cases"]] == ["test_a"]


def test_quick_mode_leaves_out_slow_cases_and_shortens_budgets(pytester, fake_clock, quiet_host):
    pytester.makepyfile(test_quick='''
        import pytest
        from pytest_charz import Work
        from pytest_charz.measure import clock

        @pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.charz_slow)])
        def test_sizes(charz, n):
            fake = clock.current()
            charz.measure(lambda: fake.advance(1000 * n), work=Work(flops=1.0))
    ''')
    result = pytester.runpytest("--target=cpu", "--charz-out=run.json", "--charz-quick")
    result.assert_outcomes(passed=1, deselected=1)
    run = run_file(pytester)
    assert run["settings"]["quick"] is True
    assert run["cases"][0]["settings"]["max_time_s"] < 2.0


def test_no_measurement_writes_no_run_file(pytester):
    pytester.makepyfile(test_plain="def test_x():\n    assert 1\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert not (pytester.path / ".charz").exists()


def test_default_run_file_goes_to_dot_charz_with_latest(suite):
    result = suite.runpytest("--target=cpu")
    result.assert_outcomes(passed=3)
    runs = suite.path / ".charz" / "runs"
    latest = json.loads((runs / "latest.json").read_text())
    assert len(latest["cases"]) == 2
    assert len([p for p in runs.iterdir() if p.name.startswith("run-")]) == 1


def test_xdist_workers_take_turns_on_the_device_and_their_runs_are_merged(pytester, tmp_path, monkeypatch):
    # Real processes (xdist workers cannot share this process's fake clock): each case sleeps
    # a little under the device lock; the merged run holds every case once.
    monkeypatch.setenv("CHARZ_LOCK_DIR", str(tmp_path))
    pytester.makepyfile(test_parallel='''
        import time
        import pytest
        from pytest_charz import Work

        @pytest.mark.parametrize("i", range(4))
        def test_case(charz, i):
            charz.measure(lambda: time.sleep(0.0002), work=Work(flops=1.0), max_time=0.05)
    ''')
    result = pytester.runpytest_subprocess("-n", "2", "--target=cpu", "--charz-out=run.json", "--charz-no-save")
    result.assert_outcomes(passed=4)
    run = run_file(pytester)
    assert sorted(c["params"]["i"] for c in run["cases"]) == [0, 1, 2, 3]
    assert sorted(run["provenance"]["xdist_workers"]) == ["gw0", "gw1"]
    assert not list(pytester.path.glob("run.gw*"))
    result.stdout.fnmatch_lines(["*charz: measurements (all workers)*", "run file: *run.json"])
    # the measurement windows of the two workers never overlap
    windows = sorted((c["conditions"]["before"]["wall_time"], c["conditions"]["after"]["wall_time"])
                     for c in run["cases"])
    assert all(earlier[1] <= later[0] for earlier, later in zip(windows, windows[1:]))


def test_a_parameter_marker_wins_over_the_function_marker(pytester, fake_clock, quiet_host):
    pytester.makepyfile(test_marks='''
        import pytest
        from pytest_charz import Work
        from pytest_charz.measure import clock

        @pytest.mark.charz(max_time=0.5, noise=0.02)
        @pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.charz(max_time=0.25))])
        def test_sizes(charz, n):
            fake = clock.current()
            charz.measure(lambda: fake.advance(1000 * n), work=Work(flops=1.0))
    ''')
    pytester.runpytest("--target=cpu", "--charz-out=run.json", "--charz-no-save").assert_outcomes(passed=2)
    settings = {c["params"]["n"]: c["settings"] for c in run_file(pytester)["cases"]}
    assert settings[1]["max_time_s"] == 0.5 and settings[2]["max_time_s"] == 0.25
    assert settings[2]["noise_target"] == 0.02


def test_several_measurements_of_one_test_need_their_own_names(pytester, fake_clock, quiet_host):
    pytester.makepyfile(test_two='''
        from pytest_charz import Work
        from pytest_charz.measure import clock

        def test_named(charz):
            fake = clock.current()
            charz.measure(lambda: fake.advance(1000), work=Work(flops=1.0), name="small")
            charz.measure(lambda: fake.advance(2000), work=Work(flops=2.0), name="large")

        def test_unnamed_twice(charz):
            fake = clock.current()
            charz.measure(lambda: fake.advance(1000), work=Work(flops=1.0))
            charz.measure(lambda: fake.advance(1000), work=Work(flops=1.0))
    ''')
    result = pytester.runpytest("--target=cpu", "--charz-out=run.json", "--charz-no-save")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*measures twice under the same name ''*"])
    ids = [c["id"] for c in run_file(pytester)["cases"]]
    assert "test_two.py::test_named::small" in ids and "test_two.py::test_named::large" in ids


WRAPPED = '''
from pytest_charz import Work
from pytest_charz.measure import clock

class Doubling:
    """Wraps the bound device: every batch costs twice what the call itself advanced."""
    def __init__(self, device):
        self._device = device
    def __getattr__(self, name):
        return getattr(self._device, name)
    def time_batch(self, fn, inner, work=None):
        return 2.0 * self._device.time_batch(fn, inner, work)

class Elsewhere(Doubling):
    backend = "toy"

def test_wrapped(charz):
    fake = clock.current()
    charz.measure(lambda: fake.advance(1000), work=Work(flops=1.0, dtype="fp64"), device=Doubling(charz.device))

def test_other_backend(charz):
    fake = clock.current()
    charz.measure(lambda: fake.advance(1000), work=Work(flops=1.0, dtype="fp64"), device=Elsewhere(charz.device))
'''


def test_a_measurement_may_be_timed_by_a_wrapper_of_the_bound_device(pytester, fake_clock, quiet_host):
    pytester.makepyfile(test_wrapped=WRAPPED)
    result = pytester.runpytest("--target=cpu", "--charz-out=run.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*must wrap the bound cpu device, got a 'toy' one*"])
    (case,) = run_file(pytester)["cases"]
    assert case["measurement"]["median_s"] == pytest.approx(2e-6)   # the wrapper's clock, not the device's
