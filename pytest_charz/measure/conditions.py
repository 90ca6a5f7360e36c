"""Conditions: what was true on the machine and the device while measuring.

A :class:`Snapshot` is taken before and after each case; :func:`compare` turns the pair into the
interval's figures (steal fraction, load, clock changes, throttling, energy) and flags the ones a
performance engineer would call suspicious. Device backends fill ``device`` with their telemetry
(:class:`DeviceTelemetry`); the host part is read here from ``/proc`` and sysfs.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from . import clock

# A case whose interval shows more than this fraction of CPU time stolen by the hypervisor, or
# other processes busier than this many CPUs' worth, is flagged: its numbers may be disturbed.
STEAL_FRACTION_SUSPICIOUS = 0.02
OTHER_LOAD_SUSPICIOUS_CPUS = 0.25


@dataclass(frozen=True)
class DeviceTelemetry:
    """Accelerator readings at one instant; every field is optional (None = not readable)."""

    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    power_w: float | None = None
    energy_j: float | None = None          # cumulative counter since driver load
    temperature_c: float | None = None
    utilization_pct: float | None = None
    processes: tuple[Mapping[str, Any], ...] = ()   # other processes on the device: pid, name, memory

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["throttle_reasons"] = list(self.throttle_reasons)
        data["processes"] = [dict(p) for p in self.processes]
        return data


@dataclass(frozen=True)
class Snapshot:
    """Host and device state at one instant."""

    wall_time: float
    load_avg: tuple[float, float, float] | None = None
    cpu_times: Mapping[str, float] = field(default_factory=dict)   # cumulative jiffies: total, steal, idle, iowait
    cpu_freq_mhz: tuple[float, ...] = ()          # per logical CPU, where readable
    governor: str | None = None
    busy_processes: tuple[Mapping[str, Any], ...] = ()   # other processes using CPU: pid, name, cpu_s
    device: DeviceTelemetry | None = None
    core_clock_mhz: float | None = None           # measured by the clock probe where cpufreq is absent

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_time": self.wall_time,
            "load_avg": list(self.load_avg) if self.load_avg else None,
            "cpu_times": dict(self.cpu_times),
            "cpu_freq_mhz": list(self.cpu_freq_mhz),
            "governor": self.governor,
            "busy_processes": [dict(p) for p in self.busy_processes],
            "device": self.device.to_json() if self.device else None,
            "core_clock_mhz": self.core_clock_mhz,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Snapshot":
        device = data.get("device")
        return cls(
            wall_time=float(data.get("wall_time", 0.0)),
            load_avg=tuple(data["load_avg"]) if data.get("load_avg") else None,  # type: ignore[arg-type]
            cpu_times=dict(data.get("cpu_times") or {}),
            cpu_freq_mhz=tuple(data.get("cpu_freq_mhz") or ()),
            governor=data.get("governor"),
            busy_processes=tuple(data.get("busy_processes") or ()),
            device=DeviceTelemetry(
                **{
                    **device,
                    "throttle_reasons": tuple(device.get("throttle_reasons") or ()),
                    "processes": tuple(device.get("processes") or ()),
                }
            )
            if device
            else None,
            core_clock_mhz=data.get("core_clock_mhz"),
        )


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def read_cpu_times(stat_text: str | None = None) -> dict[str, float]:
    """Cumulative CPU time (jiffies) from the ``cpu`` line of ``/proc/stat``."""
    text = stat_text if stat_text is not None else _read("/proc/stat")
    if not text:
        return {}
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [float(v) for v in line.split()[1:]]
            names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice"]
            fields = dict(zip(names, values))
            # guest time is already counted in user/nice
            total = sum(values[:8])
            return {"total": total, "idle": fields.get("idle", 0.0) + fields.get("iowait", 0.0),
                    "steal": fields.get("steal", 0.0)}
    return {}


def read_cpu_freq_mhz(cpuinfo_text: str | None = None) -> tuple[float, ...]:
    """Current frequency per logical CPU: cpufreq's scaling_cur_freq, else /proc/cpuinfo's MHz."""
    freqs: list[float] = []
    cpu = 0
    while True:
        text = _read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
        if text is None:
            break
        freqs.append(float(text) / 1000.0)
        cpu += 1
    if freqs:
        return tuple(freqs)
    text = cpuinfo_text if cpuinfo_text is not None else _read("/proc/cpuinfo")
    for line in (text or "").splitlines():
        if line.lower().startswith("cpu mhz"):
            try:
                freqs.append(float(line.split(":", 1)[1]))
            except ValueError:
                pass
    return tuple(freqs)


def read_core_clock_mhz() -> float | None:
    """The clock of the core this thread runs on, measured (about a millisecond), where the OS
    gives no current frequency (virtual machines): turbo changes then still show in the
    conditions. None where the probe cannot be built."""
    if os.path.exists("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"):
        return None
    from ..errors import CharzError
    from ..kernels.clock_probe import measure_core_clock_mhz

    try:
        return round(measure_core_clock_mhz(adds=1_000_000, repeats=3), 1)
    except (CharzError, OSError):
        return None


def read_governor() -> str | None:
    text = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    return text.strip() if text else None


def read_busy_processes(exclude_pids: frozenset[int] = frozenset(), top: int = 5) -> tuple[dict[str, Any], ...]:
    """Other processes with cumulative CPU time, most first (needs psutil; empty without it).

    This process and its descendants are not "other": a case's own helper processes (the peer
    ranks of a collective) are part of what it measures, not load beside it."""
    try:
        import psutil
    except ImportError:
        return ()
    mine = {os.getpid(), *exclude_pids}
    try:
        mine.update(child.pid for child in psutil.Process().children(recursive=True))
    except psutil.Error:
        pass  # this process's own table vanished mid-read: count every other process as before
    rows = []
    for proc in psutil.process_iter(["pid", "name", "cpu_times"]):
        info = proc.info
        if info["pid"] in mine or info.get("cpu_times") is None:
            continue
        times = info["cpu_times"]
        rows.append({"pid": info["pid"], "name": info.get("name") or "?", "cpu_s": times.user + times.system})
    rows.sort(key=lambda r: r["cpu_s"], reverse=True)
    return tuple(rows[: max(top * 8, 40)])


def host_snapshot(device: DeviceTelemetry | None = None, exclude_pids: frozenset[int] = frozenset()) -> Snapshot:
    """Read the host's state now (and attach the device's telemetry, when given). The processes
    in ``exclude_pids`` are not load: a sibling that measures only while this process waits for
    its turn (:mod:`pytest_charz.measure.turns`)."""
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return Snapshot(
        wall_time=clock.wall_time(),
        load_avg=load,
        cpu_times=read_cpu_times(),
        cpu_freq_mhz=read_cpu_freq_mhz(),
        governor=read_governor(),
        busy_processes=read_busy_processes(exclude_pids),
        device=device,
        core_clock_mhz=read_core_clock_mhz(),
    )


@dataclass(frozen=True)
class Interval:
    """What happened between two snapshots, and what about it is suspicious."""

    duration_s: float
    steal_fraction: float | None
    busy_fraction: float | None           # of all CPUs, everyone included
    other_cpu_s_per_s: float | None       # CPU-seconds per second used by other processes
    top_other_processes: tuple[Mapping[str, Any], ...]
    load_avg_after: float | None
    cpu_freq_change: float | None         # relative change of the mean frequency, after/before - 1
    energy_j: float | None
    throttle_reasons: tuple[str, ...]
    device_processes: int | None
    flags: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["top_other_processes"] = [dict(p) for p in self.top_other_processes]
        data["throttle_reasons"] = list(self.throttle_reasons)
        data["flags"] = list(self.flags)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Interval":
        def number(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        processes = data.get("device_processes")
        return cls(
            duration_s=float(data.get("duration_s") or 0.0),
            steal_fraction=number("steal_fraction"),
            busy_fraction=number("busy_fraction"),
            other_cpu_s_per_s=number("other_cpu_s_per_s"),
            top_other_processes=tuple(dict(p) for p in data.get("top_other_processes") or ()),
            load_avg_after=number("load_avg_after"),
            cpu_freq_change=number("cpu_freq_change"),
            energy_j=number("energy_j"),
            throttle_reasons=tuple(str(r) for r in data.get("throttle_reasons") or ()),
            device_processes=None if processes is None else int(processes),
            flags=tuple(str(f) for f in data.get("flags") or ()),
        )


def compare(before: Snapshot, after: Snapshot) -> Interval:
    """Figures for the interval between two snapshots, with flags for suspicious conditions."""
    duration = max(after.wall_time - before.wall_time, 0.0)
    flags: list[str] = []
    steal = busy = None
    if before.cpu_times and after.cpu_times:
        total = after.cpu_times["total"] - before.cpu_times["total"]
        if total > 0:
            steal = (after.cpu_times["steal"] - before.cpu_times["steal"]) / total
            busy = 1.0 - (after.cpu_times["idle"] - before.cpu_times["idle"]) / total
    if steal is not None and steal > STEAL_FRACTION_SUSPICIOUS:
        flags.append("steal")

    other_rate = None
    top: list[dict[str, Any]] = []
    if before.busy_processes or after.busy_processes:
        previous = {p["pid"]: p["cpu_s"] for p in before.busy_processes}
        used = []
        for proc in after.busy_processes:
            delta = proc["cpu_s"] - previous.get(proc["pid"], proc["cpu_s"])
            if delta > 0:
                used.append({"pid": proc["pid"], "name": proc["name"], "cpu_s": delta})
        used.sort(key=lambda r: r["cpu_s"], reverse=True)
        top = used[:5]
        if duration > 0:
            other_rate = sum(r["cpu_s"] for r in used) / duration
            if other_rate > OTHER_LOAD_SUSPICIOUS_CPUS:
                flags.append("other-load")

    freq_change = None
    if before.core_clock_mhz and after.core_clock_mhz:
        freq_change = after.core_clock_mhz / before.core_clock_mhz - 1.0
        if abs(freq_change) > 0.05:
            flags.append("cpu-clock-changed")
    elif before.cpu_freq_mhz and after.cpu_freq_mhz:
        b = sum(before.cpu_freq_mhz) / len(before.cpu_freq_mhz)
        a = sum(after.cpu_freq_mhz) / len(after.cpu_freq_mhz)
        if b > 0:
            freq_change = a / b - 1.0
            if abs(freq_change) > 0.05:
                flags.append("cpu-clock-changed")

    energy = None
    reasons: tuple[str, ...] = ()
    device_processes = None
    if after.device is not None:
        if before.device is not None and before.device.energy_j is not None and after.device.energy_j is not None:
            energy = after.device.energy_j - before.device.energy_j
        reasons = tuple(sorted(set((before.device.throttle_reasons if before.device else ()) + after.device.throttle_reasons)))
        # Idle is the normal state between launches, not a slowdown.
        if [r for r in reasons if r not in ("gpu_idle", "idle")]:
            flags.append("throttled")
        device_processes = len(after.device.processes)
        if after.device.processes:
            flags.append("device-shared")
    return Interval(
        duration_s=duration,
        steal_fraction=steal,
        busy_fraction=busy,
        other_cpu_s_per_s=other_rate,
        top_other_processes=tuple(top),
        load_avg_after=after.load_avg[0] if after.load_avg else None,
        cpu_freq_change=freq_change,
        energy_j=energy,
        throttle_reasons=reasons,
        device_processes=device_processes,
        flags=tuple(flags),
    )
