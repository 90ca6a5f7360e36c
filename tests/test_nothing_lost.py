"""Nothing measured is lost to the file system, and a bad option is a usage error.

A baseline store that cannot be written (read-only, permission denied, full), a disk that fills
up during or at the end of a session, a run directory that refuses the run file, and a session
killed mid-run: every measured case stays in the run file, its journal or the fallback file, the
failure is one line of the terminal summary naming the file and the OS error, and no case fails
for it. The file system is faked (the tests run as root, where a read-only mode stops nothing):
a conftest written into the pytester directory refuses writes under one directory with one
errno, from the start or from the end of the session. Time is the fake clock's.
"""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from charz_factories import make_case, measurement_json
from pytest_charz.records import CaseRecord, Run, RunTarget
from pytest_charz.run import RunWriter, journal_path, load_run
from pytest_charz.store import DirectoryStore, StoreWriteError, evaluate_case, write_error_text

SUITE = '''
import pytest
from pytest_charz import Work
from pytest_charz.measure import clock

@pytest.mark.parametrize("cost_ns", [1000, 2000, 3000])
def test_steady(charz, cost_ns):
    fake = clock.current()
    charz.measure(lambda: fake.advance(cost_ns), work=Work(flops=2000.0, dtype="fp64"))
'''

# The fake file system: under FAKE_ROOT, once "full", every write is refused with FAKE_ERRNO
# (creating a file or directory, renaming onto, removing, opening for writing); reads work, and
# nothing outside FAKE_ROOT is touched. FAKE_WHEN says when it fills: "configure" (from the
# start), "sessionfinish" (when the session ends), or "journal" (after FAKE_JOURNAL_CASES cases
# of the run journal). FAKE_TMP is the temporary directory of the session.
FAKE_FS_CONFTEST = '''
import builtins
import errno
import os
import tempfile

import pytest

ROOT = os.path.abspath(os.environ["FAKE_ROOT"])
ERRNO = getattr(errno, os.environ["FAKE_ERRNO"])
WHEN = os.environ["FAKE_WHEN"]
JOURNAL_CASES = int(os.environ.get("FAKE_JOURNAL_CASES", "0"))
state = {"full": WHEN == "configure"}
patch = pytest.MonkeyPatch()
real_open, real_os_open, real_mkdir = builtins.open, os.open, os.mkdir
real_replace, real_rename, real_unlink = os.replace, os.rename, os.unlink
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def inside(path):
    try:
        where = os.path.abspath(os.fspath(path))
    except TypeError:
        return False
    return where == ROOT or where.startswith(ROOT + os.sep)


def check(path):
    if state["full"] and inside(path):
        raise OSError(ERRNO, os.strerror(ERRNO), os.fspath(path))


class FillingJournal:
    """A journal whose writes fill the disk after its header and JOURNAL_CASES cases."""

    def __init__(self, handle, path):
        self.handle, self.path, self.lines = handle, path, 0

    def write(self, text):
        if state["full"] or self.lines > JOURNAL_CASES:
            state["full"] = True
            raise OSError(ERRNO, os.strerror(ERRNO), self.path)
        self.lines += 1
        return self.handle.write(text)

    def __getattr__(self, name):
        return getattr(self.handle, name)


def fake_open(file, mode="r", *args, **kwargs):
    writing = any(c in mode for c in "wax+")
    if writing:
        check(file)
    handle = real_open(file, mode, *args, **kwargs)
    if writing and WHEN == "journal" and inside(file) and str(file).endswith(".partial.jsonl"):
        return FillingJournal(handle, os.fspath(file))
    return handle


def fake_os_open(path, flags, *args, **kwargs):
    if flags & WRITE_FLAGS:
        check(path)
    return real_os_open(path, flags, *args, **kwargs)


def fake_mkdir(path, *args, **kwargs):
    check(path)
    return real_mkdir(path, *args, **kwargs)


def fake_replace(src, dst, *args, **kwargs):
    check(dst)
    return real_replace(src, dst, *args, **kwargs)


def fake_rename(src, dst, *args, **kwargs):
    check(dst)
    return real_rename(src, dst, *args, **kwargs)


def fake_unlink(path, *args, **kwargs):
    check(path)
    return real_unlink(path, *args, **kwargs)


def pytest_configure(config):
    patch.setattr(builtins, "open", fake_open)
    patch.setattr(os, "open", fake_os_open)
    patch.setattr(os, "mkdir", fake_mkdir)
    patch.setattr(os, "replace", fake_replace)
    patch.setattr(os, "rename", fake_rename)
    patch.setattr(os, "unlink", fake_unlink)
    if os.environ.get("FAKE_TMP"):
        patch.setattr(tempfile, "tempdir", os.environ["FAKE_TMP"])


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    if WHEN == "sessionfinish":
        state["full"] = True


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    patch.undo()
'''


