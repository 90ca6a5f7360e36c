"""A :class:`~.result.SimResult` as Chrome trace-event JSON (the format Perfetto and
``chrome://tracing`` open): one process for the host and one for the device; a track (thread)
for the host's dispatch, one per stream and one per resource; counters for each resource's
bandwidth and for the device's power.

Events: ``M`` metadata naming processes and threads, ``X`` complete events (``ts`` and ``dur``
in microseconds), ``C`` counters. Every event carries ``ph``, ``ts``, ``pid``, ``tid``, ``name``;
every number is finite (an unknown energy is null), so the trace is strict JSON.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .result import SimResult

HOST_PID, DEVICE_PID = 1, 2
_US = 1e6


def _meta(pid: int, tid: int, what: str, name: str) -> dict[str, Any]:
    return {"ph": "M", "ts": 0, "pid": pid, "tid": tid, "name": what, "args": {"name": name}}


def trace_events(result: "SimResult") -> list[dict[str, Any]]:
    """The events of ``result`` (module docstring); empty tracks when it kept no ops."""
    ops = sorted(result.ops, key=lambda op: (op.start_s, op.stream, op.name))
    streams = sorted({op.stream for op in ops})
    resources = sorted({name for op in ops for name in op.moved} | {op.bound for op in ops if op.bound == "compute"})
    events: list[dict[str, Any]] = [
        _meta(HOST_PID, 0, "process_name", "host"), _meta(HOST_PID, 0, "thread_name", "dispatch"),
        _meta(DEVICE_PID, 0, "process_name", f"{result.target} (device 0 of {result.devices})")]
    stream_tid = {stream: 1 + index for index, stream in enumerate(streams)}
    resource_tid = {name: 1000 + index for index, name in enumerate(resources)}
    for stream, tid in stream_tid.items():
        events.append(_meta(DEVICE_PID, tid, "thread_name", f"stream {stream}"))
    for name, tid in resource_tid.items():
        events.append(_meta(DEVICE_PID, tid, "thread_name", name))
    previous_issue = 0.0
    for op in sorted(result.ops, key=lambda op: op.issue_s):
        events.append({"ph": "X", "ts": previous_issue * _US, "dur": max(op.issue_s - previous_issue, 0.0) * _US,
                       "pid": HOST_PID, "tid": 0, "name": f"dispatch {op.name}", "cat": "host"})
        previous_issue = op.issue_s
    for op in ops:
        duration = max(op.end_s - op.start_s, 0.0)
        # An op's energy is NaN where the target has no power figures: null in JSON, never a NaN token.
        energy_j = op.energy_j if math.isfinite(op.energy_j) else None
        args = {"op_class": op.op_class, "bound": op.bound, "energy_j": energy_j, "issue_us": op.issue_s * _US}
        events.append({"ph": "X", "ts": op.start_s * _US, "dur": duration * _US, "pid": DEVICE_PID,
                       "tid": stream_tid[op.stream], "name": op.name, "cat": op.op_class, "args": args})
        used = set(op.moved) | ({"compute"} if op.bound == "compute" else set())
        for name in used:
            events.append({"ph": "X", "ts": op.start_s * _US, "dur": duration * _US, "pid": DEVICE_PID,
                           "tid": resource_tid[name], "name": op.name, "cat": name})
        for name, moved in op.moved.items():
            rate = moved / duration if duration > 0 else 0.0
            events.append({"ph": "C", "ts": op.start_s * _US, "pid": DEVICE_PID, "tid": 0,
                           "name": f"{name} bandwidth", "args": {"bytes_per_s": rate}})
            events.append({"ph": "C", "ts": op.end_s * _US, "pid": DEVICE_PID, "tid": 0,
                           "name": f"{name} bandwidth", "args": {"bytes_per_s": 0.0}})
        if duration > 0 and energy_j is not None:
            events.append({"ph": "C", "ts": op.start_s * _US, "pid": DEVICE_PID, "tid": 0, "name": "dynamic power",
                           "args": {"watts": op.energy_j / duration}})
            events.append({"ph": "C", "ts": op.end_s * _US, "pid": DEVICE_PID, "tid": 0, "name": "dynamic power",
                           "args": {"watts": 0.0}})
    return events
