"""``simulate_work`` (one case's Work on one device) and ``simulate_graph`` (a workload op graph
on a system of devices): the simulator's entry points.

**Pricing is the core's, scheduling the simulator's** (docs/DESIGN "One prediction core"). Each
distinct kernel (an op's Work without its launch) is priced once per machine by the prediction
core the machine carries (:func:`.pricing.machine_predictor`: the ``Predictor`` of the target,
model, profile and calibration, on the machine's what-if figures): that is the op's time alone on
the device. The simulator's own demand vector (:func:`.hardware.op_cost`) only splits that time
among the shared resources (:func:`.pricing.split`), so that ops running at once contend for
DRAM, links and compute; energy is the simulator's. The ops are then laid out by the one
schedule (:func:`pytest_charz.workloads.schedule.schedule_graph`, the one ``predict_graph``
runs, here with contention on), under the machine's runtime figures (:func:`.runtime.sim_runtime`),
and the bound is named by the same rule. A graph whose ops never overlap therefore gets the
latency and bound ``predict_graph`` gives. An op the core cannot price takes no time and is
listed in ``uncovered`` (the latency is a lower bound); a single case it cannot price is a
:class:`.pricing.SimNotPriced` error.

A graph is prepared once (its layout for the schedule, the distinct kernels it repeats; kept per
graph object). Energy is the ops' dynamic energy plus static power over the latency, for every
rank. When the average power of a device exceeds its power cap, the clock is lowered (compute
power taken to go with the cube of the clock: frequency times voltage squared; the core's peaks
follow the clock) and the run is simulated again.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..work import Work
from ..workloads.graph import Graph
from ..workloads.predict import kernel_work, tokens_per_s
from ..workloads.schedule import HOST, GraphLayout, Schedule, graph_bound, schedule_graph
from .capacity import MemoryNeed, check_fits, memory_need
from .hardware import OpCost, op_cost, resources
from .machine import Machine
from .pricing import SimNotPriced, machine_predictor, split
from .result import BottleneckDetail, SimOp, SimOptions, SimResult
from .runtime import sim_runtime

if TYPE_CHECKING:
    from ..calibration.predictor import Predictor
    from ..models.base import Prediction

#: Power-cap iterations, the lowest clock scale, and how far over the cap a result may stay.
CAP_ITERATIONS = 4
MIN_CLOCK_SCALE = 0.2
CAP_TOLERANCE = 1.005


@dataclass(frozen=True)
class PreparedGraph:
    """A graph as flat lists: what every simulation of it shares, whatever the machine."""

    names: tuple[str, ...]
    classes: tuple[str, ...]
    layout: GraphLayout
    kernel_of: tuple[int, ...]                 # op -> index into kernels
    kernels: tuple[tuple[Work, float], ...]    # distinct (work, bytes read from dependencies)
    need: MemoryNeed

    @property
    def streams(self) -> tuple[int, ...]:
        return self.layout.streams

    @property
    def launches(self) -> tuple[int, ...]:
        return self.layout.launches


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
        layout=GraphLayout.of(graph), kernel_of=tuple(kernel_of), kernels=tuple(kernels), need=memory_need(graph))
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


def _with_predictor(machine: Machine, predictor: "Predictor | None") -> Machine:
    """``machine`` priced by ``predictor`` instead of its own core (its figures at construction
    taken as the ones the predictor's ceilings describe; its runtime figures kept)."""
    if predictor is None:
        return machine
    if predictor.target and predictor.target != machine.id:
        raise UsageError(f"a prediction core of {predictor.target!r} cannot price the {machine.id!r} machine")
    return replace(machine, predictor=predictor)


def simulate_graph(graph: Graph, machine: Machine, options: SimOptions | None = None, *,
                   predictor: "Predictor | None" = None) -> SimResult:
    """Simulate one execution of ``graph`` (one rank of a tensor-parallel system) on ``machine``,
    its ops priced by the machine's prediction core (``predictor``: another one).

    Raises :class:`~.capacity.SimCapacityError` when the rank's weights, KV cache and
    activations exceed the device's DRAM, UsageError when the graph needs more ranks than the
    system has devices."""
    if not isinstance(graph, Graph):
        raise UsageError(f"simulate_graph takes a workloads Graph, got {type(graph).__name__}")
    machine = _with_predictor(_check_machine(machine), predictor)
    options = options or SimOptions()
    ranks = int(graph.params.get("tp", 1) or 1)
    if ranks > machine.devices:
        raise UsageError(f"{graph.name} at tp={ranks} needs {ranks} devices; the {machine.id} system has "
                         f"{machine.devices} (parameter devices)")
    prepared = prepare(graph)
    check_fits(graph, machine, prepared.need)
    running = machine
    for _ in range(CAP_ITERATIONS):
        run = _run(prepared, running, options)
        dynamic_j = sum(cost.energy_j for cost in run.costs)
        compute_j = sum(cost.compute_energy_j for cost in run.costs)
        latency = run.schedule.latency_s
        power = (dynamic_j + _static_w(running) * latency) / latency if latency > 0 else 0.0
        scale = _cap_scale(running, power, compute_j / latency if latency > 0 else 0.0)
        if scale >= 1.0 or not math.isfinite(power):
            break
        running = replace(running, clock_mhz=running.clock_mhz * scale)
    return _result(graph, prepared, running, machine, options, run, ranks)


_NOTHING = OpCost((), 0.0, "none", 0.0, False, ())


def _has_kernel(work: Work) -> bool:
    return bool(work.flops or work.bytes or work.transfers or work.collectives or work.accesses)


def _price(work: Work, reused: float, prediction: "Prediction | None", machine: Machine,
           index: dict[str, int]) -> OpCost:
    """The demands of one kernel: the core's time, split among the machine's resources."""
    if prediction is None or not prediction.covered:
        return _NOTHING
    try:
        raw = op_cost(work, machine, index, reused)
    except UsageError:              # a figure the split needs and the machine lacks: time without a share
        raw = OpCost((), 0.0, prediction.bound, 0.0, False, ())
    return split(raw, prediction.time_s)


@dataclass(frozen=True)
class _Run:
    costs: list[OpCost]
    predictions: list["Prediction | None"]
    schedule: Schedule
    synchronous: bool
    launch_gap_s: float
    model: str


def _run(prepared: PreparedGraph, machine: Machine, options: SimOptions) -> _Run:
    names = resources(machine)
    index = {name: slot for slot, name in enumerate(names)}
    predictor = machine_predictor(machine)
    works = [kernel_work(work) for work, _ in prepared.kernels]
    priced = [work for work in works if _has_kernel(work)]
    by_work = dict(zip(priced, predictor.predict_all(priced)))
    predictions = [by_work.get(work) for work in works]
    kernel_costs = [_price(work, reused, prediction, machine, index)
                    for (_, reused), work, prediction in zip(prepared.kernels, works, predictions)]
    runtime = sim_runtime(machine, options)
    schedule = schedule_graph(prepared.layout, [kernel_costs[k] for k in prepared.kernel_of], runtime, len(names),
                              contention=True)
    model = f"{predictor.model.name} on {predictor.ceilings.origin}" + \
        (f", calibrated ({predictor.calibration_source})" if predictor.calibration is not None else "")
    return _Run([kernel_costs[k] for k in prepared.kernel_of], [predictions[k] for k in prepared.kernel_of], schedule,
                runtime.synchronous, runtime.graph_launch_s if runtime.graph_replay else runtime.launch_s, model)


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
            run: _Run, ranks: int) -> SimResult:
    names = resources(running)
    schedule, costs = run.schedule, run.costs
    latency = schedule.latency_s
    launch_s = sum(prepared.launches) * run.launch_gap_s
    busy = {"host": schedule.host_busy_s, "launch": launch_s, **dict(zip(names, schedule.busy_s))}
    utilization = {name: (min(value / latency, 1.0) if latency > 0 else 0.0) for name, value in busy.items()}
    host_s, device_s, bound = graph_bound(prepared.layout, schedule, run.synchronous)
    # The host when the schedule is host-bound, else the device's busiest resource (or its launches).
    device_busy = {name: value for name, value in busy.items() if name != "host"}
    bottleneck = "none" if not latency > 0 else "host" if bound == "host" else \
        max(device_busy, key=lambda name: device_busy[name])
    critical, on_path = _critical_path(prepared, schedule)
    detail = BottleneckDetail(busy, dict(zip(names, schedule.saturated_s)), critical, on_path)
    breakdown: dict[str, float] = {"compute": sum(c.compute_energy_j for c in costs) * ranks,
                                   "memory_and_links": sum(c.energy_j - c.compute_energy_j for c in costs) * ranks,
                                   "static": _static_w(running) * latency * ranks}
    energy = sum(breakdown.values())
    tokens = tokens_per_s(graph, latency)
    uncovered = tuple((prepared.names[i], prediction.reason) for i, prediction in enumerate(run.predictions)
                      if prediction is not None and not prediction.covered)
    notes = []
    if running.clock_mhz < machine.clock_mhz:
        notes.append(f"power cap {machine.power_cap_w:g} W: clock lowered from {machine.clock_mhz:g} to "
                     f"{running.clock_mhz:.4g} MHz")
    if not math.isfinite(energy):
        notes.append(f"{machine.id} has no static power figure: energy is unknown")
    if uncovered:
        notes.append(f"not priced by the core: {len(uncovered)} op(s), e.g. {uncovered[0][0]}: {uncovered[0][1]}; "
                     "they take no time and the latency is a lower bound")
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
        energy_breakdown_j=breakdown, ops=ops, params=dict(graph.params), options=options, notes=tuple(notes),
        bound=bound, host_s=host_s, device_s=device_s, model=run.model, uncovered=uncovered)


