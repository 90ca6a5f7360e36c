"""CUPTI (``cupti-python``) as the in-process counter source of NVIDIA GPUs: the kernels each
call launches and their GPU time, from the Activity API's kernel records.

cupti-python binds CUPTI's Activity and Callback APIs (NVIDIA, "CUPTI Python", Overview: range
profiling, PM sampling and the metric APIs are not among the supported ones in the releases
that list them), so hardware metrics (DRAM bytes, SM and tensor-pipe throughput, occupancy) come
from Nsight Compute (:mod:`.ncu`) re-running a case; this source reports those as missing with
that reason. The import is guarded: without cupti-python every event is missing, naming the
extra that installs it.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..measure.readings import CounterReading

EVENTS = ("kernels", "kernel-time-s")
HARDWARE_METRICS = ("dram-read-bytes", "dram-write-bytes", "sm-throughput-pct", "tensor-pipe-active-pct",
                    "achieved-occupancy-pct")
NEEDS_NCU = ("per-kernel hardware metrics are not collected in process (cupti-python has no range profiler "
             "here): re-run the case with python -m pytest_charz.evidence.ncu NODEID --out FILE")
_BUFFER_BYTES = 8 << 20


def load_cupti() -> Any | None:
    """``cupti.cupti`` or None when cupti-python is not installed (or has no CUDA to bind)."""
    try:
        from cupti import cupti  # type: ignore[import-not-found]
    except (ImportError, OSError):
        return None
    return cupti


def missing_without_cupti() -> dict[str, str]:
    why = "cupti-python is not installed: pip install 'pytest-charz[cupti]'"
    return {**{name: why for name in EVENTS}, **{name: NEEDS_NCU for name in HARDWARE_METRICS}}


class CuptiKernelSource:
    """Kernel launches and kernel time of this process (``CounterSource``), from CUPTI's
    ``CONCURRENT_KERNEL`` activity records. :meth:`read` flushes CUPTI's buffers so the totals
    include every kernel finished so far (the device has synchronized at the end of a batch)."""

    name = "cupti"

    def __init__(self, cupti: Any) -> None:
        self._cupti = cupti
        self._kernels = 0
        self._kernel_ns = 0
        self._enabled = False

    def available(self) -> tuple[tuple[str, ...], Mapping[str, str]]:
        return EVENTS, {name: NEEDS_NCU for name in HARDWARE_METRICS}

    def _requested(self) -> tuple[int, int]:
        return _BUFFER_BYTES, 0

    def _completed(self, activities: list[Any]) -> None:
        kind = self._cupti.ActivityKind.CONCURRENT_KERNEL
        for record in activities:
            if record.kind == kind:
                self._kernels += 1
                self._kernel_ns += int(record.end) - int(record.start)

    def start(self) -> None:
        if not self._enabled:
            self._cupti.activity_register_callbacks(self._requested, self._completed)
            self._cupti.activity_enable(self._cupti.ActivityKind.CONCURRENT_KERNEL)
            self._enabled = True

    def read(self) -> dict[str, float]:
        self._cupti.activity_flush_all(1)
        return {"kernels": float(self._kernels), "kernel-time-s": self._kernel_ns * 1e-9}

    def stop(self) -> CounterReading:
        totals = self.read()
        if self._enabled:
            self._cupti.activity_disable(self._cupti.ActivityKind.CONCURRENT_KERNEL)
            self._enabled = False
        return CounterReading(totals, {name: NEEDS_NCU for name in HARDWARE_METRICS}, self.name, 1)
