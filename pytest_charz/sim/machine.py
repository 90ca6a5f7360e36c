"""The simulated machine: compute units, memory levels, links and runtime figures of one product.

A :class:`Machine` is built from a catalogue :class:`~pytest_charz.targets.spec.TargetSpec`
(:meth:`Machine.from_spec`) or from a measured capability profile (:meth:`Machine.from_profile`,
the spec filling what the profile lacks), and changed by what-if parameters
(:meth:`Machine.with_params`, names in :data:`~.parameters.PARAMETERS`). Every figure keeps where it
came from in ``sources`` (by parameter name).

A machine also carries the prediction core that prices its ops (:meth:`Machine.priced_by`: the
``Predictor`` of :func:`pytest_charz.prediction.load_predictor` for the same target and profile,
or one with a calibration) and the figures that core's ceilings describe, so that a what-if
change reaches the price (:mod:`.pricing`). Its host dispatch and launch gap start from the same
rule as ``predict_graph``'s (:func:`pytest_charz.workloads.runtime.runtime_of`).

Peaks are stored at the reference clock and unit count they were quoted at; the machine's
``clock_mhz`` and ``units`` scale them (:meth:`Machine.peak`).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import UsageError
from ..models.ceilings import MATRIX_OPS, Ceilings
from ..targets.spec import Figure
from . import defaults
from .parameters import PARAMETERS, check_parameter_value

if TYPE_CHECKING:
    from ..calibration.predictor import Predictor
    from ..targets.energy import EnergyCoefficients
    from ..targets.spec import TargetSpec

#: Reference clock where a spec gives none: peaks then scale relative to this nominal figure.
NOMINAL_CLOCK_MHZ = 1000.0


@dataclass(frozen=True)
class SimLevel:
    """One memory level: capacity (B), bandwidth (B/s) and load latency (s); None where unknown.
    ``scope`` is the catalogue's (``unit``: per compute unit, ``device``, ...)."""

    name: str
    scope: str
    capacity_bytes: float | None
    bandwidth_bytes_per_s: float | None
    latency_s: float | None = None


@dataclass(frozen=True)
class SimLink:
    """A link kind: per-direction bandwidth of one link (B/s), hop latency (s), links per device."""

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    count: int = 1

    @property
    def total_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.count


