"""The run file: a versioned JSON record of one characterization run.

Cases are journaled as they finish (``<run>.partial.jsonl``, one JSON line each) so a session
that is interrupted, or killed, keeps the cases already measured; at the end the run is written
whole, atomically. ``load_run`` accepts a finished run file or a left-over journal.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import FormatError, UsageError

RUN_VERSION = 1
RUN_KIND = "charz-run"


@dataclass
class Run:
    """A run being built or loaded. ``cases`` are plain JSON mappings (see ``plugin.case_record``)."""

    target: Mapping[str, Any]
    device: Mapping[str, Any]
    provenance: Mapping[str, Any]
    settings: Mapping[str, Any]
    created: str
    cases: list[dict[str, Any]] = field(default_factory=list)
    status: str = "running"            # "running", "complete", "interrupted", "failed"

    def header(self) -> dict[str, Any]:
        return {
            "version": RUN_VERSION,
            "kind": RUN_KIND,
            "created": self.created,
            "status": self.status,
            "target": dict(self.target),
            "device": dict(self.device),
            "provenance": dict(self.provenance),
            "settings": dict(self.settings),
        }

    def to_json(self) -> dict[str, Any]:
        return {**self.header(), "cases": list(self.cases)}


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


def atomic_write_json(path: str, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temp file in the same directory + rename)."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=False, allow_nan=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp makes the file private (0600); a report or baseline is as readable as any file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class RunWriter:
    """Journals cases as they come and writes the whole run at the end."""

    def __init__(self, path: str, run: Run) -> None:
        self.path = path
        self.run = run
        check_writable(path)
        self._journal = open(journal_path(path), "w")
        self._journal.write(json.dumps(run.header()) + "\n")
        self._journal.flush()

    def add_case(self, case: dict[str, Any]) -> None:
        self.run.cases.append(case)
        self._journal.write(json.dumps(case) + "\n")
        self._journal.flush()

    def finish(self, status: str) -> None:
        self.run.status = status
        atomic_write_json(self.path, self.run.to_json())
        self._journal.close()
        try:
            os.unlink(journal_path(self.path))
        except OSError:
            pass


def _check_header(data: Mapping[str, Any], source: str) -> None:
    if not isinstance(data, Mapping):
        raise FormatError(f"{source}: not a charz run (top level is {type(data).__name__})")
    if data.get("kind") != RUN_KIND:
        raise FormatError(f"{source}: not a charz run (kind={data.get('kind')!r})")
    version = data.get("version")
    if version != RUN_VERSION:
        raise FormatError(f"{source}: run file version {version!r} is not supported (this pytest-charz reads version {RUN_VERSION})")


def load_run(path: str) -> dict[str, Any]:
    """Load a run file (or the journal of an interrupted run) as a JSON mapping, checked."""
    if path.endswith(".partial.jsonl"):
        return load_journal(path)
    try:
        with open(path) as handle:
            data = json.load(handle)
    except FileNotFoundError:
        if os.path.exists(journal_path(path)):
            return load_journal(journal_path(path))
        raise FormatError(f"{path}: no such run file") from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    _check_header(data, path)
    if not isinstance(data.get("cases"), list):
        raise FormatError(f"{path}: 'cases' is missing or not a list")
    return data


def load_journal(path: str) -> dict[str, Any]:
    """Rebuild a run from its journal; a torn last line (killed mid-write) is dropped."""
    with open(path) as handle:
        lines = handle.read().splitlines()
    if not lines:
        raise FormatError(f"{path}: empty run journal")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        raise FormatError(f"{path}: the journal's header line is not JSON") from None
    _check_header(header, path)
    cases = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            cases.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise FormatError(f"{path}: line {number} is not JSON") from None
    return {**header, "status": "interrupted", "cases": cases}


def merge_runs(path: str, interrupted: bool = False) -> bool:
    """Merge the run files of pytest-xdist workers (``<root>.gw0.json``, ...) into ``path``.

    Cases are kept in node-id order; the workers' files are removed once the merged file is
    written. Returns False when there are no worker files."""
    import glob

    root, ext = os.path.splitext(path)
    pattern = f"{glob.escape(root)}.gw*{ext or '.json'}"
    parts = sorted(p for p in glob.glob(pattern) if not p.endswith(".partial.jsonl"))
    journals = sorted(glob.glob(pattern + ".partial.jsonl"))
    runs = [load_run(p) for p in parts] + [load_journal(j) for j in journals]
    if not runs:
        return False
    first = runs[0]
    cases = sorted((c for run in runs for c in run["cases"]), key=lambda c: c["id"])
    status = "interrupted" if interrupted or any(r["status"] != "complete" for r in runs) else "complete"
    provenance = {**first["provenance"], "xdist_workers": [r["provenance"].get("xdist_worker") for r in runs]}
    merged = {**first, "status": status, "provenance": provenance, "cases": cases}
    atomic_write_json(path, merged)
    for leftover in parts + journals:
        os.unlink(leftover)
    return True
