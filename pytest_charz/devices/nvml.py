"""NVIDIA telemetry through NVML (the ``pynvml`` module of the ``nvidia-ml-py`` package).

:class:`NvmlTelemetry` reads one GPU's clocks, clock-event (throttle) reasons, power, energy,
temperature, utilization and the other compute processes on it, and returns a
:class:`~pytest_charz.measure.conditions.DeviceTelemetry`. Every NVML call is guarded on its own:
a driver that refuses one query (``NVMLError_NotSupported`` on a consumer board, a missing
function in an old ``pynvml``) leaves that field ``None`` and the others are still read.

Units as NVML gives them and as we record them: clocks in MHz (both), power in mW -> W, total
energy in mJ -> J (cumulative since the driver was loaded), temperature in degrees C,
utilization in percent.

The clock-event reason bits are those of ``nvml.h`` (``nvmlClocksEventReason*``, formerly
``nvmlClocksThrottleReason*``; the bit values did not change with the rename).
"""
from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from ..errors import require_extra
from ..measure.conditions import DeviceTelemetry
from .detect_gpu import normalize_pci_bus_id
from .vendor_library import VendorLibrary

#: Bit -> name of the clock-event reasons in ``nvml.h``.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clock_setting"),
)

#: A sample taken while the SM clock was below this fraction of the expected (maximum) SM clock
#: is discarded. nvbench uses the same default (``--throttle-threshold 75``, in percent): it
#: compares the SM clock observed during a sample with the device's peak clock rate.
SM_CLOCK_THRESHOLD = 0.75
SM_CLOCK_DISCARD_REASON = "sm-clock-below-threshold"