@dataclass(frozen=True)
class Machine:
    """One device of a system of ``devices`` identical devices, and the host that drives it."""

    id: str
    kind: str
    units: int
    reference_units: int
    clock_mhz: float
    reference_clock_mhz: float
    peak_flops: Mapping[str, float]
    vector_peak_flops: Mapping[str, float]
    levels: tuple[SimLevel, ...]
    host_link: SimLink | None
    peer_link: SimLink | None
    topology: str
    devices: int
    copy_engines: int = defaults.COPY_ENGINES
    dispatch_overhead_s: float = defaults.HOST_DISPATCH_S
    launch_overhead_s: float = defaults.LAUNCH_OVERHEAD_S
    graph_launch_overhead_s: float = defaults.GRAPH_NODE_LAUNCH_S
    power_cap_w: float | None = None
    idle_power_w: float | None = None
    energy: "EnergyCoefficients | None" = field(default=None, compare=False)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    predictor: "Predictor | None" = field(default=None, compare=False, repr=False)
    priced_at: Mapping[str, float] = field(default_factory=dict, compare=False, repr=False)

    # -- figures ----------------------------------------------------------------------------------
    @property
    def compute_scale(self) -> float:
        """Peak FLOP/s now over the peak at the reference units and clock."""
        return (self.units / self.reference_units) * (self.clock_mhz / self.reference_clock_mhz)

    def peak(self, dtype: str, op: str = "") -> float | None:
        """Peak FLOP/s of ``dtype`` for ``op`` (the vector peak for a non-matrix op), None if unknown."""
        table = self.vector_peak_flops if op and op not in MATRIX_OPS and dtype in self.vector_peak_flops \
            else self.peak_flops
        peak = table.get(dtype)
        return None if peak is None else peak * self.compute_scale

    def level(self, name: str) -> SimLevel | None:
        for level in self.levels:
            if level.name == name:
                return level
        return None

    @functools.cached_property
    def ceilings(self) -> Ceilings:
        """The machine's figures as model ceilings: GEMM tiling and latency terms reuse the models."""
        def figures(values: Mapping[str, float | None]) -> dict[str, Figure]:
            return {key: Figure(value, "sim machine") for key, value in values.items() if value is not None}

        dtypes = set(self.peak_flops)
        return Ceilings(
            target_id=self.id, kind=self.kind, origin=f"sim:{self.id}",
            peak_flops=figures({d: self.peak(d) for d in dtypes}),
            vector_peak_flops=figures({d: self.vector_peak_flops[d] * self.compute_scale for d in self.vector_peak_flops}),
            bandwidth_bytes_per_s=figures({lv.name: lv.bandwidth_bytes_per_s for lv in self.levels}),
            capacity_bytes=figures({lv.name: lv.capacity_bytes for lv in self.levels}),
            latency_s=figures({lv.name: lv.latency_s for lv in self.levels}),
            compute_units=Figure(self.units, "sim machine"))

    # -- building ---------------------------------------------------------------------------------
    def priced_by(self, predictor: "Predictor", profile: Mapping[str, Any] | None = None) -> "Machine":
        """This machine with its ops priced by ``predictor`` (a core of this machine's target),
        host dispatch and launch gap from :func:`~pytest_charz.workloads.runtime.runtime_of` on
        its ceilings and ``profile`` (the one it was loaded with: a CPU's measured framework
        dispatch), and the current figures recorded as those its ceilings describe."""
        from ..workloads.runtime import runtime_of

        if predictor.target and predictor.target != self.id:
            raise UsageError(f"a prediction core of {predictor.target!r} cannot price the {self.id!r} machine")
        runtime = runtime_of(predictor.ceilings, profile, costs=getattr(predictor.model, "costs", None))
        sources = {**self.sources, "dispatch_overhead": runtime.dispatch_source, "launch_overhead": runtime.launch_source}
        machine = dataclasses.replace(self, dispatch_overhead_s=runtime.dispatch_s, launch_overhead_s=runtime.launch_s,
                                      sources=sources, predictor=predictor)
        return dataclasses.replace(machine, priced_at={name: machine.param(name) for name in PARAMETERS})

    @classmethod
    def from_spec(cls, spec: "TargetSpec", predictor: "Predictor | None" = None) -> "Machine":
        """The datasheet machine of ``spec``, read through :meth:`Ceilings.from_spec` (so the
        catalogue's cited priors, such as achievable DRAM and GEMM fractions and link latencies,
        apply as they do to the models); runtime and link figures it still lacks come from
        :mod:`.defaults`, energy from ``targets/energy/<id>.toml``. Priced by ``predictor``
        (default: the core of ``spec`` with the default model)."""
        from ..prediction import load_predictor
        from ..targets.energy import energy_coefficients

        ceilings = Ceilings.from_spec(spec)
        sources: dict[str, str] = {}
        clock = spec.compute.clock_boost_mhz or spec.compute.clock_base_mhz
        reference_clock = clock.value if clock is not None else NOMINAL_CLOCK_MHZ
        sources["clock_mhz"] = clock.source if clock is not None else "no clock in the spec: a nominal 1000 MHz"
        sources["compute_units"] = spec.compute.units.source
        sources["peak_flops"] = "; ".join(f"{d}: {f.source}" for d, f in ceilings.peak_flops.items())
        levels = []
        for lv in spec.memory:
            capacity, bandwidth, latency = (ceilings.capacity_bytes.get(lv.name),
                                            ceilings.bandwidth_bytes_per_s.get(lv.name), ceilings.latency_s.get(lv.name))
            levels.append(SimLevel(lv.name, lv.scope, _value(capacity), _value(bandwidth), _value(latency)))
            if capacity is not None:
                sources[f"{lv.name}_bytes"] = capacity.source
            if bandwidth is not None:
                sources["memory_bandwidth" if lv.name == "dram" else f"{lv.name}_bandwidth"] = bandwidth.source
        host = None
        if spec.host_link is not None:
            count = spec.host_link.count
            bandwidth = ceilings.link_bandwidth_bytes_per_s.get("h2d") or spec.host_link.bandwidth_bytes_per_s
            latency = ceilings.link_latency_s.get("h2d")
            host = SimLink(spec.host_link.name, bandwidth.value / count,
                           latency.value if latency is not None else defaults.HOST_LINK_LATENCY_S, count)
            sources["host_link_bandwidth"] = bandwidth.source
            sources["host_link_latency"] = latency.source if latency is not None else defaults.LINK_LATENCY_SOURCE
        peer = None
        topology = defaults.NO_PEERS
        if spec.peer_links:
            raw = spec.peer_links[0]
            total = ceilings.link_bandwidth_bytes_per_s.get("peer")
            latency = ceilings.link_latency_s.get("peer")
            per_link = total.value / raw.count if total is not None else raw.bandwidth_bytes_per_s.value
            peer = SimLink(raw.name, per_link, latency.value if latency is not None else defaults.PEER_LINK_LATENCY_S,
                           raw.count)
            topology = defaults.PEER_TOPOLOGIES.get(raw.name, defaults.PeerTopology("switch", 8, "assumed: a switch"))
            sources["link_bandwidth"] = total.source if total is not None else raw.bandwidth_bytes_per_s.source
            sources["link_latency"] = latency.source if latency is not None else defaults.LINK_LATENCY_SOURCE
        sources["devices"] = topology.source
        sources["graph_launch_overhead"] = defaults.GRAPH_NODE_LAUNCH_SOURCE
        sources["copy_engines"] = defaults.COPY_ENGINES_SOURCE
        try:
            energy = energy_coefficients(spec)
        except UsageError:
            energy = None                  # the host CPU and specs outside the catalogue
        idle = energy.idle_w if energy is not None else None
        tdp = energy.tdp_w if energy is not None else None
        if idle is not None:
            sources["idle_power_w"] = f"{idle.source}: {idle.how}"
        if tdp is not None:
            sources["power_cap_w"] = f"the TDP: {tdp.source}"
        units = int(spec.compute.units.value)
        machine = cls(id=spec.id, kind=spec.identity.kind, units=units, reference_units=units,
                      clock_mhz=reference_clock, reference_clock_mhz=reference_clock,
                      peak_flops={d: f.value for d, f in ceilings.peak_flops.items()},
                      vector_peak_flops={d: f.value for d, f in ceilings.vector_peak_flops.items()},
                      levels=tuple(levels), host_link=host, peer_link=peer, topology=topology.topology,
                      devices=topology.devices, power_cap_w=tdp.value if tdp is not None else None,
                      idle_power_w=idle.value if idle is not None else None, energy=energy, sources=sources)
        return machine.priced_by(predictor if predictor is not None else load_predictor(spec))

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any], spec: "TargetSpec | None" = None,
                     predictor: "Predictor | None" = None) -> "Machine":
        """A machine with a capability profile's measured figures (``charz profile`` JSON, read
        through :meth:`Ceilings.from_profile`); ``spec`` (default: the profile's target in the
        catalogue) fills what the profile lacks. Priced by ``predictor`` (default: the core of
        ``spec`` and ``profile`` with the default model); a profile of another target than
        ``spec`` is a UsageError (:func:`~pytest_charz.prediction.load_predictor`'s)."""
        from ..prediction import load_predictor
        from ..targets.catalogue import resolve

        measured = Ceilings.from_profile(profile)
        if spec is None:
            if not measured.target_id:
                raise UsageError("the profile names no target: pass spec= (a catalogue TargetSpec)")
            spec = resolve(measured.target_id)
        if predictor is None:
            predictor = load_predictor(spec, profile=profile)   # refuses a profile of another target
        machine = cls.from_spec(spec, predictor)
        sources = dict(machine.sources)
        origin = f"measured: capability profile of {measured.target_id or spec.id}"
        changes: dict[str, Any] = {}
        if measured.peak_flops:
            changes["peak_flops"] = {**{d: p * 1.0 for d, p in machine.peak_flops.items()},
                                     **{d: f.value / machine.compute_scale for d, f in measured.peak_flops.items()}}
            sources["peak_flops"] = origin
        if measured.vector_peak_flops:
            changes["vector_peak_flops"] = {**machine.vector_peak_flops,
                                            **{d: f.value / machine.compute_scale
                                               for d, f in measured.vector_peak_flops.items()}}
        levels = []
        for level in machine.levels:
            bandwidth, capacity, latency = (measured.bandwidth(level.name), measured.capacity(level.name),
                                            measured.latency(level.name))
            levels.append(dataclasses.replace(
                level, bandwidth_bytes_per_s=bandwidth or level.bandwidth_bytes_per_s,
                capacity_bytes=capacity or level.capacity_bytes,
                latency_s=latency if latency is not None else level.latency_s))
            if bandwidth:
                sources["memory_bandwidth" if level.name == "dram" else f"{level.name}_bandwidth"] = origin
        changes["levels"] = tuple(levels)
        if measured.units() is not None:
            changes["units"] = measured.units()
        h2d, h2d_latency, peer = (measured.link_bandwidth("h2d"), measured.link_latency("h2d"),
                                  measured.link_bandwidth("peer"))
        if machine.host_link is not None and h2d:
            changes["host_link"] = dataclasses.replace(
                machine.host_link, bandwidth_bytes_per_s=h2d / machine.host_link.count,
                latency_s=h2d_latency if h2d_latency is not None else machine.host_link.latency_s)
            sources["host_link_bandwidth"] = f"{origin}: transfer:h2d"
        if machine.peer_link is not None and peer:
            changes["peer_link"] = dataclasses.replace(machine.peer_link,
                                                       bandwidth_bytes_per_s=peer / machine.peer_link.count)
            sources["link_bandwidth"] = f"{origin}: transfer:peer over {machine.peer_link.count} links"
        # host dispatch and launch gap as predict_graph takes them (a CPU's measured dispatch included)
        return dataclasses.replace(machine, sources=sources, **changes).priced_by(predictor, profile)

    # -- parameters -------------------------------------------------------------------------------
    def param(self, name: str) -> float:
        """The current value of parameter ``name`` (:data:`PARAMETERS`); NaN where the machine has none."""
        if name not in PARAMETERS:
            raise UsageError(f"unknown machine parameter {name!r}; known: {', '.join(PARAMETERS)}")
        value = _GETTERS[name](self)
        return float("nan") if value is None else float(value)

    def with_params(self, values: Mapping[str, float]) -> "Machine":
        """A copy with the parameters ``values`` set (what-if questions); an unknown name, a
        negative bandwidth or a zero count is a UsageError."""
        machine = self
        for name, value in values.items():
            number = check_parameter_value(name, value)
            machine = _SETTERS[name](machine, number)
            machine = dataclasses.replace(machine, sources={**machine.sources, name: "what-if parameter"})
        return machine


