"""The CPU's reference kernels: short fixed workloads run between a case's batches (the sampler
times them on the one clock), so its
times can be compared between processes whose core clock or neighbours differ
(:mod:`pytest_charz.measure.pace`).

``core-clock``: a chain of dependent adds, one per cycle (:mod:`.clock_probe`): its time is
1 / core clock. It paces compute and dispatch cases (Python and library dispatch run on the
same core at the same clock). ``memory``: a copy of a fixed buffer of a mebibyte (two with
its destination: beyond the L2 of most cores), which paces memory-bound cases with the cache
and memory clocks and the neighbours' traffic as well as the core's: those whose launches each
move at least as much (:func:`pace_kind`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import CharzError

if TYPE_CHECKING:
    from ..work import Work

# About 30 microseconds at 3 GHz: short beside a batch, long beside the timer's resolution.
CLOCK_PACE_ADDS = 100_000
MEMORY_PACE_BYTES = 1 << 20
# A case moving at most this many FLOPs per byte is paced by the memory kernel.
MEMORY_BOUND_FLOPS_PER_BYTE = 1.0


class ClockPace:
    """The core-clock reference kernel: ``units`` dependent adds per run."""

    kind = "core-clock"
    unit = "adds"

    def __init__(self, adds: int = CLOCK_PACE_ADDS) -> None:
        from .clock_probe import adds_per_run, run_adds

        self._run_adds = run_adds
        self._adds = adds
        self.units = float(adds_per_run(adds))
        if self.units <= 0:
            raise CharzError("no clock probe for this processor architecture")
        self._run_adds(adds)  # built, loaded and warm before the case's first batch

    def run_once(self) -> None:
        self._run_adds(self._adds)


class MemoryPace:
    """The memory reference kernel: a copy of ``units`` bytes per run."""

    kind = "memory"
    unit = "bytes copied"

    def __init__(self, size_bytes: int = MEMORY_PACE_BYTES) -> None:
        import numpy as np

        self._source = np.ones(size_bytes // 8)
        self._destination = np.empty_like(self._source)
        self._copy = np.copyto
        self.units = float(self._source.nbytes)
        self._copy(self._destination, self._source)

    def run_once(self) -> None:
        self._copy(self._destination, self._source)


def pace_kind(work: "Work") -> str:
    """The reference kernel's kind for a case of this work: ``memory`` for a case that moves
    bytes with at most MEMORY_BOUND_FLOPS_PER_BYTE FLOPs per byte and, per launch, at least the
    memory kernel's copy (:data:`MEMORY_PACE_BYTES`); ``core-clock`` otherwise. A case whose
    launches each move less runs in the caches and in its host's dispatch, at the core's clock:
    a captured decode step (88-118 launches of 20-40 KB each, dispatch-bound) paced by the memory
    kernel read 18-28% slower normalised, and was called drift, where its raw time had moved
    -1% to +4% (a Xeon guest whose memory kernel ran faster in that session)."""
    flops = sum(work.flops.values()) if work.flops else 0.0
    moved = sum(work.bytes.values()) if work.bytes else 0.0
    per_launch = moved / max(work.launches, 1)
    memory_bound = moved > 0 and flops <= MEMORY_BOUND_FLOPS_PER_BYTE * moved
    return "memory" if memory_bound and per_launch >= MEMORY_PACE_BYTES else "core-clock"


def cpu_pace_probe(work: "Work") -> "ClockPace | MemoryPace | None":
    """The reference kernel for a CPU case of ``work``; None where it cannot be built here
    (no compiler, an architecture without the probe): the case is then judged on raw times."""
    try:
        return MemoryPace() if pace_kind(work) == "memory" else ClockPace()
    except (CharzError, OSError):
        return None


__all__ = ["CLOCK_PACE_ADDS", "ClockPace", "MEMORY_PACE_BYTES", "MemoryPace", "cpu_pace_probe", "pace_kind"]
