"""A graph predicted op by op: each op priced by the prediction core, then laid on the one schedule.

:func:`predict_graph` splits the work the way the simulator does (docs/DESIGN "One prediction
core"): **pricing** is the core's, a :class:`~pytest_charz.calibration.predictor.Predictor`
loaded once by :func:`pytest_charz.prediction.load_predictor` (target, model, profile,
calibration, all checked to belong together), which prices every distinct kernel (the op's Work
without its launch) exactly as it prices a single case, calibration included. **Scheduling** is
:func:`.schedule.schedule_graph`, the simulator's own schedule run with contention off: each op
has the device to itself, so it occupies its stream for the core's kernel time plus its launch
gap. Host dispatch, the launch gap, the launch queue, ``sync`` points, stream order and the
synchronous host of a CPU target follow :mod:`.runtime` and :mod:`.schedule`, the same rules
and figures as ``charz sim``; so on a graph whose ops never run at once (every builder's LLM
graph) the two give the same latency and bound.

The end-to-end latency is the end of the last op. The bound is the schedule's
(:func:`.schedule.graph_bound`): **host-bound** when issuing every op takes longer than the
device's own critical path (the device idles waiting for dispatch: small-batch decode),
**device-bound** otherwise. A graph whose weights, KV cache and activations do not fit one
device's DRAM is refused (:func:`.capacity.check_fits`, the simulator's check), saying what it
needs and what there is.

A runtime profile (``runtime=``: ``eager``, ``graphs``, ``serving``, ``vllm``;
:data:`.runtime.RUNTIME_PROFILES`) sets how the host issues the ops (its dispatch per op, graph
replay, a serving engine's host work per step); ``charz sim`` applies the
same profile (:func:`pytest_charz.sim.runtime.with_runtime_profile`), so the two still agree.

An op the core cannot price keeps its launch gap on the timeline, is listed in ``uncovered``
with the model's reason, and makes the latency a lower bound (``complete=False``); it is never
dropped silently.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import UsageError
from ..formats import GRAPH_PREDICTION
from ..work import Work
from .capacity import check_fits
from .graph import OP_CLASSES, Graph
from .runtime import (ASYNCHRONOUS_KINDS, DEFAULT_HOST_DISPATCH_S, DEFAULT_LAUNCH_OVERHEAD_S, GRAPH_NODE_SOURCE,
                      runtime_of)
from .schedule import BOUNDS, GraphLayout, OpDemand, graph_bound, schedule_graph

if TYPE_CHECKING:
    from ..models.base import Model, Prediction
    from ..calibration.predictor import Predictor
    from ..prediction import CalibrationArg, ProfileArg, TargetArg

__all__ = ["ASYNCHRONOUS_KINDS", "BOUNDS", "DEFAULT_HOST_DISPATCH_S", "DEFAULT_LAUNCH_OVERHEAD_S", "ClassTime",
           "GraphPrediction", "OpPrediction", "kernel_work", "latency_interval", "predict_graph", "tokens_per_s"]


@dataclass(frozen=True)
class OpPrediction:
    """One op on the timeline; times in seconds from the start of the graph.

    ``prediction`` is the model's prediction of the op's kernel (its Work without the launch);
    ``time_s`` the time the op occupies its stream (kernel plus ``launch_s``; the launch only for
    an uncovered op); ``issue_s`` when the host finished dispatching it; ``share`` its part of the
    summed op time of the graph. ``bound`` is the model's bound, or ``launch`` when the launch
    overhead exceeds the kernel.
    """

    name: str
    op_class: str
    stream: int
    prediction: "Prediction"
    launch_s: float
    time_s: float
    bound: str
    regime: str
    issue_s: float
    start_s: float
    end_s: float
    share: float

    @property
    def covered(self) -> bool:
        return self.prediction.covered

    @property
    def kernel_s(self) -> float:
        """The model's kernel time (NaN when uncovered)."""
        return self.prediction.time_s

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "op_class": self.op_class, "stream": self.stream, "time_s": self.time_s,
                "launch_s": self.launch_s, "bound": self.bound, "regime": self.regime, "issue_s": self.issue_s,
                "start_s": self.start_s, "end_s": self.end_s, "share": self.share,
                "prediction": self.prediction.to_json()}


@dataclass(frozen=True)
class ClassTime:
    """Where the time goes: one op class's ops, summed op time (s) and share of the graph's."""

    op_class: str
    ops: int
    time_s: float
    share: float

    def to_json(self) -> dict[str, Any]:
        return {"op_class": self.op_class, "ops": self.ops, "time_s": self.time_s, "share": self.share}


