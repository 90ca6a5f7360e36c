"""Progress a person sees on long work, and silence where output is piped: the time left of a
session said as each suite file ends, and the stages of a ``charz`` command on a terminal."""
from __future__ import annotations

import io
from pathlib import Path

from pytest_charz.report.progress import Progress
from pytest_charz.report.progress import SessionPace
from pytest_charz.report.text import duration_words


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_time_left_is_said_when_a_file_ends_at_the_pace_so_far():
    now = [0.0]
    pace = SessionPace(["a.py::t1", "a.py::t2", "b.py::t1", "b.py::t2"], ["a.py", "a.py", "b.py", "b.py"],
                       lambda: now[0], quiet_s=30.0)
    now[0] = 20.0
    assert pace.finished("a.py::t1") is None               # not the last of its file
    now[0] = 40.0
    assert pace.finished("a.py::t2") == "charz: 2 of 4 tests done in 40 s; about 40 s left at this pace"
    now[0] = 50.0
    assert pace.finished("b.py::t1") is None
    assert pace.finished("b.py::t2") is None               # nothing left to estimate
    assert pace.finished("c.py::unknown") is None


def test_a_short_session_says_nothing():
    now = [0.0]
    pace = SessionPace(["a.py::t", "b.py::t"], ["a.py", "b.py"], lambda: now[0])
    now[0] = 5.0
    assert pace.finished("a.py::t") is None


def test_durations_read_at_a_glance():
    assert [duration_words(s) for s in (4.2, 59.4, 185, 3720)] == ["4 s", "59 s", "3m05s", "1h02m"]


def test_a_pytest_session_prints_the_time_left_between_files(pytester, fake_clock, quiet_host, monkeypatch):
    monkeypatch.setattr(SessionPace, "QUIET_S", 0.0)
    test = "def test_one():\n    pass\n\ndef test_two():\n    pass\n"
    pytester.makepyfile(test_a=test, test_b=test)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["test_a.py ..*", "charz: 2 of 4 tests done in * s; about * s left at this pace",
                                 "test_b.py ..*"])
    assert "left at this pace" not in pytester.runpytest("-q", "-q", "-p", "no:cacheprovider").stdout.str()


def test_progress_shows_its_stages_on_a_terminal_only():
    tty = Tty()
    with Progress("charz profile", total=2, stream=tty) as progress:
        progress.step("reading run.json")
        progress.step("building the profile")
    assert "charz profile" in tty.getvalue() and "building the profile" in tty.getvalue()
    piped = io.StringIO()
    with Progress("charz profile", total=2, stream=piped) as progress:
        progress.step("reading run.json")
    assert piped.getvalue() == ""


def test_charz_profile_is_quiet_on_stderr_when_piped(tmp_path, capsys):
    from pytest_charz import cli

    run = tmp_path / "run.json.gz"
    run.write_bytes((Path(__file__).parent / "data" / "runs" / "amd-epyc-zen3-kvm-2vcpu.run.json.gz").read_bytes())
    assert cli.main(["profile", str(run), "-o", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "charz profile" not in captured.err and "profile of" in captured.out
