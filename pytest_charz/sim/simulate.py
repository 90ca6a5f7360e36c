"""``simulate_work`` (one case's Work on one device) and ``simulate_graph`` (a workload op graph
on a system of devices): the simulator's entry points.

A graph is prepared once (op indices, dependencies, streams, the distinct kernels it repeats;
kept per graph object), each distinct kernel is costed once per machine
(:func:`.hardware.op_cost`), and the runtime (:func:`.runtime.run_schedule`) lays the ops out.
Energy is the ops' dynamic energy plus static power over the latency, for every rank. When the
average power of a device exceeds its power cap, the clock is lowered (compute power taken to
go with the cube of the clock: frequency times voltage squared) and the run is simulated again.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError
from ..work import Work
from ..workloads.graph import Graph
from ..workloads.predict import tokens_per_s
from .capacity import MemoryNeed, check_fits, memory_need
from .hardware import OpCost, op_cost, resources
from .machine import Machine
from .result import BottleneckDetail, SimOp, SimOptions, SimResult
from .runtime import HOST, Schedule, run_schedule

#: Power-cap iterations, the lowest clock scale, and how far over the cap a result may stay.
CAP_ITERATIONS = 4
MIN_CLOCK_SCALE = 0.2
CAP_TOLERANCE = 1.005


@dataclass(frozen=True)
class PreparedGraph:
    """A graph as flat lists: what every simulation of it shares, whatever the machine."""

    names: tuple[str, ...]
    classes: tuple[str, ...]
    streams: tuple[int, ...]
    deps: tuple[tuple[int, ...], ...]
    syncs: tuple[bool, ...]
    launches: tuple[int, ...]
    kernel_of: tuple[int, ...]                 # op -> index into kernels
    kernels: tuple[tuple[Work, float], ...]    # distinct (work, bytes read from dependencies)
    need: MemoryNeed


_PREPARED: dict[int, tuple[Any, PreparedGraph]] = {}


def _work_key(work: Work, reused: float) -> tuple[Any, ...]:
    return (work.op, tuple(sorted(work.flops.items())), tuple(sorted(work.bytes.items())),
            tuple(sorted(work.transfers.items())), tuple((c.op, c.bytes, c.ranks) for c in work.collectives),
            tuple(sorted(work.shape.items())), work.accesses, reused)


def prepare(graph: Graph) -> PreparedGraph:
    """The flat form of ``graph``, built once per graph object."""
    cached = _PREPARED.get(id(graph))
    if cached is not None and cached[0]() is graph:
        return cached[1]
    position = {op.name: index for index, op in enumerate(graph.ops)}
    keys: dict[tuple[Any, ...], int] = {}
    kernels: list[tuple[Work, float]] = []
    kernel_of = []
    for op in graph.ops:
        reused = float(sum(t.nbytes for dep in op.deps for t in graph.ops[position[dep]].outputs))
        key = _work_key(op.work, reused)
        if key not in keys:
            keys[key] = len(kernels)
            kernels.append((op.work, reused))
        kernel_of.append(keys[key])
    prepared = PreparedGraph(
        names=tuple(op.name for op in graph.ops), classes=tuple(op.op_class for op in graph.ops),
        streams=tuple(op.stream for op in graph.ops),
        deps=tuple(tuple(position[dep] for dep in op.deps) for op in graph.ops),
        syncs=tuple(bool(op.attrs.get("sync", False)) for op in graph.ops),
        launches=tuple(op.work.launches for op in graph.ops), kernel_of=tuple(kernel_of), kernels=tuple(kernels),
        need=memory_need(graph))
    graph_id = id(graph)

    def forget(_: Any) -> None:
        _PREPARED.pop(graph_id, None)

    _PREPARED[graph_id] = (weakref.ref(graph, forget), prepared)
    return prepared


def _check_machine(machine: Any) -> Machine:
    if not isinstance(machine, Machine):
        raise UsageError(f"simulate takes a sim Machine (Machine.from_spec), got {type(machine).__name__}")
    return machine


def _static_w(machine: Machine) -> float:
    return machine.idle_power_w if machine.idle_power_w is not None else math.nan


def _cap_scale(machine: Machine, power_w: float, compute_power_w: float) -> float:
    """The clock scale under which ``power_w`` (one device, compute part ``compute_power_w``)
    fits the cap: compute power taken to go with the cube of the clock."""
    cap = machine.power_cap_w
    if cap is None or not power_w > cap * CAP_TOLERANCE or compute_power_w <= 0:
        return 1.0
    room = cap - (power_w - compute_power_w)
    if room <= 0:
        return MIN_CLOCK_SCALE
    return max(MIN_CLOCK_SCALE, (room / compute_power_w) ** (1.0 / 3.0))


def simulate_graph(graph: Graph, machine: Machine, options: SimOptions | None = None) -> SimResult:
    """Simulate one execution of ``graph`` (one rank of a tensor-parallel system) on ``machine``.

    Raises :class:`~.capacity.SimCapacityError` when the rank's weights, KV cache and
    activations exceed the device's DRAM, UsageError when the graph needs more ranks than the
    system has devices or a figure the machine lacks."""
    if not isinstance(graph, Graph):
        raise UsageError(f"simulate_graph takes a workloads Graph, got {type(graph).__name__}")
    machine = _check_machine(machine)
    options = options or SimOptions()
    ranks = int(graph.params.get("tp", 1) or 1)
    if ranks > machine.devices:
        raise UsageError(f"{graph.name} at tp={ranks} needs {ranks} devices; the {machine.id} system has "
                         f"{machine.devices} (parameter devices)")
    prepared = prepare(graph)
    check_fits(graph, machine, prepared.need)
    running = machine
    for _ in range(CAP_ITERATIONS):
        costs, schedule = _run(prepared, running, options)
        dynamic_j = sum(costs[i].energy_j for i in range(len(costs)))
        compute_j = sum(costs[i].compute_energy_j for i in range(len(costs)))
        latency = schedule.latency_s
        power = (dynamic_j + _static_w(running) * latency) / latency if latency > 0 else 0.0
        scale = _cap_scale(running, power, compute_j / latency if latency > 0 else 0.0)
        if scale >= 1.0 or not math.isfinite(power):
            break
        running = replace(running, clock_mhz=running.clock_mhz * scale)
    return _result(graph, prepared, running, machine, options, costs, schedule, ranks)


def _run(prepared: PreparedGraph, machine: Machine, options: SimOptions) -> tuple[list[OpCost], Schedule]:
    names = resources(machine)
    index = {name: slot for slot, name in enumerate(names)}
    kernel_costs = [op_cost(work, machine, index, reused) for work, reused in prepared.kernels]
    costs = [kernel_costs[k] for k in prepared.kernel_of]
    n = len(costs)
    dispatch = options.host_dispatch_s if options.host_dispatch_s is not None else machine.dispatch_overhead_s
    if options.graph_replay:
        gap = machine.graph_launch_overhead_s
        dispatch_s = [dispatch] + [0.0] * (n - 1) if n else []
        depth, syncs = n + 1, (False,) * n
    else:
        gap = machine.launch_overhead_s
        dispatch_s, depth, syncs = [dispatch] * n, options.launch_queue_depth, prepared.syncs
        if machine.kind == "cpu":       # the host runs the ops itself: it waits for each one
            syncs = (True,) * n
    gaps = [launches * gap for launches in prepared.launches]
    schedule = run_schedule(prepared.streams, prepared.deps, costs, gaps, dispatch_s, syncs, depth,
                            machine.copy_engines, len(names))
    return costs, schedule


def _critical_path(prepared: PreparedGraph, schedule: Schedule) -> tuple[dict[str, float], int]:
    if not prepared.names:
        return {}, 0
    op = max(range(len(prepared.names)), key=lambda i: (schedule.end_s[i], -i))
    path: dict[str, float] = {}
    count = 0
    while op >= 0:
        count += 1
        klass = prepared.classes[op]
        path[klass] = path.get(klass, 0.0) + schedule.end_s[op] - schedule.start_s[op]
        if schedule.cause[op] == HOST:
            path["host"] = path.get("host", 0.0) + schedule.start_s[op]
            break
        op = schedule.cause[op]
    return dict(sorted(path.items(), key=lambda item: -item[1])), count


def _result(graph: Graph, prepared: PreparedGraph, running: Machine, machine: Machine, options: SimOptions,
            costs: list[OpCost], schedule: Schedule, ranks: int) -> SimResult:
    names = resources(running)
    latency = schedule.latency_s
    gap = running.graph_launch_overhead_s if options.graph_replay else running.launch_overhead_s
    launch_s = sum(prepared.launches) * gap
    busy = {"host": schedule.host_busy_s, "launch": launch_s, **dict(zip(names, schedule.busy_s))}
    utilization = {name: (min(value / latency, 1.0) if latency > 0 else 0.0) for name, value in busy.items()}
    bottleneck = max(busy, key=lambda name: (busy[name], name == "host")) if latency > 0 else "none"
    critical, on_path = _critical_path(prepared, schedule)
    detail = BottleneckDetail(busy, dict(zip(names, schedule.saturated_s)), critical, on_path)
    breakdown: dict[str, float] = {"compute": sum(c.compute_energy_j for c in costs) * ranks,
                                   "memory_and_links": sum(c.energy_j - c.compute_energy_j for c in costs) * ranks,
                                   "static": _static_w(running) * latency * ranks}
    energy = sum(breakdown.values())
    tokens = tokens_per_s(graph, latency)
    notes = []
    if running.clock_mhz < machine.clock_mhz:
        notes.append(f"power cap {machine.power_cap_w:g} W: clock lowered from {machine.clock_mhz:g} to "
                     f"{running.clock_mhz:.4g} MHz")
    if not math.isfinite(energy):
        notes.append(f"{machine.id} has no static power figure: energy is unknown")
    ops: tuple[SimOp, ...] = ()
    if options.trace or options.record_ops:
        ops = tuple(SimOp(prepared.names[i], prepared.classes[i], prepared.streams[i], schedule.issue_s[i],
                          schedule.start_s[i], schedule.end_s[i], costs[i].bound, costs[i].energy_j,
                          {names[slot]: moved for slot, moved in costs[i].moved}) for i in range(len(costs)))
    return SimResult(
        target=machine.id, workload=graph.name, phase=graph.phase, latency_s=latency, energy_j=energy,
        average_power_w=energy / latency if latency > 0 else math.nan, tokens_per_s=tokens,
        joules_per_token=energy / (tokens * latency) if tokens else None, utilization=utilization,
        bottleneck=bottleneck, bottleneck_detail=detail, devices=ranks, clock_mhz=running.clock_mhz,
        energy_breakdown_j=breakdown, ops=ops, params=dict(graph.params), options=options, notes=tuple(notes))


def simulate_work(work: Work, machine: Machine) -> SimResult:
    """One execution of one case's ``work`` on one device, as a suite case times it: its launches
    (``launches * launch_overhead``), the kernel (compute and memory levels overlapped, dependent
    loads added), then its transfers and collectives one after another, as the ``composite``
    model combines them; with ``work.shape["overlap"]`` true, launches and moves overlap the kernel."""
    if not isinstance(work, Work):
        raise UsageError(f"simulate_work takes a Work, got {type(work).__name__}")
    running = _check_machine(machine)
    for _ in range(CAP_ITERATIONS):
        names = resources(running)
        index = {name: slot for slot, name in enumerate(names)}
        cost = op_cost(work, running, index)
        links = {slot for name, slot in index.items() if name.startswith("link:")}
        kernel_s = max((s for slot, s in cost.demands if slot not in links), default=0.0)
        moves_s = sum(s for slot, s in cost.demands if slot in links)
        launch_s = work.launches * running.launch_overhead_s
        if work.shape.get("overlap"):
            latency = cost.fixed_s + max(kernel_s, launch_s, moves_s)
        else:
            latency = cost.fixed_s + kernel_s + launch_s + moves_s
        power = (cost.energy_j + _static_w(running) * latency) / latency if latency > 0 else 0.0
        scale = _cap_scale(running, power, cost.compute_energy_j / latency if latency > 0 else 0.0)
        if scale >= 1.0 or not math.isfinite(power):
            break
        running = replace(running, clock_mhz=running.clock_mhz * scale)
    busy = {"launch": launch_s, **{name: 0.0 for name in names}}
    for slot, seconds in cost.demands:
        busy[names[slot]] += seconds
    bottleneck = cost.bound if cost.bound != "none" else ("launch" if launch_s else "none")
    if launch_s > max(busy.get(name, 0.0) for name in names) and launch_s > cost.fixed_s:
        bottleneck = "launch"
    static_j = _static_w(running) * latency
    energy = cost.energy_j + static_j
    return SimResult(
        target=machine.id, workload=work.op or "work", phase="case", latency_s=latency, energy_j=energy,
        average_power_w=energy / latency if latency > 0 else math.nan, tokens_per_s=None, joules_per_token=None,
        utilization={name: (min(value / latency, 1.0) if latency > 0 else 0.0) for name, value in busy.items()},
        bottleneck=bottleneck, bottleneck_detail=BottleneckDetail(busy, {}, {work.op or "work": latency}, 1),
        clock_mhz=running.clock_mhz,
        energy_breakdown_j={"compute": cost.compute_energy_j, "memory_and_links": cost.energy_j - cost.compute_energy_j,
                            "static": static_j})
