"""The pieces both halves of the profile's reading side share: cases and their accessors, one
run's figure for one ceiling (:class:`CaseFigures`) and the run's spec (:class:`SpecView`).

:mod:`.profile_cases` and :mod:`.profile_levels` read cases with these; nothing here reads a
ceiling.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

Case = Mapping[str, Any]


@dataclass
class CaseFigures:
    """One run's figure for one ceiling, the cases it rests on and notes on how it was read."""

    name: str
    value: float | None
    unit: str
    cases: list[Case]
    best_case: str | None = None
    spec: float | None = None
    spec_source: str | None = None
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


# -- the run's spec -------------------------------------------------------------------------------
class SpecView:
    """Figures of the run's ``target.spec`` (``TargetSpec.to_json()``), as (value, source) pairs."""

    def __init__(self, spec: Mapping[str, Any] | None) -> None:
        self.spec = spec or {}
        self.levels: dict[str, Mapping[str, Any]] = {
            str(lv.get("name")): lv for lv in self.spec.get("memory") or () if isinstance(lv, Mapping)}

    @staticmethod
    def _figure(raw: Any, scale: float = 1.0) -> tuple[float | None, str | None]:
        if isinstance(raw, Mapping) and isinstance(raw.get("value"), (int, float)):
            return float(raw["value"]) * scale, str(raw.get("source") or "")
        return None, None

    def flops(self, dtype: str, vector: bool) -> tuple[float | None, str | None]:
        compute = self.spec.get("compute") or {}
        if vector and dtype in (compute.get("vector_peak_flops") or {}):
            return self._figure(compute["vector_peak_flops"][dtype])
        return self._figure((compute.get("peak_flops") or {}).get(dtype))

    def level(self, name: str, key: str, scale: float = 1.0) -> tuple[float | None, str | None]:
        return self._figure((self.levels.get(name) or {}).get(key), scale)

    def per_unit(self, name: str) -> bool:
        """Whether the level is private to one core / SM / CU (scope ``unit``)."""
        return str((self.levels.get(name) or {}).get("scope") or "") == "unit"

    def cache_levels(self) -> list[tuple[str, float | None]]:
        """Cache level names in order of size, with capacity in bytes where the spec has one."""
        caches = [(name, self.level(name, "capacity_bytes")[0]) for name in self.levels if name != "dram"]
        return sorted(caches, key=lambda item: (item[1] is None, item[1] or 0.0, item[0]))

    def llc_bytes(self) -> float | None:
        known = [capacity for _, capacity in self.cache_levels() if capacity]
        return max(known) if known else None

    def link(self, kind: str) -> tuple[float | None, str | None, float | None]:
        """Spec bandwidth, its source and latency in seconds for a transfer kind."""
        if kind in ("h2d", "d2h") and self.spec.get("host_link"):
            link = self.spec["host_link"]
            bandwidth, source = self._figure(link.get("bandwidth_bytes_per_s"))
            return bandwidth, source, self._figure(link.get("latency_us"), 1e-6)[0]
        if kind == "peer" and self.spec.get("peer_links"):
            link = self.spec["peer_links"][0]
            bandwidth, source = self._figure(link.get("bandwidth_bytes_per_s"))
            count = int(link.get("count") or 1)
            if bandwidth is not None:
                return bandwidth * count, f"{count} x {link.get('name')}: {source}", self._figure(link.get("latency_us"), 1e-6)[0]
        if kind in ("d2d", "host"):
            bandwidth, source = self.level("dram", "bandwidth_bytes_per_s")
            if bandwidth is not None:
                return bandwidth / 2, f"half of DRAM bandwidth (read + write): {source}", None
        return None, None, None


# -- case accessors -------------------------------------------------------------------------------
def work(case: Case) -> Mapping[str, Any]:
    return case.get("work") or {}


def shape(case: Case) -> Mapping[str, Any]:
    return work(case).get("shape") or {}


def median_s(case: Case) -> float | None:
    value = (case.get("measurement") or {}).get("median_s")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def time_s(case: Case) -> float:
    """The median time of a usable case (only usable cases reach the readers)."""
    value = median_s(case)
    assert value is not None, case.get("id")
    return value


def usable(case: Case) -> bool:
    """A case with a time: not every sample discarded."""
    return median_s(case) is not None and "all-discarded" not in (case.get("flags") or ())


def bytes_per_s(case: Case) -> float:
    return sum((work(case).get("bytes") or {}).values()) / time_s(case)


def working_set(case: Case) -> float | None:
    size = shape(case).get("working_set_bytes")
    return float(size) if isinstance(size, (int, float)) and size > 0 else None
