"""A graph predicted op by op, and scheduled the way a runtime issues it.

:func:`predict_graph` predicts every op's kernel with a model through the same path as
:func:`pytest_charz.prediction.predict` (ceilings from the target's datasheet or a capability
profile, an optional calibration), then lays the ops on a timeline:

* **Host.** One host thread issues the ops in graph order, ``host_dispatch_s`` each (framework
  dispatch plus the driver's launch call). It never waits for the device on an asynchronous
  runtime (GPUs, ASICs); on a synchronous one (the host CPU, where the "device" is the host
  itself) it waits for each op to finish before dispatching the next.
* **Device.** Each stream runs its ops in order. An op starts when it has been issued, its
  dependencies have ended and the op before it on its stream has ended; it then occupies its
  stream for its kernel time plus one launch overhead (the gap a launch leaves on the device).

The end-to-end latency is the end of the last op. It is at least the host's issue time (ops x
``host_dispatch_s``) and at least the device's critical path without dispatch, and the schedule
says which one it is: **host-bound** when issuing takes longer than the device's own critical
path (the device idles waiting for dispatch: small-batch decode), **device-bound** otherwise.

Each op's Work counts ``launches=1``; that launch is charged once, as the op's launch overhead
(the ceilings' measured ``launch`` figure, or :data:`DEFAULT_LAUNCH_OVERHEAD_S` where the
ceilings are a datasheet's, which has none), so the model sees the kernel's work without it. On a
CPU whose profile measured PyTorch's dispatch (``dispatch:torch-module`` per op of eager module
code, else ``dispatch:torch``), that figure is each op's host dispatch and there is no launch
(the op runs on the dispatching thread).
An op the model cannot predict keeps its launch overhead on the timeline, is listed in
``uncovered`` with the model's reason, and makes the latency a lower bound (``complete=False``);
it is never dropped silently.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import UsageError, check_non_negative
from ..formats import GRAPH_PREDICTION
from ..work import Work
from .graph import OP_CLASSES, Graph

if TYPE_CHECKING:
    from ..models.base import Model, Prediction
    from ..calibration.predictor import Predictor
    from ..prediction import CalibrationArg, ProfileArg, TargetArg

#: Device-side cost of one kernel launch when the ceilings have no measured ``launch`` figure
#: (datasheets have none): 2.5 us, the middle of the 1-3 us ``cudaLaunchKernel`` enqueue cost on
#: CUDA 12+ drivers quoted in "From PyTorch op to kernel launch" (J. Lin, GPU kernel serving,
#: lesson 18, https://jiahuanglin.xyz/all_lessons/gpu_kernel_serving/18_pytorch_to_kernel.html).
#: The runtime suite's empty-kernel launch case measures the real figure.
DEFAULT_LAUNCH_OVERHEAD_S = 2.5e-6
#: Host time to dispatch one op of an eager framework when the ceilings have no measured
#: ``launch`` figure: 10 us, inside the 5-25 us of CPU-side work per PyTorch eager op (Python,
#: binding, autograd and ATen dispatch, backend, driver) in the same source. The runtime suite's
#: ``dispatch`` case measures it on a host CPU.
DEFAULT_HOST_DISPATCH_S = 10e-6
#: Target kinds whose runtime issues work asynchronously (the host runs ahead of the device).
ASYNCHRONOUS_KINDS = frozenset({"gpu", "asic"})
BOUNDS = ("host", "device")


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


def _framework_dispatch(kind: str, profile: Mapping[str, Any] | None) -> Any:
    """The profile's measured host time per op of eager PyTorch model code on a CPU target:
    ``dispatch:torch-module`` (ops issued from ``nn.Module`` code, module calls and views
    included: what a workload graph's ops cost), else the bare ``dispatch:torch``; else None."""
    if kind != "cpu" or profile is None:
        return None
    from ..models.ceilings_profile import read_op_costs

    dispatch = read_op_costs(profile).dispatch_s
    return dispatch.get("torch-module") or dispatch.get("torch")


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
    target: "TargetArg" = None,
    model: "str | Model | None" = None,
    profile: "ProfileArg" = None,
    calibration: "CalibrationArg" = None,
    host_dispatch_s: float | None = None,
    *,
    asynchronous: bool | None = None,
    predictor: "Predictor | None" = None,
) -> GraphPrediction:
    """Predict ``graph`` on ``target`` op by op and schedule it (module docstring); times in s.

    ``target``, ``model``, ``profile`` and ``calibration`` are as for
    :func:`pytest_charz.prediction.predict` (``predictor``: an already loaded core instead). ``host_dispatch_s``: host time to issue one op
    (default: the ceilings' ``launch`` figure, else :data:`DEFAULT_HOST_DISPATCH_S`).
    ``asynchronous``: whether the host runs ahead of the device (default: the target kind is a
    GPU or an ASIC).
    """
    from ..prediction import load_predictor, read_profile

    if not isinstance(graph, Graph):
        raise UsageError(f"predict_graph takes a workloads Graph, got {type(graph).__name__}")
    profile = read_profile(profile) if profile is not None else None   # read once, used twice
    if predictor is None:
        predictor = load_predictor(target, model, profile, calibration)
    chosen = predictor.model
    ceilings = predictor.ceilings
    measured_launch = ceilings.launch_overhead_s
    framework_dispatch = _framework_dispatch(ceilings.kind, profile) if host_dispatch_s is None else None
    if framework_dispatch is not None:
        # A CPU op runs on the thread that dispatched it: no device launch, the framework's
        # measured dispatch is the whole overhead of an op.
        launch_s, launch_source = 0.0, "none: a CPU op runs on the thread that dispatches it"
        dispatch_s, dispatch_source = framework_dispatch.value, framework_dispatch.source
    else:
        if measured_launch is not None:
            launch_s, launch_source = measured_launch.value, measured_launch.source or ceilings.origin
        else:
            launch_s = DEFAULT_LAUNCH_OVERHEAD_S
            launch_source = "DEFAULT_LAUNCH_OVERHEAD_S (no launch figure in the ceilings; cudaLaunchKernel 1-3 us)"
        if host_dispatch_s is not None:
            dispatch_s, dispatch_source = check_non_negative("host_dispatch_s", host_dispatch_s), "given"
        elif measured_launch is not None:
            dispatch_s, dispatch_source = launch_s, f"the ceilings' launch figure ({launch_source})"
        else:
            dispatch_s = DEFAULT_HOST_DISPATCH_S
            dispatch_source = "DEFAULT_HOST_DISPATCH_S (PyTorch eager: 5-25 us of host work per op)"
    overlapping = asynchronous if asynchronous is not None else ceilings.kind in ASYNCHRONOUS_KINDS

    # Each distinct kernel priced once by the core, calibration applied exactly as for a single case.
    kernels = [kernel_work(op.work) for op in graph.ops]
    distinct = list(dict.fromkeys(work for work in kernels if not _is_empty(work)))
    predicted = dict(zip(distinct, predictor.predict_all(distinct)))

    from ..models.base import Prediction

    no_kernel = Prediction.of_terms(chosen.name, 0.0, "launch", {})
    rows: list[dict[str, Any]] = []
    stream_free: dict[int, float] = {}
    end_of: dict[str, float] = {}
    host_t = 0.0
    uncovered: list[tuple[str, str]] = []
    for op, work in zip(graph.ops, kernels):
        prediction = predicted[work] if work in predicted else no_kernel
        op_launch_s = op.work.launches * launch_s
        if prediction.covered:
            kernel_s = prediction.time_s
            bound = prediction.bound if kernel_s >= op_launch_s else "launch"
            regime = prediction.regime if bound != "launch" else "launch"
        else:
            kernel_s, bound, regime = 0.0, "", ""
            uncovered.append((op.name, prediction.reason))
        time_s = kernel_s + op_launch_s
        issue_s = host_t + dispatch_s
        ready = max([issue_s, stream_free.get(op.stream, 0.0), *(end_of[dep] for dep in op.deps)])
        end_s = ready + time_s
        end_of[op.name] = end_s
        stream_free[op.stream] = end_s
        # A synchronous runtime returns to the host only once the op is done.
        host_t = issue_s if overlapping else end_s
        rows.append({"op": op, "prediction": prediction, "launch_s": op_launch_s, "time_s": time_s,
                     "bound": bound, "regime": regime, "issue_s": issue_s, "start_s": ready, "end_s": end_s})

    latency_s = max(end_of.values(), default=0.0)
    busy_s = sum(row["time_s"] for row in rows)
    times = {row["op"].name: row["time_s"] for row in rows}
    # The device's own critical path (dependencies and stream order, dispatch free).
    _, device_s = graph.critical_path(lambda op: times[op.name])
    host_s = len(graph.ops) * dispatch_s
    if not overlapping:
        # The host waits for every op: the device can never run ahead of dispatch.
        device_s = busy_s
    ops = tuple(OpPrediction(name=row["op"].name, op_class=row["op"].op_class, stream=row["op"].stream,
                             prediction=row["prediction"], launch_s=row["launch_s"], time_s=row["time_s"],
                             bound=row["bound"], regime=row["regime"], issue_s=row["issue_s"],
                             start_s=row["start_s"], end_s=row["end_s"],
                             share=row["time_s"] / busy_s if busy_s else 0.0) for row in rows)
    by_class = []
    for op_class in OP_CLASSES:
        members = [op for op in ops if op.op_class == op_class]
        if members:
            class_s = sum(op.time_s for op in members)
            by_class.append(ClassTime(op_class, len(members), class_s, class_s / busy_s if busy_s else 0.0))
    by_class.sort(key=lambda row: -row.time_s)
    return GraphPrediction(
        graph=graph.name, phase=graph.phase, params=dict(graph.params), target=predictor.target,
        model=chosen.name, ceilings_origin=ceilings.origin, asynchronous=overlapping,
        launch_overhead_s=launch_s, launch_overhead_source=launch_source,
        host_dispatch_s=dispatch_s, host_dispatch_source=dispatch_source,
        ops=ops, latency_s=latency_s, host_s=host_s, device_s=device_s,
        bound="host" if host_s > device_s else "device", by_class=tuple(by_class),
        tokens_per_s=tokens_per_s(graph, latency_s), uncovered=tuple(uncovered),
        interval_s=latency_interval(ops, latency_s))
