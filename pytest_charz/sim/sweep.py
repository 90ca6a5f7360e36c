"""What-if sweeps: a grid of architecture parameters, each configuration simulated, the table,
the Pareto front of latency against energy, and which parameter moves the end-to-end time most.

Pure and deterministic: the grid is the cartesian product of the axes in the order given, every
configuration is evaluated independently (:mod:`.sweep_run`: locally in worker processes, or on
a Dask cluster), and results are put back in grid order, so two sweeps with the same inputs give the same table
whatever the scheduling. The evaluation is a picklable callable ``values -> SweepPoint``:
:class:`GraphEvaluator` (a workload graph on a :class:`~pytest_charz.sim.Machine`) or one of a
test's own.
"""
from __future__ import annotations

import difflib
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import UsageError
from ..formats import Format
from .parameters import is_count, whole_values

SWEEP = Format("charz-sweep", 1, "charz sweep")
#: Largest grid a sweep runs unless told otherwise (``charz sweep --max-configs``): a guard against
#: a typo such as N=10000, or N=100 on four axes, starting hours of simulation.
MAX_CONFIGS = 10_000
#: Most values one axis may have whatever the cap: the values are made before the grid is sized.
MAX_AXIS_VALUES = 1_000_000
#: Spacings of an axis ``PARAM=LO:HI:N[:SPACING]``.
SPACINGS = ("lin", "log")

Evaluate = Callable[[Mapping[str, float]], "SweepPoint"]
Progress = Callable[[int], None]


@dataclass(frozen=True)
class Axis:
    """One swept parameter and its values, in sweep order."""

    name: str
    values: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "values": list(self.values)}


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{what}: {text!r} is not a finite number")
    return value


def check_parameter(name: str, known: Iterable[str]) -> str:
    """``name`` if it is one of ``known``, else a UsageError listing them and the nearest."""
    names = sorted(known)
    if name in names:
        return name
    nearest = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    hint = f"; did you mean {nearest[0]!r}?" if nearest else ""
    raise UsageError(f"unknown sweep parameter {name!r}; known parameters: {', '.join(names)}{hint}")


def parse_axis(text: str, known: Iterable[str]) -> Axis:
    """An axis from ``PARAM=LO:HI:N`` (N values evenly spaced, ends included), ``PARAM=LO:HI:N:log``
    (geometric spacing) or ``PARAM=V1,V2,...`` (the values as listed)."""
    name, sep, spec = text.partition("=")
    name = name.strip()
    if not sep or not name or not spec.strip():
        raise UsageError(f"--vary {text!r}: expected PARAM=LO:HI:N, PARAM=LO:HI:N:log or PARAM=V1,V2,...")
    check_parameter(name, known)
    what = f"--vary {text!r}"
    if ":" not in spec:
        values = tuple(_number(part.strip(), what) for part in spec.split(","))
        if len(set(values)) != len(values):
            raise UsageError(f"{what}: a value is listed twice")
        return Axis(name, values)
    parts = spec.split(":")
    if len(parts) not in (3, 4):
        raise UsageError(f"{what}: expected LO:HI:N or LO:HI:N:log, got {spec!r}")
    low, high = _number(parts[0], what), _number(parts[1], what)
    spacing = parts[3].strip() if len(parts) == 4 else "lin"
    if spacing not in SPACINGS:
        raise UsageError(f"{what}: spacing must be one of {', '.join(SPACINGS)}; got {spacing!r}")
    try:
        count = int(parts[2])
    except ValueError:
        raise UsageError(f"{what}: N must be an integer, got {parts[2]!r}") from None
    if count < 1 or (count == 1 and low != high):
        raise UsageError(f"{what}: N must be at least 2 (1 only when LO == HI), got {count}")
    if count > MAX_AXIS_VALUES:
        raise UsageError(f"{what}: N is {count}, more values than any sweep runs on one axis "
                         f"(at most {MAX_AXIS_VALUES}); use fewer")
    if high < low:
        raise UsageError(f"{what}: HI ({high:g}) is below LO ({low:g})")
    if spacing == "log" and low <= 0:
        raise UsageError(f"{what}: a log axis needs LO > 0, got {low:g}")
    values = axis_values(low, high, count, spacing)
    if is_count(name):
        values = whole_values(values, what)
    return Axis(name, values)


def axis_values(low: float, high: float, count: int, spacing: str = "lin") -> tuple[float, ...]:
    """``count`` values from ``low`` to ``high`` (both included), evenly or geometrically spaced."""
    if count == 1:
        return (low,)
    if spacing == "log":
        ratio = math.log(high / low)
        return tuple(low * math.exp(ratio * i / (count - 1)) for i in range(count - 1)) + (high,)
    return tuple(low + (high - low) * i / (count - 1) for i in range(count - 1)) + (high,)


