"""The baseline store: per target and suite, each case's reference measurement and its history.

A directory store keeps ``<root>/<target-id>/<suite-module>.json`` (the suite module is the test
file's stem, e.g. ``test_memory``), versioned JSON meant to be reviewed in git::

    {"version": 1, "kind": "charz-baseline", "target": id, "suite": module,
     "cases": {case_id: {"reference": Reference, "band": {"lo", "hi", ...} | null,
                         "history": [{"time", "reason", "previous_median_s", "median_s",
                                      "provenance": {...}}]}}}

Rules: a case without a reference gets one with :meth:`put` (history reason ``"new case"``); a
reference is replaced only by :meth:`accept` with a stated reason, which is appended to the
history. Writes are atomic (temp file + rename); a file that is corrupt or of an unknown version
raises :class:`FormatError` naming the file and the problem, and nothing is written over it.
"""
from __future__ import annotations

import contextlib
import copy
import datetime
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from .errors import FormatError, UsageError
from .explain import conditions_summary, provenance_summary

if TYPE_CHECKING:
    from .targets.spec import TargetSpec

BASELINE_VERSION = 1
BASELINE_KIND = "charz-baseline"
MAX_REFERENCE_SAMPLES = 200
NEW_CASE_REASON = "new case"
# A reference settles once this many clean sessions measured it: one session on a shared or
# virtual machine can be an outlier (turbo state, neighbours), and a gate that judges against
# it raises false alarms. Until then the reference gathers sessions and drift is not judged.
REFERENCE_SESSIONS = 3
_SAMPLE_DIGITS = 7        # significant digits kept per sample: far below any timing noise


def thin_samples(samples_s: ArrayLike, limit: int = MAX_REFERENCE_SAMPLES) -> tuple[float, ...]:
    """At most ``limit`` samples, evenly spaced order statistics of ``samples_s`` (sorted).

    Keeps the distribution's shape (median, quantiles) for rank tests and bootstraps; with more
    than ``limit`` samples the kept set is a quantile grid, which makes tests on it conservative.
    """
    ordered = np.sort(np.asarray(samples_s, dtype=float))
    if ordered.size > limit:
        ordered = ordered[np.round(np.linspace(0, ordered.size - 1, limit)).astype(int)]
    return tuple(float(f"{v:.{_SAMPLE_DIGITS}g}") for v in ordered)


