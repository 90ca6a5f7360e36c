"""The one schedule of an op graph: the host thread, the launch queue, streams and events,
synchronization, graph replay, copy engines, and the resources that concurrent ops share.

``predict_graph`` and the simulator both lay their priced ops out with :func:`schedule_graph`
(the figures from :class:`.runtime.Runtime`); they differ only in what each op asks of the
device, never in the rules below. ``predict_graph`` runs it with contention off (each op has the
device to itself: an op takes exactly the core's kernel time); the simulator with contention on.

* **Host.** One thread dispatches the ops in issue order, ``dispatch_s`` each (framework
  overhead and the driver's launch call). It runs ahead of the device until ``queue_depth``
  issued ops wait to start; it then blocks until one starts. After an op marked ``sync``
  (``attrs["sync"]``: ``.item()``, a host copy the program reads) it waits for that op to end;
  on a synchronous runtime (the host CPU) it waits for every op.
* **Graph replay.** One dispatch issues the whole captured sequence, without a queue limit, and
  each kernel leaves the device only the graph node's gap.
* **Streams and events.** Each stream runs its ops in issue order; an op also waits for its
  dependencies on other streams (an event record and wait).
* **Device.** A started op first spends its launch gap (launches x gap) and fixed latency, then
  does its work: ``demands``, seconds of each resource at its full rate. With contention, each
  resource is split equally among the ops using it (processor sharing, unused shares handed
  back: :func:`share_rates`) and an op progresses at the rate of its scarcest share; without, at
  its rate alone. Copies (host and peer transfers) also need one of ``copy_engines`` engines.
* **Bound** (:func:`graph_bound`): **host** when the host's dispatch time exceeds the device's
  own critical path (the longest chain of dependencies and stream order through the ops'
  durations on the timeline; on a synchronous runtime, the ops' summed durations): the device
  idles waiting for dispatch. **device** otherwise.

Events are tuples on :class:`.events.EventQueue`; per-op state lives in flat lists.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from .events import ACTIVATE, COMPLETE, ISSUE, EventQueue

if TYPE_CHECKING:
    from .graph import Graph
    from .runtime import Runtime

#: ``cause`` of an op's start: it started as soon as the host issued it.
HOST = -1
BOUNDS = ("host", "device")
_SATURATED = 1.0 - 1e-9
#: Rounds of handing unused shares back (:func:`share_rates`).
SHARE_ROUNDS = 4


class Demand(Protocol):
    """What one op asks of the device once it has started: ``demands`` ``(resource index, seconds
    at the full resource)``, ``fixed_s`` latency that holds no shared resource, ``copy`` whether
    it needs a copy engine."""

    @property
    def demands(self) -> tuple[tuple[int, float], ...]: ...
    @property
    def fixed_s(self) -> float: ...
    @property
    def copy(self) -> bool: ...


@dataclass(frozen=True)
class OpDemand:
    """A plain :class:`Demand`."""

    demands: tuple[tuple[int, float], ...] = ()
    fixed_s: float = 0.0
    copy: bool = False


@dataclass(frozen=True)
class GraphLayout:
    """A graph as the schedule reads it, in issue order: each op's stream, the indices of its
    dependencies, whether the host waits for it (``sync``) and its launches."""

    streams: tuple[int, ...]
    deps: tuple[tuple[int, ...], ...]
    syncs: tuple[bool, ...]
    launches: tuple[int, ...]
    #: each op's host framework (:func:`~pytest_charz.models.opclass_costs.host_framework`)
    frameworks: tuple[str, ...] = ()
    #: the ``nn.Module`` calls each op begins (:func:`~pytest_charz.models.model_code.module_calls`, 0 uncounted)
    module_calls: tuple[float, ...] = ()
    #: the Python calls before each op (:func:`~pytest_charz.models.model_code.python_calls_of`, 0 uncounted)
    python_calls: tuple[float, ...] = ()

    @classmethod
    def of(cls, graph: "Graph") -> "GraphLayout":
        from ..models.model_code import module_calls, python_calls_of
        from ..models.opclass_costs import host_framework

        position = {op.name: index for index, op in enumerate(graph.ops)}
        return cls(tuple(op.stream for op in graph.ops), tuple(tuple(position[d] for d in op.deps) for op in graph.ops),
                   tuple(bool(op.attrs.get("sync", False)) for op in graph.ops),
                   tuple(op.work.launches for op in graph.ops), tuple(host_framework(op.work) for op in graph.ops),
                   tuple(module_calls(op.work) or 0.0 for op in graph.ops),
                   tuple(python_calls_of(op.work) or 0.0 for op in graph.ops))


@dataclass
class Schedule:
    """The timeline (seconds from the first dispatch). ``cause[i]`` is what op ``i`` waited for
    last: :data:`HOST` (its issue) or the index of the op whose end released it. ``busy_s[r]``
    integrates resource ``r``'s used fraction over time; ``saturated_s[r]`` is the time it ran at
    full rate."""

    issue_s: list[float]
    start_s: list[float]
    end_s: list[float]
    cause: list[int]
    latency_s: float
    host_busy_s: float
    host_blocked_s: float
    busy_s: list[float]
    saturated_s: list[float]


def alone_rate(cost: Demand) -> float:
    """The fraction of its work per second an op does with every resource to itself."""
    longest = max((seconds for _, seconds in cost.demands), default=0.0)
    return 1.0 / longest if longest > 0 else float("inf")


def share_rates(demands: dict[int, tuple[tuple[int, float], ...]], resource_count: int,
                rounds: int = SHARE_ROUNDS) -> dict[int, float]:
    """Rates (fraction of its work per second) of ops running at once, each needing
    ``demands[op]`` = ``(resource, seconds at the full resource)``.

    Each resource starts split equally among the ops that use it; what an op cannot use (it is
    held back by another resource) goes back to the ops that the resource holds back, for
    ``rounds`` rounds (max-min fair sharing, work conserving in the common cases: a GEMM beside a
    stream leaves the stream the DRAM bandwidth it does not need)."""
    users = [0] * resource_count
    for needs in demands.values():
        for slot, seconds in needs:
            if seconds > 0:
                users[slot] += 1
    shares = {op: {slot: 1.0 / users[slot] for slot, seconds in needs if seconds > 0} for op, needs in demands.items()}
    rates: dict[int, float] = {}
    for round_index in range(rounds + 1):
        for op, needs in demands.items():
            rates[op] = min((shares[op][slot] / seconds for slot, seconds in needs if seconds > 0),
                            default=float("inf"))
        if round_index == rounds:
            break
        used = [0.0] * resource_count
        binding: list[list[int]] = [[] for _ in range(resource_count)]
        for op, needs in demands.items():
            rate = rates[op]
            for slot, seconds in needs:
                if seconds > 0:
                    used[slot] += rate * seconds
                    if shares[op][slot] - rate * seconds <= 1e-12 * shares[op][slot]:
                        binding[slot].append(op)
        moved = False
        for slot in range(resource_count):
            leftover = 1.0 - used[slot]
            if leftover > 1e-9 and binding[slot]:
                for op in binding[slot]:
                    shares[op][slot] += leftover / len(binding[slot])
                moved = True
        if not moved:
            break
    return rates


class _State:
    """The host's and the engines' mutable state during one run."""

    __slots__ = ("last", "pending", "engines", "next", "blocked", "blocked_since", "wait_for", "host_busy",
                 "host_blocked")

    def __init__(self, copy_engines: int) -> None:
        self.last = 0.0                 # time the shared work was last advanced to
        self.pending = 0                # issued ops not yet started
        self.engines = copy_engines     # free copy engines
        self.next = 0                   # the next op the host dispatches
        self.blocked = False            # the host waits for room in the launch queue
        self.blocked_since = 0.0
        self.wait_for = -1              # the op a sync point waits for
        self.host_busy = 0.0
        self.host_blocked = 0.0


def slowed(cost: Demand, factor: float) -> Demand:
    """``cost`` taking ``factor`` times as long (every demand and its fixed latency)."""
    if factor == 1.0:
        return cost
    return OpDemand(tuple((resource, seconds * factor) for resource, seconds in cost.demands), cost.fixed_s * factor,
                    cost.copy)


def schedule_graph(layout: GraphLayout, costs: Sequence[Demand], runtime: "Runtime", resource_count: int,
                   contention: bool = True) -> Schedule:
    """Lay ``costs`` (one per op of ``layout``) out under ``runtime``'s figures (module docstring)."""
    n = len(costs)
    if runtime.graph_replay:
        gap, depth, syncs = runtime.graph_launch_s, n + 1, (False,) * n
        dispatch_s = [runtime.dispatch_s] + [0.0] * (n - 1) if n else []
    else:
        gap, depth, dispatch_s = runtime.launch_s, runtime.queue_depth, [runtime.dispatch_s] * n
        if runtime.framework_dispatch and len(layout.frameworks) == n:
            calls = layout.module_calls if len(layout.module_calls) == n else (0.0,) * n
            python = layout.python_calls if len(layout.python_calls) == n else (0.0,) * n
            dispatch_s = [runtime.op_dispatch_s(framework, count, python_count)
                          for framework, count, python_count in zip(layout.frameworks, calls, python)]
            costs = [slowed(cost, runtime.op_slowdown(framework)) for cost, framework in zip(costs, layout.frameworks)]
        syncs = layout.syncs if runtime.asynchronous else (True,) * n
    if n and runtime.step_s:
        dispatch_s[0] += runtime.step_s   # the engine's host work of the step comes before its first op
    gaps = [launches * gap for launches in layout.launches]
    return run_schedule(layout.streams, layout.deps, costs, gaps, dispatch_s, syncs, depth, runtime.copy_engines,
                        resource_count, contention)


