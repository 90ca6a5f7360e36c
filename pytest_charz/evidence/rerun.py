"""The pytest command that re-runs one case under a profiler (Nsight Compute, rocprofv3, perf
stat): the case's node id is one argument, counters are off in the child (the profiler counts),
references are not saved and the child's run file goes where the caller says."""
from __future__ import annotations

import sys
from typing import Sequence


def pytest_case_argv(nodeid: str, run_out: str, *, python: str | None = None, target: str | None = None,
                     extra: Sequence[str] = ()) -> list[str]:
    """``python -m pytest NODEID`` for one case, quick, with the child's counters off."""
    argv = [python or sys.executable, "-m", "pytest", nodeid, "-p", "no:cacheprovider", "-q", "--charz-quick",
            "--charz-counters=off", "--charz-no-save", f"--charz-out={run_out}"]
    if target:
        argv.append(f"--target={target}")
    return argv + list(extra)
