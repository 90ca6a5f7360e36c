"""The one interface of counter sources, and the arithmetic of their running totals.

A :class:`CounterSource` says which events it can count (:meth:`CounterSource.available`),
counts between :meth:`~CounterSource.start` and :meth:`~CounterSource.stop`, and reads its running
totals at any point in between (:meth:`~CounterSource.read`), so that the collector
(:mod:`.collect`) can add up the sampler's timed batches only. A case's counters are a frozen
:class:`CounterReading`: values per call of the case, and for every event asked for but not
counted, the reason; it lives with the other sensor readings in
:mod:`pytest_charz.measure.readings`, below the run file's records that hold it.
"""
from __future__ import annotations

import math
from typing import Mapping, Protocol, runtime_checkable

from ..measure.readings import CounterReading


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
