"""The Device protocol: what the measurement engine needs from a backend.

A backend allocates, runs, synchronizes, times with the right clock (device events on an
accelerator, the one clock on a CPU), flushes caches for cold samples, and snapshots telemetry.
Devices never judge: verdicts live in ``verdict.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from ..measure.conditions import DeviceTelemetry


@dataclass(frozen=True)
class DeviceInfo:
    """Identity of a bound device, as recorded in a run's provenance."""

    backend: str                  # "cpu", "cuda", "rocm", "sim"
    index: int
    name: str                     # as the driver / OS reports it
    ids: Mapping[str, str] = field(default_factory=dict)      # uuid, pci bus id, pci device id
    versions: Mapping[str, str] = field(default_factory=dict)  # driver, runtime, libraries

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "index": self.index, "name": self.name,
                "ids": dict(self.ids), "versions": dict(self.versions)}


@dataclass(frozen=True)
class VisibleDevice:
    """A device that detection found, before it is bound: enough to match it against targets."""

    backend: str
    index: int
    name: str
    pci_device_id: str | None = None


@runtime_checkable
class Device(Protocol):
    """One bound device. Implementations: ``cpu.CpuDevice``, ``cuda.CudaDevice``,
    ``rocm.RocmDevice``, ``sim.SimDevice``."""

    @property
    def info(self) -> DeviceInfo: ...

    @property
    def backend(self) -> str: ...

    def timer_resolution_s(self) -> float:
        """Smallest interval the device's timer can tell apart, in seconds."""
        ...

    def time_batch(self, fn: Callable[[], Any], inner: int) -> float:
        """Run ``fn`` ``inner`` times back to back and return the elapsed seconds, measured with
        the device's own clock (work complete when it returns)."""
        ...

    def synchronize(self) -> None: ...

    def flush_caches(self) -> None:
        """Evict the last-level cache so the next sample starts cold."""
        ...

    def telemetry(self) -> DeviceTelemetry | None:
        """Clocks, throttle reasons, power, energy, temperature and other processes, where
        readable; None on a device without telemetry (the host part is read elsewhere)."""
        ...

    def check_sample(self) -> str | None:
        """Called after each sample: a discard reason (e.g. ``"sm-clock-below-threshold"``) when
        the sample must not count, else None."""
        ...

    def close(self) -> None: ...