def grid_size(axes: Sequence[Axis]) -> int:
    """How many configurations the grid of ``axes`` has (the product of their lengths), without
    making them; UsageError for no axis or a parameter varied twice."""
    names = [axis.name for axis in axes]
    if not axes:
        raise UsageError("a sweep needs at least one --vary PARAM=LO:HI:N")
    if len(set(names)) != len(names):
        raise UsageError(f"a parameter is varied twice: {', '.join(names)}")
    return math.prod(len(axis.values) for axis in axes)


def grid(axes: Sequence[Axis], max_configs: int = MAX_CONFIGS) -> list[dict[str, float]]:
    """Every configuration of ``axes``: the cartesian product, the last axis varying fastest.

    UsageError, before any configuration is made, for a grid of more than ``max_configs``."""
    names = [axis.name for axis in axes]
    size = grid_size(axes)
    if size > max_configs:
        raise UsageError(f"the sweep has {size} configurations, more than the cap of {max_configs}; "
                         "use fewer values, or raise the cap (charz sweep --max-configs)")
    return [dict(zip(names, combo)) for combo in itertools.product(*(axis.values for axis in axes))]


@dataclass(frozen=True)
class SweepPoint:
    """One simulated configuration: its parameter values and what the simulator reported.
    Latency in seconds, energy in joules, power in watts."""

    values: Mapping[str, float]
    latency_s: float
    energy_j: float
    average_power_w: float
    tokens_per_s: float | None = None
    joules_per_token: float | None = None
    bottleneck: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"values": dict(self.values), "latency_s": self.latency_s, "energy_j": self.energy_j,
                "average_power_w": self.average_power_w, "tokens_per_s": self.tokens_per_s,
                "joules_per_token": self.joules_per_token, "bottleneck": self.bottleneck}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SweepPoint":
        return cls(values={str(k): float(v) for k, v in data["values"].items()},
                   latency_s=float(data["latency_s"]), energy_j=float(data["energy_j"]),
                   average_power_w=float(data["average_power_w"]), tokens_per_s=data.get("tokens_per_s"),
                   joules_per_token=data.get("joules_per_token"), bottleneck=str(data.get("bottleneck", "")))


def point_of(values: Mapping[str, float], result: Any) -> SweepPoint:
    """A SweepPoint from a simulator result (:class:`~pytest_charz.sim.SimResult`)."""
    return SweepPoint(values=dict(values), latency_s=float(result.latency_s), energy_j=float(result.energy_j),
                      average_power_w=float(result.average_power_w), tokens_per_s=result.tokens_per_s,
                      joules_per_token=result.joules_per_token, bottleneck=str(result.bottleneck))


class GraphEvaluator:
    """Simulates ``graph`` on ``machine`` with each configuration's parameters applied
    (``machine.with_params(values)``). Picklable, so worker processes and Dask workers get it."""

    def __init__(self, machine: Any, graph: Any, options: Any = None) -> None:
        self.machine = machine
        self.graph = graph
        self.options = options

    def __call__(self, values: Mapping[str, float]) -> SweepPoint:
        """The configuration's point; UsageError naming the configuration when the simulated
        latency or energy is not a finite figure (a value far outside any machine's)."""
        from . import simulate_graph

        where = ", ".join(f"{name}={value:g}" for name, value in values.items()) or "the unchanged machine"
        machine = self.machine.with_params(values) if values else self.machine
        try:
            point = point_of(values, simulate_graph(self.graph, machine, self.options))
        except UsageError as exc:
            if not values:
                raise
            raise UsageError(f"{exc} (configuration {where})") from None
        for what, figure in (("latency", point.latency_s), ("energy", point.energy_j)):
            if math.isinf(figure) or (what == "latency" and math.isnan(figure)):
                raise UsageError(f"the simulated {what} of {where} is {figure}, not a figure: the value is beyond "
                                 "what the simulator can compute with; sweep values of the order of a real machine's")
        return point


def pareto_front(points: Sequence[SweepPoint]) -> tuple[int, ...]:
    """Indices of the points no other point beats in both latency and energy (lower is better),
    in order of increasing latency; of equal points the first in grid order."""
    order = sorted(range(len(points)), key=lambda i: (points[i].latency_s, points[i].energy_j, i))
    front: list[int] = []
    best_energy = math.inf
    for index in order:
        if points[index].energy_j < best_energy:
            front.append(index)
            best_energy = points[index].energy_j
    return tuple(front)


