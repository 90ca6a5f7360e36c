"""Energy coefficients per catalogue target (``energy/<target-id>.toml``), every one with its source.

File schema::

    target = "<catalogue id>"
    [sources]  key = "full citation"
    [static]   idle_w = COEFFICIENT                # W of one idle device (clocks up, no work)
    [memory]   <level> = COEFFICIENT               # pJ per byte moved at that level (dram, l2, l3)
    [links]    peer = COEFFICIENT, host = COEFFICIENT   # pJ per byte sent over the link
    [power]    tdp_w = COEFFICIENT                 # only where the catalogue spec has no TDP

where COEFFICIENT is ``{ value = <number >= 0>, source = "<key of [sources]>", how = "<derivation>" }``.

Dynamic energy per FLOP is derived, not stored: ``(TDP - idle - DRAM power at full bandwidth) /
peak`` for each dtype of the spec (the vector peak for vector ops), i.e. a device running every
unit at its peak and DRAM at full bandwidth draws exactly its TDP. Each derived coefficient's
source says so, with its numbers.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..datafile import TableReader
from ..errors import SpecError, UsageError
from ..formats import read_toml
from .spec import TargetSpec

ENERGY_DIR = Path(__file__).with_name("energy")
PICO = 1e-12


@dataclass(frozen=True)
class Coefficient:
    """One energy figure in the unit its field says, where it comes from and how it was derived."""

    value: float
    source: str
    how: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "how": self.how}


@dataclass(frozen=True)
class EnergyCoefficients:
    """A target's energy figures: J per FLOP by dtype (matrix and vector), J per byte by memory
    level and link, static W, and the TDP they were derived against. None where unknown."""

    target_id: str
    idle_w: Coefficient | None
    tdp_w: Coefficient | None
    joules_per_flop: Mapping[str, Coefficient] = field(default_factory=dict)
    joules_per_vector_flop: Mapping[str, Coefficient] = field(default_factory=dict)
    joules_per_byte: Mapping[str, Coefficient] = field(default_factory=dict)
    joules_per_link_byte: Mapping[str, Coefficient] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        def table(values: Mapping[str, Coefficient]) -> dict[str, Any]:
            return {key: value.to_json() for key, value in values.items()}

        return {"target_id": self.target_id, "idle_w": self.idle_w.to_json() if self.idle_w else None,
                "tdp_w": self.tdp_w.to_json() if self.tdp_w else None,
                "joules_per_flop": table(self.joules_per_flop),
                "joules_per_vector_flop": table(self.joules_per_vector_flop),
                "joules_per_byte": table(self.joules_per_byte),
                "joules_per_link_byte": table(self.joules_per_link_byte)}


class _Reader(TableReader):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.sources: Mapping[str, str] = {}

    def coefficient(self, data: Any, where: str) -> Coefficient:
        raw = self.table(data, where, ("value", "source", "how"))
        value = raw["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise self.fail(f"{where}.value", "must be a non-negative number", value)
        if raw["source"] not in self.sources:
            raise self.fail(f"{where}.source", f"must be a key of [sources] ({', '.join(self.sources)})",
                            raw["source"])
        return Coefficient(float(value), f"{self.sources[raw['source']]}", self.text(raw, "how", where))

    def group(self, data: Any, where: str, keys: tuple[str, ...]) -> dict[str, Coefficient]:
        raw = self.table(data, where, (), keys)
        return {key: self.coefficient(value, f"{where}.{key}") for key, value in raw.items()}


def load_energy_file(path: Path) -> dict[str, Any]:
    """The checked contents of one energy file: target, idle, tdp, memory, links (raw units)."""
    reader = _Reader(path)
    data = reader.table(read_toml(path), "", ("target", "sources", "memory", "links"), ("static", "power"))
    sources = data["sources"]
    if not isinstance(sources, dict) or not sources or not all(isinstance(v, str) and v for v in sources.values()):
        raise reader.fail("sources", "must be a non-empty table of citations", sources)
    reader.sources = sources
    static = reader.group(data.get("static", {}), "static", ("idle_w",))
    power = reader.group(data.get("power", {}), "power", ("tdp_w",))
    return {"target": reader.text(data, "target", ""), "idle_w": static.get("idle_w"), "tdp_w": power.get("tdp_w"),
            "memory": reader.group(data["memory"], "memory", ("l1", "l2", "l3", "dram")),
            "links": reader.group(data["links"], "links", ("peer", "host"))}


@functools.lru_cache(maxsize=None)
def _load(target_id: str) -> dict[str, Any]:
    path = ENERGY_DIR / f"{target_id}.toml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in ENERGY_DIR.glob("*.toml")))
        raise UsageError(f"no energy coefficients for target {target_id!r}; known: {known}")
    raw = load_energy_file(path)
    if raw["target"] != target_id:
        raise SpecError(f"{path}: target is {raw['target']!r}, not {target_id!r} as its name says")
    return raw


def energy_coefficients(spec: TargetSpec) -> EnergyCoefficients:
    """The energy coefficients of ``spec``'s catalogue target, the per-FLOP ones derived from its
    TDP, idle power, DRAM power at full bandwidth and peaks (module docstring)."""
    raw = _load(spec.id)
    per_byte = {level: Coefficient(c.value * PICO, c.source, c.how + " (pJ per byte)") for level, c in raw["memory"].items()}
    per_link = {link: Coefficient(c.value * PICO, c.source, c.how + " (pJ per byte)") for link, c in raw["links"].items()}
    tdp: Coefficient | None = raw["tdp_w"]
    if tdp is None and spec.power is not None and spec.power.tdp_w is not None:
        tdp = Coefficient(spec.power.tdp_w.value, f"catalogue {spec.id}: power.tdp_w ({spec.power.tdp_w.source})")
    idle: Coefficient | None = raw["idle_w"]
    per_flop: dict[str, Coefficient] = {}
    per_vector_flop: dict[str, Coefficient] = {}
    dram = spec.level("dram")
    if tdp is not None and idle is not None:
        memory_w = 0.0
        if dram is not None and dram.bandwidth_bytes_per_s is not None and "dram" in per_byte:
            memory_w = dram.bandwidth_bytes_per_s.value * per_byte["dram"].value
        compute_w = max(tdp.value - idle.value - memory_w, 0.0)
        for table, out in ((spec.compute.peak_flops, per_flop), (spec.compute.vector_peak_flops, per_vector_flop)):
            for dtype, peak in table.items():
                out[dtype] = Coefficient(
                    compute_w / peak.value,
                    f"derived: (TDP {tdp.value:g} W - idle {idle.value:g} W - DRAM {memory_w:.4g} W at full bandwidth)"
                    f" / {dtype} peak {peak.value:.4g} FLOP/s (catalogue {spec.id})",
                    "a device at every peak draws its TDP")
    return EnergyCoefficients(spec.id, idle, tdp, per_flop, per_vector_flop, per_byte, per_link)
