"""TargetSpec: a hardware description kept as data, every figure with its source.

The catalogue files (``catalogue/*.toml``) are parsed into these values by ``catalogue.py``; the
host CPU's spec is derived at run time by ``host.py``. Units are in the field names.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Figure:
    """A number and where it comes from (a datasheet citation, or how it was derived)."""

    value: float
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source}


@dataclass(frozen=True)
class CpuIdentity:
    """What tells one CPU from another where results differ: the processor's own identification
    (vendor, family/model/stepping, full model name), the ISA features that change results, the
    cache sizes per level and the core count. ``targets/identity.py`` fingerprints it."""

    model_name: str              # the full model name, as /proc/cpuinfo gives it
    vendor: str                  # "intel", "amd", "arm", ... (as Identity.vendor)
    family: int | None = None    # cpuid family (x86), "CPU architecture" (Arm)
    model: int | None = None     # cpuid model (x86), "CPU part" (Arm)
    stepping: int | None = None  # cpuid stepping (x86), "CPU revision" (Arm)
    features: tuple[str, ...] = ()       # result-changing ISA flags present, sorted
    native_dtypes: tuple[str, ...] = ()  # "bf16", "fp16", "int8" computed natively, sorted
    cache_bytes: Mapping[str, int] = field(default_factory=dict)  # "l1" (data), "l2", "l3": per instance
    cores: int = 0               # physical cores
    logical_cpus: int = 0


@dataclass(frozen=True)
class Identity:
    id: str                      # canonical id, also the baseline directory name ("h100-sxm")
    name: str                    # marketing name
    vendor: str                  # "nvidia", "amd", "intel", "google", ...
    kind: str                    # "gpu", "asic", "cpu"
    backend: str                 # the Device backend that drives it: "cuda", "rocm", "cpu", "tpu"...
    aliases: tuple[str, ...] = ()
    # How to recognise the physical device: regexes over the name the driver reports, PCI ids.
    match_name: tuple[str, ...] = ()
    pci_device_ids: tuple[str, ...] = ()
    architecture: str = ""       # "Hopper", "CDNA3", "Sapphire Rapids"...
    # The host CPU's identification (None for catalogue targets and specs recorded before it).
    cpu: CpuIdentity | None = None


@dataclass(frozen=True)
class Compute:
    units: Figure                # SMs, CUs, TensorCores, cores
    unit_name: str               # "SM", "CU", "core"...
    clock_base_mhz: Figure | None
    clock_boost_mhz: Figure | None
    # Dense peak FLOP/s (or OP/s for integer types) per dtype, at the boost clock unless said.
    peak_flops: Mapping[str, Figure]
    # Peak of non-matrix (vector/SIMT) FLOP/s per dtype where it differs from the matrix peak.
    vector_peak_flops: Mapping[str, Figure] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryLevel:
    name: str                    # "l1", "l2", "l3", "dram" (Work's level names)
    label: str                   # "HBM3", "L2", "L1/shared"...
    scope: str                   # "unit" (per SM/core), "device", "socket", "system"
    capacity_bytes: Figure | None
    bandwidth_bytes_per_s: Figure | None
    latency_ns: Figure | None = None


@dataclass(frozen=True)
class Link:
    name: str                    # "pcie5-x16", "nvlink4", "infinity-fabric", "ici"
    bandwidth_bytes_per_s: Figure  # per direction
    latency_us: Figure | None = None
    count: int = 1               # links of this kind per device


@dataclass(frozen=True)
class Power:
    tdp_w: Figure | None
    idle_w: Figure | None = None


@dataclass(frozen=True)
class Priors:
    """Figures a datasheet lacks, for predictions from the spec alone; each a cited published
    measurement or a rule fitted on other targets' measurements (``targets/priors.py`` applies
    them, ``pytest_charz.published`` holds the measurements the rules were fitted on).

    ``efficiency``: achievable fraction of a datasheet figure per op class, keys ``gemm_<dtype>``
    (the vendor GEMM's best over the dense matrix peak), ``dram`` (STREAM-like copy over the
    datasheet bandwidth), ``host_link`` and ``peer_link`` (large copies over the per-direction
    link rate). ``latency_ns`` and ``bandwidth_bytes_per_s`` by memory level where the spec has
    none; ``host_link_*``/``peer_link_*`` where the spec has no such link or no latency for it.
    ``gemm_tile_us``: by dtype, the fixed time one output tile of the vendor GEMM pays besides its
    main loop (pipeline fill and epilogue, ``models/gemm.py``), where the target's kernels are
    shown to pay one.
    """

    launch_us: Figure | None = None
    host_link_latency_us: Figure | None = None
    peer_link_latency_us: Figure | None = None
    host_link_bandwidth_bytes_per_s: Figure | None = None
    peer_link_bandwidth_bytes_per_s: Figure | None = None
    latency_ns: Mapping[str, Figure] = field(default_factory=dict)
    bandwidth_bytes_per_s: Mapping[str, Figure] = field(default_factory=dict)
    efficiency: Mapping[str, Figure] = field(default_factory=dict)
    gemm_tile_us: Mapping[str, Figure] = field(default_factory=dict)


PRIOR_SCALARS = ("launch_us", "host_link_latency_us", "peer_link_latency_us",
                 "host_link_bandwidth_bytes_per_s", "peer_link_bandwidth_bytes_per_s")
PRIOR_MAPS = ("latency_ns", "bandwidth_bytes_per_s", "efficiency", "gemm_tile_us")


@dataclass(frozen=True)
class TargetSpec:
    identity: Identity
    compute: Compute
    memory: tuple[MemoryLevel, ...]
    host_link: Link | None
    peer_links: tuple[Link, ...]
    power: Power | None
    sources: Mapping[str, str]   # citation key -> full citation
    origin: str = ""             # file it was loaded from, or "derived at run time"
    notes: tuple[str, ...] = ()
    priors: Priors | None = None  # figures for spec-only predictions the datasheet lacks

    @property
    def id(self) -> str:
        return self.identity.id

    def level(self, name: str) -> MemoryLevel | None:
        for level in self.memory:
            if level.name == name:
                return level
        return None

    def peak(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for ``dtype``, or None when the target has no such figure."""
        figure = self.compute.peak_flops.get(dtype)
        return figure.value if figure is not None else None

    def bandwidth(self, level: str) -> float | None:
        found = self.level(level)
        if found is None or found.bandwidth_bytes_per_s is None:
            return None
        return found.bandwidth_bytes_per_s.value

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        from ..formats import TARGET_SPEC

        return {**TARGET_SPEC.stamp(), **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "a target spec") -> "TargetSpec":
        """The TargetSpec that :meth:`to_json` wrote (as a run file records it), rebuilt;
        FormatError naming ``source`` when it is malformed."""
        from ..errors import FormatError
        from ..formats import TARGET_SPEC

        data = TARGET_SPEC.check_nested(data, source)
        try:
            identity = {**data["identity"]}
            for key in ("aliases", "match_name", "pci_device_ids"):
                identity[key] = tuple(identity.get(key) or ())
            identity["cpu"] = _cpu_identity(identity.get("cpu"))
            compute = data["compute"]
            power = data.get("power")
            return cls(
                identity=Identity(**identity),
                compute=Compute(_required(compute["units"]), compute["unit_name"],
                                _figure(compute.get("clock_base_mhz")), _figure(compute.get("clock_boost_mhz")),
                                {k: _required(v) for k, v in compute["peak_flops"].items()},
                                {k: _required(v) for k, v in (compute.get("vector_peak_flops") or {}).items()}),
                memory=tuple(MemoryLevel(m["name"], m["label"], m["scope"], _figure(m.get("capacity_bytes")),
                                         _figure(m.get("bandwidth_bytes_per_s")), _figure(m.get("latency_ns")))
                             for m in data["memory"]),
                host_link=_link(data["host_link"]) if data.get("host_link") else None,
                peer_links=tuple(_link(raw) for raw in data.get("peer_links") or ()),
                power=Power(_figure(power.get("tdp_w")), _figure(power.get("idle_w"))) if power else None,
                sources=dict(data.get("sources") or {}), origin=str(data.get("origin", "")),
                notes=tuple(data.get("notes") or ()),
                priors=_priors(data["priors"]) if data.get("priors") else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"{source} is malformed: {exc!r}") from exc


