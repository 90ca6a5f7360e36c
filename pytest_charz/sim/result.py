"""What a simulation returns: :class:`SimResult` (latency, energy, utilization, bottleneck,
per-op timeline) and the options it ran under, :class:`SimOptions`."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import UsageError
from ..formats import SIM_RESULT
from .defaults import LAUNCH_QUEUE_DEPTH


@dataclass(frozen=True)
class SimOptions:
    """How a graph is run. ``graph_replay``: the ops are one captured graph, launched once.
    ``launch_queue_depth``: issued ops the host may run ahead by before it blocks.
    ``host_dispatch_s``: host time per op (default: the machine's ``dispatch_overhead``).
    ``trace``: keep the per-op timeline (``SimResult.ops``) for :meth:`SimResult.trace_events`;
    ``record_ops`` keeps it without asking for a trace. ``engine_step_s``: a serving engine's
    host time per step, before the graph's first op (a runtime profile's engine)."""

    graph_replay: bool = False
    launch_queue_depth: int = LAUNCH_QUEUE_DEPTH
    trace: bool = False
    host_dispatch_s: float | None = None
    record_ops: bool = False
    engine_step_s: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.launch_queue_depth, bool) or not isinstance(self.launch_queue_depth, int) \
                or self.launch_queue_depth < 1:
            raise UsageError(f"launch_queue_depth must be a positive integer, got {self.launch_queue_depth!r}")
        if self.host_dispatch_s is not None and (not isinstance(self.host_dispatch_s, (int, float))
                                                 or not self.host_dispatch_s >= 0):
            raise UsageError(f"host_dispatch_s must be a non-negative number of seconds, got {self.host_dispatch_s!r}")
        if not isinstance(self.engine_step_s, (int, float)) or not self.engine_step_s >= 0:
            raise UsageError(f"engine_step_s must be a non-negative number of seconds, got {self.engine_step_s!r}")

    def to_json(self) -> dict[str, Any]:
        return {"graph_replay": self.graph_replay, "launch_queue_depth": self.launch_queue_depth,
                "trace": self.trace, "host_dispatch_s": self.host_dispatch_s, "record_ops": self.record_ops,
                "engine_step_s": self.engine_step_s}


@dataclass(frozen=True)
class SimOp:
    """One op on the timeline (s from the first dispatch): when the host issued it, when it
    started on its stream and ended, the resource that bounded it, its dynamic energy (J, one
    device) and the bytes it moved per resource."""

    name: str
    op_class: str
    stream: int
    issue_s: float
    start_s: float
    end_s: float
    bound: str
    energy_j: float
    moved: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "op_class": self.op_class, "stream": self.stream, "issue_s": self.issue_s,
                "start_s": self.start_s, "end_s": self.end_s, "bound": self.bound, "energy_j": self.energy_j,
                "moved": dict(self.moved)}


@dataclass(frozen=True)
class BottleneckDetail:
    """Why the bottleneck is what it is. ``busy_s``: per resource, the time it was in use
    (weighted by the fraction used; for the host, its dispatch time; for ``launch``, the
    device's launch gaps); ``saturated_s``: the time each shared resource ran at its full rate;
    ``critical_path_s`` by op class (and ``host`` for dispatch the path waited on), and the
    number of ops on the path."""

    busy_s: Mapping[str, float]
    saturated_s: Mapping[str, float]
    critical_path_s: Mapping[str, float]
    critical_path_ops: int

    def to_json(self) -> dict[str, Any]:
        return {"busy_s": dict(self.busy_s), "saturated_s": dict(self.saturated_s),
                "critical_path_s": dict(self.critical_path_s), "critical_path_ops": self.critical_path_ops}


@dataclass(frozen=True)
class SimResult:
    """One simulated execution.

    ``latency_s`` end to end. ``energy_j`` and ``average_power_w`` are of all ``devices`` that run
    it (the tensor-parallel ranks of a graph; 1 for a single case), NaN where the target has no
    power figures. ``tokens_per_s`` and ``joules_per_token`` only for LLM prefill and decode.
    ``utilization`` per resource is its busy time over the latency. ``bottleneck`` names the
    resource busy the longest (``host``, ``launch``, ``compute``, ``memory:<level>``,
    ``link:<name>``). ``clock_mhz`` is the clock it ran at (lower than the machine's when the
    power cap bound). ``ops`` is empty unless a trace or the ops were asked for.

    ``bound`` is the schedule's (``host`` or ``device``, the rule ``predict_graph`` names its
    bound by: :func:`pytest_charz.workloads.schedule.graph_bound`) with ``host_s`` (the host's
    dispatch time) and ``device_s`` (the device's own critical path); empty for a single case.
    ``model`` names the prediction core that priced the ops (model and ceilings' origin);
    ``uncovered`` lists ``(op name, reason)`` of every op it could not price: they took no
    time, and the latency is a lower bound.
    """

    target: str
    workload: str
    phase: str
    latency_s: float
    energy_j: float
    average_power_w: float
    tokens_per_s: float | None
    joules_per_token: float | None
    utilization: Mapping[str, float]
    bottleneck: str
    bottleneck_detail: BottleneckDetail
    devices: int = 1
    clock_mhz: float = math.nan
    energy_breakdown_j: Mapping[str, float] = field(default_factory=dict)
    ops: tuple[SimOp, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    options: SimOptions = field(default_factory=SimOptions)
    notes: tuple[str, ...] = ()
    bound: str = ""
    host_s: float = math.nan
    device_s: float = math.nan
    model: str = ""
    uncovered: tuple[tuple[str, str], ...] = ()

    @property
    def complete(self) -> bool:
        return not self.uncovered

    def to_json(self) -> dict[str, Any]:
        """The versioned JSON document (``formats.SIM_RESULT``); NaN energy is written as null."""
        def number(value: float | None) -> float | None:
            return None if value is None or not math.isfinite(value) else value

        return {**SIM_RESULT.stamp(), "target": self.target, "workload": self.workload, "phase": self.phase,
                "params": dict(self.params), "options": self.options.to_json(), "devices": self.devices,
                "latency_s": self.latency_s, "energy_j": number(self.energy_j),
                "average_power_w": number(self.average_power_w), "tokens_per_s": self.tokens_per_s,
                "joules_per_token": number(self.joules_per_token), "clock_mhz": number(self.clock_mhz),
                "utilization": dict(self.utilization), "bottleneck": self.bottleneck, "bound": self.bound,
                "host_s": number(self.host_s), "device_s": number(self.device_s), "model": self.model,
                "complete": self.complete,
                "uncovered": [{"name": name, "reason": reason} for name, reason in self.uncovered],
                "bottleneck_detail": self.bottleneck_detail.to_json(),
                "energy_breakdown_j": {k: number(v) for k, v in self.energy_breakdown_j.items()}, "notes": list(self.notes),
                "ops": [{**op.to_json(), "energy_j": number(op.energy_j)} for op in self.ops]}

    def trace_events(self) -> list[dict[str, Any]]:
        """The timeline as Chrome trace-event JSON objects (open the list, wrapped as
        ``{"traceEvents": [...]}``, in Perfetto): :func:`.trace.trace_events`."""
        from .trace import trace_events

        return trace_events(self)
