"""What a new user runs into: every mistake is one clear line and a non-zero exit, never a
traceback, and a figure that would give a wrong answer is refused where it enters.

Each test is one case a user reported: a truncated file, a directory where a file goes (or the
reverse), a name that would write outside the directory given, a closed pipe, Ctrl-C, a missing
profiler, NaN or infinity given as a figure, a sweep too large to run. The inputs are the
recorded runs and profile under ``tests/data/`` (truncated into ``tmp_path``) and small
simulated workloads; nothing here depends on this host's speed.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_charz import cli
from pytest_charz.errors import FormatError, UsageError
from pytest_charz.formats import atomic_write_json, atomic_write_text
from pytest_charz.work import Collective, Work

DATA = Path(__file__).parent / "data"
RUN = DATA / "runs" / "amd-epyc-zen3-kvm-2vcpu.run.json.gz"
PROFILE = DATA / "profiles" / "amd-epyc-zen4-kvm-2vcpu.profile.json.gz"
#: A small simulated workload: two layers of a 7B decode step on a catalogue GPU.
WORKLOAD = ["llama-2-7b", "--phase", "decode", "--context", "256", "--num-layers", "2"]


def charz(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``charz ARGV`` in this process: its exit status, stdout and stderr."""
    status = cli.main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def error_line(status: int, err: str, *needles: str) -> str:
    """The one ``charz: error:`` line of a usage error (exit 2), checked to name every needle."""
    assert status == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("charz: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def truncated(source: Path, destination: Path) -> Path:
    """``destination``: the first third of the gzip file ``source``, as a copy cut short leaves it."""
    data = source.read_bytes()
    destination.write_bytes(data[: len(data) // 3])
    return destination


@pytest.fixture
def cut_run(tmp_path: Path) -> Path:
    return truncated(RUN, tmp_path / "cut.run.json.gz")


@pytest.fixture
def cut_profile(tmp_path: Path) -> Path:
    return truncated(PROFILE, tmp_path / "cut.profile.json.gz")


# -- truncated files ------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["profile"], ["bottleneck"], ["export", "--format", "csv"]],
                         ids=["profile", "bottleneck", "export"])
def test_a_truncated_run_file_is_named_as_truncated_or_corrupt(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, cut_run: Path, command: list[str]) -> None:
    status, _, err = charz(capsys, command[0], cut_run, *command[1:], *(["-o", tmp_path / "out"]
                                                                      if command[0] == "profile" else []))
    error_line(status, err, str(cut_run), "truncated or corrupt")
    assert not (tmp_path / "out").exists() and sorted(os.listdir(tmp_path)) == ["cut.run.json.gz"]


def test_compare_names_the_truncated_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                             cut_profile: Path) -> None:
    status, _, err = charz(capsys, "compare", PROFILE, cut_profile, "-o", tmp_path / "out")
    error_line(status, err, str(cut_profile), "truncated or corrupt charz profile")
    assert not (tmp_path / "out").exists()


def test_sim_names_the_truncated_profile(capsys: pytest.CaptureFixture[str], cut_profile: Path) -> None:
    status, out, err = charz(capsys, "sim", *WORKLOAD, "--target", "h100", "--profile", cut_profile)
    error_line(status, err, str(cut_profile), "truncated or corrupt")
    assert out == ""


def test_a_file_that_is_not_json_is_corrupt_too(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    half = tmp_path / "half.run.json"
    half.write_text('{"kind": "charz-run", "version": 2, "cases": [')
    status, _, err = charz(capsys, "export", half, "--format", "csv")
    error_line(status, err, str(half), "truncated or corrupt", "not valid JSON")


# -- a file where a directory goes, and the reverse -----------------------------------------------
def test_sim_trace_into_a_directory_is_refused_before_simulating(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    status, out, err = charz(capsys, "sim", *WORKLOAD, "--target", "h100", "--trace", folder)
    error_line(status, err, "--trace", str(folder), "is a directory")
    assert out == "" and os.listdir(folder) == [] and sorted(os.listdir(tmp_path)) == ["traces"]


@pytest.mark.parametrize("fmt", ["csv", "pytest-benchmark", "parquet"])
def test_export_into_a_directory_leaves_nothing_behind(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       fmt: str) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    status, _, err = charz(capsys, "export", RUN, "--format", fmt, "-o", folder)
    error_line(status, err, str(folder), "is a directory")
    assert sorted(os.listdir(tmp_path)) == ["exports"] and os.listdir(folder) == []


def test_profile_into_an_existing_file_is_refused_before_reading_the_runs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    existing = tmp_path / "notes.txt"
    existing.write_text("keep me\n")
    status, _, err = charz(capsys, "profile", RUN, "-o", existing)
    error_line(status, err, "-o", str(existing), "is a file, not a directory")
    assert existing.read_text() == "keep me\n" and sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_the_writers_refuse_a_directory_and_leave_no_temporary_file(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    with pytest.raises(UsageError, match="is a directory"):
        atomic_write_text(str(folder), "text")
    with pytest.raises(UsageError, match="is a directory"):
        atomic_write_json(str(folder), {"kind": "k", "version": 1})
    assert sorted(os.listdir(tmp_path)) == ["d"] and os.listdir(folder) == []


# -- outputs stay inside the directory given ------------------------------------------------------
@pytest.mark.parametrize("name", ["../../x", "sub/x", "..", ""])
def test_profile_name_with_a_path_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str) -> None:
    out = tmp_path / "a" / "b" / "out"
    status, _, err = charz(capsys, "profile", RUN, "-o", out, "--name", name)
    error_line(status, err, "--name", repr(name), "plain file name")
    assert sorted(os.listdir(tmp_path)) == []


def test_compare_name_with_a_path_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = charz(capsys, "compare", PROFILE, PROFILE, "-o", tmp_path / "out", "--name", "../escape")
    error_line(status, err, "--name", "'../escape'")
    assert sorted(os.listdir(tmp_path)) == []


# -- numbers refused where they enter -------------------------------------------------------------
@pytest.mark.parametrize("command", [["sim", *WORKLOAD, "--target", "h100"],
                                     ["workload", "predict", *WORKLOAD, "--target", "h100"]], ids=["sim", "predict"])
@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_host_dispatch_must_be_a_finite_figure(capsys: pytest.CaptureFixture[str], command: list[str],
                                               value: str) -> None:
    status, out, err = charz(capsys, *command, "--host-dispatch-us", value)
    error_line(status, err, "--host-dispatch-us", value, "finite number of microseconds >= 0")
    assert out == ""


@pytest.mark.parametrize("setting", ["memory_bandwidth=1e-300", "l2_bandwidth=1e-300"])
def test_a_what_if_figure_that_overflows_the_simulator_is_refused_not_printed(
        capsys: pytest.CaptureFixture[str], setting: str) -> None:
    status, out, err = charz(capsys, "sim", *WORKLOAD, "--target", "h100", "--set", setting, "--json")
    error_line(status, err, f"--set {setting}")
    assert out == ""       # no document with bare Infinity or NaN in it


@pytest.mark.parametrize("setting, message", [
    ("memory_bandwidth=nan", "--set memory_bandwidth=nan: parameter memory_bandwidth must be a number"),
    ("l2_bandwidth=inf", "--set l2_bandwidth=inf: parameter l2_bandwidth must be finite"),
    ("compute_units=inf", "parameter compute_units must be finite"),
])
def test_nan_and_infinity_are_refused_in_set(capsys: pytest.CaptureFixture[str], setting: str, message: str) -> None:
    status, out, err = charz(capsys, "sim", *WORKLOAD, "--target", "h100", "--set", setting, "--json")
    error_line(status, err, message)
    assert out == ""


def test_a_swept_value_that_overflows_the_simulator_names_its_configuration(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = charz(capsys, "sweep", *WORKLOAD, "--target", "h100-sxm", "--no-progress",
                           "--vary", "l2_bandwidth=1e-300,1e12", "-o", tmp_path / "sw")
    error_line(status, err, "l2_bandwidth=1e-300")
    assert not (tmp_path / "sw" / "sweep.json").exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"bytes": math.nan}, "Work.bytes['dram'] must be a finite non-negative number, got nan"),
    ({"flops": math.inf}, "Work.flops['fp32'] must be a finite non-negative number, got inf"),
    ({"bytes": {"l2": -1.0}}, "Work.bytes['l2'] must be a finite non-negative number, got -1.0"),
    ({"transfers": {"h2d": math.nan}}, "Work.transfers['h2d'] must be a finite non-negative number, got nan"),
    ({"shape": {"m": math.inf}}, "Work.shape['m'] must be a finite number, got inf"),
])
def test_work_refuses_amounts_that_are_not_finite(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        Work(**kwargs)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_a_collective_refuses_nan_bytes_and_fractional_ranks() -> None:
    with pytest.raises(UsageError, match="bytes must be a finite non-negative number, got nan"):
        Collective("all-reduce", math.nan, 8)
    with pytest.raises(UsageError, match="ranks must be a whole number >= 1, got 2.5"):
        Collective("all-reduce", 1e6, 2.5)  # type: ignore[arg-type]


def test_no_json_written_holds_nan_or_infinity_and_the_error_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    document = {"kind": "charz-sim-result", "version": 1, "points": [{"latency_s": 1.0}, {"latency_s": math.inf}]}
    with pytest.raises(FormatError) as raised:
        atomic_write_json(str(path), document)
    assert str(path) in str(raised.value) and "points[1].latency_s is inf" in str(raised.value)
    assert os.listdir(tmp_path) == []


# -- a sweep too large to run ---------------------------------------------------------------------
def test_a_huge_sweep_is_refused_with_its_size_and_an_estimate_before_it_runs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = charz(capsys, "sweep", *WORKLOAD, "--target", "h100-sxm", "--no-progress",
                           "--vary", "memory_bandwidth=1e12:2e12:1000000", "-o", tmp_path / "sw")
    line = error_line(status, err, "1000000 configurations", "1000000 values of memory_bandwidth",
                      "more than the cap of 10000", "it would take about", "--max-configs 1000000")
    assert "ms each on" in line
    assert not (tmp_path / "sw").exists()


def test_max_configs_lowers_and_raises_the_cap(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    vary = ["--vary", "memory_bandwidth=2e12:4e12:3", "--vary", "compute_units=66,132"]
    status, _, err = charz(capsys, "sweep", *WORKLOAD, "--target", "h100-sxm", "--no-progress", *vary,
                           "--max-configs", "5", "-o", tmp_path / "small")
    error_line(status, err, "6 configurations (3 values of memory_bandwidth x 2 values of compute_units)",
               "cap of 5", "--max-configs 6")
    status, _, err = charz(capsys, "sweep", *WORKLOAD, "--target", "h100-sxm", "--no-progress", *vary,
                           "--max-configs", "6", "-o", tmp_path / "small")
    assert status == 0, err
    assert "charz sweep: 6 configurations, about" in err
    assert len(json.loads((tmp_path / "small" / "sweep.json").read_text())["points"]) == 6


# -- a missing profiler, a closed pipe, Ctrl-C: the real processes --------------------------------
@pytest.mark.parametrize("module, tool", [("pytest_charz.evidence.ncu", "'ncu' is not on PATH: install Nsight Compute"),
                                          ("pytest_charz.evidence.rocprof", "'rocprofv3' is not on PATH")])
def test_a_missing_profiler_is_one_line_and_exit_2(tmp_path: Path, module: str, tool: str) -> None:
    environment = {**os.environ, "PATH": str(tmp_path)}        # nothing on PATH: no profiler
    done = subprocess.run([sys.executable, "-m", module, "suites/test_x.py::case", "--out", str(tmp_path / "c.json")],
                          capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"python -m {module}: error: ") and tool in done.stderr
    assert not (tmp_path / "c.json").exists()


def test_a_reader_that_closes_the_pipe_ends_charz_quietly(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)              # as `| head` does once it has its lines: every write now fails
    try:
        done = subprocess.run([sys.executable, "-m", "pytest_charz.cli", "sim", *WORKLOAD, "--target", "h100",
                               "--json", "--all-ops"], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == 141 and done.stderr == ""


def _ctrl_c_as_at_a_terminal() -> None:
    """In the child before it runs: Ctrl-C's default action, which a test run started in the
    background of a shell without job control does not pass on (its SIGINT is ignored, and so
    is every child's, and the sweep ran on to the test's timeout)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: Seconds from the sweep's first line to Ctrl-C: while its workers run, and while they start and
#: take their first chunks (where 4 of 16 interrupts, 0.02-0.1 s in, hung a sweep run on an
#: executor that waited at exit for its workers' chunks).
INTERRUPT_AFTER_S = (0.5, 0.02, 0.05, 0.1)


@pytest.mark.parametrize("after_s", INTERRUPT_AFTER_S)
def test_ctrl_c_in_a_parallel_sweep_is_one_line_and_exit_130(tmp_path: Path, after_s: float) -> None:
    child = subprocess.Popen([sys.executable, "-m", "pytest_charz.cli", "sweep", *WORKLOAD, "--target", "h100-sxm",
                              "--vary", "memory_bandwidth=1e12:4e12:100000", "--max-configs", "100000",
                              "--jobs", "2", "--no-progress",
                              "-o", str(tmp_path / "sw")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                             start_new_session=True, preexec_fn=_ctrl_c_as_at_a_terminal)
    try:
        started = child.stderr.readline() if child.stderr else ""
        assert "charz sweep: 100000 configurations, about" in started   # far more than 0.5 s of work
        time.sleep(after_s)        # the workers are starting or running
        os.killpg(child.pid, signal.SIGINT)       # what the terminal sends the whole group on Ctrl-C
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, err
    assert err.strip().splitlines() == ["charz: interrupted"] and out == ""
    assert not (tmp_path / "sw" / "sweep.json").exists()


def test_ctrl_c_maps_to_130_in_process(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_charz.sim.sweep_run as sweep_run

    def interrupted(*args: object, **kwargs: object) -> tuple[()]:
        raise KeyboardInterrupt
    monkeypatch.setattr(sweep_run, "run_configs", interrupted)
    status, out, err = charz(capsys, "sweep", *WORKLOAD, "--target", "h100-sxm", "--no-progress",
                             "--vary", "memory_bandwidth=2e12:4e12:3", "-o", tmp_path / "sw")
    assert status == 130 and err.splitlines()[-1] == "charz: interrupted" and "Traceback" not in err
    assert not (tmp_path / "sw" / "sweep.json").exists()
