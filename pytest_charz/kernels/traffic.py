"""Background memory traffic: a load generator that keeps cores streaming over a buffer while the
foreground measures a kernel, for the contention suite. It is not a measured kernel itself.

:func:`spin` calls the ``charz_spin`` kernel of ``cpu_kernels.c`` through the library and
helpers of :mod:`.cpu` (ctypes releases the GIL, so it runs beside a foreground kernel);
:class:`BackgroundTraffic` runs it in a background Python thread until stopped.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError, check_choice, check_non_negative
from .cpu import fill_random
from .cpu_library import (
    F64P,
    I32P,
    Team,
    aligned_empty,
    check_array,
    check_count,
    lib,
    ptr,
    resolve_threads,
)

SPIN_MODES = ("read", "copy")


@dataclass(frozen=True)
class TrafficResult:
    """What a background traffic run did: bytes read plus written (no write-allocate) and time."""

    bytes_moved: int
    elapsed_s: float
    threads: int
    mode: str
    checksum: float

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_moved / self.elapsed_s if self.elapsed_s > 0 else 0.0


def spin_chunk_bytes() -> int:
    """Bytes of its share each :func:`spin` thread streams between looks at the clock and flag."""
    return int(lib().charz_spin_chunk_bytes())


def spin(
    buffer: np.ndarray,
    duration_s: float,
    mode: str = "read",
    threads: int = 1,
    stop_flag: np.ndarray | None = None,
) -> TrafficResult:
    """Keep ``threads`` cores streaming over ``buffer`` until ``duration_s`` has passed or
    ``stop_flag[0]`` (an int32 array of one item) becomes non-zero.

    ``mode="read"`` sums each thread's share; ``"copy"`` copies its first half onto its second.
    The clock and the flag are checked after each chunk of :func:`spin_chunk_bytes` (64 KiB), so
    each thread does at least one chunk. Defaults to one thread: it is the load a contention case
    puts beside the kernel it measures (see :class:`BackgroundTraffic`). The result's
    ``bytes_moved`` counts reads plus writes; its checksum is the sum of what "read" read.
    """
    check_choice("mode", mode, SPIN_MODES)
    check_non_negative("duration_s", duration_s)
    threads = resolve_threads(threads)
    check_array("buffer", buffer, np.float64, writeable=True)
    if stop_flag is None:
        stop_flag = np.zeros(1, dtype=np.int32)
    check_array("stop_flag", stop_flag, np.int32)
    moved, elapsed = ctypes.c_int64(0), ctypes.c_double(0.0)
    team = Team(threads)
    checksum = lib().charz_spin(
        ptr(buffer, F64P), len(buffer), SPIN_MODES.index(mode), float(duration_s), ptr(stop_flag, I32P),
        threads, ctypes.byref(moved), ctypes.byref(elapsed), team.ref,
    )
    team.check()
    return TrafficResult(int(moved.value), float(elapsed.value), threads, mode, float(checksum))


class BackgroundTraffic:
    """Memory traffic from a background Python thread while the foreground measures something.

    ::

        with BackgroundTraffic(256 << 20, mode="read") as load:
            ...  # measure the kernel under contention
        load.result.bytes_per_s

    ``max_duration_s`` bounds the run if :meth:`stop` is never called.
    """

    def __init__(
        self, nbytes: int, mode: str = "read", threads: int = 1, seed: int = 0, max_duration_s: float = 3600.0
    ) -> None:
        check_choice("mode", mode, SPIN_MODES)
        self.mode = mode
        self.threads = resolve_threads(threads)
        self.max_duration_s = max_duration_s
        self.buffer = aligned_empty(check_count("nbytes", nbytes, 8 * 64) // 8)
        fill_random(self.buffer, seed=seed, threads=self.threads)
        self._stop = np.zeros(1, dtype=np.int32)
        self._thread: threading.Thread | None = None
        self._outcome: list[TrafficResult | BaseException] = []

    def start(self) -> None:
        if self._thread is not None:
            raise UsageError("this BackgroundTraffic was already started; make a new one")
        self._thread = threading.Thread(target=self._run, name="charz-background-traffic", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._outcome.append(spin(self.buffer, self.max_duration_s, self.mode, self.threads, self._stop))
        except BaseException as exc:  # handed to the caller of stop()
            self._outcome.append(exc)

    def stop(self) -> TrafficResult:
        """Stop the traffic and return what it did."""
        if self._thread is None:
            raise UsageError("BackgroundTraffic.stop() before start()")
        self._stop[0] = 1
        self._thread.join()
        outcome = self._outcome[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    @property
    def result(self) -> TrafficResult:
        if not self._outcome or isinstance(self._outcome[0], BaseException):
            raise UsageError("BackgroundTraffic has no result until stop() returns")
        return self._outcome[0]

    def __enter__(self) -> "BackgroundTraffic":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