@pytest.fixture
def fake_fs(pytester: pytest.Pytester, fake_clock: Any, quiet_host: None,
            monkeypatch: pytest.MonkeyPatch) -> Any:
    """Write the suite and the fake file system's conftest; ``fake_fs(root, errno_name, when)``
    arms it for the next run."""
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeconftest(FAKE_FS_CONFTEST)
    tmp = pytester.path / "tmp"
    tmp.mkdir()

    def arm(root: Path, errno_name: str, when: str, journal_cases: int = 0) -> None:
        monkeypatch.setenv("FAKE_ROOT", str(root))
        monkeypatch.setenv("FAKE_ERRNO", errno_name)
        monkeypatch.setenv("FAKE_WHEN", when)
        monkeypatch.setenv("FAKE_JOURNAL_CASES", str(journal_cases))
        monkeypatch.setenv("FAKE_TMP", str(tmp))

    return arm


def problem_lines(result: pytest.RunResult) -> list[str]:
    """The lines of the summary's "charz: not written" section."""
    lines = result.outlines
    starts = [i for i, line in enumerate(lines) if "charz: not written" in line]
    if not starts:
        return []
    section = []
    for line in lines[starts[0] + 1:]:
        if line.startswith("=") or not line.strip():
            break
        section.append(line)
    return section


def assert_no_traceback(result: pytest.RunResult) -> None:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "INTERNALERROR" not in text, text


# -- the baseline store ---------------------------------------------------------------------------
@pytest.mark.parametrize("errno_name, words", [("EROFS", "Read-only file system"),
                                               ("EACCES", "Permission denied"),
                                               ("ENOSPC", "No space left on device")])
def test_an_unwritable_store_keeps_every_case_and_says_so_once(fake_fs, pytester, errno_name, words):
    baselines = pytester.path / "baselines"
    fake_fs(baselines, errno_name, "configure")
    result = pytester.runpytest("--target=cpu", "--charz-out=run.json")
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.OK
    assert_no_traceback(result)
    run = json.loads((pytester.path / "run.json").read_text())
    assert run["status"] == "complete" and len(run["cases"]) == 3
    for case in run["cases"]:
        assert case["measurement"]["median_s"] > 0
        assert case["verdict"]["outcome"] == "new"
        assert case["verdict"]["baseline"].startswith("not saved: cannot write the baseline file")
        assert f"{words} ({errno_name})" in case["verdict"]["baseline"]
    problems = problem_lines(result)
    assert len(problems) == 1, result.stdout.str()
    assert str(baselines) in problems[0] and f"{words} ({errno_name})" in problems[0]
    assert "3 cases not saved" in problems[0]
    assert not baselines.exists() or list(baselines.rglob("*")) == []


