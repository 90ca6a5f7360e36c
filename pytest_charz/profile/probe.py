"""Shared-resource detection: short DRAM probes spread through a run (``op="probe"``).

On a shared host, neighbours' memory traffic moves the DRAM ceiling from one run (or one part of
a run) to the next: two back-to-back runs of the recorded Zen 5 guest gave ``bandwidth:dram``
54.2 and 91.4 GB/s. The memory and contention suites measure the same short probe (a read of a
buffer past the last-level cache, and a page-local chase over it) at several points of a run;
the spread of the probe's figures is the evidence a ceiling needs: past ``PROBE_STABLE`` the
DRAM-bound ceilings (``bandwidth:dram``, ``latency:dram``, ``slowdown:*``) are flagged unstable,
with the probe's range as the measured cause.
"""
from __future__ import annotations

from typing import Any

from ..units import format_bytes
from .figures import Case, CaseFigures, bytes_per_s, shape, time_s

#: A probe whose figures spread by more than this (max / min - 1) marks the DRAM ceilings unstable.
PROBE_STABLE = 0.05
#: The ceilings a neighbour's memory traffic moves.
DRAM_BOUND = ("bandwidth:dram", "latency:dram", "slowdown:")


def _value(case: Case) -> float:
    """The probe's figure: bytes per second of a read probe, seconds per load of a chase probe."""
    accesses = case.work.accesses
    return time_s(case) / accesses if accesses else bytes_per_s(case)


def _text(kind: str, value: float) -> str:
    return f"{value * 1e9:.3g} ns" if kind == "dram-latency" else f"{value / 1e9:.3g} GB/s"


def read_probes(cases: list[Case], figures: list[CaseFigures]) -> tuple[dict[str, Any], list[str]]:
    """The probe curve (points in run order, spread per kind) and notes; flags DRAM-bound figures
    when a probe's spread passes ``PROBE_STABLE`` (``extra["unstable"]`` and a caveat)."""
    by_kind: dict[str, list[Case]] = {}
    for case in cases:
        by_kind.setdefault(str(shape(case).get("probe") or "dram-read"), []).append(case)
    points: list[dict[str, Any]] = []
    spreads: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for kind, group in by_kind.items():
        values = [_value(c) for c in group]
        for case, value in zip(group, values):
            points.append({"case": case.id, "probe": kind, "value": value,
                           "working_set_bytes": shape(case).get("working_set_bytes")})
        spread = max(values) / min(values) - 1 if len(values) > 1 else None
        spreads[kind] = {"spread": spread, "min": min(values), "max": max(values), "probes": len(values)}
    unstable = {k: s for k, s in spreads.items() if s["spread"] is not None and s["spread"] > PROBE_STABLE}
    if unstable:
        evidence = "; ".join(
            f"{kind} over {format_bytes(float(shape(by_kind[kind][0]).get('working_set_bytes') or 0))}: "
            f"{_text(kind, s['min'])} to {_text(kind, s['max'])} ({100 * s['spread']:.0f}% spread, {s['probes']} probes)"
            for kind, s in unstable.items())
        text = (f"unstable: the DRAM probe moved during the run ({evidence}): neighbours' memory traffic on a "
                "shared host, or a changed clock; this ceiling may differ by as much in another run")
        notes.append(text)
        for figure in figures:
            if figure.name.startswith(DRAM_BOUND):
                figure.notes.append(text)
                figure.extra["unstable"] = True
    elif len(cases) < 2:
        notes.append("fewer than two DRAM probes: whether neighbours moved the DRAM ceilings is not known")
    return {"points": points, "spread": spreads}, notes
