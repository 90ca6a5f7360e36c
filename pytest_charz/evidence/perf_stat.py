"""``perf stat`` as a counter source for a separate run: the argv that re-runs a command (or a
case) under it, and the parser of its CSV output (``perf stat -x,``).

``perf stat -x, -e EVENTS -- COMMAND`` writes, on stderr (or ``-o FILE``), one line per event::

    counter-value,unit,event-name,run-time-ns,percent-running,metric-value,metric-unit

with ``<not supported>`` or ``<not counted>`` in place of the value for an event the machine
cannot count (perf's documentation, ``perf-stat(1)``, "CSV FORMAT"). Software events are counted
everywhere; the value of ``task-clock`` is in ``msec``. Unlike :mod:`.perf_events` (in process,
per timed batch), this counts a whole process, warm-up and start-up included: it is for
re-running selected cases and for CPUs whose model-specific event names perf resolves
(``fp_arith_inst_retired.256b_packed_double``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..measure.readings import CounterReading

DEFAULT_EVENTS = ("task-clock", "context-switches", "cpu-migrations", "page-faults", "cycles", "instructions",
                  "cache-references", "cache-misses")
NOT_SUPPORTED = "<not supported>"
NOT_COUNTED = "<not counted>"
#: perf's units -> factor to the run file's unit (task-clock -> ``task-clock-s``).
_UNIT_SCALE = {"msec": 1e-3, "usec": 1e-6, "nsec": 1e-9, "sec": 1.0}


@dataclass(frozen=True)
class PerfStatLine:
    """One event line of ``perf stat -x,``: value None when not counted, with why in ``status``."""

    event: str
    value: float | None
    unit: str
    run_time_ns: float | None
    running_pct: float | None
    status: str = ""


def perf_stat_argv(command: Sequence[str], events: Sequence[str] = DEFAULT_EVENTS, *, perf: str = "perf",
                   output: str | None = None, separator: str = ",") -> list[str]:
    """``perf stat`` counting ``events`` of ``command`` (an argv; its items stay single arguments)."""
    argv = [perf, "stat", "-x", separator, "--no-big-num", "-e", ",".join(events)]
    if output is not None:
        argv += ["-o", output]
    return argv + ["--", *command]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_perf_stat(text: str, separator: str = ",") -> list[PerfStatLine]:
    """The event lines of ``perf stat -x<separator>`` output (comments and blank lines skipped)."""
    lines: list[PerfStatLine] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(separator)
        if len(fields) < 3:
            continue
        value_text, unit, event = fields[0].strip(), fields[1].strip(), fields[2].strip()
        if value_text in (NOT_SUPPORTED, NOT_COUNTED):
            value, status = None, value_text.strip("<>")
        else:
            value, status = _number(value_text), ""
            if value is None:
                continue  # not an event line (perf's own messages on stderr)
        run_time = _number(fields[3]) if len(fields) > 3 else None
        running = _number(fields[4]) if len(fields) > 4 else None
        lines.append(PerfStatLine(event, value, unit, run_time, running, status))
    return lines


def counters_from_perf_stat(lines: Sequence[PerfStatLine], calls: int = 1, *,
                            no_pmu_reason: str | None = None) -> CounterReading:
    """A CounterReading of parsed lines divided by ``calls``; events perf could not count are
    missing with perf's word for it (and ``no_pmu_reason`` when the machine has no PMU)."""
    values: dict[str, float] = {}
    missing: dict[str, str] = {}
    notes: list[str] = []
    for line in lines:
        if line.value is None:
            why = f"perf stat: {line.status}"
            missing[line.event] = f"{why} ({no_pmu_reason})" if no_pmu_reason and line.status == "not supported" \
                else why
            continue
        scale = _UNIT_SCALE.get(line.unit, 1.0)
        name = f"{line.event}-s" if line.unit in _UNIT_SCALE else line.event
        values[name] = line.value * scale / max(calls, 1)
        if line.running_pct is not None and line.running_pct < 100.0:
            notes.append(f"{line.event} multiplexed: counted {line.running_pct:.1f}% of the time, scaled by perf")
    return CounterReading(values, missing, "perf-stat", calls, "call", tuple(notes))
