"""Versioned JSON formats: one constant per format, one loader, one atomic writer.

Every JSON document pytest-charz writes carries ``kind`` and ``version`` at its top level, and so
does every typed record nested inside one (a case's ``Work``, ``Measurement``, ``Prediction``,
``Verdict``, the ``TargetSpec`` of a run). :meth:`Format.load` reads a file (plain or gzip),
checks both, migrates an older version where a migration is registered, and names the file in
every error (a truncated gzip file included); :func:`atomic_write_json` refuses a document without
them, so an unversioned file is never written, and one holding NaN or infinity (naming the key;
the commands' JSON on stdout goes through the same :func:`dumps_json`). The writers refuse a directory
where a file goes and leave no temporary file behind. Nothing here knows what a document means.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import tempfile
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .errors import FormatError, UsageError

Migration = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Format:
    """A versioned JSON format: its ``kind`` string, the ``version`` this code writes, and
    migrations from older versions (``{old_version: fn(document) -> document of old + 1}``)."""

    kind: str
    version: int
    what: str
    migrations: dict[int, Migration] = field(default_factory=dict, compare=False, hash=False)

    def stamp(self) -> dict[str, Any]:
        """The ``kind`` and ``version`` keys a document of this format starts with."""
        return {"kind": self.kind, "version": self.version}

    def migrate_from(self, version: int) -> Callable[[Migration], Migration]:
        """Decorator registering the migration of documents of ``version`` to ``version + 1``."""
        def register(fn: Migration) -> Migration:
            self.migrations[version] = fn
            return fn
        return register

    def check(self, data: Any, source: str) -> dict[str, Any]:
        """``data`` as a document of this format at the current version (migrated when older).

        FormatError, naming ``source``, for another kind, an unknown version or a top level that
        is not an object."""
        if not isinstance(data, Mapping):
            raise FormatError(f"{source}: not a {self.what} (top level is {type(data).__name__})")
        if data.get("kind") != self.kind:
            raise FormatError(f"{source}: not a {self.what} (kind={data.get('kind')!r}, expected {self.kind!r})")
        document = dict(data)
        version = document.get("version")
        while isinstance(version, int) and version < self.version and version in self.migrations:
            document = self.migrations[version](document)
            document["version"] = version = version + 1
        if version != self.version:
            raise FormatError(f"{source}: {self.what} version {data.get('version')!r} is not supported "
                              f"(this pytest-charz reads version {self.version})")
        return document

    def check_nested(self, data: Any, source: str) -> Mapping[str, Any]:
        """A record nested in a document: checked like :meth:`check` when it is stamped; an
        unstamped one (written before records carried their own stamp) is taken as version 1."""
        if isinstance(data, Mapping) and "kind" not in data:
            if data.get("version", 1) != 1 or self.version != 1:
                raise FormatError(f"{source}: unstamped {self.what} where version {self.version} is expected")
            return data
        return self.check(data, source)

    def load(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Read and check the document at ``path`` (``.gz`` files are decompressed)."""
        return self.check(read_json(path, self.what), os.fspath(path))


def read_json(path: str | os.PathLike[str], what: str = "JSON file") -> Any:
    """Parse the JSON file at ``path`` (plain or gzip); FormatError naming the file otherwise.

    A gzip stream that ends early (a copy cut short), a damaged one, and text that is not JSON
    are all "truncated or corrupt", never a decoder's traceback."""
    name = os.fspath(path)
    opener: Any = gzip.open if name.endswith(".gz") else open
    try:
        with opener(name, "rt", encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise FormatError(f"{name}: no such {what}") from None
    except IsADirectoryError:
        raise FormatError(f"{name}: is a directory, not a {what}") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise FormatError(f"{name}: truncated or corrupt {what}: the gzip data is incomplete or damaged "
                          f"({exc}); copy or write the file again") from None
    except OSError as exc:
        raise FormatError(f"{name}: cannot be read ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise FormatError(f"{name}: truncated or corrupt {what}: not valid JSON "
                          f"({getattr(exc, 'msg', exc)}{where})") from None


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse one of the project's data files (a target of the catalogue, a model configuration);
    SpecError naming the file when it cannot be read or is not valid TOML."""
    import sys

    from .errors import SpecError

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise SpecError(f"{name}: cannot be read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{name}: is not valid TOML ({exc})") from None


def check_stamped(data: Any) -> None:
    """Raise ValueError unless ``data`` is a mapping with top-level ``kind`` and ``version``."""
    if not isinstance(data, Mapping) or not isinstance(data.get("kind"), str) or "version" not in data:
        raise ValueError("pytest-charz writes only documents with a top-level 'kind' and 'version'")


def non_finite_key(data: Any, where: str = "") -> tuple[str, float] | None:
    """The path (``points[3].latency_s``) and value of the first NaN or infinity in ``data``
    (nested mappings, lists and tuples), or None when every number is finite."""
    if isinstance(data, float):
        return None if math.isfinite(data) else (where or "the value", data)
    if isinstance(data, Mapping):
        for key, value in data.items():
            found = non_finite_key(value, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    elif isinstance(data, (list, tuple)):
        for index, value in enumerate(data):
            found = non_finite_key(value, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def dumps_json(data: Any, source: str = "the JSON output", *, indent: int | None = 1) -> str:
    """``data`` as JSON text with no ``NaN`` or ``Infinity`` token (no JSON parser but Python's
    reads them, and a number that is not finite is a wrong answer, not a figure).

    FormatError naming ``source`` and the key of the first non-finite number; TypeError, as
    :func:`json.dumps`, for a value JSON cannot hold."""
    try:
        return json.dumps(data, indent=indent, allow_nan=False)
    except ValueError:
        found = non_finite_key(data)
        if found is None:
            raise
        key, value = found
        raise FormatError(f"{source}: not written: {key} is {value!r}, and a JSON document holds only "
                          "finite numbers") from None


def check_output_file(path: str, option: str = "the output path") -> str:
    """``path`` if a file can be written there: UsageError when it is a directory, or when
    what should be its directory is a file."""
    if os.path.isdir(path):
        raise UsageError(f"{option} {path!r} is a directory; give the path of the file to write")
    _check_parent_directories(os.path.dirname(os.path.abspath(path)), option, path)
    return path


def check_output_directory(path: str, option: str = "the output directory") -> str:
    """``path`` if it is a directory or can be made one: UsageError when it, or a directory
    above it, is a file."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{option} {path!r} is a file, not a directory; give a directory to write into "
                         "(it is created when missing)")
    _check_parent_directories(os.path.abspath(path), option, path)
    return path


