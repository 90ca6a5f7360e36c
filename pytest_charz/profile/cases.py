"""From one run's cases to its ceiling figures, curves and evidence (the profile's reading side).

Each op of the case conventions (``docs/run-format.md``) has a reader here: STREAM bandwidth
beyond the last-level cache, alpha-beta fits of transfers, per-op overheads and contention
slowdowns; the best FMA and GEMM rates per dtype are read in :mod:`.compute`. The levels of the
bandwidth-vs-working-set and latency curves are read in :mod:`.levels`; case accessors,
:class:`CaseFigures` and :class:`SpecView` live in :mod:`.figures`. A case slower than its twin
on fewer threads is flagged (:mod:`.sanity`) and no ceiling rests on it. Cases are :class:`~pytest_charz.records.CaseRecord`; spec figures come from the
run's ``target.spec`` (a :class:`~pytest_charz.targets.spec.TargetSpec`).
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from ..curves.links import link_figures
from ..measure.conditions import OTHER_LOAD_SUSPICIOUS_CPUS, STEAL_FRACTION_SUSPICIOUS
from ..records import Run
from ..units import format_bytes
from .figures import Case, CaseFigures, SpecView, bytes_per_s, shape, time_s, usable, working_set
from .blas import annotate_gemm
from .compute import best_rates, flops_curve
from .collectives import read_collectives
from .consensus import check_order, make_curve, read_levels
from .levels import bandwidth_group, latency_levels, latency_per_load_s, levels, staircase_cases
from .opclass_rates import opclass_rates
from .overheads import overhead_figures
from .probe import read_probes
from .sanity import twin_flags

# STREAM cases count for main-memory bandwidth when their working set exceeds this many LLCs.
LLC_MULTIPLE = 4
# A capacity from the bandwidth curve notes the latency curve's boundary when they differ more.
CAPACITY_DISAGREE = 1.5
#: Ops whose cases the profile reads (the op-class suite's elementwise, reduction and norm cases
#: for the exp, sum and layer norm rates: :mod:`.opclass_rates`).
KNOWN_OPS = ("fma", "gemm", "stream", "read", "chase", "copy", "transfer", "launch", "dispatch", "wakeup",
             "allocation", "contention", "probe", "elementwise", "reduction", "norm")
_IDLE_REASONS = ("gpu_idle", "idle")


# -- evidence -------------------------------------------------------------------------------------
def evidence_of(cases: Sequence[Case], kind: str) -> tuple[dict[str, Any], list[str]]:
    """Evidence (case ids, samples, conditions) and condition caveats of the cases a figure rests on.

    ``kind`` is the target kind: on a CPU the clock is the host's, elsewhere the device's.
    """
    steal: list[float] = []
    other: list[float] = []
    freq_change: list[float] = []
    reasons: set[str] = set()
    clocks_read = noise_missed = other_flagged = shared = 0
    for case in cases:
        interval = case.conditions.interval
        flags = set(case.flags)
        if interval.steal_fraction is not None:
            steal.append(interval.steal_fraction)
        if interval.other_cpu_s_per_s is not None:
            other.append(interval.other_cpu_s_per_s)
        if interval.cpu_freq_change is not None:
            freq_change.append(abs(interval.cpu_freq_change))
        reasons.update(r for r in interval.throttle_reasons if r not in _IDLE_REASONS)
        device = case.conditions.after.device
        # On a CPU the clock is the host's (its change over the case); elsewhere the device's.
        if kind != "cpu":
            clocks_read += device is not None and device.sm_clock_mhz is not None
        else:
            clocks_read += interval.cpu_freq_change is not None
        noise_missed += "noisy" in flags or not case.measurement.noise_met
        other_flagged += "other-load" in flags
        shared += "device-shared" in flags
    measurements = [case.measurement for case in cases]
    conditions: dict[str, Any] = {
        "max_steal_fraction": max(steal) if steal else None,
        "other_load_seen": other_flagged > 0 or any(v > OTHER_LOAD_SUSPICIOUS_CPUS for v in other),
        "max_other_cpu_s_per_s": max(other) if other else None,
        "throttle_reasons": sorted(reasons),
        "max_cpu_freq_change": max(freq_change) if freq_change else None,
        "clocks_readable": clocks_read == len(cases) and bool(cases),
        "device_shared_cases": shared,
    }
    evidence = {
        "cases": list(dict.fromkeys(case.id for case in cases)),
        "samples": sum(len(m.samples_s) for m in measurements),
        "discarded": sum(m.discarded_total for m in measurements),
        "conditions": conditions,
    }
    caveats: list[str] = []
    if noise_missed:
        caveats.append(f"noise target missed in {noise_missed} of {len(cases)} cases")
    if conditions["max_steal_fraction"] is not None and conditions["max_steal_fraction"] > STEAL_FRACTION_SUSPICIOUS:
        caveats.append(f"steal time up to {100 * conditions['max_steal_fraction']:.1f}%")
    if conditions["other_load_seen"]:
        caveats.append(f"other load up to {conditions['max_other_cpu_s_per_s'] or 0:.2f} CPUs")
    if reasons:
        caveats.append(f"throttling: {', '.join(sorted(reasons))}")
    if conditions["max_cpu_freq_change"] is not None and conditions["max_cpu_freq_change"] > 0.05:
        caveats.append(f"CPU clock changed by up to {100 * conditions['max_cpu_freq_change']:.1f}%")
    if cases and not clocks_read:
        caveats.append("clocks not readable")
    if shared:
        caveats.append(f"device shared with other processes in {shared} of {len(cases)} cases")
    return evidence, caveats


# -- readers, one per kind of case ----------------------------------------------------------------
def _stream(cases: list[Case], spec: SpecView) -> tuple[list[CaseFigures], dict[str, Any]]:
    llc = spec.llc_bytes()
    # a case slower than its twin on fewer threads counts for nothing (profile/sanity.py)
    flagged = twin_flags(cases, bytes_per_s, "B/s")
    pool = [c for c in cases if c.id not in flagged] or cases
    threads = max(int(shape(c).get("threads") or 1) for c in pool)
    all_threads = [c for c in pool if int(shape(c).get("threads") or 1) == threads]
    notes: list[str] = [flag["text"] for flag in flagged.values()]
    if llc is None:
        eligible = all_threads
        notes.append("last-level cache capacity unknown: every working set counted")
    else:
        eligible = [c for c in all_threads if (working_set(c) or 0) > LLC_MULTIPLE * llc]
        if not eligible:
            largest = max(working_set(c) or 0 for c in all_threads)
            eligible = [c for c in all_threads if (working_set(c) or 0) == largest]
            notes.append(f"no STREAM working set above {LLC_MULTIPLE}x the last-level cache: the largest counted")
    best = max(eligible, key=bytes_per_s)
    peak, source = spec.level("dram", "bandwidth_bytes_per_s")
    figure = CaseFigures("bandwidth:dram", bytes_per_s(best), "B/s", eligible, best.id, peak, source, notes)
    if flagged:
        figure.extra["flags"] = list(flagged.values())
    eligible_ids = {id(c) for c in eligible}
    points = [{"case": c.id, "kernel": shape(c).get("kernel"), "threads": shape(c).get("threads"),
               "working_set_bytes": working_set(c), "bytes_per_s": bytes_per_s(c), "counted": id(c) in eligible_ids}
              for c in cases]
    return [figure], {"points": points, "threads": threads}


def _transfer_bytes(case: Case) -> float:
    """Bytes one transfer case moves: its ``shape.bytes``, else every transfer of its Work."""
    size = shape(case).get("bytes")
    return float(size) if isinstance(size, (int, float)) else float(sum(case.work.transfers.values()))


#: The curve of peer copies in both directions at once; its figures join ``transfer:peer``.
PEER_BIDIR = "peer-bidir"


def _transfer_kind(case: Case) -> str:
    kind = str(shape(case).get("kind") or next(iter(case.work.transfers), "h2d"))
    return PEER_BIDIR if kind == "peer" and shape(case).get("direction") == "bidirectional" else kind


def _join_bidirectional(figures: list[CaseFigures]) -> None:
    """``transfer:peer`` gets the both-ways figures (``bidirectional_bandwidth``, the two
    directions' sum, and ``bidirectional_latency_s``) and a note; no ceiling of its own, since
    a Work's transfer kinds have no such link. Without one-way cases only the curve is kept."""
    bidir = next((f for f in figures if f.name == f"transfer:{PEER_BIDIR}"), None)
    if bidir is None:
        return
    figures.remove(bidir)
    one_way = next((f for f in figures if f.name == "transfer:peer"), None)
    if one_way is None:
        return
    one_way.extra.update(bidirectional_bandwidth=bidir.value, bidirectional_latency_s=bidir.extra.get("latency_s"),
                         bidirectional_best_case=bidir.best_case)
    if bidir.value is not None:
        ratio = f" ({bidir.value / one_way.value:.2f}x one direction)" if one_way.value else ""
        one_way.notes.append(f"both directions at once: {bidir.value / 1e9:.4g} GB/s in total{ratio}, "
                             f"from {len(bidir.cases)} case(s), {bidir.notes[-1]}")


def _transfers(cases: list[Case], spec: SpecView) -> tuple[list[CaseFigures], dict[str, Any]]:
    """Per transfer kind: alpha-beta fit over sizes (pinned host memory when there is some; for
    peer copies, the direct path when it ran)."""
    by_kind: dict[str, list[Case]] = {}
    for case in cases:
        by_kind.setdefault(_transfer_kind(case), []).append(case)
    figures, points, fits = [], {}, {}
    for kind, group in by_kind.items():
        peer = kind in ("peer", PEER_BIDIR)
        pinned = [c for c in group if shape(c).get("peer_access" if peer else "pinned")]
        used = pinned or group
        used_ids = {id(c) for c in used}
        sizes = [_transfer_bytes(c) for c in used]
        times = [time_s(c) or 0.0 for c in used]
        points[kind] = [{"case": c.id, "bytes": _transfer_bytes(c), "time_s": time_s(c),
                         "pinned": bool(shape(c).get("pinned")), "counted": id(c) in used_ids} for c in group]
        notes = ["pinned host memory" if pinned else "pageable or unspecified host memory"] if not peer else \
            ["peer access: direct copies between the GPUs" if pinned else
             "no peer access: the driver staged the copies through host memory"]
        link = link_figures(sizes, times)
        bandwidth, latency = link.bandwidth_bytes_per_s, link.latency_s
        fit_json: dict[str, Any] | None = None
        if link.fit is None:
            notes.append("one transfer size only: no latency fit, bandwidth of that size")
        else:
            fit_json = {"r2": link.fit.r2, "points": link.fit.points}
            fits[kind] = {"bandwidth": bandwidth, "latency_s": latency, **fit_json}
            if bandwidth is None:
                notes.append("transfer time does not grow with size: no bandwidth")
            elif link.large_transfers:
                notes.append(f"bandwidth: median over the {link.large_transfers} transfer(s) of "
                             f"{format_bytes(link.large_from_bytes)} or more, less the fitted latency (the fit over "
                             f"every size: {(link.fit.bandwidth_bytes_per_s or 0.0) / 1e9:.3g} GB/s)")
            else:
                notes.append("bandwidth from the fit over every size")
        rates = [s / t for s, t in zip(sizes, times)]
        best = used[rates.index(max(rates))]
        peak, source, spec_latency = spec.link(kind)
        figures.append(CaseFigures(f"transfer:{kind}", bandwidth, "B/s", used, best.id, peak, source, notes,
                                   {"bandwidth": bandwidth, "latency_s": latency, "spec_latency_s": spec_latency,
                                    "fit": fit_json}))
    _join_bidirectional(figures)
    return figures, {"points": points, "fits": fits}


def _contention(cases: list[Case]) -> tuple[list[CaseFigures], dict[str, Any], list[str]]:
    pairs: dict[str, dict[str, list[Case]]] = {}
    for case in cases:
        case_shape = shape(case)
        pairs.setdefault(str(case_shape.get("pair")), {}).setdefault(str(case_shape.get("role")), []).append(case)
    figures, rows, notes = [], [], []
    for pair, roles in pairs.items():
        if not roles.get("alone") or not roles.get("contended"):
            notes.append(f"contention pair {pair!r} lacks its {'alone' if not roles.get('alone') else 'contended'} case")
            continue
        alone = statistics.median(time_s(c) for c in roles["alone"])
        contended = statistics.median(time_s(c) for c in roles["contended"])
        aggressor = shape(roles["contended"][0]).get("aggressor")
        figures.append(CaseFigures(f"slowdown:{pair}", contended / alone, "x", roles["alone"] + roles["contended"],
                                   notes=[f"aggressor: {aggressor}"] if aggressor else []))
        rows.append({"pair": pair, "aggressor": aggressor, "alone_s": alone, "contended_s": contended,
                     "slowdown": contended / alone})
    return figures, {"pairs": rows}, notes


def _memory_levels(by_op: dict[str, list[Case]], spec: SpecView, curves: dict[str, Any], notes: list[str],
                   have: list[CaseFigures]) -> list[CaseFigures]:
    """Bandwidth, latency and capacity of each memory level from the read (or copy) and chase
    curves: read together with the spec's caches (:mod:`.consensus`) where the spec has their
    capacities, else each curve on its own (:mod:`.levels`). Fills ``curves`` and ``notes``."""
    per_curve: list[CaseFigures] = []
    capacities: dict[str, CaseFigures] = {}
    bandwidth_curve = latency_curve = None
    for op, key in (("read", "bandwidth"), ("copy", "copy")):
        # only sweeps over working sets shape a curve: a copy of the op-class suite has none
        swept = [c for c in by_op.get(op, ()) if working_set(c)]
        if not swept:
            continue
        group, threads = bandwidth_group(swept)
        # more threads over one working set never read slower (the levels keep their median)
        notes.extend(f"{op} curve: {flag['text']}" for flag in twin_flags(
            swept, bytes_per_s, "B/s", consequence="the level figures keep it in their medians").values())
        note = "" if op == "read" else " (copy cases)"
        found, caps, curve = levels(group, bytes_per_s, "bandwidth", "B/s", "bandwidth_bytes_per_s", 1.0, spec, note,
                                    threads)
        curves[key] = {**curve, "threads": threads}
        if op == "copy" and by_op.get("read"):
            continue     # copies only stand in for read cases when there are none
        per_curve.extend(found)
        for cap in caps:
            capacities.setdefault(cap.name, cap)
        bandwidth_curve = make_curve(group, bytes_per_s, "bandwidth", "B/s", threads, "bandwidth_bytes_per_s", 1.0,
                                     note)
    if by_op.get("chase"):
        chases = [c for c in by_op["chase"] if working_set(c)]
        found, caps, curves["latency"], walk = latency_levels(chases, spec)
        if walk:
            curves["latency_random"] = walk
        per_curve.extend(found)
        for cap in caps:
            kept = capacities.setdefault(cap.name, cap)
            if kept is not cap and kept.value and cap.value and max(kept.value / cap.value,
                                                                    cap.value / kept.value) > CAPACITY_DISAGREE:
                kept.notes.append(f"the latency curve puts this boundary at {format_bytes(cap.value)}")
        staircase = staircase_cases(chases)
        local = any(shape(c).get("pattern") == "page-local" for c in staircase)
        latency_curve = make_curve(staircase, latency_per_load_s, "latency", "s", 1, "latency_ns", 1e-9,
                                   " (page-local walk: random order within 64 KiB windows)" if local else "")
    reading = read_levels(bandwidth_curve, latency_curve, spec)
    if reading is None:
        chosen = per_curve + list(capacities.values())
    else:
        # The walk's note on the last latency level stays with the reading's dram figure.
        walk_notes = [n for f in per_curve if f.name == "latency:dram" for n in f.notes if "fully random walk" in n]
        chosen = reading.figures
        for figure in chosen:
            if figure.name == "latency:dram":
                figure.notes.extend(walk_notes)
        notes.extend(reading.notes)
        curves["levels"] = {"rows": reading.table}
    names = {f.name for f in have}
    chosen = [f for f in chosen if f.name not in names]
    order = [name for name, _ in spec.cache_levels()] + ["dram"]
    notes.extend(check_order(have + chosen, order))
    return chosen


def find_ceilings(run: Run) -> tuple[list[CaseFigures], dict[str, Any], list[str]]:
    """One run's ceiling figures, curves (JSON-ready) and run-level notes."""
    spec = SpecView(run.target.spec)
    by_op: dict[str, list[Case]] = {}
    unusable = 0
    for case in run.cases:
        if not usable(case):
            unusable += 1
            continue
        by_op.setdefault(case.work.op, []).append(case)
    figures: list[CaseFigures] = []
    curves: dict[str, Any] = {}
    notes: list[str] = []
    figures.extend(read_collectives(by_op.pop("collective", []), spec, curves))
    if unusable:
        notes.append(f"{unusable} case(s) without a time (all samples discarded) left out")
    unknown = sorted(op or "(none)" for op in by_op if op not in KNOWN_OPS)
    if unknown:
        notes.append(f"cases of ops the profile does not read: {', '.join(unknown)}")
    for op, quantity in (("fma", "flops"), ("gemm", "gemm")):
        if by_op.get(op):
            figures.extend(best_rates(by_op[op], op, quantity, spec))
    annotate_gemm(figures, run, spec)
    if by_op.get("fma") or by_op.get("gemm"):
        curves["flops"] = flops_curve(by_op.get("fma", []) + by_op.get("gemm", []))
    if by_op.get("stream"):
        found, curves["stream"] = _stream(by_op["stream"], spec)
        figures.extend(found)
    figures.extend(_memory_levels(by_op, spec, curves, notes, figures))
    if by_op.get("transfer"):
        found, curves["transfer"] = _transfers(by_op["transfer"], spec)
        figures.extend(found)
    overhead_cases = [c for op in ("launch", "dispatch", "wakeup", "allocation") for c in by_op.get(op, [])]
    if overhead_cases:
        found, curves["overhead"] = overhead_figures(overhead_cases)
        figures.extend(found)
    # the op-class suite's exp, sum and layer norm rates (softmax's and norms' passes), net of dispatch
    dispatch = {f.name.split(":", 1)[1]: f.value for f in figures if f.name.startswith("dispatch:") and f.value}
    figures.extend(opclass_rates([c for op in ("elementwise", "reduction", "norm") for c in by_op.get(op, [])],
                                 dispatch))
    if by_op.get("contention"):
        found, curves["contention"], pair_notes = _contention(by_op["contention"])
        figures.extend(found)
        notes.extend(pair_notes)
    if by_op.get("probe"):
        curves["probe"], probe_notes = read_probes(by_op["probe"], figures)
        notes.extend(probe_notes)
    elif any(f.name == "bandwidth:dram" for f in figures):
        notes.append("no DRAM probe in this run: whether neighbours' memory traffic moved the DRAM ceilings "
                     "is not known")
    return [f for f in figures if f.value is None or math.isfinite(f.value)], curves, notes