@dataclass(frozen=True)
class GraphPrediction:
    """A graph's predicted end-to-end latency and its schedule.

    ``latency_s``: end of the last op. ``host_s``: the host's time to issue every op (ops x
    ``host_dispatch_s``). ``device_s``: the device's critical path with dispatch taken as free.
    ``bound``: ``host`` when ``host_s`` exceeds ``device_s`` (the device waits for dispatch),
    else ``device``. ``tokens_per_s``: ``batch * seq / latency`` for prefill, ``batch / latency``
    for decode, None for other phases. ``uncovered``: ``(op name, reason)`` of every op the model
    could not predict; when any, ``complete`` is False and the latency is a lower bound.
    ``interval_s``: the latency's interval from the ops' (:func:`latency_interval`).
    ``graph_replay``: the ops were issued as one replayed graph (one dispatch).
    ``engine_step_s``: a serving engine's host work before the first op (in ``host_s``), with
    its source.
    """

    graph: str
    phase: str
    params: Mapping[str, Any]
    target: str
    model: str
    ceilings_origin: str
    asynchronous: bool
    launch_overhead_s: float
    launch_overhead_source: str
    host_dispatch_s: float
    host_dispatch_source: str
    ops: tuple[OpPrediction, ...]
    latency_s: float
    host_s: float
    device_s: float
    bound: str
    by_class: tuple[ClassTime, ...]
    tokens_per_s: float | None
    uncovered: tuple[tuple[str, str], ...]
    interval_s: tuple[float, float] = (0.0, 0.0)
    graph_replay: bool = False
    engine_step_s: float = 0.0
    engine_step_source: str = ""

    @property
    def complete(self) -> bool:
        return not self.uncovered

    @property
    def busy_s(self) -> float:
        """Summed op time over all streams (s): the device's work, launches included."""
        return sum(op.time_s for op in self.ops)

    @property
    def device_idle_s(self) -> float:
        """Time the critical path adds over the device's own (s): waiting for dispatch."""
        return max(0.0, self.latency_s - self.device_s)

    def op(self, name: str) -> OpPrediction:
        for op in self.ops:
            if op.name == name:
                return op
        raise UsageError(f"the prediction of {self.graph!r} has no op {name!r}")

    def to_json(self) -> dict[str, Any]:
        return {**GRAPH_PREDICTION.stamp(), "graph": self.graph, "phase": self.phase, "params": dict(self.params),
                "target": self.target, "model": self.model, "ceilings_origin": self.ceilings_origin,
                "asynchronous": self.asynchronous,
                "launch_overhead": {"value_s": self.launch_overhead_s, "source": self.launch_overhead_source},
                "host_dispatch": {"value_s": self.host_dispatch_s, "source": self.host_dispatch_source},
                "graph_replay": self.graph_replay,
                "engine_step": {"value_s": self.engine_step_s, "source": self.engine_step_source},
                "latency_s": self.latency_s, "interval_s": list(self.interval_s), "host_s": self.host_s, "device_s": self.device_s,
                "device_idle_s": self.device_idle_s, "bound": self.bound, "tokens_per_s": self.tokens_per_s,
                "complete": self.complete,
                "uncovered": [{"name": name, "reason": reason} for name, reason in self.uncovered],
                "by_class": [row.to_json() for row in self.by_class],
                "ops": [op.to_json() for op in self.ops]}


def kernel_work(work: Work) -> Work:
    """``work`` without its launches: what the op's kernel does once it runs."""
    return Work(dict(work.flops), dict(work.bytes), launches=0, transfers=dict(work.transfers),
                collectives=work.collectives, op=work.op, shape=dict(work.shape), accesses=work.accesses)


def _is_empty(work: Work) -> bool:
    return not (work.flops or work.bytes or work.transfers or work.collectives or work.accesses)


def latency_interval(ops: "tuple[OpPrediction, ...]", latency_s: float) -> tuple[float, float]:
    """The latency's interval: each covered op's interval about its kernel time, summed
    correlated within an op class and independent across classes
    (:func:`pytest_charz.calibration.classes.summed_interval`); the point itself when no op has
    an interval (an uncalibrated prediction)."""
    from ..calibration.classes import summed_interval

    parts = [(op.op_class, op.kernel_s, *op.prediction.interval_s) for op in ops if op.covered]
    total, low, high = summed_interval(parts) if parts else (0.0, 0.0, 0.0)
    return max(0.0, latency_s - (total - low)), latency_s + (high - total)


def tokens_per_s(graph: Graph, latency_s: float) -> float | None:
    """Tokens per second of an LLM phase: prefill ``batch * seq``, decode ``batch`` per step."""
    if not latency_s > 0 or graph.phase not in ("prefill", "decode"):
        return None
    batch = float(graph.params.get("batch", 1) or 1)
    if graph.phase == "decode":
        return batch / latency_s
    seq = graph.params.get("seq")
    return batch * float(seq) / latency_s if seq else None


