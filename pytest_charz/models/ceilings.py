"""Ceilings: the hardware figures a model consumes, each with its source.

A :class:`Ceilings` value is built either from a :class:`~pytest_charz.targets.spec.TargetSpec`
(datasheet peaks: what the vendor promises) or from a capability profile (what the suites
measured). Models never see a TargetSpec or a profile, only this, so the same model runs on
either; a figure nobody knows stays ``None`` and a model that needs it says so
(``Prediction.covered=False``) instead of guessing.

Capability profile contract (version 1), the mapping :meth:`Ceilings.from_profile` reads::

    {"kind": "charz-profile", "version": 1,     # formats.PROFILE; kind may be left out by hand
     "target": {"id": "h100-sxm", "kind": "gpu", "compute_units": 132},   # all optional
     "ceilings": [
        {"name": "flops:bf16",        "value": 7.1e14, "unit": "FLOP/s", "source": "..."},
        {"name": "flops:fp64:vector", "value": 2.6e13, "unit": "FLOP/s"},   # non-matrix peak
        {"name": "gemm:bf16",         "value": 6.9e14, "unit": "FLOP/s"},   # the vendor GEMM's best
        {"name": "bandwidth:dram",    "value": 3.0e12, "unit": "B/s"},
        {"name": "capacity:l2",       "value": 5.2e7,  "unit": "B"},
        {"name": "latency:l1",        "value": 1.2e-9, "unit": "s"},
        {"name": "transfer:h2d",      "bandwidth": 5.3e10, "latency_s": 2.0e-6},
        {"name": "collective:all-reduce", "bandwidth": 9e9, "latency_s": 3e-5, "ranks": 2},  # algbw
        {"name": "launch",            "value": 2.5e-6, "unit": "s"},
        {"name": "compute_units",     "value": 132},
     ]}

``flops:<dtype>`` (FMA chains) is the vector peak of that dtype; the matrix peak of a dtype is
the higher of ``flops:<dtype>`` and ``gemm:<dtype>``. Names are ``<quantity>:<key>`` with keys
from :mod:`pytest_charz.work` (dtypes, memory levels, transfer kinds, collective ops);
``collective:<op>`` is that collective's alpha-beta line at ``ranks`` ranks (``bandwidth``: the
algorithm bandwidth, nccl-tests bytes / time). ``unit`` may be omitted (SI base units assumed)
or a scaled unit (``TFLOP/s``, ``GB/s``, ``GiB/s``, ``ns``, ``us``, ``MiB``...). A ``value`` of
null means "not measured". Names with other quantities (contention, power...) are ignored:
profiles carry more than models use. A name of a known quantity with an unknown key, an unknown
unit or a duplicate name is a :class:`~pytest_charz.errors.FormatError`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import FormatError, UsageError
from ..targets.links import link_ceilings
from ..targets.priors import PRIOR_MODES, apply_priors, is_prior
from ..targets.spec import Figure
from ..work import COLLECTIVE_OPS, DTYPES, MEMORY_LEVELS, TRANSFER_KINDS

if TYPE_CHECKING:
    from ..targets.spec import TargetSpec
    from ..work import Work

CEILINGS_VERSION = 1
# The collective ops keying the collective ceilings: :data:`pytest_charz.work.COLLECTIVE_OPS`
# (``ceilings.COLLECTIVE_OPS`` is that same tuple).

# Ops that run on matrix units (tensor cores, MXUs, AMX): they may reach ``peak_flops``; other ops
# are held to ``vector_peak_flops`` where the target has one. An op left unnamed gets the higher
# (matrix) peak so the roofline stays a lower bound.
MATRIX_OPS = frozenset({"gemm", "matmul", "bmm", "conv", "attention"})

#: The fields of :class:`Ceilings` that map a key (dtype, level, link, collective op) to a figure.
FIGURE_MAPS = (
    "peak_flops", "vector_peak_flops", "bandwidth_bytes_per_s", "capacity_bytes", "latency_s",
    "link_bandwidth_bytes_per_s", "link_latency_s",
    "collective_bandwidth_bytes_per_s", "collective_latency_s", "collective_ranks",
    "gemm_tile_s",
)
_FIGURE_SCALARS = ("launch_overhead_s", "compute_units")
#: Figure maps written to JSON only when set (measured collectives, a spec's GEMM tile time), so
#: that files without them stay as they were.
_MAPS_WRITTEN_WHEN_SET = frozenset({*(name for name in FIGURE_MAPS if name.startswith("collective_")), "gemm_tile_s"})
_KEYS = {
    "peak_flops": DTYPES, "vector_peak_flops": DTYPES, "bandwidth_bytes_per_s": MEMORY_LEVELS,
    "capacity_bytes": MEMORY_LEVELS, "latency_s": MEMORY_LEVELS,
    "link_bandwidth_bytes_per_s": TRANSFER_KINDS, "link_latency_s": TRANSFER_KINDS,
    **{name: COLLECTIVE_OPS for name in FIGURE_MAPS if name.startswith("collective_")},
    "gemm_tile_s": DTYPES,
}
# Latencies and overheads may be zero; rates, capacities and counts must be positive.
_MAY_BE_ZERO = frozenset({"latency_s", "link_latency_s", "launch_overhead_s", "collective_latency_s", "gemm_tile_s"})


def check_figure(field_name: str, figure: Any, key: str = "") -> Figure:
    """``figure`` when it is a :class:`Figure` with a finite value in the range of the field
    ``field_name`` (zero allowed for latencies and overheads, else positive); UsageError naming
    the field and ``key``."""
    label = f"Ceilings.{field_name}" + (f"[{key!r}]" if key else "")
    if not isinstance(figure, Figure):
        raise UsageError(f"{label} must be a Figure(value, source), got {figure!r}")
    value = figure.value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{label} must be a finite number, got {value!r}")
    if not (value >= 0 if field_name in _MAY_BE_ZERO else value > 0):
        raise UsageError(f"{label} must be {'>= 0' if field_name in _MAY_BE_ZERO else '> 0'}, got {value!r}")
    return figure


@dataclass(frozen=True)
class Ceilings:
    """Hardware figures for models: peaks, bandwidths, capacities, latencies, links, launch cost.

    Every figure is a :class:`Figure` (value in the unit its field name says, and its source).
    ``kind`` is the target kind (``gpu``, ``asic``, ``cpu``), which picks e.g. the GEMM tile table.
    Links: ``h2d``/``d2h`` host link, ``d2d`` copies within device memory, ``peer`` device to
    device, ``host`` copies within host memory on a CPU-only machine. Collectives (measured
    only): per op, the algorithm bandwidth and the latency at ``collective_ranks`` ranks.
    ``architecture`` is the spec's (``Ampere``, ``Hopper``, ...), which picks what the vendor
    library's kernels can do (e.g. the GEMM tile shapes, ``models/gemm.py``).
    ``gemm_tile_s``: by dtype, the fixed time the vendor GEMM pays per output tile (a spec prior,
    :data:`pytest_charz.targets.spec.Priors.gemm_tile_us`; none where the kernels hide it).
    """

    target_id: str = ""
    kind: str = ""
    origin: str = ""
    # the spec's architecture ("Ampere", "Hopper"...): what a vendor library's kernels are built for
    architecture: str = ""
    peak_flops: Mapping[str, Figure] = field(default_factory=dict)
    vector_peak_flops: Mapping[str, Figure] = field(default_factory=dict)
    bandwidth_bytes_per_s: Mapping[str, Figure] = field(default_factory=dict)
    capacity_bytes: Mapping[str, Figure] = field(default_factory=dict)
    latency_s: Mapping[str, Figure] = field(default_factory=dict)
    link_bandwidth_bytes_per_s: Mapping[str, Figure] = field(default_factory=dict)
    link_latency_s: Mapping[str, Figure] = field(default_factory=dict)
    collective_bandwidth_bytes_per_s: Mapping[str, Figure] = field(default_factory=dict)
    collective_latency_s: Mapping[str, Figure] = field(default_factory=dict)
    collective_ranks: Mapping[str, Figure] = field(default_factory=dict)
    # the vendor GEMM's fixed time per output tile, by dtype (models/gemm.py): a spec prior
    gemm_tile_s: Mapping[str, Figure] = field(default_factory=dict)
    launch_overhead_s: Figure | None = None
    compute_units: Figure | None = None
    # A launch overhead the spec's priors give (targets/priors.py): used by launch_overhead()
    # only where no measured figure is set; kept apart so that what was measured stays known.
    launch_prior_s: Figure | None = None

    def __post_init__(self) -> None:
        for name in FIGURE_MAPS:
            figures = dict(getattr(self, name))
            for key, figure in figures.items():
                if key not in _KEYS[name]:
                    raise UsageError(f"Ceilings.{name} key {key!r} is not one of {', '.join(_KEYS[name])}")
                check_figure(name, figure, key)
            object.__setattr__(self, name, figures)
        for name in (*_FIGURE_SCALARS, "launch_prior_s"):
            figure = getattr(self, name)
            if figure is not None:
                check_figure(name, figure)

    # -- accessors: plain numbers, None when unknown -------------------------------------------
    def peak(self, dtype: str, op: str = "") -> float | None:
        """Peak FLOP/s for ``dtype`` when running ``op`` (vector peak for non-matrix ops)."""
        if op and op not in MATRIX_OPS and dtype in self.vector_peak_flops:
            return self.vector_peak_flops[dtype].value
        figure = self.peak_flops.get(dtype)
        return figure.value if figure is not None else None

    def bandwidth(self, level: str) -> float | None:
        return _value(self.bandwidth_bytes_per_s.get(level))

    def capacity(self, level: str) -> float | None:
        return _value(self.capacity_bytes.get(level))

    def latency(self, level: str) -> float | None:
        return _value(self.latency_s.get(level))

    def link_bandwidth(self, kind: str) -> float | None:
        return _value(self.link_bandwidth_bytes_per_s.get(kind))

    def link_latency(self, kind: str) -> float | None:
        return _value(self.link_latency_s.get(kind))

    def collective(self, op: str) -> tuple[float, float, int] | None:
        """Measured (latency_s, algorithm bytes_per_s, ranks) of collective ``op``; None unless all three."""
        lat, bw, ranks = (m.get(op) for m in (self.collective_latency_s, self.collective_bandwidth_bytes_per_s,
                                              self.collective_ranks))
        return None if lat is None or bw is None or ranks is None else (lat.value, bw.value, int(ranks.value))

    def gemm_tile(self, dtype: str) -> float:
        """The GEMM's fixed time per output tile of ``dtype`` in seconds (0 without one)."""
        return _value(self.gemm_tile_s.get(dtype)) or 0.0

    def launch_overhead(self) -> float | None:
        """The measured launch overhead (s), else the spec's prior, else None."""
        return _value(self.launch_overhead_s or self.launch_prior_s)

    def priors_used(self, work: "Work") -> dict[str, str]:
        """The prior figures (``targets/priors.py``) a prediction of ``work`` consults, by name
        (``flops:<dtype>``, ``gemm_tile:<dtype>``, ``bandwidth:<level>``, ``latency:<level>``, ``launch``,
        ``transfer:<kind>:bandwidth``/``:latency``) with their sources; empty when every figure
        it needs is a datasheet's or a measured one."""
        used: dict[str, Figure] = {}

        def note(name: str, figure: Figure | None) -> None:
            if is_prior(figure):
                assert figure is not None
                used[name] = figure

        for dtype in work.flops:
            matrix = not work.op or work.op in MATRIX_OPS or dtype not in self.vector_peak_flops
            note(f"flops:{dtype}", (self.peak_flops if matrix else self.vector_peak_flops).get(dtype))
            if work.op == "gemm":
                note(f"gemm_tile:{dtype}", self.gemm_tile_s.get(dtype))
        for level in work.bytes:
            note(f"bandwidth:{level}", self.bandwidth_bytes_per_s.get(level))
        if work.accesses:
            working_set = float(work.shape.get("working_set_bytes", math.inf))
            for level in MEMORY_LEVELS:           # the levels the latency term reads (models.roofline)
                note(f"latency:{level}", self.latency_s.get(level))
                capacity = self.capacity(level)
                if capacity is not None and working_set <= capacity:
                    break
        if work.launches and self.launch_overhead_s is None:
            note("launch", self.launch_prior_s)
        kinds = list(work.transfers) + (["peer"] if any(self.collective(c.op) is None
                                                         for c in work.collectives) else [])
        for kind in kinds:
            note(f"transfer:{kind}:bandwidth", self.link_bandwidth_bytes_per_s.get(kind))
            note(f"transfer:{kind}:latency", self.link_latency_s.get(kind))
        return {name: figure.source for name, figure in used.items()}

    def units(self) -> int | None:
        value = _value(self.compute_units)
        return int(value) if value is not None else None

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def from_spec(cls, spec: "TargetSpec", priors: str = "all") -> "Ceilings":
        """Datasheet ceilings of ``spec``, with its priors where it has them.

        Link figures are :func:`~pytest_charz.targets.links.link_ceilings` (derived ones, such as
        ``d2d`` at half the DRAM bandwidth, say so in their source). With ``priors`` (the
        default) the spec's ``[priors]`` are applied (:func:`~pytest_charz.targets.priors.apply_priors`):
        achievable fractions scale the peaks and rates they name, and launch overhead, latencies
        and missing links are filled; each such figure's source starts with ``prior: ``.
        ``priors="missing"`` fills only what the datasheet lacks, leaving its peaks and rates
        unscaled (the datasheet roofline: ``spec-roofline``); ``priors="none"`` gives the
        datasheet alone (no launch overhead: that is measured).
        """
        if priors not in PRIOR_MODES:
            raise UsageError(f"Ceilings.from_spec priors must be one of {', '.join(PRIOR_MODES)}, got {priors!r}")
        memory = {level.name: level for level in spec.memory}
        bandwidth = {n: lv.bandwidth_bytes_per_s for n, lv in memory.items() if lv.bandwidth_bytes_per_s}
        capacity = {n: lv.capacity_bytes for n, lv in memory.items() if lv.capacity_bytes}
        latency = {
            n: Figure(lv.latency_ns.value * 1e-9, lv.latency_ns.source)
            for n, lv in memory.items() if lv.latency_ns is not None
        }
        derived = link_ceilings(spec)
        links = {kind: link.bandwidth_bytes_per_s for kind, link in derived.items()}
        link_latency = {kind: link.latency_s for kind, link in derived.items() if link.latency_s is not None}
        peaks, vector = dict(spec.compute.peak_flops), dict(spec.compute.vector_peak_flops)
        gemm_tile: dict[str, Figure] = {}
        launch_prior = apply_priors(spec, peaks, vector, bandwidth, latency, links, link_latency, priors, gemm_tile)
        return cls(
            target_id=spec.id,
            kind=spec.identity.kind,
            architecture=spec.identity.architecture,
            origin=f"spec:{spec.id}",
            peak_flops=peaks,
            vector_peak_flops=vector,
            bandwidth_bytes_per_s=bandwidth,
            capacity_bytes=capacity,
            latency_s=latency,
            link_bandwidth_bytes_per_s=links,
            link_latency_s=link_latency,
            compute_units=spec.compute.units,
            gemm_tile_s=gemm_tile,
            launch_prior_s=launch_prior,
        )

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any]) -> "Ceilings":
        """Measured ceilings from a capability profile mapping (contract in the module docstring)."""
        from .ceilings_profile import read_profile_figures

        return cls(**read_profile_figures(profile))

    def with_overrides(self, **changes: Any) -> "Ceilings":
        """A copy with some figures replaced: what-if questions and test fixtures.

        Mapping fields merge key by key (``bandwidth_bytes_per_s={"dram": 4e12}``); a number
        becomes a ``Figure(number, "override")`` and ``None`` removes the figure. Scalar figures
        (``launch_overhead_s``, ``compute_units``) take a number, a Figure or None; ``target_id``,
        ``kind``, ``origin`` and ``architecture`` take strings.
        """
        updates: dict[str, Any] = {}
        for name, change in changes.items():
            if name in FIGURE_MAPS:
                if not isinstance(change, Mapping):
                    raise UsageError(f"with_overrides({name}=...) takes a mapping, got {change!r}")
                merged = dict(getattr(self, name))
                for key, value in change.items():
                    if value is None:
                        merged.pop(key, None)
                    else:
                        merged[key] = _as_figure(value)
                updates[name] = merged
            elif name in (*_FIGURE_SCALARS, "launch_prior_s"):
                updates[name] = None if change is None else _as_figure(change)
            elif name in ("target_id", "kind", "origin", "architecture"):
                updates[name] = str(change)
            else:
                known = ", ".join(("target_id", "kind", "origin", "architecture") + FIGURE_MAPS + _FIGURE_SCALARS + ("launch_prior_s",))
                raise UsageError(f"Ceilings has no figure {name!r}; known: {known}")
        return dataclasses.replace(self, **updates)

    def filled_from(self, other: "Ceilings") -> "Ceilings":
        """A copy whose missing figures are taken from ``other`` (sources say where each came from)."""
        updates: dict[str, Any] = {}
        for name in FIGURE_MAPS:
            updates[name] = {**getattr(other, name), **getattr(self, name)}
        for name in (*_FIGURE_SCALARS, "launch_prior_s"):
            updates[name] = getattr(self, name) or getattr(other, name)
        updates["kind"] = self.kind or other.kind
        updates["architecture"] = self.architecture or other.architecture
        updates["target_id"] = self.target_id or other.target_id
        updates["origin"] = f"{self.origin}+{other.origin}" if other.origin else self.origin
        return dataclasses.replace(self, **updates)

    # -- JSON ----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"version": CEILINGS_VERSION, "target_id": self.target_id,
                                "kind": self.kind, "origin": self.origin}
        if self.architecture:   # only when known: older files stay as they were
            data["architecture"] = self.architecture
        for name in FIGURE_MAPS:
            if getattr(self, name) or name not in _MAPS_WRITTEN_WHEN_SET:
                data[name] = {key: figure.to_json() for key, figure in getattr(self, name).items()}
        for name in _FIGURE_SCALARS:
            figure = getattr(self, name)
            data[name] = figure.to_json() if figure is not None else None
        if self.launch_prior_s is not None:   # only when set: older files stay as they were
            data["launch_prior_s"] = self.launch_prior_s.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Ceilings":
        if data.get("version") != CEILINGS_VERSION:
            raise FormatError(f"Ceilings JSON version {data.get('version')!r} is not {CEILINGS_VERSION}")
        try:
            kwargs: dict[str, Any] = {n: str(data.get(n, "")) for n in ("target_id", "kind", "origin", "architecture")}
            for name in FIGURE_MAPS:
                kwargs[name] = {k: Figure(float(f["value"]), str(f["source"])) for k, f in (data.get(name) or {}).items()}
            for name in (*_FIGURE_SCALARS, "launch_prior_s"):
                raw = data.get(name)
                kwargs[name] = Figure(float(raw["value"]), str(raw["source"])) if raw else None
            return cls(**kwargs)
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"Ceilings JSON is malformed: {exc}") from exc


def _value(figure: Figure | None) -> float | None:
    return figure.value if figure is not None else None


def _as_figure(value: Any) -> Figure:
    if isinstance(value, Figure):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"an override must be a number, a Figure or None, got {value!r}")
    return Figure(float(value), "override")
