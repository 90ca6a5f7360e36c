"""What the cuda and rocm backends share: the cache-flush size, telemetry reads and the
clock-based sample discard."""
from __future__ import annotations

from typing import Any

from ..measure.conditions import DeviceTelemetry
from .nvml import sm_clock_discard_reason, sm_clock_is_low


def flush_bytes(l2_cache_bytes: int) -> int:
    """Bytes written to evict the last-level cache: twice its size (at least 1 MiB), a multiple of 4 bytes."""
    return max(2 * int(l2_cache_bytes), 1 << 20) // 4 * 4


class TelemetryDiscards:
    """Mixin for a GPU backend with ``_telemetry`` (NvmlTelemetry / AmdsmiTelemetry or None),
    ``expected_sm_clock_mhz`` and ``sm_clock_threshold``: a sample after which the graphics clock
    is under the threshold of its expected clock while the device reports throttling is
    discarded (see :func:`~pytest_charz.devices.nvml.sm_clock_discard_reason`)."""

    _telemetry: Any
    expected_sm_clock_mhz: float | None
    sm_clock_threshold: float

    def telemetry(self) -> DeviceTelemetry | None:
        return self._telemetry.read() if self._telemetry is not None else None

    def check_sample(self) -> str | None:
        if self._telemetry is None:
            return None
        clock = self._telemetry.sm_clock_mhz()
        if not sm_clock_is_low(clock, self.expected_sm_clock_mhz, self.sm_clock_threshold):
            return None             # the common case: one telemetry call per sample
        return sm_clock_discard_reason(clock, self.expected_sm_clock_mhz, self.sm_clock_threshold,
                                       throttled=self._telemetry.throttling())