def predict_graph(
    graph: Graph,
    target: TargetArg = None,
    model: str | Model | None = None,
    profile: ProfileArg = None,
    calibration: CalibrationArg = None,
    host_dispatch_s: float | None = None,
    *,
    asynchronous: bool | None = None,
    predictor: Predictor | None = None,
    runtime: str | None = None,
) -> GraphPrediction:
    """Predict ``graph`` on ``target`` op by op and schedule it (module docstring); times in s.

    ``target``, ``model``, ``profile`` and ``calibration`` are as for
    :func:`pytest_charz.prediction.load_predictor` (``predictor``: an already loaded core
    instead; ``profile`` still gives a CPU's measured framework dispatch). ``host_dispatch_s``:
    host time to issue one op (default: :func:`.runtime.runtime_of`). ``asynchronous``: whether
    the host runs ahead of the device (default: the target kind is a GPU or an ASIC). ``runtime``:
    a profile of :data:`.runtime.RUNTIME_PROFILES` (``eager``, ``graphs``, ``serving``, ``vllm``): its host
    dispatch, graph replay and engine step (the kernels are the graph's, as built). Raises
    :class:`.capacity.CapacityError` (a UsageError) when the graph does not fit the device's DRAM.
    """
    from ..models.base import Prediction
    from ..prediction import load_predictor, read_profile

    if not isinstance(graph, Graph):
        raise UsageError(f"predict_graph takes a workloads Graph, got {type(graph).__name__}")
    profile = read_profile(profile) if profile is not None else None   # read once, used twice
    if predictor is None:
        predictor = load_predictor(target, model, profile, calibration)
    chosen, ceilings = predictor.model, predictor.ceilings
    check_fits(graph, ceilings.capacity("dram"), predictor.target or ceilings.target_id or "the target")
    # the host's dispatch per framework is the core's, as it prices one op (and as charz sim issues)
    issued = runtime_of(ceilings, profile, host_dispatch_s, asynchronous, runtime,
                        costs=getattr(chosen, "costs", None), graph=graph)
    gap_s = issued.graph_launch_s if issued.graph_replay else issued.launch_s   # what each launch leaves the device

    # Each distinct kernel priced once by the core, calibration applied exactly as for a single case.
    kernels = [kernel_work(op.work) for op in graph.ops]
    distinct = list(dict.fromkeys(work for work in kernels if not _is_empty(work)))
    predicted = dict(zip(distinct, predictor.predict_all(distinct)))
    no_kernel = Prediction.of_terms(chosen.name, 0.0, "launch", {})
    rows: list[dict[str, Any]] = []
    costs: list[OpDemand] = []
    uncovered: list[tuple[str, str]] = []
    for op, work in zip(graph.ops, kernels):
        prediction = predicted[work] if work in predicted else no_kernel
        op_launch_s = op.work.launches * gap_s
        if prediction.covered:
            kernel_s = prediction.time_s
            bound = prediction.bound if kernel_s >= op_launch_s else "launch"
            regime = prediction.regime if bound != "launch" else "launch"
        else:
            kernel_s, bound, regime = 0.0, "", ""
            uncovered.append((op.name, prediction.reason))
        # Contention off: the op's one demand is its kernel time, on a resource of its own.
        costs.append(OpDemand(((0, kernel_s),) if kernel_s > 0 else ()))
        rows.append({"op": op, "prediction": prediction, "launch_s": op_launch_s, "time_s": kernel_s + op_launch_s,
                     "bound": bound, "regime": regime})
    layout = GraphLayout.of(graph)
    schedule = schedule_graph(layout, costs, issued, 1, contention=False)
    host_s, device_s, bound = graph_bound(layout, schedule, issued.synchronous)
    busy_s = sum(row["time_s"] for row in rows)
    ops = tuple(OpPrediction(name=row["op"].name, op_class=row["op"].op_class, stream=row["op"].stream,
                             prediction=row["prediction"], launch_s=row["launch_s"], time_s=row["time_s"],
                             bound=row["bound"], regime=row["regime"], issue_s=schedule.issue_s[index],
                             start_s=schedule.start_s[index], end_s=schedule.end_s[index],
                             share=row["time_s"] / busy_s if busy_s else 0.0) for index, row in enumerate(rows))
    by_class = []
    for op_class in OP_CLASSES:
        members = [op for op in ops if op.op_class == op_class]
        if members:
            class_s = sum(op.time_s for op in members)
            by_class.append(ClassTime(op_class, len(members), class_s, class_s / busy_s if busy_s else 0.0))
    by_class.sort(key=lambda row: -row.time_s)
    latency_s = schedule.latency_s
    return GraphPrediction(
        graph=graph.name, phase=graph.phase, params={**graph.params, **({"runtime": runtime} if runtime else {})},
        target=predictor.target,
        model=chosen.name, ceilings_origin=ceilings.origin, asynchronous=issued.asynchronous,
        launch_overhead_s=gap_s,
        launch_overhead_source=GRAPH_NODE_SOURCE if issued.graph_replay else issued.launch_source,
        host_dispatch_s=issued.dispatch_s, host_dispatch_source=issued.dispatch_source,
        ops=ops, latency_s=latency_s, host_s=host_s, device_s=device_s, bound=bound, by_class=tuple(by_class),
        tokens_per_s=tokens_per_s(graph, latency_s), uncovered=tuple(uncovered),
        interval_s=latency_interval(ops, latency_s), graph_replay=issued.graph_replay,
        engine_step_s=issued.step_s, engine_step_source=issued.step_source)
