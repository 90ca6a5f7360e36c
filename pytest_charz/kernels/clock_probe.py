"""Measure the clock a CPU core actually runs at (turbo included).

Where the OS gives no maximum frequency (virtual machines have no cpufreq, and their
``cpu MHz`` is the nominal clock), the host spec's peaks would be derived at the wrong clock;
this probe times a chain of dependent adds, one per cycle, and reports adds per second.
"""
from __future__ import annotations

import ctypes
import functools
import time
from pathlib import Path

from ..errors import CharzError
from .build import load

SOURCE = Path(__file__).with_name("clock_probe.c")


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    # Loaded once per process: the reference kernel runs between every few batches of a case.
    library, _ = load(SOURCE)
    library.charz_clock_adds_per_iteration.restype = ctypes.c_int
    library.charz_clock_chain.restype = ctypes.c_uint64
    library.charz_clock_chain.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    library.charz_clock_chain_busy.restype = ctypes.c_uint64
    library.charz_clock_chain_busy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int,
                                               ctypes.POINTER(ctypes.c_double)]
    return library


def measure_core_clock_mhz(adds: int = 40_000_000, repeats: int = 5, threads: int = 1,
                           fma_pipes: int = 0) -> float:
    """Best of ``repeats`` timings of ``adds`` dependent adds, as MHz (adds per microsecond).

    With ``threads`` > 1 the chain runs on that many threads at once (ctypes releases the GIL),
    which gives the clock with that many cores busy: all-core turbo is lower than single-core
    turbo, and an all-core peak must use the all-core clock. The slowest thread's best is
    returned. With ``fma_pipes`` 1 or 2 the widest vector FMAs run alongside the chain, keeping
    that many FMA pipes full: the clock then read is the one vector peak code runs at. The
    best, not the median: interruptions (other processes, the hypervisor) only ever make a
    timing longer. Raises CharzError where the probe cannot be built or has no code for this
    processor architecture.
    """
    if threads > 1:
        import threading

        results: list[float] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(threads)

        def one() -> None:
            try:
                barrier.wait()
                results.append(measure_core_clock_mhz(adds, repeats, 1, fma_pipes))
            except BaseException as exc:  # re-raised below, in the caller's thread
                errors.append(exc)

        workers = [threading.Thread(target=one) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if errors:
            raise errors[0]
        return min(results)
    library = _library()
    sink = ctypes.c_double(0.0)
    per_iteration = library.charz_clock_adds_per_iteration()
    if per_iteration <= 0:
        raise CharzError("no clock probe for this processor architecture")
    iterations = max(1, adds // per_iteration)
    best = float("inf")
    for _ in range(repeats):
        # The one place that reads the system timer past measure/clock.py: the probe measures the
        # silicon's clock, which a test's fake clock must not stand in for (the host spec derived
        # from it is cached for the process); tests replace the probe's result instead.
        start = time.perf_counter_ns()
        if fma_pipes > 0:
            total = library.charz_clock_chain_busy(iterations, 3, min(fma_pipes, 2), ctypes.byref(sink))
        else:
            total = library.charz_clock_chain(iterations, 3)
        elapsed = time.perf_counter_ns() - start
        if total != (3 * per_iteration * iterations) % (1 << 64):
            raise CharzError(f"the clock probe computed {total}, expected {3 * per_iteration * iterations}")
        best = min(best, elapsed)
    return per_iteration * iterations / (best / 1e3)


def run_adds(adds: int) -> None:
    """One untimed run of about ``adds`` dependent adds (one per cycle): the short core-clock
    reference kernel a case's samples are normalised by (:mod:`pytest_charz.kernels.pace`; the
    sampler times it on the one clock). Raises CharzError where the probe cannot be built or
    has no code for this processor architecture."""
    library = _library()
    per_iteration = library.charz_clock_adds_per_iteration()
    if per_iteration <= 0:
        raise CharzError("no clock probe for this processor architecture")
    iterations = max(1, adds // per_iteration)
    total = library.charz_clock_chain(iterations, 3)
    if total != (3 * per_iteration * iterations) % (1 << 64):
        raise CharzError(f"the clock probe computed {total}, expected {3 * per_iteration * iterations}")


def adds_per_run(adds: int) -> int:
    """The dependent adds :func:`time_adds_s` really does for ``adds`` asked (whole iterations)."""
    per_iteration = _library().charz_clock_adds_per_iteration()
    return max(1, adds // per_iteration) * per_iteration if per_iteration > 0 else 0