def _sanitize(name: str, what: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")
    if not cleaned:
        raise UsageError(f"{what} {name!r} gives an empty file name")
    return cleaned


def suite_module(suite: str) -> str:
    """The baseline file's name for a suite: the stem of its module path, sanitized."""
    stem = os.path.splitext(os.path.basename(suite.replace("\\", "/").rstrip("/")))[0]
    return _sanitize(stem, "suite")


def target_directory(target_id: str) -> str:
    return _sanitize(target_id, "target id")


def target_key(target_id: str, kind: str, name: str) -> str:
    """The baseline directory of a target. The host CPU is keyed by its model name, since
    references of one CPU say nothing about another."""
    if kind == "cpu" and target_id == "cpu":
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        return f"cpu-{slug}" if slug else "cpu"
    return target_id


def store_target_key(spec: "TargetSpec") -> str:
    return target_key(spec.id, spec.identity.kind, spec.identity.name)


def run_target_key(run: Mapping[str, Any]) -> str:
    """The baseline directory of the target a run file was measured on."""
    target = run.get("target") or {}
    return target_key(str(target.get("id", "")), str(target.get("kind", "")), str(target.get("name", "")))


def now_iso() -> str:
    from .measure import clock

    return datetime.datetime.fromtimestamp(clock.wall_time(), datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Reference:
    """A case's reference measurement: what later runs are compared with.

    ``conditions`` is :func:`~pytest_charz.explain.conditions_summary` and ``provenance``
    :func:`~pytest_charz.explain.provenance_summary` of the run that measured it.
    """

    median_s: float
    ci_s: tuple[float, float]
    samples_s: tuple[float, ...]
    noise_target: float
    mode: str
    op: str
    conditions: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    created: str = ""
    # Medians of the sessions that measured this reference (``median_s`` is their median);
    # empty for a reference of one session.
    session_medians_s: tuple[float, ...] = ()

    @property
    def sessions(self) -> int:
        return max(1, len(self.session_medians_s))

    @property
    def settled(self) -> bool:
        return self.sessions >= REFERENCE_SESSIONS

    @property
    def spread(self) -> float:
        """Largest relative distance of a session's median from the reference median: how far
        apart sessions of an unchanged case were measured (0 with one session)."""
        if len(self.session_medians_s) < 2:
            return 0.0
        return max(abs(m / self.median_s - 1.0) for m in self.session_medians_s)

    def with_session(self, other: "Reference") -> "Reference":
        """This reference with ``other`` (one more session of the same case) added: the median
        becomes the median of the session medians; the samples and CI kept are those of the
        session nearest to it."""
        medians = (self.session_medians_s or (self.median_s,)) + (other.median_s,)
        median = float(np.median(medians))
        own = float(np.median(self.samples_s))
        pick = other if abs(math.log(other.median_s / median)) < abs(math.log(own / median)) else self
        return Reference(median_s=median, ci_s=pick.ci_s, samples_s=pick.samples_s, noise_target=self.noise_target,
                         mode=self.mode, op=self.op, conditions=pick.conditions, provenance=self.provenance,
                         created=other.created, session_medians_s=tuple(medians))

    def __post_init__(self) -> None:
        if not (isinstance(self.median_s, (int, float)) and math.isfinite(self.median_s) and self.median_s > 0):
            raise UsageError(f"Reference.median_s must be a positive finite time, got {self.median_s!r}")
        if not self.samples_s:
            raise UsageError("a Reference needs at least one sample")
        object.__setattr__(self, "ci_s", (float(self.ci_s[0]), float(self.ci_s[1])))
        object.__setattr__(self, "samples_s", tuple(float(v) for v in self.samples_s))

    @classmethod
    def from_case(cls, case: Mapping[str, Any], provenance: Mapping[str, Any], created: str | None = None) -> "Reference":
        """The reference a measured case record (see docs/run-format.md) would leave."""
        measurement = case["measurement"]
        if not measurement.get("samples_s") or measurement.get("median_s") is None:
            raise UsageError(f"case {case.get('id')!r} has no kept samples to make a reference of")
        stamp = created if created is not None else now_iso()
        ci = measurement.get("ci_s") or (measurement["median_s"], measurement["median_s"])
        return cls(
            median_s=float(measurement["median_s"]),
            ci_s=(float(ci[0]), float(ci[1])),
            samples_s=thin_samples(measurement["samples_s"]),
            noise_target=float(measurement.get("noise_target", math.nan)),
            mode=str(measurement.get("mode", "")),
            op=str((case.get("work") or {}).get("op") or ""),
            conditions=conditions_summary(case.get("conditions") or {}),
            provenance=provenance_summary(provenance, created=stamp),
            created=stamp,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "median_s": self.median_s,
            "ci_s": list(self.ci_s),
            "samples_s": list(self.samples_s),
            "noise_target": self.noise_target,
            "mode": self.mode,
            "op": self.op,
            "conditions": copy.deepcopy(dict(self.conditions)),
            "provenance": copy.deepcopy(dict(self.provenance)),
            "created": self.created,
            "session_medians_s": list(self.session_medians_s),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "reference") -> "Reference":
        try:
            return cls(
                median_s=float(data["median_s"]),
                ci_s=(float(data["ci_s"][0]), float(data["ci_s"][1])),
                samples_s=tuple(float(v) for v in data["samples_s"]),
                noise_target=float(data["noise_target"]) if data.get("noise_target") is not None else math.nan,
                mode=str(data.get("mode", "")),
                op=str(data.get("op", "")),
                conditions=dict(data.get("conditions") or {}),
                provenance=dict(data.get("provenance") or {}),
                created=str(data.get("created", "")),
                session_medians_s=tuple(float(v) for v in data.get("session_medians_s") or ()),
            )
        except (KeyError, IndexError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"{source}: malformed reference ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class HistoryEntry:
    """One change of a case's reference, with its reason."""

    time: str
    reason: str
    previous_median_s: float | None
    median_s: float
    provenance: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "reason": self.reason, "previous_median_s": self.previous_median_s,
                "median_s": self.median_s, "provenance": dict(self.provenance)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str) -> "HistoryEntry":
        try:
            previous = data.get("previous_median_s")
            return cls(str(data["time"]), str(data["reason"]), None if previous is None else float(previous),
                       float(data["median_s"]), dict(data.get("provenance") or {}))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"{source}: malformed history entry ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class BaselineEntry:
    """Everything the store keeps for one case."""

    reference: Reference
    band: Mapping[str, Any] | None
    history: tuple[HistoryEntry, ...]

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference.to_json(), "band": dict(self.band) if self.band is not None else None,
                "history": [h.to_json() for h in self.history]}

    @classmethod
    def from_json(cls, data: Any, source: str) -> "BaselineEntry":
        if not isinstance(data, Mapping) or not isinstance(data.get("reference"), Mapping):
            raise FormatError(f"{source}: a case must be an object with a 'reference' object")
        band = data.get("band")
        if band is not None and not isinstance(band, Mapping):
            raise FormatError(f"{source}: 'band' must be an object or null, got {type(band).__name__}")
        history = data.get("history") or []
        if not isinstance(history, list):
            raise FormatError(f"{source}: 'history' must be a list")
        return cls(Reference.from_json(data["reference"], source), dict(band) if band is not None else None,
                   tuple(HistoryEntry.from_json(h, source) for h in history))


def _short_provenance(reference: Reference) -> dict[str, Any]:
    keep = ("libraries", "device_versions", "kernel", "python", "commit")
    return {k: copy.deepcopy(reference.provenance[k]) for k in keep if reference.provenance.get(k)}


def _check_reason(reason: str) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise UsageError(f"a change of a baseline needs a non-empty reason, got {reason!r}")
    return reason.strip()


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


class _DocumentStore:
    """The store's rules over whole suite documents; subclasses load and save documents."""

    def _load(self, target_id: str, module: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def _save(self, target_id: str, module: str, document: dict[str, Any]) -> None:
        raise NotImplementedError

    def _source(self, target_id: str, module: str) -> str:
        raise NotImplementedError

    def _checked(self, target_id: str, module: str) -> dict[str, Any] | None:
        document = self._load(target_id, module)
        if document is not None:
            source = self._source(target_id, module)
            check_document(document, source)
            if document.get("target") != target_id:
                raise FormatError(f"{source}: holds baselines of target {document.get('target')!r}, not {target_id!r}")
        return document

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
        with self._exclusive(target_id):
            return self._write_locked(target_id, suite_module(suite), case_id, reference, reason, band, replace)

    def _write_locked(self, target_id: str, module: str, case_id: str, reference: Reference, reason: str,
                      band: Mapping[str, Any] | None, replace: bool) -> BaselineEntry:
        source = self._source(target_id, module)
        document = self._checked(target_id, module) or {
            "version": BASELINE_VERSION, "kind": BASELINE_KIND, "target": target_id, "suite": module, "cases": {}}
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
        with self._exclusive(target_id):
            module = suite_module(suite)
            current = self.entry(target_id, module, case_id)
            if current is None:
                raise UsageError(f"case {case_id!r} has no reference to add a session to")
            if current.reference.settled:
                raise UsageError(f"the reference of {case_id!r} has settled; it changes only by accepting a reason")
            combined = current.reference.with_session(session)
            reason = f"reference session {combined.sessions} of {REFERENCE_SESSIONS}"
            return self._write_locked(target_id, module, case_id, combined, reason, None, True)


def check_document(document: Any, source: str) -> None:
    """Raise FormatError unless ``document`` is a baseline file this version reads."""
    if not isinstance(document, Mapping):
        raise FormatError(f"{source}: not a charz baseline (top level is {type(document).__name__})")
    if document.get("kind") != BASELINE_KIND:
        raise FormatError(f"{source}: not a charz baseline (kind={document.get('kind')!r})")
    if document.get("version") != BASELINE_VERSION:
        raise FormatError(f"{source}: baseline version {document.get('version')!r} is not supported "
                          f"(this pytest-charz reads version {BASELINE_VERSION})")
    if not isinstance(document.get("cases"), Mapping):
        raise FormatError(f"{source}: 'cases' is missing or not an object")


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
            identity = (status.st_ino, status.st_mtime_ns, status.st_size)
            cached = self._parsed.get(path)
            if cached is not None and cached[0] == identity:
                return cached[1]
            with open(path, encoding="utf-8") as handle:
                document: dict[str, Any] = json.load(handle)
        except FileNotFoundError:
            return None
        except json.JSONDecodeError as exc:
            raise FormatError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
        except UnicodeDecodeError as exc:
            raise FormatError(f"{path}: not UTF-8 text ({exc.reason})") from None
        self._parsed[path] = (identity, document)
        return document

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
        from .run import atomic_write_json

        atomic_write_json(self.path(target_id, module), document)

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


__all__ = ["BASELINE_VERSION", "BaselineEntry", "BaselineStore", "DirectoryStore", "HistoryEntry",
           "InMemoryStore", "NEW_CASE_REASON", "Reference", "check_document", "suite_module", "thin_samples"]
