"""The run file: a versioned JSON record of one characterization run.

Cases are journaled as they finish (``<run>.partial.jsonl``, one JSON line each) so a session
that is interrupted, or killed, keeps the cases already measured; at the end the run is written
whole, atomically. ``load_run`` accepts a finished run file or a left-over journal (also when
given the run file's own path, so a run whose final write failed loads from its journal).
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import IO

from .errors import FormatError, UsageError
from .formats import RUN, atomic_write_json, read_json
from .records import CaseRecord, Run

__all__ = ["Run", "RunWriter", "check_writable", "journal_path", "load_journal", "load_run", "merge_runs"]


def journal_path(path: str) -> str:
    return path + ".partial.jsonl"


def check_writable(path: str) -> None:
    """Raise UsageError early when the run file's directory cannot be created or written."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the directory for the run file {path!r}: {exc.strerror}") from None
    if os.path.isdir(path):
        raise UsageError(f"the run file path {path!r} is a directory")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"cannot write the run file {path!r}: directory {directory!r} is not writable")


class RunWriter:
    """Journals cases as they come and writes the whole run at the end.

    A journal the file system refuses (a read-only directory, a full disk) never stops the
    session: the cases stay in memory, :attr:`journal_error` says what happened and
    :attr:`journaled` how many cases the journal holds. With ``journal=False`` there is no
    journal and no check of ``path`` (a last resort that keeps the cases in memory only).
    :attr:`journaling` says whether a journal was opened."""

    def __init__(self, path: str, run: Run, *, journal: bool = True) -> None:
        self.path = path
        self._header = run
        self._cases: list[CaseRecord] = list(run.cases)
        self._status = run.status
        self.journal_error: OSError | None = None
        self.journaled = 0
        self._journal: IO[str] | None = None
        self.journaling = False
        if not journal:
            return
        check_writable(path)
        try:
            self._journal = open(journal_path(path), "w", encoding="utf-8")
            self._journal.write(json.dumps(run.header()) + "\n")
            self._journal.flush()
            self.journaling = True
        except OSError as exc:
            self._journal_failed(exc)
            with contextlib.suppress(OSError):    # a journal without its header line is of no use to anyone
                os.unlink(journal_path(path))
        for case in self._cases:
            self._journal_case(case)

    @property
    def run(self) -> Run:
        """The run as recorded so far (after :meth:`finish`: as written)."""
        return self._header.with_cases(tuple(self._cases), self._status)

    @property
    def journal_path(self) -> str:
        return journal_path(self.path)

    @property
    def journal_complete(self) -> bool:
        """Whether the journal holds every case recorded so far."""
        return self.journal_error is None and self.journaling and self.journaled == len(self._cases)

    def add_case(self, case: CaseRecord) -> None:
        """Keep ``case`` and append it to the journal (a failed journal write is noted, not raised)."""
        self._cases.append(case)
        self._journal_case(case)

    def _journal_case(self, case: CaseRecord) -> None:
        if self._journal is None:
            return
        try:
            self._journal.write(json.dumps(case.to_json()) + "\n")
            self._journal.flush()
        except OSError as exc:
            self._journal_failed(exc)
            return
        self.journaled += 1

    def _journal_failed(self, error: OSError) -> None:
        # Stop journaling: a line after a failed one would leave a hole; what was flushed stays
        # readable (a torn last line is dropped by load_journal).
        self.journal_error = error
        journal, self._journal = self._journal, None
        if journal is not None:
            with contextlib.suppress(OSError):
                journal.close()

    def finish(self, status: str) -> None:
        """Write the whole run to :attr:`path` atomically and remove the journal. The error of
        that write propagates (an ``OSError``, or the UsageError of
        :func:`~pytest_charz.formats.atomic_write_json`); the journal is then left in place
        (closed), and ``load_run(journal_path(path))`` reads the cases it holds."""
        self._status = status
        journal, self._journal = self._journal, None
        if journal is not None:
            try:
                journal.close()
            except OSError as exc:
                self.journal_error = exc
        atomic_write_json(self.path, self.run.to_json())
        with contextlib.suppress(OSError):
            os.unlink(journal_path(self.path))


def load_run(path: str) -> Run:
    """Load a run file (plain or ``.gz``, or the journal of an interrupted run), checked and
    migrated to the current version."""
    if path.endswith(".partial.jsonl"):
        return load_journal(path)
    if not os.path.exists(path) and os.path.exists(journal_path(path)):
        return load_journal(journal_path(path))
    if not os.path.exists(path):
        raise FormatError(f"{path}: no such run file")
    return Run.from_json(read_json(path, RUN.what), path)


def load_journal(path: str) -> Run:
    """Rebuild a run from its journal; a torn last line (killed mid-write) is dropped."""
    with open(path) as handle:
        lines = handle.read().splitlines()
    if not lines:
        raise FormatError(f"{path}: empty run journal")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        raise FormatError(f"{path}: the journal's header line is not JSON") from None
    header = RUN.check(header, path)
    cases = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            cases.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise FormatError(f"{path}: line {number} is not JSON") from None
    return Run.from_parts(header, cases, path, status="interrupted")


def merge_runs(path: str, interrupted: bool = False) -> bool:
    """Merge the run files of pytest-xdist workers (``<root>.gw0.json``, ...) into ``path``.

    Cases are kept in node-id order; the workers' files are removed once the merged file is
    written. Returns False when there are no worker files."""
    import glob
    from dataclasses import replace

    root, ext = os.path.splitext(path)
    pattern = f"{glob.escape(root)}.gw*{ext or '.json'}"
    parts = sorted(p for p in glob.glob(pattern) if not p.endswith(".partial.jsonl"))
    journals = sorted(glob.glob(pattern + ".partial.jsonl"))
    runs = [load_run(p) for p in parts] + [load_journal(j) for j in journals]
    if not runs:
        return False
    first = runs[0]
    cases = tuple(sorted((c for run in runs for c in run.cases), key=lambda c: c.id))
    status = "interrupted" if interrupted or any(r.status != "complete" for r in runs) else "complete"
    provenance = {**first.provenance, "xdist_workers": [r.provenance.get("xdist_worker") for r in runs]}
    merged = replace(first, status=status, provenance=provenance, cases=cases)
    atomic_write_json(path, merged.to_json())
    for leftover in parts + journals:
        os.unlink(leftover)
    return True
