"""``collective:<op>`` ceilings from the collectives suite's cases (``work.op == "collective"``).

Per collective op, like ``transfer:<kind>`` (:func:`~pytest_charz.curves.links.link_figures`):
the latency is the intercept of the alpha-beta fit over every message size, the algorithm
bandwidth (nccl-tests bytes / time) the median of bytes / (time - latency) over the messages
within 16x of the largest. The ceiling's value is the bus bandwidth, the algorithm bandwidth
times nccl-tests' bus factor (``models.comm.bus_factor``: 2(n-1)/n all-reduce, (n-1)/n
all-gather, reduce-scatter, all-to-all, 1 broadcast and send/recv), the figure that compares
with a link's bandwidth and across rank counts; it is held against the spec's ``peer`` link.
A run whose cases ran at several rank counts gives each op's figures at the rank count with the
most cases (the largest among equals); the others stay in the curve.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..curves.links import link_figures
from ..models.comm import bus_factor
from ..units import format_bytes
from .figures import Case, CaseFigures, SpecView, shape, time_s


def _message_bytes(case: Case) -> float:
    size = shape(case).get("bytes")
    if isinstance(size, (int, float)):
        return float(size)
    return float(sum(c.bytes for c in case.work.collectives))


def _op_and_ranks(case: Case) -> tuple[str, int]:
    case_shape = shape(case)
    message = case.work.collectives[0] if case.work.collectives else None
    op = str(case_shape.get("collective") or (message.op if message else "?"))
    ranks = case_shape.get("ranks") or (message.ranks if message else 0)
    return op, int(ranks)


def read_collectives(cases: Sequence[Case], spec: SpecView, curves: dict[str, Any]) -> list[CaseFigures]:
    """The ``collective:<op>`` figures of a run's collective cases; fills ``curves["collective"]``
    (every case with its algorithm and bus bandwidth, and each op's fit). Empty without cases."""
    if not cases:
        return []
    groups: dict[str, dict[int, list[Case]]] = {}
    for case in cases:
        op, ranks = _op_and_ranks(case)
        groups.setdefault(op, {}).setdefault(ranks, []).append(case)
    figures, points, fits = [], [], []
    peer_bandwidth, peer_source, _ = spec.link("peer")
    for op, by_ranks in groups.items():
        ranks = max(by_ranks, key=lambda r: (len(by_ranks[r]), r))    # the fullest sweep
        used = by_ranks[ranks]
        factor = bus_factor(op, ranks)
        for group_ranks, group in by_ranks.items():
            for case in group:
                algbw = _message_bytes(case) / time_s(case)
                points.append({"case": case.id, "op": op, "ranks": group_ranks, "bytes": _message_bytes(case),
                               "time_s": time_s(case), "algbw_bytes_per_s": algbw,
                               "busbw_bytes_per_s": algbw * bus_factor(op, group_ranks),
                               "backend": shape(case).get("backend"), "counted": group_ranks == ranks})
        notes = [f"{ranks} ranks ({shape(used[0]).get('backend') or 'backend not recorded'}); bus factor {factor:.3g}"]
        if len(by_ranks) > 1:
            notes.append(f"also measured at {', '.join(str(r) for r in sorted(by_ranks) if r != ranks)} ranks: "
                         "not counted")
        link = link_figures([_message_bytes(c) for c in used], [time_s(c) for c in used])
        fit_json: dict[str, Any] | None = None
        if link.fit is None:
            notes.append("one message size only: no latency fit, bandwidth of that size")
        else:
            fit_json = {"r2": link.fit.r2, "points": link.fit.points}
            fits.append({"op": op, "ranks": ranks, "latency_s": link.latency_s,
                         "bandwidth": link.bandwidth_bytes_per_s, **fit_json})
            if link.bandwidth_bytes_per_s is None:
                notes.append("time does not grow with the message size: no bandwidth")
            elif link.large_transfers:
                notes.append(f"bandwidth: median over the {link.large_transfers} message(s) of "
                             f"{format_bytes(link.large_from_bytes)} or more, less the fitted latency")
        algorithm_bw = link.bandwidth_bytes_per_s
        busbw = algorithm_bw * factor if algorithm_bw is not None else None
        best = max(used, key=lambda c: _message_bytes(c) / time_s(c))
        figures.append(CaseFigures(f"collective:{op}", busbw, "B/s", list(used), best.id, peer_bandwidth, peer_source,
                                   notes, {"bandwidth": algorithm_bw, "bus_bandwidth": busbw, "latency_s": link.latency_s,
                                           "ranks": ranks, "bus_factor": factor, "fit": fit_json}))
    curves["collective"] = {"points": points, "fits": fits}
    return figures
