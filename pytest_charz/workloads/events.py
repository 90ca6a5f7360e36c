"""The event core of the one schedule (:mod:`.schedule`, which ``predict_graph`` and the
simulator both run): a heap of ``(time_s, priority, sequence, kind, payload)`` tuples.

Deterministic by construction: ties in time are broken by ``priority`` (smaller first), then by
``sequence``, the order in which events were scheduled, so the same inputs always pop the same
events in the same order. Events are plain tuples (no per-event objects) and times are simulated
seconds: nothing here reads a wall clock. An event scheduled in the past is an error, so time
never goes backwards.

SimPy is not used, for fit rather than speed: on a chain of 1364 ops (a host process that
dispatches, a device process that runs each op) SimPy 4.1 took 15.7-23.8 ms, the simulator's
schedule with this heap the same within noise (16.4-24.2 ms, ``benchmarks/bench_sim.py`` measures
both when SimPy is installed). The schedule shares bandwidth among running ops, so every start or
end reschedules the completions of the others: here a stale completion is dropped by a version
number, where SimPy's timeouts cannot be cancelled and each would need an interrupt. And the
core stays free of dependencies, with its tie-breaking rule in plain sight.
"""
from __future__ import annotations

import heapq
from typing import Any

#: Event priorities at one instant: completions first (they free streams and resources), then
#: activations of ops whose launch gap ended, then host issues.
COMPLETE, ACTIVATE, ISSUE = 0, 1, 2


class EventQueue:
    """A min-heap of events ordered by (time, priority, sequence)."""

    __slots__ = ("_heap", "_sequence", "now_s")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._sequence = 0
        self.now_s = 0.0

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, time_s: float, priority: int, kind: int, payload: Any = None) -> None:
        """Add an event at ``time_s`` (not before the current time)."""
        if time_s < self.now_s:
            raise ValueError(f"event at {time_s!r} s is before the current time {self.now_s!r} s")
        self._sequence += 1
        heapq.heappush(self._heap, (time_s, priority, self._sequence, kind, payload))

    def pop(self) -> tuple[float, int, Any]:
        """The next event as ``(time_s, kind, payload)``; the current time moves to it."""
        time_s, _, _, kind, payload = heapq.heappop(self._heap)
        self.now_s = time_s
        return time_s, kind, payload