def check_file_name(name: str, option: str = "--name") -> str:
    """``name`` if it is a plain file name, so what is written stays inside the directory given:
    UsageError for a name with a directory part, ``.`` or ``..``, or nothing at all."""
    separators = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    if not name or name in (".", "..") or any(sep in name for sep in separators) or "\0" in name:
        raise UsageError(f"{option} must be a plain file name, without a directory or '..' (the files go in "
                         f"the output directory, -o); got {name!r}")
    return name


def _check_parent_directories(directory: str, option: str, path: str) -> None:
    probe = directory
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if probe and os.path.exists(probe) and not os.path.isdir(probe):
        raise UsageError(f"{option} {path!r} cannot be written: {probe!r} is a file, not a directory")


def atomic_write_json(path: str, data: Any) -> None:
    """Write the document ``data`` (stamped with ``kind`` and ``version``) to ``path``
    atomically: a temporary file in the same directory, then a rename.

    FormatError, before anything is written, for a NaN or infinity in ``data`` (naming its key);
    UsageError when ``path`` is a directory or cannot be written."""
    check_stamped(data)
    _write_atomically(path, dumps_json(data, path) + "\n")


def atomic_write_text(path: str, text: str) -> None:
    """Write a report's text to ``path`` atomically (a temporary file in the same directory, then a
    rename); UsageError when ``path`` is a directory or cannot be written, leaving nothing behind."""
    _write_atomically(path, text)


def _write_atomically(path: str, text: str) -> None:
    check_output_file(path)
    directory = os.path.dirname(os.path.abspath(path)) or "."
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.splitext(path)[1] or ".tmp", dir=directory)
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp makes the file private (0600); a report or baseline is as readable as any file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from exc
        raise


# -- the formats ----------------------------------------------------------------------------------
# Documents (files).
RUN = Format("charz-run", 2, "charz run")
PROFILE = Format("charz-profile", 1, "charz profile")
CALIBRATION = Format("charz-calibration", 2, "charz calibration file")
VALIDATION = Format("charz-validation", 1, "charz validation report")
BASELINE = Format("charz-baseline", 1, "charz baseline")
GRAPH = Format("charz-graph", 1, "charz workload graph")
GRAPH_PREDICTION = Format("charz-graph-prediction", 1, "charz workload graph prediction")
COMPARISON = Format("charz-comparison", 1, "charz comparison")
BOTTLENECKS = Format("charz-bottlenecks", 1, "charz bottleneck report")
SIM_RESULT = Format("charz-sim-result", 1, "charz simulation result")
# Records nested in documents.
CASE = Format("charz-case", 1, "case record")
WORK = Format("charz-work", 1, "Work record")
MEASUREMENT = Format("charz-measurement", 1, "Measurement record")
PREDICTION = Format("charz-prediction", 1, "Prediction record")
VERDICT = Format("charz-verdict", 1, "Verdict record")
TARGET_SPEC = Format("charz-target-spec", 1, "TargetSpec record")
DEVICE_INFO = Format("charz-device", 1, "device record")
COUNTERS = Format("charz-counters", 1, "counters record")
ENERGY = Format("charz-energy", 1, "energy record")