def test_a_failed_store_write_is_a_condition_of_the_verdict_not_a_pass(tmp_path, monkeypatch):
    """--charz-accept against a store that refuses the write: the drift was not accepted, so
    the case still fails as drift, and says why; a new case and a reference still gathering
    sessions are judged as usual, with what was not written in their note."""
    store = DirectoryStore(tmp_path)
    rng = np.random.default_rng(7)

    def measured(scale: float, case_id: str = "c") -> CaseRecord:
        samples = [float(v) for v in 1e-3 * scale * rng.lognormal(0.0, 0.002, 60)]
        return make_case(case_id, {"op": "stream"}, None, suite="suites/test_mem.py",
                         measurement=measurement_json(float(np.median(samples)), samples_s=samples,
                                                      rel_ci_halfwidth=0.002))

    def evaluate(case: CaseRecord, failures: list[StoreWriteError], **options: Any) -> Any:
        return evaluate_case(case, store, "cpu-test", None, None, {}, on_write_error=failures.append, **options)

    for _ in range(3):                         # three clean sessions settle the reference
        evaluate(measured(1.0), [])
    path = store.path("cpu-test", "suites/test_mem.py")
    stored = Path(path).read_text()
    real_replace = os.replace

    def read_only(src: str, dst: str) -> None:
        if os.path.dirname(os.path.abspath(dst)) == os.path.dirname(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", read_only)
    failures: list[StoreWriteError] = []
    verdict = evaluate(measured(1.10), failures, accept_reason="new BLAS build")
    assert verdict.outcome == "drift" and verdict.fails
    assert verdict.baseline == f"not accepted: cannot write the baseline file {path}: Read-only file system (EROFS)"
    assert [f.path for f in failures] == [path] and isinstance(failures[0], OSError)
    new = evaluate(measured(1.0, "other"), failures)
    assert new.outcome == "new" and not new.fails and new.baseline.startswith("not saved: cannot write")
    assert Path(path).read_text() == stored
    assert [p.name for p in Path(path).parent.iterdir()] == [Path(path).name]   # no temporary file left


def test_the_reason_of_a_failed_write_is_read_through_a_reporting_error() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/x/.tmp-1.json")
        except OSError:
            raise ValueError("cannot write '/x/a.json'") from None
    except ValueError as reported:
        assert write_error_text(reported) == "No space left on device (ENOSPC)"
    assert write_error_text(RuntimeError("something else")) == "something else"


# -- the run file ---------------------------------------------------------------------------------
def test_a_full_disk_at_the_end_keeps_the_journal_of_every_case(fake_fs, pytester):
    fake_fs(pytester.path / "out", "ENOSPC", "sessionfinish")
    result = pytester.runpytest("--target=cpu", "--charz-out=out/run.json")
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.OK              # the verdicts decide the exit code
    assert_no_traceback(result)
    out = pytester.path / "out"
    assert not (out / "run.json").exists()
    assert (out / "run.json.partial.jsonl").exists()
    assert [p.name for p in out.iterdir() if p.name.startswith(".tmp-")] == []
    run = load_run(str(out / "run.json"))
    assert sorted(c.params["cost_ns"] for c in run.cases) == [1000, 2000, 3000]
    assert all(c.verdict is not None and c.verdict.outcome == "new" for c in run.cases)
    problems = problem_lines(result)
    assert len(problems) == 1, result.stdout.str()
    assert "run.json could not be written (No space left on device (ENOSPC))" in problems[0]
    assert f"its journal keeps all 3 cases: load it with pytest_charz.run.load_run('{out}/run.json.partial.jsonl')" \
        in problems[0]
    assert "run file: " not in result.stdout.str()      # no claim of a file that is not there
    result.stdout.fnmatch_lines(["*charz: measurements*", "*test_steady[[]3000[]]*"])


def test_a_disk_that_fills_mid_session_sends_the_whole_run_to_the_fallback_file(fake_fs, pytester):
    fake_fs(pytester.path / "out", "ENOSPC", "journal", journal_cases=1)
    result = pytester.runpytest("--target=cpu", "--charz-out=out/run.json")
    result.assert_outcomes(passed=3)
    assert_no_traceback(result)
    problems = problem_lines(result)
    assert len(problems) == 1, result.stdout.str()
    assert "keeps 1 of 3 cases (No space left on device (ENOSPC))" in problems[0]
    fallback = pytester.path / "tmp" / f"charz-run-{os.getpid()}.json"
    assert f"the whole run was written to {fallback} instead" in problems[0]
    assert len(load_run(str(fallback)).cases) == 3
    assert len(load_run(str(pytester.path / "out" / "run.json")).cases) == 1    # the journal
    result.stdout.fnmatch_lines([f"run file: {fallback}"])


def test_a_run_directory_that_refuses_the_run_file_sends_it_to_the_fallback_file(fake_fs, pytester):
    fake_fs(pytester.path / ".charz", "EROFS", "configure")
    result = pytester.runpytest("--target=cpu")              # the default run path, under .charz/runs
    result.assert_outcomes(passed=3)
    assert_no_traceback(result)
    fallback = next((pytester.path / "tmp").glob("charz-run-*.json"))
    run = load_run(str(fallback))
    assert run.status == "complete" and len(run.cases) == 3
    problems = problem_lines(result)
    assert len(problems) == 1 and "Read-only file system (EROFS)" in problems[0], result.stdout.str()
    assert f"this run was recorded in {fallback} instead" in problems[0]
    result.stdout.fnmatch_lines([f"run file: {fallback}"])
    assert not (pytester.path / ".charz").exists()


def _run_header() -> Run:
    return Run(target=RunTarget("cpu", "host", "cpu", "test", None), device={}, provenance={}, settings={},
               created="2026-11-30T00:00:00+00:00")


def test_a_session_killed_after_k_cases_leaves_a_journal_of_k_cases(tmp_path):
    path = str(tmp_path / "runs" / "r.json")
    writer = RunWriter(path, _run_header())
    for name in ("a", "b", "c"):
        writer.add_case(make_case(name, {"op": "fma"}, 1e-6))
    # killed here: finish never runs, and the last line was being written
    with open(journal_path(path), "a", encoding="utf-8") as handle:
        handle.write('{"id": "suites/test_synth.py::d", "meas')
    run = load_run(path)
    assert run.status == "interrupted"
    assert [c.id for c in run.cases] == [f"suites/test_synth.py::{n}" for n in "abc"]
    assert load_run(journal_path(path)).cases == run.cases


class FillingFile:
    """A file on a disk that fills up once ``room`` more lines are written."""

    def __init__(self, handle: Any, room: int) -> None:
        self.handle, self.room = handle, room

    def write(self, text: str) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= 1
        return int(self.handle.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)


def test_a_journal_the_disk_refuses_keeps_the_cases_in_memory(tmp_path, monkeypatch):
    import builtins

    from pytest_charz import run as run_module

    def filling_open(file: str, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = builtins.open(file, mode, *args, **kwargs)
        return FillingFile(handle, room=2) if "w" in mode else handle

    monkeypatch.setattr(run_module, "open", filling_open, raising=False)
    path = str(tmp_path / "r.json")
    writer = RunWriter(path, _run_header())          # the header and one case fit
    writer.add_case(make_case("a", {"op": "fma"}, 1e-6))
    writer.add_case(make_case("b", {"op": "fma"}, 2e-6))
    writer.add_case(make_case("c", {"op": "fma"}, 3e-6))
    assert writer.journaled == 1 and not writer.journal_complete
    assert isinstance(writer.journal_error, OSError) and writer.journal_error.errno == errno.ENOSPC
    ids = [f"suites/test_synth.py::{n}" for n in "abc"]
    assert [c.id for c in writer.run.cases] == ids
    assert [c.id for c in load_run(path).cases] == ids[:1]      # what a kill now would leave
    writer.finish("complete")                                 # space came back before the end
    assert [c.id for c in load_run(path).cases] == ids
    assert not os.path.exists(journal_path(path))


KILLED_CONFTEST = '''
from pytest_charz.measure import clock, conditions
from pytest_charz.measure.clock import FakeClock

# Kept in a global: the context manager's generator restores the real clock when collected.
FAKE_TIME = clock.use(FakeClock())
FAKE_TIME.__enter__()
conditions.read_busy_processes = lambda *a, **k: ()
conditions.read_cpu_times = lambda stat_text=None: {"total": 2 * clock.now_ns() / 1e7,
                                                    "idle": clock.now_ns() / 1e7, "steal": 0.0}
conditions.read_cpu_freq_mhz = lambda *a, **k: (2600.0, 2600.0)
conditions.read_core_clock_mhz = lambda: 3000.0
'''

KILLED_SUITE = '''
import os
import signal

import pytest
from pytest_charz import Work
from pytest_charz.measure import clock

@pytest.mark.parametrize("cost_ns", [1000, 2000, 0, 4000])
def test_steady(charz, cost_ns):
    if cost_ns == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    fake = clock.current()
    charz.measure(lambda: fake.advance(cost_ns), work=Work(flops=2000.0, dtype="fp64"))
'''


def test_a_killed_session_leaves_a_journal_that_loads(pytester):
    pytester.makeconftest(KILLED_CONFTEST)
    pytester.makepyfile(test_killed=KILLED_SUITE)
    result = pytester.runpytest_subprocess("--target=cpu", "--charz-out=run.json", "-p", "no:cacheprovider")
    assert result.ret == -9
    assert not (pytester.path / "run.json").exists()
    run = load_run(str(pytester.path / "run.json"))
    assert run.status == "interrupted"
    assert [c.params["cost_ns"] for c in run.cases] == [1000, 2000]
    assert all(c.verdict is not None for c in run.cases)


def test_judging_that_stops_keeps_the_measured_case(pytester, fake_clock, quiet_host):
    pytester.makepyfile(test_suite=SUITE)
    pytester.runpytest("--target=cpu", "--charz-out=run.json").assert_outcomes(passed=3)
    stored = next((pytester.path / "baselines").rglob("*.json"))
    stored.write_text("{ not json")
    result = pytester.runpytest("--target=cpu", "--charz-out=run.json")
    result.assert_outcomes(failed=3)
    assert_no_traceback(result)
    result.stdout.fnmatch_lines([f"*charz: the case was measured but not judged: *{stored.name}*"])
    run = load_run(str(pytester.path / "run.json"))
    assert len(run.cases) == 3
    assert all(c.verdict is None and c.prediction is not None and c.median_s for c in run.cases)
    assert stored.read_text() == "{ not json"


# -- option errors at configure time -----------------------------------------------------------------
@pytest.mark.parametrize("option, expected", [
    ("--charz-model=nope", "--charz-model: unknown model 'nope'; known models: *opclass*"),
    ("--charz-noise=-0.1", "--charz-noise must be a fraction in (0, 1)*got -0.1"),
    ("--charz-noise=nan", "--charz-noise must be a fraction in (0, 1)*got nan"),
    ("--charz-max-time=0", "--charz-max-time must be a positive number of seconds*got 0.0"),
    ("--charz-threshold=1.5", "--charz-threshold must be a fraction in (0, 1)*got 1.5"),
    ("--charz-seed=-1", "--charz-seed must be a non-negative integer, got -1"),
    ("--charz-accept=  ", "--charz-accept needs a reason*"),
    ("--charz-baselines=suite_file.txt", "--charz-baselines must be a directory*'suite_file.txt' is a file"),
    ("--charz-profile=suite_file.txt", "*suite_file.txt*"),
    ("--charz-profile=missing.json", "*missing.json: no such*"),
    ("--charz-sim-param=bogus", "*--charz-sim-param 'bogus': expected NAME=VALUE*"),
])
def test_a_bad_option_value_is_a_usage_error_before_any_case(pytester, option, expected):
    pytester.makepyfile(test_any="def test_x(charz):\n    raise AssertionError('ran')\n")
    pytester.makefile(".txt", suite_file="not a profile")
    result = pytester.runpytest("--target=cpu", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1, result.errlines
    assert errors[0].startswith("ERROR: ") and matches(expected, errors[0][len("ERROR: "):])
    assert_no_traceback(result)
    assert "ran" not in result.stdout.str()


def matches(pattern: str, text: str) -> bool:
    from fnmatch import fnmatch

    return fnmatch(text, pattern)
