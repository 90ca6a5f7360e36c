"""Energy in the capability profile: joules per FLOP, per DRAM byte and per workload, derived
from the cases that measured energy (``CaseRecord.energy``) and that say what they did
(``CaseRecord.work``), each figure with the cases it rests on.

- joules per FLOP, per dtype: compute cases (``work.op`` ``fma`` or ``gemm``), the case's joules
  per call over its FLOPs per call; the figure is the median over those cases;
- joules per byte of DRAM traffic: STREAM cases (``work.op`` ``stream``) whose bytes are all
  DRAM bytes, joules per call over bytes per call;
- per workload: each workload case's joules per call (``work.op`` ``workload``).

The energy counter measures the whole package or board (RAPL package, GPU board), so these are
energies of the device while running the case, idle power included, not of the arithmetic alone.

Profile JSON, only when some case of the runs carries an energy record (runs without any, such
as runs recorded before energy was measured, give profiles without the key)::

    "energy": {"sources": ["rapl"], "cases_with_energy": 12,
               "joules_per_flop": {"fp64": {"value", "range", "cases": [{"case", "value", "watts"}]}},
               "joules_per_byte": {"dram": {...}}, "workloads": [{"case", "joules_per_call", "watts"}],
               "missing": "why there is no figure (when none could be derived)"}
"""
from __future__ import annotations

import statistics
from typing import Any, Sequence

from ..records import CaseRecord, Run

COMPUTE_OPS = ("fma", "gemm")


def _figure(points: list[dict[str, Any]]) -> dict[str, Any]:
    values = [p["value"] for p in points]
    return {"value": statistics.median(values), "range": [min(values), max(values)], "cases": points}


def _point(case: CaseRecord, amount: float) -> dict[str, Any]:
    energy = case.energy
    assert energy is not None and energy.joules_per_call is not None
    return {"case": case.id, "value": energy.joules_per_call / amount, "watts": energy.watts}


def energy_section(runs: Sequence[Run]) -> dict[str, Any] | None:
    """The profile's ``energy`` entry, or None when no case of ``runs`` has an energy record."""
    cases = [case for run in runs for case in run.cases if case.energy is not None]
    if not cases:
        return None
    measured = [case for case in cases if case.energy is not None and case.energy.joules_per_call is not None]
    section: dict[str, Any] = {"sources": sorted({c.energy.source for c in cases if c.energy is not None}),
                               "cases_with_energy": len(measured)}
    if not measured:
        reasons = sorted({c.energy.missing for c in cases if c.energy is not None and c.energy.missing})
        section["missing"] = "no case measured energy: " + ("; ".join(reasons) if reasons else "no reason recorded")
        return section
    per_flop: dict[str, list[dict[str, Any]]] = {}
    per_byte: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []
    for case in measured:
        work = case.work
        if work.op in COMPUTE_OPS:
            for dtype, flops in work.flops.items():
                if flops > 0:
                    per_flop.setdefault(dtype, []).append(_point(case, flops))
        elif work.op == "stream" and set(work.bytes) == {"dram"} and work.bytes["dram"] > 0:
            per_byte.append(_point(case, work.bytes["dram"]))
        elif work.op == "workload":
            energy = case.energy
            assert energy is not None
            workloads.append({"case": case.id, "joules_per_call": energy.joules_per_call, "watts": energy.watts})
    if per_flop:
        section["joules_per_flop"] = {dtype: _figure(points) for dtype, points in sorted(per_flop.items())}
    if per_byte:
        section["joules_per_byte"] = {"dram": _figure(per_byte)}
    if workloads:
        section["workloads"] = workloads
    if not (per_flop or per_byte or workloads):
        section["missing"] = ("cases measured energy, but none is a compute (fma, gemm), DRAM stream or workload "
                              "case to derive joules per FLOP or per byte from")
    return section
