"""Measure the clock a CPU core actually runs at (turbo included).

Where the OS gives no maximum frequency (virtual machines have no cpufreq, and their
``cpu MHz`` is the nominal clock), the host spec's peaks would be derived at the wrong clock;
this probe times a chain of dependent adds, one per cycle, and reports adds per second.
"""
from __future__ import annotations

import ctypes
import time
from pathlib import Path

from ..errors import CharzError
from .build import load

SOURCE = Path(__file__).with_name("clock_probe.c")


def measure_core_clock_mhz(adds: int = 40_000_000, repeats: int = 5) -> float:
    """Best of ``repeats`` timings of ``adds`` dependent adds, as MHz (adds per microsecond).

    The best, not the median: interruptions (other processes, the hypervisor) only ever make
    a timing longer. Raises CharzError where the probe cannot be built or has no code for this
    processor architecture.
    """
    library, _ = load(SOURCE)
    library.charz_clock_adds_per_iteration.restype = ctypes.c_int
    library.charz_clock_chain.restype = ctypes.c_uint64
    library.charz_clock_chain.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    per_iteration = library.charz_clock_adds_per_iteration()
    if per_iteration <= 0:
        raise CharzError("no clock probe for this processor architecture")
    iterations = max(1, adds // per_iteration)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        total = library.charz_clock_chain(iterations, 3)
        elapsed = time.perf_counter_ns() - start
        if total != (3 * per_iteration * iterations) % (1 << 64):
            raise CharzError(f"the clock probe computed {total}, expected {3 * per_iteration * iterations}")
        best = min(best, elapsed)
    return per_iteration * iterations / (best / 1e3)