def simulate_work(work: Work, machine: Machine, *, predictor: "Predictor | None" = None) -> SimResult:
    """One execution of one case's ``work`` on one device, as a suite case times it: its time is
    the prediction core's price of the whole Work (launches, kernel, transfers and collectives,
    combined as the core's model combines them) on the machine's figures; the simulator adds the
    split of the kernel among the resources (utilization, bottleneck), energy and the power cap.
    A Work the core cannot price is a :class:`.pricing.SimNotPriced` error."""
    if not isinstance(work, Work):
        raise UsageError(f"simulate_work takes a Work, got {type(work).__name__}")
    running = _with_predictor(_check_machine(machine), predictor)
    kernel = kernel_work(work)
    for _ in range(CAP_ITERATIONS):
        names = resources(running)
        index = {name: slot for slot, name in enumerate(names)}
        core = machine_predictor(running)
        whole = core.predict(work)
        if not whole.covered:
            raise SimNotPriced(f"the {core.model.name} model cannot price {work.op or 'this work'} on {machine.id}: "
                               f"{whole.reason}")
        cost = _price(kernel, 0.0, core.predict(kernel), running, index) if _has_kernel(kernel) else _NOTHING
        launch_s = work.launches * running.launch_overhead_s
        latency = whole.time_s
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
                            "static": static_j}, model=f"{core.model.name} on {core.ceilings.origin}")


def simulate_serving_case(case: Any, machine: Machine) -> float:
    """The time of a published serving run (:class:`pytest_charz.published.serving.ServingCase`)
    simulated on ``machine`` under the case's runtime profile: its prefill plus its decode steps
    at the middle context, the graphs :func:`pytest_charz.published.serving.serving_graphs`
    builds for ``predict_graph`` too (one answer)."""
    from ..published.serving import serving_graphs
    from .runtime import with_runtime_profile

    prefill, decode, steps = serving_graphs(case)
    total = simulate_graph(prefill, machine, with_runtime_profile(SimOptions(), case.runtime, prefill)).latency_s
    if decode is not None:
        total += steps * simulate_graph(decode, machine, with_runtime_profile(SimOptions(), case.runtime, decode)).latency_s
    return float(total)
