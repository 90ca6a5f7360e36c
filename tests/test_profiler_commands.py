"""Every profiler command is an argument list: a hostile case name (quotes, ``;``, ``$(...)``,
spaces, a newline) reaches the program as one argument, never a shell. Each command builder's
argv is run through the one subprocess helper with a fake executable that writes the argv it
received as JSON; the ncu and rocprofv3 re-run commands run end to end against fake tools."""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from pytest_charz.errors import UsageError
from pytest_charz.evidence import ncu, rocprof
from pytest_charz.evidence.ncu import ncu_argv
from pytest_charz.evidence.perf_stat import perf_stat_argv
from pytest_charz.evidence.rerun import pytest_case_argv
from pytest_charz.evidence.rocprof import rocprof_argv
from pytest_charz.evidence.subprocess_run import check_argv, run_tool

DATA = Path(__file__).parent / "data" / "evidence"
HOSTILE = 'suites/test_x.py::test_y[a"b\'c; rm -rf / $(touch pwned) `id` & x\ny]'

ECHO_ARGV = """#!{python}
import json, sys
json.dump(sys.argv[1:], sys.stdout)
"""


@pytest.fixture
def fake_tool(tmp_path: Path) -> Callable[[str, str], str]:
    """Write an executable ``name`` in a bin directory of ``tmp_path`` with body ``source``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def make(name: str, source: str = ECHO_ARGV) -> str:
        path = bin_dir / name
        path.write_text(source.format(python=sys.executable))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return str(path)

    return make


def _received(result: Any) -> list[str]:
    assert result.ok, result.stderr
    return json.loads(result.stdout)


def _builders(tool: str, tmp_path: Path) -> dict[str, list[str]]:
    case = pytest_case_argv(HOSTILE, str(tmp_path / "run.json"), python=tool)
    return {
        "pytest re-run": case,
        "perf stat": perf_stat_argv(case, perf=tool),
        "ncu": ncu_argv(case, ncu=tool, launch_skip=5, launch_count=3, log_file=str(tmp_path / "log.csv"),
                        kernel_regex=HOSTILE),
        "rocprofv3": rocprof_argv(case, rocprof=tool, output_dir=str(tmp_path / "out")),
    }


def test_a_hostile_case_name_reaches_every_profiler_as_one_argument(fake_tool: Callable[..., str],
                                                                    tmp_path: Path) -> None:
    tool = fake_tool("tool")
    for name, argv in _builders(tool, tmp_path).items():
        received = _received(run_tool(argv, timeout_s=30))
        assert received == argv[1:], name
        assert received.count(HOSTILE) == 1, name
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_the_ncu_kernel_filter_keeps_the_name_inside_one_argument(tmp_path: Path) -> None:
    argv = _builders("ncu", tmp_path)["ncu"]
    assert f"regex:{HOSTILE}" in argv


def test_a_shell_string_or_a_bad_item_is_refused() -> None:
    with pytest.raises(UsageError, match="argument list, never one string"):
        run_tool("perf stat -e cycles -- true")
    with pytest.raises(UsageError, match="must be a str"):
        check_argv(["perf", 3])
    with pytest.raises(UsageError, match="NUL"):
        check_argv(["perf", "a\0b"])
    with pytest.raises(UsageError, match="no such program"):
        run_tool([str(Path("/nonexistent") / "perf")])


def test_a_hung_profiler_is_stopped_at_its_timeout(fake_tool: Callable[..., str]) -> None:
    sleeper = fake_tool("sleeper", "#!{python}\nimport time\ntime.sleep(30)\n")
    result = run_tool([sleeper], timeout_s=0.5)
    assert result.timed_out and not result.ok


FAKE_NCU = """#!{python}
import json, shutil, sys
argv = sys.argv[1:]
log = argv[argv.index("--log-file") + 1]
with open(log + ".argv.json", "w") as out:
    json.dump(argv, out)
shutil.copyfile({fixture!r}, log)
"""

FAKE_ROCPROF = """#!{python}
import json, os, shutil, sys
argv = sys.argv[1:]
out_dir = argv[argv.index("-d") + 1]
name = argv[argv.index("-o") + 1]
os.makedirs(os.path.join(out_dir, "host", "4242"), exist_ok=True)
shutil.copyfile({fixture!r}, os.path.join(out_dir, "host", "4242", name + "_counter_collection.csv"))
with open(os.path.join({record!r}), "w") as out:
    json.dump(argv, out)
"""


def test_ncu_rerun_writes_counters_of_the_hostile_case(fake_tool: Callable[..., str], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = str(DATA / "ncu" / "h100-triad-raw.csv")
    fake_tool("ncu", FAKE_NCU.replace("{fixture!r}", repr(fixture)))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "counters.json"
    assert ncu.main([HOSTILE, "--out", str(out), "--launch-skip", "1", "--launch-count", "3"]) == 0
    document = json.loads(out.read_text())
    assert document["kind"] == "charz-counters" and document["source"] == "ncu" and document["per"] == "kernel"
    assert document["case"] == HOSTILE and document["calls"] == 3
    assert document["values"]["dram-read-bytes"] > 0


def test_rocprof_rerun_writes_counters_of_the_hostile_case(fake_tool: Callable[..., str], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = str(DATA / "rocprofv3" / "mi300x-triad_counter_collection.csv")
    record = str(tmp_path / "rocprof-argv.json")
    fake_tool("rocprofv3", FAKE_ROCPROF.replace("{fixture!r}", repr(fixture)).replace("{record!r}", repr(record)))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "counters.json"
    assert rocprof.main([HOSTILE, "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["source"] == "rocprofv3" and document["calls"] == 2 and document["case"] == HOSTILE
    argv = json.loads(Path(record).read_text())
    assert argv.count(HOSTILE) == 1 and argv[argv.index("--") + 1] == sys.executable


def test_a_missing_profiler_names_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match="'ncu' is not on PATH: install Nsight Compute"):
        ncu.main(["x::y", "--out", str(tmp_path / "c.json")])
    with pytest.raises(UsageError, match="'rocprofv3' is not on PATH"):
        rocprof.main(["x::y", "--out", str(tmp_path / "c.json")])
