"""The one clock. Every time read in pytest-charz goes through here so tests can fake time.

``now_ns()`` is a monotonic high-resolution counter (``time.perf_counter_ns``); ``sleep`` waits.
``use(FakeClock())`` swaps both for a deterministic clock within a ``with`` block.
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterator, Protocol


class Clock(Protocol):
    def now_ns(self) -> int: ...

    def sleep(self, seconds: float) -> None: ...

    def wall_time(self) -> float: ...


class SystemClock:
    """The real clock: ``perf_counter_ns`` for intervals, ``time.time`` for timestamps."""

    now_ns = staticmethod(time.perf_counter_ns)
    sleep = staticmethod(time.sleep)
    wall_time = staticmethod(time.time)


class FakeClock:
    """A clock that moves only when told to: ``advance(ns)`` or ``sleep(s)``.

    ``tick_ns`` is added on every read, like the cost of reading a real timer.
    """

    def __init__(self, start_ns: int = 1_000_000_000, tick_ns: int = 0, wall_start: float = 1.7e9) -> None:
        self._ns = int(start_ns)
        self.tick_ns = int(tick_ns)
        self._wall_start = wall_start
        self._start_ns = int(start_ns)

    def now_ns(self) -> int:
        self._ns += self.tick_ns
        return self._ns

    def advance(self, ns: float) -> None:
        if ns < 0:
            raise ValueError(f"a clock never goes backwards; advance({ns})")
        self._ns += int(ns)

    def sleep(self, seconds: float) -> None:
        self.advance(seconds * 1e9)

    def wall_time(self) -> float:
        return self._wall_start + (self._ns - self._start_ns) / 1e9


_current: Clock = SystemClock()


def current() -> Clock:
    return _current


def now_ns() -> int:
    return _current.now_ns()


def sleep(seconds: float) -> None:
    _current.sleep(seconds)


def wall_time() -> float:
    """Seconds since the epoch (for timestamps in records, never for intervals)."""
    return _current.wall_time()


@contextlib.contextmanager
def use(clock: Clock) -> Iterator[Clock]:
    """Make ``clock`` the clock inside the block (and restore the previous one after)."""
    global _current
    previous = _current
    _current = clock
    try:
        yield clock
    finally:
        _current = previous


def resolution_ns(reads: int = 200) -> int:
    """The smallest non-zero step seen between back-to-back reads of the current clock."""
    smallest = 0
    for _ in range(reads):
        a = now_ns()
        b = now_ns()
        for _ in range(10_000):  # a clock that never moves (a fake one) must not hang us
            if b != a:
                break
            b = now_ns()
        step = b - a
        if smallest == 0 or step < smallest:
            smallest = step
    return max(smallest, 1)


def utc_now_iso(timespec: str = "auto") -> str:
    """The current wall time as an ISO-8601 UTC timestamp (``timespec`` as ``datetime.isoformat``)."""
    import datetime

    return datetime.datetime.fromtimestamp(wall_time(), datetime.timezone.utc).isoformat(timespec=timespec)


def local_stamp() -> str:
    """The current local wall time as ``YYYYmmdd-HHMMSS``, for file names."""
    import datetime

    return datetime.datetime.fromtimestamp(wall_time()).strftime("%Y%m%d-%H%M%S")
