"""Compute ceilings of one run: the best FMA-chain and GEMM rate per dtype (``flops:<dtype>``,
``gemm:<dtype>``) and the points of the FLOP/s curve.

A case slower than its twin on fewer threads (:func:`~.sanity.twin_flags`) is flagged on the
ceiling of its dtype and no ceiling rests on it; a figure whose best case ran on fewer threads
than the widest measured says it is a lower bound on the all-thread peak.
"""
from __future__ import annotations

from typing import Any

from .figures import Case, CaseFigures, SpecView, shape, time_s
from .sanity import case_threads, twin_flags


def _rate(case: Case) -> float:
    """FLOP per second of the case's median time, every dtype it counts together."""
    return sum(case.work.flops.values()) / time_s(case)


def best_rates(cases: list[Case], op: str, quantity: str, spec: SpecView) -> list[CaseFigures]:
    """Per dtype the ``<quantity>:<dtype>`` figure of the fastest case of ``op`` (``fma``: held to
    the spec's vector peak, ``gemm``: to its matrix peak); cases slower than a twin on fewer
    threads are left out of the figure and named in its ``extra["flags"]`` and notes."""
    def peak_of(case: Case) -> float | None:
        dtypes = list(case.work.flops)
        return spec.flops(dtypes[0], vector=op == "fma")[0] if len(dtypes) == 1 else None

    flagged = twin_flags(cases, _rate, "FLOP/s", peak_of)
    by_dtype: dict[str, list[tuple[float, Case]]] = {}
    for case in cases:
        for dtype, flops in case.work.flops.items():
            by_dtype.setdefault(dtype, []).append((flops / time_s(case), case))
    out = []
    for dtype, rated in by_dtype.items():
        peak, source = spec.flops(dtype, vector=op == "fma")
        kept = [(rate, case) for rate, case in rated if case.id not in flagged] or rated
        rate, best = max(kept, key=lambda item: item[0])
        figure = CaseFigures(f"{quantity}:{dtype}", rate, "FLOP/s", [c for _, c in kept], best.id, peak, source)
        widest = max(case_threads(c) or 1 for _, c in rated)
        flags = []
        for _, case in rated:
            flag = flagged.get(case.id)
            if flag is None:
                continue
            flag = dict(flag)
            if (case_threads(best) or 1) < widest:
                flag["text"] += (f"; {figure.name} rests on the {case_threads(best) or 1}-thread case: a lower "
                                 f"bound on the {widest}-thread peak")
            flags.append(flag)
            figure.notes.append(flag["text"])
        if flags:
            figure.extra["flags"] = flags
        out.append(figure)
    return out


def flops_curve(cases: list[Case]) -> dict[str, Any]:
    """The points of the FLOP/s curve: each case's rate per dtype and its arithmetic intensity."""
    points = []
    for case in cases:
        moved = case.work.bytes.get("dram")
        for dtype, flops in case.work.flops.items():
            points.append({"case": case.id, "op": case.work.op, "dtype": dtype,
                           "flop_per_s": flops / time_s(case),
                           "intensity_flop_per_byte": flops / moved if moved else None, "shape": dict(shape(case))})
    return {"points": points}
