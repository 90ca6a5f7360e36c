"""The one interface of counter sources, and the counters of a case in the run file.

A :class:`CounterSource` says which events it can count (:meth:`CounterSource.available`),
counts between :meth:`~CounterSource.start` and :meth:`~CounterSource.stop`, and reads its running
totals at any point in between (:meth:`~CounterSource.read`), so that the collector
(:mod:`.collect`) can add up the sampler's timed batches only. A case's counters are a frozen
:class:`CounterReading`: values per call of the case, and for every event asked for but not
counted, the reason.

Run-file JSON (``formats.COUNTERS``)::

    {"kind": "charz-counters", "version": 1, "source": "perf_event_open", "per": "call",
     "calls": 12000, "values": {"instructions": 1.2e6, "task-clock-s": 3.1e-4, ...},
     "missing": {"cycles": "no PMU: ..."}, "notes": [...]}
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

from ..errors import FormatError
from ..formats import COUNTERS


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


@runtime_checkable
class CounterSource(Protocol):
    """Counts events of this process (or of a profiled child). Implementations:
    :class:`.perf_events.PerfEventSource` (CPU, in process), :class:`.cupti.CuptiKernelSource`
    (NVIDIA kernels, in process); :mod:`.perf_stat`, :mod:`.ncu` and :mod:`.rocprof` re-run a case
    under the vendor's tool and parse what it writes."""

    name: str

    def available(self) -> tuple[tuple[str, ...], Mapping[str, str]]:
        """The events this source can count here, and the others it knows with why not."""
        ...

    def start(self) -> None:
        """Begin counting (idempotent; also picks up threads started since the last call)."""
        ...

    def read(self) -> Mapping[str, float]:
        """Running totals since :meth:`start`, event name -> count (cheap: called per batch)."""
        ...

    def stop(self) -> CounterReading:
        """Stop counting; the totals since :meth:`start` (``calls`` 1: not divided)."""
        ...


def per_call(totals: Mapping[str, float], calls: int) -> dict[str, float]:
    """Totals divided by ``calls`` (empty when no call was counted); non-finite totals dropped."""
    if calls <= 0:
        return {}
    return {name: value / calls for name, value in totals.items() if math.isfinite(value)}


def subtract(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    """``after - before`` per event (an event only in ``after`` counts from zero)."""
    return {name: value - before.get(name, 0.0) for name, value in after.items()}


def add_into(total: dict[str, float], delta: Mapping[str, float]) -> None:
    for name, value in delta.items():
        total[name] = total.get(name, 0.0) + value
