"""The run file of a session: where it goes, journaling cases as they finish, the end of the
run, the copy of the latest run of its scope (``latest.json`` for a full run, ``latest-smoke.json``
for any other: :mod:`pytest_charz.scope`), and merging the files of pytest-xdist workers.

Nothing measured is lost to the file system: a run path that cannot be written sends the run to
the temporary directory instead, a run file that cannot be written at the end leaves its journal
(which :func:`pytest_charz.run.load_run` reads), and each such failure becomes one line of
:attr:`RunRecorder.problems` (the terminal summary shows them), never an exception in a case."""
from __future__ import annotations

import os
import tempfile
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


def fallback_run_path(path: str) -> str:
    """Where a run goes when ``path`` cannot be written: the temporary directory, under a name
    made of ``path``'s own and this process's id (so two sessions never share one)."""
    stem, ext = os.path.splitext(os.path.basename(path))
    return os.path.join(tempfile.gettempdir(), f"charz-{stem or 'run'}-{os.getpid()}{ext or '.json'}")


def _why(error: BaseException) -> str:
    from .store import write_error_text

    return write_error_text(error)


class RunRecorder:
    """Keeps one session's run file. ``start`` makes the run's header when the first case is
    recorded (a session that measures nothing writes nothing). :attr:`problems` lists, one line
    each, what could not be written and where the cases are instead."""

    def __init__(self, config: "pytest.Config", worker: str | None, start: Callable[[], "Run"]) -> None:
        self.config = config
        self.worker = worker
        self._start = start
        self.writer: "RunWriter | None" = None
        self.out_path: str | None = None
        self.written = False
        self.measured = 0
        self.problems: list[str] = []
        self._run_path: str | None = None
        #: The ``latest`` copy the run file went to (None until it is made).
        self.latest_path: str | None = None

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

    def _session_path(self) -> str:
        path = self.run_path()
        return worker_run_path(path, self.worker) if self.worker else path

    def _open(self) -> "RunWriter":
        """A writer for the session's run path; when that path cannot be written (no journal can
        be opened there), one for the fallback path; when neither can, one that keeps the cases
        in memory and tries the run path again at the end."""
        from dataclasses import replace

        from .run import RunWriter
        from .scope import scope_settings, smoke_reasons_of_config

        path = self._session_path()
        run = self._start()
        reasons = smoke_reasons_of_config(self.config, bool(run.settings.get("quick")))
        run = replace(run, settings={**run.settings, **scope_settings(reasons)})
        refused: list[tuple[str, str]] = []
        for candidate in (path, fallback_run_path(path)):
            try:
                writer = RunWriter(candidate, run)
            except UsageError as exc:
                refused.append((candidate, _why(exc)))
                continue
            if writer.journal_error is None:
                break
            refused.append((candidate, _why(writer.journal_error)))
        else:
            writer = RunWriter(path, run, journal=False)
        if len(refused) == 1:
            self.problems.append(f"charz: cannot write the run file {refused[0][0]}: {refused[0][1]}; "
                                 f"this run was recorded in {writer.path} instead")
        elif refused:
            self.problems.append(f"charz: cannot write the run file {refused[0][0]}: {refused[0][1]}, nor "
                                 f"{refused[1][0]}: {refused[1][1]}; the cases were kept in memory until the end")
        self.out_path = writer.path
        return writer

    def record(self, case: "CaseRecord") -> None:
        """Keep ``case`` in the run (journaled when the file system allows; never raises OSError)."""
        if self.writer is None:
            self.writer = self._open()
        self.writer.add_case(case)
        self.measured += 1

    @property
    def run(self) -> "Run":
        assert self.writer is not None, "no case was recorded"
        return self.writer.run

    def finish(self, interrupted: bool) -> None:
        """Write the run file. When that fails the journal is kept, a run the journal does not
        hold whole is written to the fallback path, and :attr:`problems` says where the cases
        are and how to load them."""
        writer = self.writer
        if writer is None or writer.run.status != "running":
            return
        try:
            writer.finish("interrupted" if interrupted else "complete")
        except (OSError, UsageError) as exc:
            self.problems.append(self._unwritten(writer, exc))
            return
        self.written = True
        if not self.worker and self.out_path == self.run_path():
            self.copy_to_latest(self.out_path, interrupted)

    def _unwritten(self, writer: "RunWriter", error: BaseException) -> str:
        """The problem line of a run file that could not be written, once the cases have been
        put where they can be (the journal, else the fallback path)."""
        from .formats import atomic_write_json

        total = len(writer.run.cases)
        lead = f"charz: the run file {writer.path} could not be written ({_why(error)})"
        if writer.journal_complete:
            journal = os.path.abspath(writer.journal_path)
            return (f"{lead}; its journal keeps all {total} cases: load it with "
                    f"pytest_charz.run.load_run({journal!r}), or pass that path to charz profile or charz validate")
        if writer.journaling:
            kept = (f"its journal {writer.journal_path} keeps {writer.journaled} of {total} cases"
                    + (f" ({_why(writer.journal_error)})" if writer.journal_error is not None else ""))
        else:
            kept = "there is no journal"
        fallback = fallback_run_path(writer.path)
        try:
            atomic_write_json(fallback, writer.run.to_json())
        except (OSError, UsageError) as again:
            return (f"{lead}; {kept}; nor could the whole run be written to {fallback} "
                    f"({_why(again)}): the other cases are only in the summary above")
        self.out_path = fallback
        self.written = True
        return f"{lead}; {kept}; the whole run was written to {fallback} instead"

    def copy_to_latest(self, path: str, interrupted: bool = False) -> None:
        """Copy the run file to the latest copy of its scope beside it (without --charz-out):
        ``latest.json`` for a full run that completed, ``latest-smoke.json`` for any other, so a
        smoke run never replaces the full run the README's commands read. Atomic: a copy that
        fails leaves the previous one and a line in :attr:`problems`."""
        if self.config.getoption("charz_out"):
            return
        from .formats import atomic_write_text
        from .scope import FULL, SMOKE, latest_name, smoke_reasons_of_config

        reasons = smoke_reasons_of_config(self.config, bool(self.config.getoption("charz_quick", False)))
        self.latest_path = latest = os.path.join(
            os.path.dirname(path), latest_name(SMOKE if reasons else FULL, interrupted))
        try:
            with open(path, encoding="utf-8") as written:
                atomic_write_text(latest, written.read())
        except (OSError, UsageError) as exc:
            self.problems.append(f"charz: {latest} was not updated ({_why(exc)}); the run file is {path}")

    def merge_workers(self, interrupted: bool) -> str | None:
        """On the pytest-xdist controller: merge the workers' run files into one run file. When
        the merged file cannot be written the workers' files are kept, and :attr:`problems` says so."""
        from .run import merge_runs

        path = self.run_path()
        try:
            merged = merge_runs(path, interrupted)
        except (OSError, UsageError) as exc:
            self.problems.append(f"charz: the workers' runs could not be merged into {path} "
                                 f"({_why(exc)}); each worker's run file or journal is kept beside it")
            return None
        if merged:
            self.copy_to_latest(path, interrupted)
        return path if merged else None