def graph_bound(layout: GraphLayout, schedule: Schedule, synchronous: bool) -> tuple[float, float, str]:
    """``(host_s, device_s, bound)`` of a schedule (module docstring): the host's dispatch time,
    the device's own critical path, and which of them bounds the latency."""
    durations = [end - start for start, end in zip(schedule.start_s, schedule.end_s)]
    if synchronous:
        device_s = sum(durations)
    else:
        finish = [0.0] * len(durations)
        last: dict[int, int] = {}
        for index, (stream, wanted) in enumerate(zip(layout.streams, layout.deps)):
            before = max((finish[dep] for dep in wanted), default=0.0)
            if stream in last:
                before = max(before, finish[last[stream]])
            finish[index] = before + durations[index]
            last[stream] = index
        device_s = max(finish, default=0.0)
    host_s = schedule.host_busy_s
    return host_s, device_s, "host" if host_s > device_s else "device"


def run_schedule(streams: Sequence[int], deps: Sequence[tuple[int, ...]], costs: Sequence[Demand],
                 gaps_s: Sequence[float], dispatch_s: Sequence[float], syncs: Sequence[bool],
                 queue_depth: int, copy_engines: int, resource_count: int, contention: bool = True) -> Schedule:
    """Simulate the ops (module docstring) and return their timeline; ``gaps_s`` is each op's
    launch gap, ``dispatch_s`` each op's host dispatch."""
    n = len(costs)
    issue_s = [0.0] * n
    start_s = [0.0] * n
    end_s = [0.0] * n
    cause = [HOST] * n
    unfinished = [len(d) for d in deps]
    dependents: list[list[int]] = [[] for _ in range(n)]
    for index, wanted in enumerate(deps):
        for dep in wanted:
            dependents[dep].append(index)
    queues: dict[int, deque[int]] = {}
    busy_stream: dict[int, bool] = {}
    last_on_stream: dict[int, int] = {}
    previous_on_stream = [-1] * n
    events = EventQueue()
    active: dict[int, float] = {}        # op -> remaining fraction of its shared work
    rates: dict[int, float] = {}
    version = [0] * n
    busy_s = [0.0] * resource_count
    saturated_s = [0.0] * resource_count
    state = _State(copy_engines)
    waiting_copy: deque[int] = deque()

    def advance(now: float) -> None:
        dt = now - state.last
        if dt > 0 and active:
            used = [0.0] * resource_count
            for op, rate in rates.items():
                active[op] -= rate * dt
                for slot, seconds in costs[op].demands:
                    used[slot] += rate * seconds
            for slot in range(resource_count):
                if used[slot]:
                    busy_s[slot] += dt * min(used[slot], 1.0)
                    if used[slot] >= _SATURATED:
                        saturated_s[slot] += dt
        state.last = now

    def finish_at(op: int, now: float) -> None:
        rate = rates[op]
        version[op] += 1
        finish = now if rate == float("inf") else now + max(active[op], 0.0) / rate
        events.schedule(finish, COMPLETE, COMPLETE, (op, version[op]))

    def reshare(now: float) -> None:
        if not active:
            return
        if len(active) == 1:
            (op,) = active
            rates[op] = alone_rate(costs[op])
        else:
            rates.update(share_rates({op: costs[op].demands for op in active}, resource_count))
        for op in active:
            finish_at(op, now)

    def schedule_issue(now: float) -> None:
        following = state.next
        if following < n:
            state.host_busy += dispatch_s[following]
            events.schedule(now + dispatch_s[following], ISSUE, ISSUE, following)

    def try_start(stream: int, now: float) -> None:
        queue = queues.get(stream)
        while queue and not busy_stream.get(stream, False):
            op = queue[0]
            if unfinished[op]:
                return
            if costs[op].copy:
                if state.engines == 0:
                    if stream not in waiting_copy:
                        waiting_copy.append(stream)
                    return
                state.engines -= 1
            queue.popleft()
            start(op, now)

    def start(op: int, now: float) -> None:
        start_s[op] = now
        busy_stream[streams[op]] = True
        released, culprit = issue_s[op], HOST
        before = previous_on_stream[op]
        if before >= 0 and end_s[before] > released:
            released, culprit = end_s[before], before
        for dep in deps[op]:
            if end_s[dep] > released:
                released, culprit = end_s[dep], dep
        cause[op] = culprit
        state.pending -= 1
        if state.blocked and state.pending < queue_depth:
            state.blocked = False
            state.host_blocked += now - state.blocked_since
            schedule_issue(now)
        events.schedule(now + gaps_s[op] + costs[op].fixed_s, ACTIVATE, ACTIVATE, op)

    def issue(op: int, now: float) -> None:
        issue_s[op] = now
        stream = streams[op]
        previous_on_stream[op] = last_on_stream.get(stream, -1)
        last_on_stream[stream] = op
        queues.setdefault(stream, deque()).append(op)
        state.pending += 1
        state.next = op + 1
        try_start(stream, now)
        if syncs[op] and op + 1 < n:
            state.wait_for, state.blocked_since = op, now
        elif state.pending >= queue_depth:
            state.blocked, state.blocked_since = True, now
        else:
            schedule_issue(now)

    def complete(op: int, now: float) -> None:
        advance(now)
        del active[op]
        del rates[op]
        end_s[op] = now
        stream = streams[op]
        busy_stream[stream] = False
        if costs[op].copy:
            state.engines += 1
            for _ in range(len(waiting_copy)):
                try_start(waiting_copy.popleft(), now)
        for later in dependents[op]:
            unfinished[later] -= 1
            if not unfinished[later]:
                try_start(streams[later], now)
        try_start(stream, now)
        if state.wait_for == op:
            state.wait_for = -1
            state.host_blocked += now - state.blocked_since
            schedule_issue(now)
        if contention:
            reshare(now)

    schedule_issue(0.0)
    while events:
        now, kind, payload = events.pop()
        if kind == COMPLETE:
            op, seen = payload
            if seen == version[op] and op in active:
                complete(op, now)
        elif kind == ACTIVATE:
            advance(now)
            active[payload] = 1.0
            if contention:
                reshare(now)
            else:                        # alone: its rate never changes, its end is known now
                rates[payload] = alone_rate(costs[payload])
                finish_at(payload, now)
        else:
            issue(payload, now)
    latency = max(max(end_s, default=0.0), max(issue_s, default=0.0))
    return Schedule(issue_s, start_s, end_s, cause, latency, state.host_busy, state.host_blocked,
                    busy_s, saturated_s)
