"""AMD telemetry through the ``amdsmi`` Python package (AMD SMI, shipped with ROCm).

:class:`AmdsmiTelemetry` reads one GPU's clocks, throttle / violation status, power, energy,
temperature, activity and the other processes on it, and returns a
:class:`~pytest_charz.measure.conditions.DeviceTelemetry`. Each amdsmi call is guarded on its own
(``AmdSmiException`` or a function missing from an older amdsmi -> that field None).

The answers are parsed by pure functions (``parse_*``, ``decode_*``) so they are tested with
recorded dicts. The shapes followed are those of the amdsmi Python interface of ROCm 6.4
(``amdsmi_interface.py``), with the older and newer spellings that differ:

- ``amdsmi_get_clock_info(h, AmdSmiClkType.GFX)`` -> ``{"clk", "min_clk", "max_clk",
  "clk_locked", "clk_deep_sleep"}`` in MHz (ROCm 6.0/6.1 wrote ``"cur_clk"`` for ``"clk"``).
- ``amdsmi_get_power_info(h)`` -> ``{"current_socket_power", "average_socket_power",
  "gfx_voltage", "soc_voltage", "mem_voltage", "power_limit"}``, power in W; ROCm 7 adds
  ``"socket_power"``. MI300-class parts answer ``"N/A"`` for ``average_socket_power``.
- ``amdsmi_get_energy_count(h)`` -> ``{"energy_accumulator", "counter_resolution",
  "timestamp"}``: energy in uJ = accumulator x resolution (ROCm 6.0/6.1 named the
  accumulator ``"power"``).
- ``amdsmi_get_temp_metric(h, AmdSmiTemperatureType.HOTSPOT, AmdSmiTemperatureMetric.CURRENT)``
  -> degrees C (MI300 has no EDGE sensor; EDGE is the fallback).
- ``amdsmi_get_gpu_activity(h)`` -> ``{"gfx_activity", "umc_activity", "mm_activity"}`` in %.
- ``amdsmi_get_violation_status(h)`` -> ``{"active_prochot_thrm", "active_ppt_pwr",
  "active_socket_thrm", "active_vr_thrm", "active_hbm_thrm",
  "active_gfx_clk_below_host_limit", ...}`` (ROCm 6.4+).
- ``amdsmi_get_gpu_metrics_info(h)["indep_throttle_status"]``: the ASIC-independent throttler
  bitmask of the amdgpu driver (``SMU_THROTTLER_*_BIT`` in the kernel's ``amdgpu_smu.h``).
- ``amdsmi_get_gpu_process_list(h)`` -> ``[{"name", "pid", "mem", "engine_usage",
  "memory_usage", ...}]``, ``mem`` in bytes (older versions returned process handles, read with
  ``amdsmi_get_gpu_process_info``).

Any value may be the string ``"N/A"`` (amdsmi's word for unsupported); it parses as None.
"""
from __future__ import annotations

import os
from types import ModuleType
from typing import Any, Iterable, Mapping

from ..errors import require_extra
from ..measure.conditions import DeviceTelemetry
from .detect_gpu import format_pci_id, normalize_pci_bus_id
from .vendor_library import VendorLibrary

#: ``indep_throttle_status`` bits (amdgpu ``SMU_THROTTLER_*_BIT``) -> reason names.
INDEP_THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0, "ppt0"), (1, "ppt1"), (2, "ppt2"), (3, "ppt3"), (4, "spl"), (5, "fppt"), (6, "sppt"),
    (7, "sppt_apu"),
    (16, "tdc_gfx"), (17, "tdc_soc"), (18, "tdc_mem"), (19, "tdc_vdd"), (20, "tdc_cvip"),
    (21, "edc_cpu"), (22, "edc_gfx"), (23, "apcc"),
    (32, "temp_gpu"), (33, "temp_core"), (34, "temp_mem"), (35, "temp_edge"), (36, "temp_hotspot"),
    (37, "temp_soc"), (38, "temp_vr_gfx"), (39, "temp_vr_soc"), (40, "temp_vr_mem0"),
    (41, "temp_vr_mem1"), (42, "temp_liquid0"), (43, "temp_liquid1"), (44, "vrhot0"),
    (45, "vrhot1"), (46, "prochot_cpu"), (47, "prochot_gfx"),
    (56, "ppm"), (57, "fit"),
)

#: ``amdsmi_get_violation_status`` ``active_*`` keys -> reason names.
VIOLATION_KEYS: tuple[tuple[str, str], ...] = (
    ("active_prochot_thrm", "prochot_thermal"),
    ("active_ppt_pwr", "ppt_power"),
    ("active_socket_thrm", "socket_thermal"),
    ("active_vr_thrm", "vr_thermal"),
    ("active_hbm_thrm", "hbm_thermal"),
    ("active_gfx_clk_below_host_limit", "gfx_clk_below_host_limit"),
)

