"""The baseline store: per target and suite, one versioned JSON document of references.

A directory store keeps ``<root>/<target-id>/<suite-module>.json`` (the suite module is the test
file's stem, e.g. ``test_memory``), versioned JSON (``formats.BASELINE``) meant to be reviewed in
git::

    {"version": 1, "kind": "charz-baseline", "target": id, "suite": module,
     "cases": {case_id: {"reference": Reference, "band": {"lo", "hi", ...} | null,
                         "history": [{"time", "reason", "previous_median_s", "median_s",
                                      "provenance": {...}}]}}}

Rules: a case without a reference gets one with :meth:`put` (history reason ``"new case"``); a
reference is replaced only by :meth:`accept` with a stated reason, which is appended to the
history. Writes are atomic (temp file + rename); a file that is corrupt or of an unknown version
raises :class:`FormatError` naming the file and the problem, and nothing is written over it. A
write the file system refuses (a read-only directory, a full disk, any ``OSError``) raises
:class:`StoreWriteError` naming the file and the OS error; the stored file is then unchanged.
"""
from __future__ import annotations

import abc
import contextlib
import copy
import errno
import json
import os
from typing import Any, Iterator, Mapping, Protocol, runtime_checkable

from ..errors import CharzError, FormatError, UsageError
from ..formats import BASELINE, atomic_write_json, read_json
from .keys import suite_module, target_directory
from .reference import NEW_CASE_REASON, REFERENCE_SESSIONS, BaselineEntry, HistoryEntry, Reference, now_iso