def _value(figure: Figure | None) -> float | None:
    return figure.value if figure is not None else None


def _level_get(name: str, what: str) -> Callable[[Machine], float | None]:
    def get(machine: Machine) -> float | None:
        level = machine.level(name)
        return None if level is None else getattr(level, what)
    return get


def _level_set(name: str, what: str) -> Callable[[Machine, float], Machine]:
    def put(machine: Machine, value: float) -> Machine:
        level = machine.level(name) or SimLevel(name, "device", None, None)
        changed = dataclasses.replace(level, capacity_bytes=value) if what == "capacity_bytes" \
            else dataclasses.replace(level, bandwidth_bytes_per_s=value)
        others = tuple(lv for lv in machine.levels if lv.name != name)
        order = ("l1", "l2", "l3", "dram")
        levels = tuple(sorted((*others, changed), key=lambda lv: order.index(lv.name) if lv.name in order else 9))
        return dataclasses.replace(machine, levels=levels)
    return put


def _link_set(which: str, what: str, convert: Callable[[float], Any] = float) -> Callable[[Machine, float], Machine]:
    def put(machine: Machine, value: float) -> Machine:
        link = getattr(machine, which)
        if link is None:
            raise UsageError(f"{machine.id} has no {'peer links' if which == 'peer_link' else 'host link'} to change")
        return dataclasses.replace(machine, **{which: dataclasses.replace(link, **{what: convert(value)})})
    return put