_NOT_AVAILABLE = "N/A"


def _number(value: Any) -> float | None:
    """A reading as a float; None for amdsmi's ``"N/A"``, None, or anything not numeric."""
    if value is None or isinstance(value, bool) or value == _NOT_AVAILABLE:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def parse_clock_info(info: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """(current, maximum) clock in MHz from ``amdsmi_get_clock_info``."""
    current = _number(info.get("clk", info.get("cur_clk")))
    return current, _number(info.get("max_clk"))


def parse_power_info(info: Mapping[str, Any]) -> float | None:
    """Socket power in W from ``amdsmi_get_power_info``: the first readable of
    ``socket_power``, ``current_socket_power``, ``average_socket_power``."""
    for key in ("socket_power", "current_socket_power", "average_socket_power"):
        watts = _number(info.get(key))
        if watts is not None:
            return watts
    return None


def parse_energy_count(info: Mapping[str, Any]) -> float | None:
    """Cumulative energy in J from ``amdsmi_get_energy_count``: accumulator x resolution (uJ)."""
    counts = _number(info.get("energy_accumulator", info.get("power")))
    resolution_uj = _number(info.get("counter_resolution"))
    if counts is None or resolution_uj is None:
        return None
    return counts * resolution_uj * 1e-6


def parse_activity(info: Mapping[str, Any]) -> float | None:
    """Graphics-engine activity in percent from ``amdsmi_get_gpu_activity``."""
    return _number(info.get("gfx_activity"))


def decode_indep_throttle_status(mask: Any) -> tuple[str, ...]:
    """Names of the throttlers set in ``indep_throttle_status``; unknown bits as ``unknown_bit<n>``."""
    value = _number(mask)
    if value is None:
        return ()
    bits = int(value)
    if bits < 0 or bits >= 1 << 64:
        return ()  # amdsmi's "not available" sentinels, if not already turned into "N/A"
    known = {bit: name for bit, name in INDEP_THROTTLE_BITS}
    return tuple(known.get(bit, f"unknown_bit{bit}") for bit in range(64) if bits >> bit & 1)


def decode_violation_status(info: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the violations ``amdsmi_get_violation_status`` reports as active now."""
    return tuple(name for key, name in VIOLATION_KEYS if info.get(key) is True or info.get(key) == 1)


def parse_process_list(rows: Iterable[Mapping[str, Any]], own_pid: int) -> tuple[dict[str, Any], ...]:
    """Processes other than ``own_pid``: pid, name, memory_bytes (VRAM, where given)."""
    out = []
    for row in rows:
        pid = int(row.get("pid", -1))
        if pid == own_pid or pid < 0:
            continue
        memory = _number(row.get("mem"))
        if memory is None:
            memory = _number((row.get("memory_usage") or {}).get("vram_mem"))
        out.append({"pid": pid, "name": str(row.get("name") or "?"),
                    "memory_bytes": int(memory) if memory is not None else None})
    return tuple(out)


def load_amdsmi() -> ModuleType:
    """Import ``amdsmi`` (``MissingExtraError`` naming the ``rocm`` extra when it is absent)."""
    return require_extra("amdsmi", "rocm")


class AmdsmiTelemetry(VendorLibrary):
    """Telemetry of one AMD GPU, chosen by amdsmi ``index`` or (preferred) ``pci_bus_id``."""

    def __init__(self, index: int | None = None, *, pci_bus_id: str | None = None,
                 amdsmi: ModuleType | None = None) -> None:
        self._smi = amdsmi if amdsmi is not None else load_amdsmi()
        self._open_library(self._smi, "amdsmi", "AmdSmiException", "amdsmi_init", "amdsmi_shut_down")
        try:
            self.handle = self._find_handle(index, pci_bus_id)
        except BaseException:
            self.close()
            raise
        gfx = self._call("amdsmi_get_clock_info", self.handle, self._clock_type("GFX"))
        self.max_sm_clock_mhz = parse_clock_info(gfx)[1] if gfx else None

    def _find_handle(self, index: int | None, pci_bus_id: str | None) -> Any:
        handles = list(self._smi.amdsmi_get_processor_handles())
        if pci_bus_id is not None:
            wanted = normalize_pci_bus_id(pci_bus_id)
            for handle in handles:
                if normalize_pci_bus_id(str(self._smi.amdsmi_get_gpu_device_bdf(handle))) == wanted:
                    return handle
            raise LookupError(f"amdsmi sees no GPU at PCI bus id {pci_bus_id!r}")
        position = 0 if index is None else index
        if not 0 <= position < len(handles):
            raise LookupError(f"amdsmi sees {len(handles)} GPU(s); there is no index {position}")
        return handles[position]

    def _clock_type(self, name: str) -> Any:
        return getattr(getattr(self._smi, "AmdSmiClkType", None), name, name)

    def sm_clock_mhz(self) -> float | None:
        """The graphics (shader) clock now, in MHz."""
        gfx = self._call("amdsmi_get_clock_info", self.handle, self._clock_type("GFX"))
        return parse_clock_info(gfx)[0] if gfx else None

    def temperature_c(self) -> float | None:
        types = getattr(self._smi, "AmdSmiTemperatureType", None)
        metric = getattr(getattr(self._smi, "AmdSmiTemperatureMetric", None), "CURRENT", 0)
        for sensor in ("HOTSPOT", "EDGE"):
            kind = getattr(types, sensor, None)
            if kind is None:
                continue
            value = _number(self._call("amdsmi_get_temp_metric", self.handle, kind, metric))
            if value is not None:
                return value
        return None

    def _throttle_state(self) -> tuple[tuple[str, ...], bool]:
        """Active violations (where amdsmi has them) and the driver's throttler bits, and whether
        amdsmi answered either query."""
        reasons: list[str] = []
        violations = self._call("amdsmi_get_violation_status", self.handle)
        if violations:
            reasons.extend(decode_violation_status(violations))
        metrics = self._call("amdsmi_get_gpu_metrics_info", self.handle)
        if metrics:
            reasons.extend(r for r in decode_indep_throttle_status(metrics.get("indep_throttle_status"))
                           if r not in reasons)
        return tuple(reasons), bool(violations or metrics)

    def throttle_reasons(self) -> tuple[str, ...]:
        """Active violations (where amdsmi has them) and the driver's throttler bits."""
        return self._throttle_state()[0]

    def throttling(self) -> bool | None:
        """Whether any throttler or violation is active; None when amdsmi answers neither query."""
        reasons, answered = self._throttle_state()
        return bool(reasons) if answered else None

    def processes(self) -> tuple[dict[str, Any], ...]:
        rows = self._call("amdsmi_get_gpu_process_list", self.handle) or []
        infos: list[Mapping[str, Any]] = []
        for row in rows:
            if isinstance(row, Mapping):
                infos.append(row)
            else:  # an older amdsmi lists process handles
                info = self._call("amdsmi_get_gpu_process_info", self.handle, row)
                if isinstance(info, Mapping):
                    infos.append(info)
        return parse_process_list(infos, os.getpid())

    def energy_j(self) -> float | None:
        """Cumulative energy in J (``amdsmi_get_energy_count``); None where it is not reported.
        One call: read around a case's samples."""
        energy = self._call("amdsmi_get_energy_count", self.handle)
        return parse_energy_count(energy) if energy else None

    def read(self) -> DeviceTelemetry:
        """Every reading amdsmi gives for this GPU now; unreadable ones are None."""
        h = self.handle
        mem = self._call("amdsmi_get_clock_info", h, self._clock_type("MEM"))
        power = self._call("amdsmi_get_power_info", h)
        activity = self._call("amdsmi_get_gpu_activity", h)
        return DeviceTelemetry(
            sm_clock_mhz=self.sm_clock_mhz(),
            mem_clock_mhz=parse_clock_info(mem)[0] if mem else None,
            max_sm_clock_mhz=self.max_sm_clock_mhz,
            throttle_reasons=self.throttle_reasons(),
            power_w=parse_power_info(power) if power else None,
            energy_j=self.energy_j(),
            temperature_c=self.temperature_c(),
            utilization_pct=parse_activity(activity) if activity else None,
            processes=self.processes(),
        )

    def identity(self) -> dict[str, str]:
        """Name, uuid, PCI bus id, PCI device id and driver version, where readable."""
        out: dict[str, str] = {}
        asic = self._call("amdsmi_get_gpu_asic_info", self.handle) or {}
        if asic.get("market_name"):
            out["name"] = str(asic["market_name"])
        device_id = format_pci_id(asic.get("device_id"))
        if device_id:
            out["pci_device_id"] = device_id
        uuid = self._call("amdsmi_get_gpu_device_uuid", self.handle)
        if uuid:
            out["uuid"] = str(uuid)
        bdf = self._call("amdsmi_get_gpu_device_bdf", self.handle)
        if bdf:
            out["pci_bus_id"] = normalize_pci_bus_id(str(bdf))
        driver = self._call("amdsmi_get_gpu_driver_info", self.handle) or {}
        if driver.get("driver_version"):
            out["driver"] = str(driver["driver_version"])
        return out
