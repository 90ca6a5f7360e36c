"""The cpu backend: the host processor, timed with the one clock."""
from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING, Any, Callable

from ..measure import clock
from ..measure.conditions import DeviceTelemetry
from ..measure.provenance import cpu_model, library_versions
from ..targets.host import parse_size
from .base import DeviceInfo

if TYPE_CHECKING:
    from ..work import Work


def last_level_cache_bytes(sysfs: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Size of the highest-level data/unified cache of cpu0, from sysfs (None when unreadable)."""
    best: tuple[int, int] | None = None
    try:
        entries = sorted(os.listdir(sysfs))
    except OSError:
        return None
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            with open(os.path.join(sysfs, entry, "level")) as h:
                level = int(h.read())
            with open(os.path.join(sysfs, entry, "type")) as h:
                kind = h.read().strip()
            with open(os.path.join(sysfs, entry, "size")) as h:
                size = parse_size(h.read())     # ValueError (not a size): skipped like a missing file
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        if size and (best is None or level > best[0]):
            best = (level, size)
    return best[1] if best else None


class CpuDevice:
    """The host CPU as a Device. Cold samples stream over a buffer twice the last-level cache
    (capped at ``max_flush_bytes``), which evicts the case's data from every cache level."""

    backend = "cpu"

    def __init__(self, index: int = 0, max_flush_bytes: int = 1 << 30) -> None:
        self._info = DeviceInfo(
            backend="cpu",
            index=index,
            name=cpu_model(),
            ids={"logical_cpus": str(os.cpu_count()), "machine": platform.machine()},
            versions={"kernel": platform.release(), **library_versions(("numpy", "scipy", "torch"))},
        )
        llc = last_level_cache_bytes()
        self.flush_bytes = min(2 * llc, max_flush_bytes) if llc else 64 << 20
        self._flush_buffer: Any = None
        self._resolution_s: float | None = None

    @property
    def info(self) -> DeviceInfo:
        return self._info

    def timer_resolution_s(self) -> float:
        if self._resolution_s is None:
            self._resolution_s = clock.resolution_ns() / 1e9
        return self._resolution_s

    def time_batch(self, fn: Callable[[], Any], inner: int, work: "Work | None" = None) -> float:
        """Seconds of ``inner`` calls of ``fn`` on the one clock; ``work`` is not needed (the
        calls really run)."""
        loops = range(inner)
        start = clock.now_ns()
        for _ in loops:
            fn()
        return (clock.now_ns() - start) / 1e9

    def synchronize(self) -> None:
        return None

    def flush_caches(self) -> None:
        import numpy as np

        if self._flush_buffer is None:
            self._flush_buffer = np.ones(self.flush_bytes // 8, dtype=np.float64)
        # Read and write every line: evicts other data from all levels, and dirties nothing of theirs.
        np.add(self._flush_buffer, 1.0, out=self._flush_buffer)

    def telemetry(self) -> DeviceTelemetry | None:
        return None

    def check_sample(self) -> str | None:
        return None

    def close(self) -> None:
        self._flush_buffer = None