def _field_set(name: str, convert: Callable[[float], Any] = float) -> Callable[[Machine, float], Machine]:
    return lambda machine, value: dataclasses.replace(machine, **{name: convert(value)})


def _link_get(which: str, what: str) -> Callable[[Machine], float | None]:
    return lambda machine: None if getattr(machine, which) is None else getattr(getattr(machine, which), what)


_GETTERS: dict[str, Callable[[Machine], float | None]] = {
    "memory_bandwidth": _level_get("dram", "bandwidth_bytes_per_s"),
    "dram_bytes": _level_get("dram", "capacity_bytes"),
    **{f"{lv}_bytes": _level_get(lv, "capacity_bytes") for lv in ("l1", "l2", "l3")},
    **{f"{lv}_bandwidth": _level_get(lv, "bandwidth_bytes_per_s") for lv in ("l2", "l3")},
    "compute_units": lambda m: m.units, "clock_mhz": lambda m: m.clock_mhz,
    "link_bandwidth": _link_get("peer_link", "bandwidth_bytes_per_s"),
    "link_count": _link_get("peer_link", "count"), "link_latency": _link_get("peer_link", "latency_s"),
    "host_link_bandwidth": _link_get("host_link", "bandwidth_bytes_per_s"),
    "host_link_latency": _link_get("host_link", "latency_s"),
    "devices": lambda m: m.devices, "copy_engines": lambda m: m.copy_engines,
    "dispatch_overhead": lambda m: m.dispatch_overhead_s, "launch_overhead": lambda m: m.launch_overhead_s,
    "graph_launch_overhead": lambda m: m.graph_launch_overhead_s,
    "power_cap_w": lambda m: m.power_cap_w, "idle_power_w": lambda m: m.idle_power_w,
}
_SETTERS: dict[str, Callable[[Machine, float], Machine]] = {
    "memory_bandwidth": _level_set("dram", "bandwidth_bytes_per_s"),
    "dram_bytes": _level_set("dram", "capacity_bytes"),
    **{f"{lv}_bytes": _level_set(lv, "capacity_bytes") for lv in ("l1", "l2", "l3")},
    **{f"{lv}_bandwidth": _level_set(lv, "bandwidth_bytes_per_s") for lv in ("l2", "l3")},
    "compute_units": _field_set("units", int), "clock_mhz": _field_set("clock_mhz"),
    "link_bandwidth": _link_set("peer_link", "bandwidth_bytes_per_s"),
    "link_count": _link_set("peer_link", "count", int), "link_latency": _link_set("peer_link", "latency_s"),
    "host_link_bandwidth": _link_set("host_link", "bandwidth_bytes_per_s"),
    "host_link_latency": _link_set("host_link", "latency_s"),
    "devices": _field_set("devices", int), "copy_engines": _field_set("copy_engines", int),
    "dispatch_overhead": _field_set("dispatch_overhead_s"), "launch_overhead": _field_set("launch_overhead_s"),
    "graph_launch_overhead": _field_set("graph_launch_overhead_s"),
    "power_cap_w": _field_set("power_cap_w"), "idle_power_w": _field_set("idle_power_w"),
}
assert set(_GETTERS) == set(PARAMETERS) == set(_SETTERS)