class StoreWriteError(CharzError, OSError):
    """A baseline file could not be written: ``path`` is the file, ``error`` what stopped the
    write (the file system's ``OSError``, or the UsageError of an atomic write that reports
    one). The store is as it was before the write. An ``OSError`` too, as the failure it wraps."""

    def __init__(self, path: str, error: BaseException) -> None:
        self.path = path
        self.error = error
        super().__init__(f"cannot write the baseline file {path}: {write_error_text(error)}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.error))


def write_error_text(error: BaseException) -> str:
    """Why a write failed, in the file system's words and without the temporary file's name:
    ``Read-only file system (EROFS)``. An error raised while handling an ``OSError`` (a write
    that reports the failure as a UsageError) is read through to that ``OSError``."""
    cause: BaseException | None = error
    seen: set[int] = set()
    while cause is not None and not isinstance(cause, OSError) and id(cause) not in seen:
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    if cause is not None and not isinstance(cause, OSError):
        cause = None
    if isinstance(cause, StoreWriteError):
        return write_error_text(cause.error)
    if cause is None:
        return str(error)
    name = errno.errorcode.get(cause.errno) if isinstance(cause.errno, int) else None
    text = cause.strerror or str(cause) or type(cause).__name__
    return f"{text} ({name})" if name else text


def _short_provenance(reference: Reference) -> dict[str, Any]:
    keep = ("libraries", "device_versions", "kernel", "python", "commit")
    return {k: copy.deepcopy(reference.provenance[k]) for k in keep if reference.provenance.get(k)}


def _check_reason(reason: str) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise UsageError(f"a change of a baseline needs a non-empty reason, got {reason!r}")
    return reason.strip()


def check_document(document: Any, source: str) -> dict[str, Any]:
    """``document`` as a baseline file this version reads; FormatError naming ``source`` otherwise."""
    checked = BASELINE.check(document, source)
    if not isinstance(checked.get("cases"), Mapping):
        raise FormatError(f"{source}: 'cases' is missing or not an object")
    return checked


def _new_document(target_id: str, module: str) -> dict[str, Any]:
    # "version" first, as baseline files have always been written: reviewed files keep their diffs small.
    return {"version": BASELINE.version, "kind": BASELINE.kind, "target": target_id, "suite": module, "cases": {}}


@runtime_checkable
class BaselineStore(Protocol):
    """Where references live. ``suite`` is a module path or name; stores key files by its stem."""

    def get(self, target_id: str, suite: str, case_id: str) -> Reference | None: ...

    def entry(self, target_id: str, suite: str, case_id: str) -> BaselineEntry | None: ...

    def put(self, target_id: str, suite: str, case_id: str, reference: Reference,
            reason: str = NEW_CASE_REASON, band: Mapping[str, Any] | None = None) -> BaselineEntry: ...

    def accept(self, target_id: str, suite: str, case_id: str, reference: Reference,
               reason: str, band: Mapping[str, Any] | None = None) -> BaselineEntry: ...

    def add_session(self, target_id: str, suite: str, case_id: str, session: Reference) -> BaselineEntry: ...

    def suites(self, target_id: str) -> tuple[str, ...]: ...


class _DocumentStore(abc.ABC):
    """The store's rules over whole suite documents; subclasses load and save documents."""

    @abc.abstractmethod
    def _load(self, target_id: str, module: str) -> dict[str, Any] | None:
        """The suite document of ``module`` under ``target_id``, or None when there is none."""

    @abc.abstractmethod
    def _save(self, target_id: str, module: str, document: dict[str, Any]) -> None:
        """Write the suite document (atomically where the medium allows)."""

    @abc.abstractmethod
    def _source(self, target_id: str, module: str) -> str:
        """Where the document lives, for error messages."""

    def _checked(self, target_id: str, module: str) -> dict[str, Any] | None:
        document = self._load(target_id, module)
        if document is None:
            return None
        source = self._source(target_id, module)
        checked = check_document(document, source)
        if checked.get("target") != target_id:
            raise FormatError(f"{source}: holds baselines of target {checked.get('target')!r}, not {target_id!r}")
        return checked

    def entry(self, target_id: str, suite: str, case_id: str) -> BaselineEntry | None:
        module = suite_module(suite)
        document = self._checked(target_id, module)
        if document is None or case_id not in document["cases"]:
            return None
        return BaselineEntry.from_json(document["cases"][case_id], f"{self._source(target_id, module)} case {case_id!r}")

    def get(self, target_id: str, suite: str, case_id: str) -> Reference | None:
        found = self.entry(target_id, suite, case_id)
        return found.reference if found is not None else None

    @contextlib.contextmanager
    def _exclusive(self, target_id: str) -> Iterator[None]:
        """Held around a read-modify-write of one target's documents."""
        yield

    def _write(self, target_id: str, suite: str, case_id: str, reference: Reference, reason: str,
               band: Mapping[str, Any] | None, replace: bool) -> BaselineEntry:
        reason = _check_reason(reason)
        module = suite_module(suite)
        try:
            with self._exclusive(target_id):
                return self._write_locked(target_id, module, case_id, reference, reason, band, replace)
        except StoreWriteError:
            raise
        except OSError as exc:
            raise StoreWriteError(self._source(target_id, module), exc) from None

    def _write_locked(self, target_id: str, module: str, case_id: str, reference: Reference, reason: str,
                      band: Mapping[str, Any] | None, replace: bool) -> BaselineEntry:
        source = self._source(target_id, module)
        document = self._checked(target_id, module) or _new_document(target_id, module)
        previous = None
        if case_id in document["cases"]:
            previous = BaselineEntry.from_json(document["cases"][case_id], f"{source} case {case_id!r}")
            if not replace:
                raise UsageError(
                    f"{source}: case {case_id!r} already has a reference (median {previous.reference.median_s:.6g} s); "
                    "it is replaced only by accepting a change with a reason")
        history = previous.history if previous is not None else ()
        entry = BaselineEntry(
            reference=reference,
            band=dict(band) if band is not None else (previous.band if previous is not None else None),
            history=history + (HistoryEntry(
                time=reference.created or now_iso(), reason=reason,
                previous_median_s=previous.reference.median_s if previous is not None else None,
                median_s=reference.median_s, provenance=_short_provenance(reference)),),
        )
        cases = dict(document["cases"])
        cases[case_id] = entry.to_json()
        document = {**document, "cases": {k: cases[k] for k in sorted(cases)}}
        self._save(target_id, module, document)
        return entry

    def put(self, target_id: str, suite: str, case_id: str, reference: Reference,
            reason: str = NEW_CASE_REASON, band: Mapping[str, Any] | None = None) -> BaselineEntry:
        """Save the reference of a case that has none; raises UsageError if it has one."""
        return self._write(target_id, suite, case_id, reference, reason, band, replace=False)

    def accept(self, target_id: str, suite: str, case_id: str, reference: Reference,
               reason: str, band: Mapping[str, Any] | None = None) -> BaselineEntry:
        """Make ``reference`` the case's reference for ``reason`` (appended to its history).
        ``band`` None keeps the stored band."""
        return self._write(target_id, suite, case_id, reference, reason, band, replace=True)

    def add_session(self, target_id: str, suite: str, case_id: str, session: Reference) -> BaselineEntry:
        """Add one more session to a reference that has not settled yet (see REFERENCE_SESSIONS);
        a settled reference changes only by :meth:`accept`."""
        module = suite_module(suite)
        try:
            with self._exclusive(target_id):
                current = self.entry(target_id, module, case_id)
                if current is None:
                    raise UsageError(f"case {case_id!r} has no reference to add a session to")
                if current.reference.settled:
                    raise UsageError(f"the reference of {case_id!r} has settled; it changes only by accepting a reason")
                combined = current.reference.with_session(session)
                reason = f"reference session {combined.sessions} of {REFERENCE_SESSIONS}"
                return self._write_locked(target_id, module, case_id, combined, reason, None, True)
        except StoreWriteError:
            raise
        except OSError as exc:
            raise StoreWriteError(self._source(target_id, module), exc) from None


class DirectoryStore(_DocumentStore):
    """Baselines as ``<root>/<target-id>/<suite-module>.json`` files."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)
        # Parsed documents by path, with the file identity they were parsed from: each case of a
        # session reads its suite's file, which changes only when a reference is written.
        self._parsed: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}

    def path(self, target_id: str, suite: str) -> str:
        return os.path.join(self.root, target_directory(target_id), suite_module(suite) + ".json")

    def _source(self, target_id: str, module: str) -> str:
        return self.path(target_id, module)

    def _load(self, target_id: str, module: str) -> dict[str, Any] | None:
        path = self.path(target_id, module)
        try:
            status = os.stat(path)
        except FileNotFoundError:
            return None
        identity = (status.st_ino, status.st_mtime_ns, status.st_size)
        cached = self._parsed.get(path)
        if cached is not None and cached[0] == identity:
            return cached[1]
        document = read_json(path, BASELINE.what)
        self._parsed[path] = (identity, document)
        return document  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def _exclusive(self, target_id: str) -> Iterator[None]:
        # pytest-xdist workers on several devices of one target share its suite files: a lock on
        # the target's directory keeps their read-modify-writes from losing each other's cases.
        directory = os.path.join(self.root, target_directory(target_id))
        os.makedirs(directory, exist_ok=True)
        try:
            import fcntl
        except ImportError:      # no flock on this platform: writes stay atomic, not serialized
            yield
            return
        fd = os.open(directory, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)         # closing releases the lock

    def _save(self, target_id: str, module: str, document: dict[str, Any]) -> None:
        path = self.path(target_id, module)
        try:
            atomic_write_json(path, document)
        except (OSError, UsageError) as exc:   # an atomic write may report the OSError as a UsageError
            raise StoreWriteError(path, exc) from None

    def suites(self, target_id: str) -> tuple[str, ...]:
        directory = os.path.join(self.root, target_directory(target_id))
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return ()
        return tuple(sorted(n[:-5] for n in names if n.endswith(".json") and not n.startswith(".")))


class InMemoryStore(_DocumentStore):
    """Baselines kept in memory as the same JSON documents a directory store writes."""

    def __init__(self) -> None:
        self.documents: dict[tuple[str, str], dict[str, Any]] = {}

    def _source(self, target_id: str, module: str) -> str:
        return f"<memory>/{target_directory(target_id)}/{module}.json"

    def _load(self, target_id: str, module: str) -> dict[str, Any] | None:
        document = self.documents.get((target_directory(target_id), module))
        return copy.deepcopy(document) if document is not None else None

    def _save(self, target_id: str, module: str, document: dict[str, Any]) -> None:
        # Round-trip through JSON so the memory store accepts exactly what a file would hold.
        self.documents[(target_directory(target_id), module)] = json.loads(json.dumps(document))

    def suites(self, target_id: str) -> tuple[str, ...]:
        directory = target_directory(target_id)
        return tuple(sorted(module for target, module in self.documents if target == directory))


__all__ = ["BaselineStore", "DirectoryStore", "InMemoryStore", "StoreWriteError", "check_document", "write_error_text"]
