"""What a case's sensors read, as the run file keeps it: its counters (:class:`CounterReading`)
and its energy (:class:`EnergyReading`).

These are plain values with their versioned JSON forms, beside the clock and the conditions in
the measurement-sensor layer, so that the run file's records (:mod:`pytest_charz.records`) can
hold and read them without importing the collection that produces them
(:mod:`pytest_charz.evidence`, which sits above the records).

Run-file JSON of the counters (``formats.COUNTERS``)::

    {"kind": "charz-counters", "version": 1, "source": "perf_event_open", "per": "call",
     "calls": 12000, "values": {"instructions": 1.2e6, "task-clock-s": 3.1e-4, ...},
     "missing": {"cycles": "no PMU: ..."}, "notes": [...]}

Run-file JSON of the energy (``formats.ENERGY``)::

    {"kind": "charz-energy", "version": 1, "source": "rapl", "joules_per_call": 2.1e-3,
     "joules": 4.2, "calls": 2000, "interval_s": 0.11, "watts": 38.0, "missing": null}
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import FormatError
from ..formats import COUNTERS, ENERGY


@dataclass(frozen=True)
class CounterReading:
    """Counters of one case: ``values`` per call of the case (event name -> count; names ending
    ``-s`` are seconds, ``-bytes`` bytes), ``missing`` (event name -> why it was not counted),
    the ``source`` that counted (``perf_event_open``, ``perf-stat``, ``ncu``, ``cupti``,
    ``rocprofv3``), ``calls`` the calls the totals were divided by, and ``notes`` on how far the
    values can be trusted (multiplexing, threads not followed)."""

    values: Mapping[str, float]
    missing: Mapping[str, str]
    source: str
    calls: int = 0
    per: str = "call"
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {**COUNTERS.stamp(), "source": self.source, "per": self.per, "calls": self.calls,
                                "values": {k: float(v) for k, v in self.values.items()},
                                "missing": dict(self.missing)}
        if self.notes:
            data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CounterReading":
        data = COUNTERS.check(data, "a case's counters")
        try:
            values = {str(k): float(v) for k, v in (data.get("values") or {}).items()}
            missing = {str(k): str(v) for k, v in (data.get("missing") or {}).items()}
            return cls(values, missing, str(data["source"]), int(data.get("calls") or 0),
                       str(data.get("per") or "call"), tuple(str(n) for n in data.get("notes") or ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"a case's counters are malformed: {exc!r}") from None

    @classmethod
    def absent(cls, source: str, reasons: Mapping[str, str], notes: tuple[str, ...] = ()) -> "CounterReading":
        """A reading that counted nothing: every event with its reason."""
        return cls({}, dict(reasons), source, 0, "call", notes)


@dataclass(frozen=True)
class EnergyReading:
    """Energy of one case over its timed samples. ``joules_per_call`` is None when nothing was
    measured, and ``missing`` then says why."""

    source: str
    joules: float | None = None
    calls: int = 0
    interval_s: float | None = None
    missing: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def joules_per_call(self) -> float | None:
        if self.joules is None or self.calls <= 0 or not math.isfinite(self.joules):
            return None
        return self.joules / self.calls

    @property
    def watts(self) -> float | None:
        if self.joules is None or not self.interval_s:
            return None
        return self.joules / self.interval_s

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {**ENERGY.stamp(), "source": self.source, "joules_per_call": self.joules_per_call,
                                "joules": self.joules, "calls": self.calls, "interval_s": self.interval_s,
                                "watts": self.watts, "missing": self.missing}
        if self.notes:
            data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "EnergyReading":
        data = ENERGY.check(data, "a case's energy")
        try:
            joules = data.get("joules")
            interval = data.get("interval_s")
            return cls(str(data["source"]), float(joules) if joules is not None else None,
                       int(data.get("calls") or 0), float(interval) if interval is not None else None,
                       str(data["missing"]) if data.get("missing") is not None else None,
                       tuple(str(n) for n in data.get("notes") or ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"a case's energy is malformed: {exc!r}") from None
