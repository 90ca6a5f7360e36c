"""Counting and measuring energy around a case's timed samples, without timing the counting.

:class:`EvidenceDevice` wraps the device the sampler drives. The sampler calls
``device.check_sample()`` after each timed sample and never during warm-up or inner-loop
calibration (``Device.check_sample``), so the wrapper knows which batches are the timed ones:

- counters are read just before and just after every batch, outside the device's timed region,
  and the deltas of the timed batches are added up (warm-up, calibration, cache flushes of cold
  samples and the sampler's own work between batches are not counted); per call = sum / calls;
- energy is a coarser counter, so it is read at the start of the stretch of timed batches (the
  reading taken before the batch that opens it) and at its end; a discarded sample closes the
  stretch before its recovery pause, and in cold mode every batch is its own stretch, so the
  flushes are left out.

:class:`CaseEvidence` holds one session's sources (opened once, their availability probed once,
kept in ``config.stash``) and makes the wrapper for each case.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import UsageError
from ..measure.readings import CounterReading, EnergyReading
from .counters import CounterSource, add_into, per_call, subtract
from .energy import EnergySource, reading_notes

if TYPE_CHECKING:
    from ..devices.base import Device
    from ..work import Work

COUNTER_MODES = ("auto", "off")
#: Before sampling begins, the energy counter is read again before a batch once this long has
#: passed since the last reading (or when the batch size changes), so the stretch of timed
#: batches starts at most this long before the first of them.
ENERGY_REFRESH_S = 0.005


def check_counter_mode(value: Any) -> str:
    if value not in COUNTER_MODES:
        raise UsageError(f"--charz-counters must be one of {', '.join(COUNTER_MODES)}; got {value!r}")
    return str(value)


class EvidenceDevice:
    """The bound device, with counters and energy read around its batches (see the module)."""

    def __init__(self, device: "Device", counters: CounterSource | None, energy: EnergySource | None,
                 now_s: Callable[[], float], cold: bool = False) -> None:
        self._device = device
        self.cold = cold
        self._counters = counters
        self._energy = energy
        self._now_s = now_s
        self.sampling = False
        self.calls = 0                      # calls of the timed batches counted
        self.totals: dict[str, float] = {}
        self._pending: tuple[int, Mapping[str, float]] | None = None
        # Energy: the reading (J, s) opening the stretch, calls since it, the stretch's totals.
        self._energy_start: tuple[float, float] | None = None
        self._energy_calls = 0
        self._last_inner = -1
        self.energy_j = 0.0
        self.energy_s = 0.0
        self.energy_calls = 0
        self.discarded = 0
        self.energy_error: str | None = None
        if counters is not None:
            counters.start()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device, name)

    @property
    def info(self) -> Any:
        return self._device.info

    @property
    def backend(self) -> str:
        return self._device.backend

    def timer_resolution_s(self) -> float:
        return self._device.timer_resolution_s()

    def synchronize(self) -> None:
        self._device.synchronize()

    def flush_caches(self) -> None:
        self._device.flush_caches()

    def telemetry(self) -> Any:
        return self._device.telemetry()

    def close(self) -> None:
        self._device.close()

    def _read_energy(self) -> tuple[float, float] | None:
        if self._energy is None or self.energy_error is not None:
            return None
        try:
            return self._energy.read_j(), self._now_s()
        except Exception as exc:  # a vendor library's error mid-run: the case keeps its timing
            self.energy_error = f"{self._energy.name}: {type(exc).__name__}: {exc}"
            return None

    def _open_stretch_if_due(self, inner: int) -> None:
        if self._energy is None:
            return
        if self.sampling:
            if self._energy_start is None:          # after a discard, or every batch in cold mode
                self._energy_start, self._energy_calls = self._read_energy(), 0
            return
        start = self._energy_start
        # Cold samples flush the caches between batches: a stretch never spans a flush.
        if start is None or self.cold or inner != self._last_inner or self._now_s() - start[1] >= ENERGY_REFRESH_S:
            self._energy_start, self._energy_calls = self._read_energy(), 0

    def _close_stretch(self) -> None:
        start, self._energy_start = self._energy_start, None
        end = self._read_energy()
        if start is not None and end is not None:
            self.energy_j += end[0] - start[0]
            self.energy_s += end[1] - start[1]
            self.energy_calls += self._energy_calls

    def time_batch(self, fn: Callable[[], Any], inner: int, work: "Work | None" = None) -> float:
        self._open_stretch_if_due(inner)
        self._last_inner = inner
        if self._counters is not None:
            if not self.sampling:
                self._counters.start()              # threads a warm-up call started
            before = self._counters.read()
            elapsed = self._device.time_batch(fn, inner, work)
            self._pending = (inner, subtract(self._counters.read(), before))
        else:
            elapsed = self._device.time_batch(fn, inner, work)
            self._pending = (inner, {})
        self._energy_calls += inner
        return elapsed

    def check_sample(self) -> str | None:
        reason = self._device.check_sample()
        self.sampling = True
        if self._pending is not None:
            inner, delta = self._pending
            self._pending = None
            add_into(self.totals, delta)
            self.calls += inner
        if reason is not None:
            self.discarded += 1
        if reason is not None or self.cold:
            self._close_stretch()
        return reason

    def finish(self) -> tuple[CounterReading | None, tuple[float, float, int]]:
        """Stop counting: the counters per call, and (joules, seconds, calls) of the timed stretch."""
        if self._energy_start is not None and self.sampling:
            self._close_stretch()
        if self._counters is None:
            return None, (self.energy_j, self.energy_s, self.energy_calls)
        last = self._counters.stop()
        notes = tuple(last.notes)
        return (CounterReading(per_call(self.totals, self.calls), dict(last.missing), last.source, self.calls,
                               "call", notes),
                (self.energy_j, self.energy_s, self.energy_calls))


class CaseEvidence:
    """One session's counter and energy sources for the bound device."""

    def __init__(self, backend: str, mode: str, pci_bus_id: str | None = None) -> None:
        from .energy import open_energy
        from .sources import open_counters

        self.backend = backend
        self.mode = check_counter_mode(mode)
        self._counter_factory, self.counters_missing, self.counter_source_name = (
            open_counters(backend) if self.mode == "auto" else (None, {}, "off"))
        self.energy, self.energy_reason = open_energy(backend, pci_bus_id)
        self.energy_name = self.energy.name if self.energy is not None else \
            {"cpu": "rapl", "cuda": "nvml", "rocm": "amdsmi"}.get(backend, "none")

    def wrap(self, device: "Device", cold: bool = False) -> EvidenceDevice:
        from ..measure import clock

        counters = self._counter_factory() if self._counter_factory is not None else None
        return EvidenceDevice(device, counters, self.energy, lambda: clock.now_ns() / 1e9, cold)

    def finish(self, wrapped: EvidenceDevice) -> tuple[CounterReading | None, EnergyReading]:
        counters, (joules, seconds, calls) = wrapped.finish()
        if counters is None and self.mode == "auto":
            counters = CounterReading.absent(self.counter_source_name, self.counters_missing)
        if self.energy is None:
            energy = EnergyReading(self.energy_name, missing=self.energy_reason)
        elif wrapped.energy_error is not None:
            energy = EnergyReading(self.energy_name, missing=wrapped.energy_error)
        elif calls <= 0:
            energy = EnergyReading(self.energy_name, missing="no timed sample was taken")
        else:
            energy = EnergyReading(self.energy_name, joules, calls, seconds,
                                   notes=reading_notes(seconds, wrapped.discarded))
        return counters, energy

    def close(self) -> None:
        if self.energy is not None:
            self.energy.close()
