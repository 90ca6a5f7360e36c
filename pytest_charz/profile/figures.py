"""The pieces both halves of the profile's reading side share: case accessors over
:class:`~pytest_charz.records.CaseRecord`, one run's figure for one ceiling (:class:`CaseFigures`)
and the run's spec (:class:`SpecView`).

:mod:`.cases` and :mod:`.levels` read cases with these; nothing here reads a ceiling.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..records import CaseRecord
from ..targets.links import link_ceilings
from ..targets.spec import Figure, MemoryLevel, TargetSpec

Case = CaseRecord


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
def _figure(figure: Figure | None, scale: float = 1.0) -> tuple[float | None, str | None]:
    if figure is None:
        return None, None
    return figure.value * scale, figure.source


class SpecView:
    """Figures of the run's TargetSpec as (value, source) pairs, (None, None) where unknown."""

    def __init__(self, spec: TargetSpec | None) -> None:
        self.spec = spec
        # By name; a later level of the same name wins, as a mapping of the spec's JSON would.
        self.levels: dict[str, MemoryLevel] = {lv.name: lv for lv in spec.memory} if spec is not None else {}
        self._links = link_ceilings(spec) if spec is not None else {}

    def flops(self, dtype: str, vector: bool) -> tuple[float | None, str | None]:
        """Peak FLOP/s of ``dtype``: the vector peak for non-matrix ops where the spec has one."""
        if self.spec is None:
            return None, None
        compute = self.spec.compute
        if vector and dtype in compute.vector_peak_flops:
            return _figure(compute.vector_peak_flops[dtype])
        return _figure(compute.peak_flops.get(dtype))

    def level(self, name: str, key: str, scale: float = 1.0) -> tuple[float | None, str | None]:
        """The ``key`` figure (a MemoryLevel field: ``bandwidth_bytes_per_s``, ``capacity_bytes``,
        ``latency_ns``) of memory level ``name``, times ``scale``."""
        level = self.levels.get(name)
        return _figure(getattr(level, key) if level is not None else None, scale)

    def per_unit(self, name: str) -> bool:
        """Whether the level is private to one core / SM / CU (scope ``unit``)."""
        level = self.levels.get(name)
        return level is not None and level.scope == "unit"

    def cache_levels(self) -> list[tuple[str, float | None]]:
        """Cache level names in order of size, with capacity in bytes where the spec has one."""
        caches = [(name, self.level(name, "capacity_bytes")[0]) for name in self.levels if name != "dram"]
        return sorted(caches, key=lambda item: (item[1] is None, item[1] or 0.0, item[0]))

    def llc_bytes(self) -> float | None:
        """The largest cache capacity in bytes, None without any."""
        known = [capacity for _, capacity in self.cache_levels() if capacity]
        return max(known) if known else None

    def link(self, kind: str) -> tuple[float | None, str | None, float | None]:
        """Spec bandwidth (bytes per second), its source and latency in seconds for a transfer
        kind, from :func:`~pytest_charz.targets.links.link_ceilings`."""
        link = self._links.get(kind)
        if link is None:
            return None, None, None
        latency = link.latency_s.value if link.latency_s is not None else None
        return link.bandwidth_bytes_per_s.value, link.bandwidth_bytes_per_s.source, latency


# -- case accessors -------------------------------------------------------------------------------
def shape(case: Case) -> Mapping[str, Any]:
    """The case's ``work.shape`` (sizes by the case conventions of ``docs/run-format.md``)."""
    return case.work.shape


def median_s(case: Case) -> float | None:
    """The measured median time in seconds, None when there is none (or it is not positive)."""
    value = case.measurement.median_s
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def time_s(case: Case) -> float:
    """The median time of a usable case in seconds (only usable cases reach the readers)."""
    value = median_s(case)
    assert value is not None, case.id
    return value


def usable(case: Case) -> bool:
    """A case with a time: not every sample discarded."""
    return median_s(case) is not None and "all-discarded" not in case.flags


def bytes_per_s(case: Case) -> float:
    """Bytes moved (every memory level) per second of the median time."""
    return sum(case.work.bytes.values()) / time_s(case)


def working_set(case: Case) -> float | None:
    """The case's working set in bytes, None when it has none."""
    size = shape(case).get("working_set_bytes")
    return float(size) if isinstance(size, (int, float)) and size > 0 else None
