"""CPU counters of this process through ``perf_event_open(2)`` (ctypes, no perf tool needed).

One counter group per event class and per thread of the process (``/proc/self/task``): software
events (task-clock, context-switches, cpu-migrations, page-faults) always; hardware events
(cycles, instructions, cache references and misses, LLC read misses) where the kernel exposes a
core PMU. Groups are read with ``PERF_FORMAT_GROUP`` and scaled by time enabled over time running,
so a multiplexed group still gives an estimate (and a note says it was multiplexed).

What is there is found out, not assumed: :func:`pmu_sources` lists ``/sys/bus/event_source/devices``
and every event is opened once by :meth:`PerfEventSource.available`; the error of one that fails
becomes its reason (no PMU, no permission under ``perf_event_paranoid``, not supported).

FP operations by vector width and DRAM traffic have no generic ``perf_event_open`` encoding: they
are model-specific raw events (the CPU vendor's event tables) or uncore PMUs counted system-wide;
they are reported missing with that reason. ``perf stat`` (:mod:`.perf_stat`) resolves such
names where perf's tables know the CPU.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..measure.readings import CounterReading

EVENT_SOURCE_DIR = "/sys/bus/event_source/devices"
PARANOID_PATH = "/proc/sys/kernel/perf_event_paranoid"

# linux/perf_event.h
PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_TYPE_HW_CACHE = 3
PERF_FORMAT_TOTAL_TIME_ENABLED = 1
PERF_FORMAT_TOTAL_TIME_RUNNING = 2
PERF_FORMAT_GROUP = 8
_READ_FORMAT = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
_FLAG_EXCLUDE_KERNEL = 1 << 5
_FLAG_EXCLUDE_HV = 1 << 6
#: ``perf_event_open`` syscall numbers (asm/unistd.h).
SYSCALL_NUMBERS = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331, "riscv64": 241}
#: Names of a core (CPU) PMU in /sys/bus/event_source/devices: x86 ``cpu``, Intel hybrid
#: ``cpu_core``/``cpu_atom``, Arm ``armv8_*`` / ``armv9_*``, POWER ``cpu``.
CORE_PMU_PREFIXES = ("cpu", "armv8", "armv9", "arm_")


@dataclass(frozen=True)
class EventSpec:
    """One event: its name in the run file, the group it is read with, perf type and config.
    Software events count seconds as nanoseconds (``scale`` 1e-9 turns task-clock into s)."""

    name: str
    group: str
    type: int
    config: int
    scale: float = 1.0


def _cache(cache: int, op: int, result: int) -> int:
    return cache | (op << 8) | (result << 16)


#: The events, grouped as they are opened (a group's members are scheduled together).
EVENTS: tuple[EventSpec, ...] = (
    EventSpec("task-clock-s", "software", PERF_TYPE_SOFTWARE, 1, 1e-9),   # PERF_COUNT_SW_TASK_CLOCK
    EventSpec("context-switches", "software", PERF_TYPE_SOFTWARE, 3),
    EventSpec("cpu-migrations", "software", PERF_TYPE_SOFTWARE, 4),
    EventSpec("page-faults", "software", PERF_TYPE_SOFTWARE, 2),
    EventSpec("cycles", "core", PERF_TYPE_HARDWARE, 0),
    EventSpec("instructions", "core", PERF_TYPE_HARDWARE, 1),
    EventSpec("cache-references", "cache", PERF_TYPE_HARDWARE, 2),
    EventSpec("cache-misses", "cache", PERF_TYPE_HARDWARE, 3),
    # PERF_COUNT_HW_CACHE_LL, OP_READ, RESULT_MISS
    EventSpec("llc-read-misses", "llc", PERF_TYPE_HW_CACHE, _cache(2, 0, 1)),
)
#: Events with no portable encoding, and why (reported missing on every machine).
NOT_PORTABLE = {
    "fp-ops-by-width": "no portable perf_event_open encoding: FP operations by vector width are model-specific "
                       "raw events (Intel FP_ARITH_INST_RETIRED.*, AMD FpRetSseAvxOps); count them with perf stat "
                       "on a CPU whose event tables perf knows",
    "dram-bytes": "DRAM traffic is counted by uncore PMUs (Intel uncore_imc, AMD amd_df) system-wide, not per "
                  "process; not collected per case",
}


class _Attr(ctypes.Structure):
    # struct perf_event_attr up to config2 (PERF_ATTR_SIZE_VER1, 72 bytes); the kernel accepts it.
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32),
                ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64)]


def pmu_sources(directory: str = EVENT_SOURCE_DIR) -> tuple[str, ...]:
    """The PMUs the kernel exposes (``/sys/bus/event_source/devices``), sorted; () when unreadable."""
    try:
        return tuple(sorted(os.listdir(directory)))
    except OSError:
        return ()


def core_pmu(sources: Sequence[str]) -> str | None:
    """The core PMU among ``sources`` (``cpu``, ``cpu_core``, ``armv8_pmuv3_0``...), else None."""
    for name in sources:
        if name.startswith(CORE_PMU_PREFIXES):
            return name
    return None


def paranoid_level(path: str = PARANOID_PATH) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def failure_reason(event: EventSpec, err: int, sources: Sequence[str], paranoid: int | None,
                   directory: str = EVENT_SOURCE_DIR) -> str:
    """Why ``event`` could not be opened (``err`` the errno), in words a run file reader can act on."""
    if event.type in (PERF_TYPE_HARDWARE, PERF_TYPE_HW_CACHE) and core_pmu(sources) is None \
            and err in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL):
        listed = " ".join(sources) if sources else "nothing"
        return (f"no PMU: {directory} has no 'cpu' source (virtual machine without PMU passthrough); "
                f"it lists {listed}")
    if err in (errno.EACCES, errno.EPERM):
        return (f"no permission: perf_event_open refused ({errno.errorcode.get(err, err)}) with "
                f"perf_event_paranoid={paranoid}; lower it (sysctl kernel.perf_event_paranoid=1) or grant "
                "CAP_PERFMON")
    if err == errno.ENOSYS:
        return "perf_event_open is not available in this kernel"
    return f"not supported here: perf_event_open failed with {errno.errorcode.get(err, err)} ({os.strerror(err)})"


class PerfEventSource:
    """Counters of every thread of this process (``CounterSource``).

    ``events`` defaults to :data:`EVENTS`. Threads started after :meth:`start` are picked up by
    the next :meth:`start` call (the collector calls it before each batch until sampling begins);
    the reading's notes say when a thread appeared later and was not counted."""

    name = "perf_event_open"

    def __init__(self, events: Sequence[EventSpec] = EVENTS, *, directory: str = EVENT_SOURCE_DIR) -> None:
        self.events = tuple(events)
        self._directory = directory
        self._sources = pmu_sources(directory)
        self._paranoid = paranoid_level()
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._syscall = SYSCALL_NUMBERS.get(platform.machine())
        # group -> thread id -> (leader fd, member fds in order); events of each group in order.
        self._fds: dict[str, dict[int, list[int]]] = {}
        self._groups: dict[str, list[EventSpec]] = {}
        self._base: dict[str, float] = {}
        self._missing: dict[str, str] = {}
        self._probed: tuple[tuple[str, ...], dict[str, str]] | None = None
        self.multiplexed: set[str] = set()

    # -- opening ----------------------------------------------------------------------------
    def _flags(self, event: EventSpec) -> int:
        # Unprivileged under paranoid >= 2 a process may count only its own user space.
        restricted = os.geteuid() != 0 and (self._paranoid or 0) >= 2
        return _FLAG_EXCLUDE_KERNEL | _FLAG_EXCLUDE_HV if restricted and event.type != PERF_TYPE_SOFTWARE else 0

    def _open(self, event: EventSpec, tid: int, group_fd: int) -> int:
        """The fd of ``event`` on thread ``tid`` (in the group of ``group_fd``, -1: a leader);
        raises OSError with the errno."""
        if self._syscall is None:
            raise OSError(errno.ENOSYS, f"no perf_event_open syscall number known for {platform.machine()}")
        attr = _Attr(type=event.type, size=ctypes.sizeof(_Attr), config=event.config,
                     read_format=_READ_FORMAT, flags=self._flags(event))
        fd = self._libc.syscall(self._syscall, ctypes.byref(attr), tid, -1, group_fd, 0)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return int(fd)

    def available(self) -> tuple[tuple[str, ...], Mapping[str, str]]:
        if self._probed is None:
            found: list[str] = []
            missing: dict[str, str] = {}
            for event in self.events:
                try:
                    os.close(self._open(event, 0, -1))
                    found.append(event.name)
                except OSError as exc:
                    missing[event.name] = failure_reason(event, exc.errno or 0, self._sources, self._paranoid,
                                                         self._directory)
            missing.update(NOT_PORTABLE)
            self._probed = (tuple(found), missing)
        return self._probed

    def _threads(self) -> list[int]:
        try:
            return sorted(int(t) for t in os.listdir("/proc/self/task"))
        except OSError:
            return [os.getpid()]

    def start(self) -> None:
        counted, missing = self.available()
        if not self._groups:
            self._missing = dict(missing)
            for event in self.events:
                if event.name in counted:
                    self._groups.setdefault(event.group, []).append(event)
        if not self._fds:
            self.multiplexed = set()
        for group, events in self._groups.items():
            per_thread = self._fds.setdefault(group, {})
            for tid in self._threads():
                if tid in per_thread:
                    continue
                fds: list[int] = []
                try:
                    for event in events:
                        fds.append(self._open(event, tid, fds[0] if fds else -1))
                except OSError:
                    for fd in fds:          # a thread that exited meanwhile: skip it
                        os.close(fd)
                    continue
                per_thread[tid] = fds

    def read(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for group, per_thread in self._fds.items():
            events = self._groups[group]
            size = 8 * (3 + len(events))
            for fds in per_thread.values():
                raw = os.read(fds[0], size)
                nr, enabled, running, *values = struct.unpack(f"{3 + len(events)}Q", raw[:size])
                if running == 0:
                    continue
                scale = enabled / running
                if running < enabled:
                    self.multiplexed.add(group)
                for event, value in zip(events, values[:nr]):
                    totals[event.name] = totals.get(event.name, 0.0) + value * scale * event.scale
        return totals

    def threads_counted(self) -> int:
        return max((len(per_thread) for per_thread in self._fds.values()), default=0)

    def stop(self) -> CounterReading:
        totals = self.read()
        notes = self.notes()
        self.close()
        return CounterReading(totals, dict(self._missing), self.name, 1, "call", notes)

    def notes(self) -> tuple[str, ...]:
        notes = [f"threads counted: {self.threads_counted()}"]
        started = set(self._threads()) - {tid for per in self._fds.values() for tid in per}
        if started and self._fds:
            notes.append(f"{len(started)} thread(s) started after counting began were not counted")
        if self.multiplexed:
            notes.append(f"multiplexed (scaled by time enabled / running): {', '.join(sorted(self.multiplexed))}")
        if self._fds and any(self._flags(e) for e in self.events):
            notes.append(f"user space only (perf_event_paranoid={self._paranoid})")
        return tuple(notes)

    def close(self) -> None:
        for fd in (fd for per_thread in self._fds.values() for fds in per_thread.values() for fd in reversed(fds)):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = {}