@dataclass(frozen=True)
class Sensitivity:
    """How one parameter moves the end-to-end latency over its range, the other parameters
    averaged out (geometric mean of the latency of every configuration at each value).

    ``swing`` is the largest of those means over the smallest, minus 1 (0.25: the time moves by
    25% across the range); ``elasticity`` is d ln(latency) / d ln(parameter) from the lowest to
    the highest value (-1: doubling the parameter halves the time; None for a range through 0)."""

    parameter: str
    low: float
    high: float
    latency_low_s: float
    latency_high_s: float
    swing: float
    elasticity: float | None

    def to_json(self) -> dict[str, Any]:
        return {"parameter": self.parameter, "low": self.low, "high": self.high,
                "latency_low_s": self.latency_low_s, "latency_high_s": self.latency_high_s,
                "swing": self.swing, "elasticity": self.elasticity}


def _geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values and min(values) > 0 else 0.0


def sensitivity(axes: Sequence[Axis], points: Sequence[SweepPoint]) -> tuple[Sensitivity, ...]:
    """Every axis with more than one value, ranked by ``swing`` (largest first, then by name)."""
    ranked = []
    for axis in axes:
        if len(axis.values) < 2:
            continue
        means = [_geometric_mean([p.latency_s for p in points if p.values[axis.name] == value])
                 for value in axis.values]
        present = [m for m in means if m > 0]
        if not present:
            continue
        low_index = min(range(len(axis.values)), key=lambda i: axis.values[i])
        high_index = max(range(len(axis.values)), key=lambda i: axis.values[i])
        low, high = axis.values[low_index], axis.values[high_index]
        at_low, at_high = means[low_index], means[high_index]
        elasticity = (math.log(at_high / at_low) / math.log(high / low)
                      if low > 0 and high > low and at_low > 0 and at_high > 0 else None)
        ranked.append(Sensitivity(axis.name, low, high, at_low, at_high, max(present) / min(present) - 1.0,
                                  elasticity))
    return tuple(sorted(ranked, key=lambda s: (-s.swing, s.parameter)))


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: what was simulated on what, the axes, one point per configuration (grid
    order), the unmodified machine's point, the Pareto front and the sensitivity ranking."""

    workload: Mapping[str, Any]
    target: str
    machine: str
    axes: tuple[Axis, ...]
    points: tuple[SweepPoint, ...]
    baseline: SweepPoint | None = None
    parameters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)   # name -> unit, description, base value
    front: tuple[int, ...] = ()
    ranking: tuple[Sensitivity, ...] = ()

    @classmethod
    def of(cls, workload: Mapping[str, Any], target: str, machine: str, axes: Sequence[Axis],
           points: Sequence[SweepPoint], baseline: SweepPoint | None = None,
           parameters: Mapping[str, Mapping[str, Any]] | None = None) -> "SweepResult":
        """A result with its front and ranking computed from ``points``."""
        return cls(dict(workload), target, machine, tuple(axes), tuple(points), baseline, dict(parameters or {}),
                   pareto_front(points), sensitivity(axes, points))

    def to_json(self) -> dict[str, Any]:
        return {**SWEEP.stamp(), "workload": dict(self.workload), "target": self.target, "machine": self.machine,
                "axes": [a.to_json() for a in self.axes], "parameters": {k: dict(v) for k, v in self.parameters.items()},
                "baseline": self.baseline.to_json() if self.baseline else None,
                "points": [p.to_json() for p in self.points], "pareto_front": list(self.front),
                "sensitivity": [s.to_json() for s in self.ranking]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "a sweep") -> "SweepResult":
        data = SWEEP.check(data, source)
        baseline = data.get("baseline")
        return cls(workload=dict(data["workload"]), target=str(data["target"]), machine=str(data["machine"]),
                   axes=tuple(Axis(str(a["name"]), tuple(float(v) for v in a["values"])) for a in data["axes"]),
                   points=tuple(SweepPoint.from_json(p) for p in data["points"]),
                   baseline=SweepPoint.from_json(baseline) if baseline else None,
                   parameters={str(k): dict(v) for k, v in (data.get("parameters") or {}).items()},
                   front=tuple(int(i) for i in data["pareto_front"]),
                   ranking=tuple(Sensitivity(**s) for s in data["sensitivity"]))


__all__ = ["Axis", "GraphEvaluator", "SWEEP", "Sensitivity", "SweepPoint", "SweepResult", "axis_values",
           "check_parameter", "grid", "grid_size", "pareto_front", "parse_axis", "point_of",
           "sensitivity"]