def _optional_int(raw: Any) -> int | None:
    return None if raw is None else int(raw)


def _cpu_identity(raw: Any) -> CpuIdentity | None:
    """The CpuIdentity of its JSON; None where absent (specs written before it existed)."""
    if not raw:
        return None
    return CpuIdentity(
        model_name=str(raw["model_name"]), vendor=str(raw["vendor"]),
        family=_optional_int(raw.get("family")), model=_optional_int(raw.get("model")),
        stepping=_optional_int(raw.get("stepping")),
        features=tuple(str(f) for f in raw.get("features") or ()),
        native_dtypes=tuple(str(d) for d in raw.get("native_dtypes") or ()),
        cache_bytes={str(k): int(v) for k, v in (raw.get("cache_bytes") or {}).items()},
        cores=int(raw.get("cores") or 0), logical_cpus=int(raw.get("logical_cpus") or 0))


def _figure(raw: Any) -> Figure | None:
    return _required(raw) if raw else None


def _required(raw: Any) -> Figure:
    if not raw:
        raise ValueError(f"a required figure is missing ({raw!r})")
    return Figure(float(raw["value"]), str(raw["source"]))


def _priors(raw: Mapping[str, Any]) -> Priors:
    fields: dict[str, Any] = {name: _figure(raw.get(name)) for name in PRIOR_SCALARS}
    fields.update({name: {k: _required(v) for k, v in (raw.get(name) or {}).items()} for name in PRIOR_MAPS})
    return Priors(**fields)


def _link(raw: Mapping[str, Any]) -> Link:
    return Link(raw["name"], _required(raw["bandwidth_bytes_per_s"]), _figure(raw.get("latency_us")),
                int(raw.get("count", 1)))
