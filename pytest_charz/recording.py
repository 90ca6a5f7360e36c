"""The run file of a session: where it goes, journaling cases as they finish, the end of the
run, the ``latest.json`` copy, and merging the files of pytest-xdist workers."""
from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Callable

from .errors import UsageError

if TYPE_CHECKING:
    import pytest

    from .records import CaseRecord, Run
    from .run import RunWriter


def worker_run_path(path: str, worker: str) -> str:
    """The run file of pytest-xdist worker ``worker`` beside the session's ``path``."""
    root, ext = os.path.splitext(path)
    return f"{root}.{worker}{ext or '.json'}"


class RunRecorder:
    """Keeps one session's run file. ``start`` makes the run's header when the first case is
    recorded (a session that measures nothing writes nothing)."""

    def __init__(self, config: "pytest.Config", worker: str | None, start: Callable[[], "Run"]) -> None:
        self.config = config
        self.worker = worker
        self._start = start
        self.writer: "RunWriter | None" = None
        self.out_path: str | None = None
        self.measured = 0
        self._run_path: str | None = None

    def run_path(self) -> str:
        """Where this session's run goes: --charz-out, else a time-stamped file under .charz/runs.
        pytest-xdist workers get the controller's choice (see plugin.XdistHooks)."""
        workerinput = getattr(self.config, "workerinput", None)
        if workerinput and workerinput.get("charz_run_path"):
            return str(workerinput["charz_run_path"])
        if self._run_path is None:
            from .measure import clock

            self._run_path = self.config.getoption("charz_out") or os.path.join(
                str(self.config.rootpath), ".charz", "runs", f"run-{clock.local_stamp()}.json")
        return self._run_path

    def _open(self) -> "RunWriter":
        from .run import RunWriter

        path = self.run_path()
        if self.worker:
            path = worker_run_path(path, self.worker)
        try:
            writer = RunWriter(path, self._start())
        except (UsageError, OSError) as exc:
            raise UsageError(f"--charz-out: {exc}") from None
        self.out_path = path
        return writer

    def record(self, case: "CaseRecord") -> None:
        if self.writer is None:
            self.writer = self._open()
        self.writer.add_case(case)
        self.measured += 1

    @property
    def run(self) -> "Run":
        assert self.writer is not None, "no case was recorded"
        return self.writer.run

    def finish(self, interrupted: bool) -> None:
        if self.writer is None or self.writer.run.status != "running":
            return
        self.writer.finish("interrupted" if interrupted else "complete")
        if not self.worker and self.out_path:
            self.copy_to_latest(self.out_path)

    def copy_to_latest(self, path: str) -> None:
        if not self.config.getoption("charz_out"):
            shutil.copyfile(path, os.path.join(os.path.dirname(path), "latest.json"))

    def merge_workers(self, interrupted: bool) -> str | None:
        """On the pytest-xdist controller: merge the workers' run files into one run file."""
        from .run import merge_runs

        path = self.run_path()
        merged = merge_runs(path, interrupted)
        if merged:
            self.copy_to_latest(path)
        return path if merged else None