# nvml.h constants, used when an old pynvml does not define them.
_NVML_CLOCK_SM = 1
_NVML_CLOCK_MEM = 2
_NVML_TEMPERATURE_GPU = 0


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Names of the reasons set in an NVML clock-event reasons ``mask``, lowest bit first.

    A bit NVML defines that this table does not know is named ``unknown_0x<bit>`` rather than
    dropped, so a new reason is still visible in the run file. ``0`` (no reason) gives ``()``.
    """
    if mask < 0:
        raise ValueError(f"a clock-event reasons mask is an unsigned bitmask, got {mask}")
    known = 0
    names: list[str] = []
    for bit, name in CLOCK_EVENT_REASONS:
        known |= bit
        if mask & bit:
            names.append(name)
    unknown = mask & ~known
    bit = 1
    while unknown:
        if unknown & bit:
            names.append(f"unknown_0x{bit:x}")
            unknown &= ~bit
        bit <<= 1
    return tuple(names)


#: Clock-event reasons that mean the GPU is held below the clock it was asked for. The others
#: (``gpu_idle``, ``applications_clocks``, ``sync_boost``, ``display_clock_setting``) are a clock
#: low by choice: an idle GPU between short kernels, or clocks locked by the administrator.
THROTTLE_EVENT_REASONS = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})


def sm_clock_is_low(sm_clock_mhz: float | None, expected_sm_clock_mhz: float | None,
                    threshold: float = SM_CLOCK_THRESHOLD) -> bool:
    """Whether the SM clock is under ``threshold`` x the expected SM clock (False when either is
    unknown: no evidence)."""
    if sm_clock_mhz is None or expected_sm_clock_mhz is None or not expected_sm_clock_mhz > 0:
        return False
    return sm_clock_mhz < threshold * expected_sm_clock_mhz


def sm_clock_discard_reason(
    sm_clock_mhz: float | None,
    expected_sm_clock_mhz: float | None,
    threshold: float = SM_CLOCK_THRESHOLD,
    throttled: bool | None = None,
) -> str | None:
    """``"sm-clock-below-threshold"`` when the SM clock is under ``threshold`` x the expected SM
    clock and the device says it is throttling, else None.

    The clock is read after the sample, not during it (nvbench times the clock inside the
    sample): a GPU that idles between short kernels, or whose clocks an administrator locked
    low, reads a low clock without any sample being slowed. So a low clock discards only with a
    throttle reason (``throttled`` True); ``throttled`` None (the reasons could not be read)
    falls back to the clock alone; False (no throttle reason) keeps the sample.
    """
    if not sm_clock_is_low(sm_clock_mhz, expected_sm_clock_mhz, threshold) or throttled is False:
        return None
    return SM_CLOCK_DISCARD_REASON


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def load_pynvml() -> ModuleType:
    """Import ``pynvml`` (``MissingExtraError`` naming the ``cuda`` extra when it is absent)."""
    return require_extra("pynvml", "cuda")


class NvmlTelemetry(VendorLibrary):
    """Telemetry of one NVIDIA GPU.

    ``index`` is NVML's index (all GPUs of the machine, in PCI order, regardless of
    ``CUDA_VISIBLE_DEVICES``); pass ``pci_bus_id`` instead to pick the GPU a CUDA device index
    refers to. ``nvml`` is the ``pynvml`` module (imported when omitted).
    """

    def __init__(self, index: int | None = None, *, pci_bus_id: str | None = None,
                 nvml: ModuleType | None = None) -> None:
        self._nvml = nvml if nvml is not None else load_pynvml()
        self._open_library(self._nvml, "pynvml", "NVMLError", "nvmlInit", "nvmlShutdown")
        try:
            self.handle = self._find_handle(index, pci_bus_id)
        except BaseException:
            self.close()
            raise
        self.max_sm_clock_mhz = self._float(self._call("nvmlDeviceGetMaxClockInfo", self.handle,
                                                       self._const("NVML_CLOCK_SM", _NVML_CLOCK_SM)))

    def _find_handle(self, index: int | None, pci_bus_id: str | None) -> Any:
        nvml = self._nvml
        if pci_bus_id is not None:
            wanted = normalize_pci_bus_id(pci_bus_id)
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                if normalize_pci_bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId)) == wanted:
                    return handle
            raise LookupError(f"NVML sees no GPU at PCI bus id {pci_bus_id!r}")
        return nvml.nvmlDeviceGetHandleByIndex(0 if index is None else index)

    def _const(self, name: str, default: int) -> int:
        return int(getattr(self._nvml, name, default))

    @staticmethod
    def _float(value: Any, scale: float = 1.0) -> float | None:
        return None if value is None else float(value) * scale

    def sm_clock_mhz(self) -> float | None:
        """The SM clock now, in MHz (one NVML call: cheap enough to read after every sample)."""
        return self._float(self._call("nvmlDeviceGetClockInfo", self.handle,
                                      self._const("NVML_CLOCK_SM", _NVML_CLOCK_SM)))

    def _clock_event_mask(self) -> int | None:
        mask = self._call("nvmlDeviceGetCurrentClocksEventReasons", self.handle)
        if mask is None:  # pynvml before the rename, or a driver without the new entry point
            mask = self._call("nvmlDeviceGetCurrentClocksThrottleReasons", self.handle)
            if mask is not None:
                self.unreadable.pop("nvmlDeviceGetCurrentClocksEventReasons", None)
        return int(mask) if mask is not None else None

    def clock_event_reasons(self) -> tuple[str, ...]:
        mask = self._clock_event_mask()
        return decode_clock_event_reasons(mask) if mask is not None else ()

    def throttling(self) -> bool | None:
        """Whether a throttle reason (:data:`THROTTLE_EVENT_REASONS`) is active; None when the
        reasons cannot be read."""
        mask = self._clock_event_mask()
        if mask is None:
            return None
        return any(reason in THROTTLE_EVENT_REASONS for reason in decode_clock_event_reasons(mask))

    def processes(self) -> tuple[dict[str, Any], ...]:
        """Compute processes on the GPU other than this one: pid, name, memory_bytes."""
        running = self._call("nvmlDeviceGetComputeRunningProcesses", self.handle) or ()
        mine = os.getpid()
        rows = []
        for proc in running:
            pid = int(proc.pid)
            if pid == mine:
                continue
            name = self._call("nvmlSystemGetProcessName", pid)
            memory = getattr(proc, "usedGpuMemory", None)
            rows.append({"pid": pid, "name": _text(name) if name is not None else "?",
                         "memory_bytes": int(memory) if memory is not None else None})
        return tuple(rows)

    def energy_j(self) -> float | None:
        """Total energy since the driver was loaded, in J (``nvmlDeviceGetTotalEnergyConsumption``,
        mJ); None where the board does not report it. One call: read around a case's samples."""
        return self._float(self._call("nvmlDeviceGetTotalEnergyConsumption", self.handle), 1e-3)

    def read(self) -> DeviceTelemetry:
        """Every reading NVML gives for this GPU now; unreadable ones are None."""
        nvml, h = self._nvml, self.handle
        utilization = self._call("nvmlDeviceGetUtilizationRates", h)
        return DeviceTelemetry(
            sm_clock_mhz=self.sm_clock_mhz(),
            mem_clock_mhz=self._float(self._call("nvmlDeviceGetClockInfo", h,
                                                 self._const("NVML_CLOCK_MEM", _NVML_CLOCK_MEM))),
            max_sm_clock_mhz=self.max_sm_clock_mhz,
            throttle_reasons=self.clock_event_reasons(),
            power_w=self._float(self._call("nvmlDeviceGetPowerUsage", h), 1e-3),
            energy_j=self.energy_j(),
            temperature_c=self._float(self._call("nvmlDeviceGetTemperature", h,
                                                 getattr(nvml, "NVML_TEMPERATURE_GPU", _NVML_TEMPERATURE_GPU))),
            utilization_pct=self._float(getattr(utilization, "gpu", None)),
            processes=self.processes(),
        )

    def identity(self) -> dict[str, str]:
        """Name, uuid, PCI bus id, PCI device id and driver versions, where readable."""
        out: dict[str, str] = {}
        name = self._call("nvmlDeviceGetName", self.handle)
        if name is not None:
            out["name"] = _text(name)
        uuid = self._call("nvmlDeviceGetUUID", self.handle)
        if uuid is not None:
            out["uuid"] = _text(uuid)
        pci = self._call("nvmlDeviceGetPciInfo", self.handle)
        if pci is not None:
            out["pci_bus_id"] = normalize_pci_bus_id(_text(pci.busId))
            out["pci_device_id"] = f"0x{(int(pci.pciDeviceId) >> 16) & 0xFFFF:04x}"
        driver = self._call("nvmlSystemGetDriverVersion")
        if driver is not None:
            out["driver"] = _text(driver)
        return out
