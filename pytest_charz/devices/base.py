"""The Device and Backend protocols: what the measurement engine needs from a backend.

A :class:`Backend` is a kind of device named by a target prefix (``cpu``, ``cuda``, ``rocm``,
``sim``, or one a conftest registers through the ``pytest_charz_backends`` hook): it resolves a
target name to a :class:`~pytest_charz.targets.spec.TargetSpec` and the device it runs on, and
opens that device. A :class:`Device` allocates, runs, synchronizes, times with the right clock
(device events on an accelerator, the one clock on a CPU, a model of the hardware on a simulated
one), flushes caches for cold samples, and snapshots telemetry. Devices never judge: verdicts
live in ``verdict.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, runtime_checkable

from ..measure.conditions import DeviceTelemetry

if TYPE_CHECKING:
    from ..targets.spec import TargetSpec
    from ..work import Work


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

    def time_batch(self, fn: Callable[[], Any], inner: int, work: "Work | None" = None) -> float:
        """Run ``fn`` ``inner`` times back to back and return the elapsed seconds, measured with
        the device's own clock (work complete when it returns).

        ``work`` is what one call of ``fn`` does (the case's Work; the sampler always passes it,
        an empty Work when the case gave none). A device that executes ``fn`` may ignore it; a
        simulated one times the work instead of executing it. None: the caller does not know
        (a suite timing a helper loop directly), which a simulated device may refuse.
        """
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


@runtime_checkable
class Backend(Protocol):
    """A kind of device, registered under the target prefix ``name``: ``--target=NAME:REST``
    is routed to it. Built in: ``cpu``, ``cuda``, ``rocm`` (``devices.registry``); others come
    through the ``pytest_charz_backends`` hook (see :mod:`pytest_charz.hookspec`)."""

    name: str

    def select(self, name: str, worker: int | None) -> tuple["TargetSpec", VisibleDevice]:
        """Resolve ``name`` (the part of ``--target`` after ``prefix:``, possibly empty: this
        backend's default) to its spec and the device it runs on. ``worker`` is the
        pytest-xdist worker number (None outside xdist), for spreading workers over several
        matching devices. Raises :class:`~pytest_charz.errors.UsageError` for a name it does
        not know or a device that is not there."""
        ...

    def open(self, visible: VisibleDevice, spec: "TargetSpec") -> Device:
        """Bind the device that :meth:`select` found (closed with ``Device.close``)."""
        ...
