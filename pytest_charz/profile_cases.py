"""From one run's cases to its ceiling figures, curves and evidence (the profile's reading side).

Each op of the case conventions (``docs/run-format.md``) has a reader here: the best FMA and
GEMM rates per dtype, STREAM bandwidth beyond the last-level cache, levels of the
bandwidth-vs-working-set and latency curves, alpha-beta fits of transfers, per-op overheads and
contention slowdowns. Spec figures come from the run's ``target.spec`` (TargetSpec as JSON).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .errors import UsageError
from .measure.conditions import OTHER_LOAD_SUSPICIOUS_CPUS, STEAL_FRACTION_SUSPICIOUS
from .profile_fit import detect_levels, fit_alpha_beta
from .report.units import format_bytes
from .work import MEMORY_LEVELS

Case = Mapping[str, Any]
# STREAM cases count for main-memory bandwidth when their working set exceeds this many LLCs.
LLC_MULTIPLE = 4
# A capacity from the bandwidth curve notes the latency curve's boundary when they differ more.
CAPACITY_DISAGREE = 1.5
# A transfer bandwidth is read from the transfers within this factor of the largest size.
LARGE_TRANSFER_SPAN = 16
KNOWN_OPS = ("fma", "gemm", "stream", "read", "chase", "copy", "transfer", "launch", "dispatch", "wakeup",
             "contention")
_IDLE_REASONS = ("gpu_idle", "idle")


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
def _work(case: Case) -> Mapping[str, Any]:
    return case.get("work") or {}


def _shape(case: Case) -> Mapping[str, Any]:
    return _work(case).get("shape") or {}


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
    return sum((_work(case).get("bytes") or {}).values()) / time_s(case)


def _working_set(case: Case) -> float | None:
    size = _shape(case).get("working_set_bytes")
    return float(size) if isinstance(size, (int, float)) and size > 0 else None


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
        interval = (case.get("conditions") or {}).get("interval") or {}
        flags = set(case.get("flags") or ())
        if interval.get("steal_fraction") is not None:
            steal.append(float(interval["steal_fraction"]))
        if interval.get("other_cpu_s_per_s") is not None:
            other.append(float(interval["other_cpu_s_per_s"]))
        if interval.get("cpu_freq_change") is not None:
            freq_change.append(abs(float(interval["cpu_freq_change"])))
        reasons.update(r for r in interval.get("throttle_reasons") or () if r not in _IDLE_REASONS)
        device = ((case.get("conditions") or {}).get("after") or {}).get("device") or {}
        clocks_read += bool(device.get("sm_clock_mhz") is not None if kind != "cpu" else interval.get("cpu_freq_change") is not None)
        noise_missed += "noisy" in flags or (case.get("measurement") or {}).get("noise_met") is False
        other_flagged += "other-load" in flags
        shared += "device-shared" in flags
    measurements = [case.get("measurement") or {} for case in cases]
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
        "cases": list(dict.fromkeys(str(case.get("id")) for case in cases)),
        "samples": sum(int(m.get("kept") or 0) for m in measurements),
        "discarded": sum(sum((m.get("discarded") or {}).values()) for m in measurements),
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
def _best_rates(cases: list[Case], op: str, quantity: str, spec: SpecView) -> list[CaseFigures]:
    by_dtype: dict[str, list[tuple[float, Case]]] = {}
    for case in cases:
        for dtype, flops in (_work(case).get("flops") or {}).items():
            by_dtype.setdefault(dtype, []).append((flops / time_s(case), case))
    out = []
    for dtype, rated in by_dtype.items():
        rate, best = max(rated, key=lambda item: item[0])
        peak, source = spec.flops(dtype, vector=op == "fma")
        out.append(CaseFigures(f"{quantity}:{dtype}", rate, "FLOP/s", [c for _, c in rated], str(best.get("id")),
                               peak, source))
    return out


def _flops_curve(cases: list[Case]) -> dict[str, Any]:
    points = []
    for case in cases:
        moved = (_work(case).get("bytes") or {}).get("dram")
        for dtype, flops in (_work(case).get("flops") or {}).items():
            points.append({"case": case.get("id"), "op": _work(case).get("op"), "dtype": dtype,
                           "flop_per_s": flops / time_s(case),
                           "intensity_flop_per_byte": flops / moved if moved else None, "shape": dict(_shape(case))})
    return {"points": points}


def _stream(cases: list[Case], spec: SpecView) -> tuple[list[CaseFigures], dict[str, Any]]:
    llc = spec.llc_bytes()
    threads = max(int(_shape(c).get("threads") or 1) for c in cases)
    all_threads = [c for c in cases if int(_shape(c).get("threads") or 1) == threads]
    notes: list[str] = []
    if llc is None:
        eligible = all_threads
        notes.append("last-level cache capacity unknown: every working set counted")
    else:
        eligible = [c for c in all_threads if (_working_set(c) or 0) > LLC_MULTIPLE * llc]
        if not eligible:
            largest = max(_working_set(c) or 0 for c in all_threads)
            eligible = [c for c in all_threads if (_working_set(c) or 0) == largest]
            notes.append(f"no STREAM working set above {LLC_MULTIPLE}x the last-level cache: the largest counted")
    best = max(eligible, key=bytes_per_s)
    peak, source = spec.level("dram", "bandwidth_bytes_per_s")
    figure = CaseFigures("bandwidth:dram", bytes_per_s(best), "B/s", eligible, str(best.get("id")), peak, source, notes)
    eligible_ids = {id(c) for c in eligible}
    points = [{"case": c.get("id"), "kernel": _shape(c).get("kernel"), "threads": _shape(c).get("threads"),
               "working_set_bytes": _working_set(c), "bytes_per_s": bytes_per_s(c), "counted": id(c) in eligible_ids}
              for c in cases]
    return [figure], {"points": points, "threads": threads}


def _capacity(boundary_bytes: float, level: str, spec: SpecView, threads: int) -> float:
    """A level's capacity from a boundary of a curve measured with ``threads`` threads, each
    working on its own share: a level private to each core holds one share."""
    return boundary_bytes / threads if spec.per_unit(level) else boundary_bytes


def _level_names(fit: Any, spec: SpecView, threads: int = 1) -> list[str | None]:
    """Memory level of each plateau, in order of size.

    With the spec's cache capacities, the plateau before each boundary takes the cache level
    whose capacity is nearest (in log size) to the boundary's, among the levels after the one
    named before; the last plateau is ``dram`` when it starts beyond the last-level cache or no
    cache level is left. Without them: ``l1``, ``l2``, ... and ``dram`` for the last plateau.
    A plateau left without a level gets None (its figures stay in the curve only).
    """
    plateaus, boundaries = fit.plateaus, fit.boundaries
    caches = spec.cache_levels()
    names: list[str | None] = []
    if caches and all(capacity for _, capacity in caches):
        remaining = list(caches)
        for boundary in boundaries:
            if not remaining:
                names.append(None)
                continue
            nearest = min(remaining, key=lambda item: abs(math.log(
                _capacity(boundary.capacity_bytes, item[0], spec, threads) / (item[1] or 1.0))))
            names.append(nearest[0])
            remaining = remaining[remaining.index(nearest) + 1 :]
        llc = spec.llc_bytes() or 0.0
        last = plateaus[-1]
        names.append("dram" if last.first_size_bytes > llc or not remaining else remaining[0][0])
        return names
    order = [name for name, _ in caches] or [lv for lv in MEMORY_LEVELS if lv != "dram"]
    names = [order[i] if i < len(order) else None for i in range(len(plateaus))]
    if len(plateaus) >= 2:
        names[-1] = "dram"
    return names


def _levels(cases: list[Case], value_of: Callable[[Case], float], quantity: str, unit: str, spec_key: str,
            spec_scale: float, spec: SpecView, source_note: str,
            threads: int = 1) -> tuple[list[CaseFigures], list[CaseFigures], dict[str, Any]]:
    """Level figures (``quantity:<level>``) and capacities (``capacity:<level>``) from one curve
    measured with ``threads`` threads sharing each working set."""
    cases = sorted(cases, key=lambda c: _working_set(c) or 0.0)
    # Points that missed their noise target stay on the curve but do not shape the levels, as
    # long as two thirds of the curve is left: a disturbance during one case is not a level.
    steady = [c for c in cases if "noisy" not in (c.get("flags") or ())]
    fitted = steady if len(steady) >= max(2.0, 2 * len(cases) / 3) else cases
    used = {id(c) for c in fitted}
    points = [{"case": c.get("id"), "working_set_bytes": _working_set(c) or 0.0, "value": value_of(c),
               "used": id(c) in used} for c in cases]
    curve: dict[str, Any] = {"unit": unit, "points": points, "plateaus": [], "boundaries": []}
    cases = fitted
    sizes = [_working_set(c) or 0.0 for c in cases]
    values = [value_of(c) for c in cases]
    if len({s for s in sizes}) < 2 or not all(s > 0 for s in sizes):
        return [], [], curve
    noises = [(c.get("measurement") or {}).get("rel_ci_halfwidth") for c in cases]
    known = [float(n) for n in noises if isinstance(n, (int, float))]
    fit = detect_levels(sizes, values, noise=statistics.median(known) if known else None)
    names = _level_names(fit, spec, threads)
    levels, capacities = [], []
    for i, (plateau, name) in enumerate(zip(fit.plateaus, names)):
        curve["plateaus"].append({"level": name, "first_size_bytes": plateau.first_size_bytes,
                                  "last_size_bytes": plateau.last_size_bytes, "value": plateau.value})
        members = cases[plateau.first_index : plateau.last_index + 1]
        if name is None:
            continue
        peak, source = spec.level(name, spec_key, spec_scale)
        levels.append(CaseFigures(f"{quantity}:{name}", plateau.value, unit, members, None, peak, source,
                                  [f"median of {len(members)} working sets on the plateau{source_note}"]))
        if i < len(fit.boundaries) and name != "dram":
            boundary = fit.boundaries[i]
            span = cases[plateau.first_index : fit.plateaus[i + 1].last_index + 1]
            cap, cap_source = spec.level(name, "capacity_bytes")
            per_core = threads > 1 and spec.per_unit(name)
            share = f" per core (the working set over {threads} threads)" if per_core else ""
            capacities.append(CaseFigures(
                f"capacity:{name}", _capacity(boundary.capacity_bytes, name, spec, threads), "B", span, None, cap,
                cap_source,
                [f"from the {quantity} curve: total working set between {format_bytes(boundary.lower_size_bytes)} "
                 f"and {format_bytes(boundary.upper_size_bytes)}{share}{source_note}"]))
            curve["boundaries"].append({"level": name, "capacity_bytes": boundary.capacity_bytes,
                                        "lower_size_bytes": boundary.lower_size_bytes,
                                        "upper_size_bytes": boundary.upper_size_bytes,
                                        "value_before": boundary.value_before, "value_after": boundary.value_after})
    if len(fitted) < len(points):
        for figure in levels + capacities:
            figure.notes.append(f"{len(points) - len(fitted)} point(s) of the curve missed their noise target "
                                "and were not used to find the levels")
    if any(name is None for name in names):
        levels_text = ", ".join(f"{p.value:.4g}" for p, n in zip(fit.plateaus, names) if n is None)
        for figure in levels:
            figure.notes.append(f"plateaus not matched to a memory level: {levels_text} {unit}")
    return levels, capacities, curve


def _latency_levels(cases: list[Case], spec: SpecView) -> tuple[list[CaseFigures], list[CaseFigures],
                                                                  dict[str, Any], dict[str, Any] | None]:
    """Latency levels from the chase cases: from the page-local walks when there are some (the
    latency of each level with few TLB misses), else from every chase. The fully random walks
    beside page-local ones make a second curve, latency with a TLB miss on nearly every load,
    and the last level's figure says what such a walk cost at the largest working set."""
    local = [c for c in cases if _shape(c).get("pattern") == "page-local"]
    walk = [c for c in cases if _shape(c).get("pattern") != "page-local"] if local else []
    note = " (page-local walk: random order within 64 KiB windows)" if local else ""
    levels, caps, curve = _levels(local or cases, _latency_s, "latency", "s", "latency_ns", 1e-9, spec, note)
    if not walk:
        return levels, caps, curve, None
    walk.sort(key=lambda c: _working_set(c) or 0.0)
    points = [{"case": c.get("id"), "working_set_bytes": _working_set(c), "value": _latency_s(c),
               "hugepages": _shape(c).get("hugepages")} for c in walk]
    largest = points[-1]
    if levels:
        levels[-1].notes.append(
            f"a fully random walk (a TLB miss on nearly every load) takes {largest['value'] * 1e9:.4g} ns per load "
            f"over {format_bytes(largest['working_set_bytes'])}")
    return levels, caps, curve, {"unit": "s", "points": points}


def _bandwidth_group(cases: list[Case]) -> tuple[list[Case], int]:
    """The thread count with the most working sets (ties: more threads) and its cases."""
    groups: dict[int, list[Case]] = {}
    for case in cases:
        groups.setdefault(int(_shape(case).get("threads") or 1), []).append(case)
    threads = max(groups, key=lambda t: (len(groups[t]), t))
    return groups[threads], threads


def _latency_s(case: Case) -> float:
    accesses = int(_work(case).get("accesses") or 0)
    return time_s(case) / accesses if accesses else time_s(case)


def _transfer_bytes(case: Case) -> float:
    size = _shape(case).get("bytes")
    return float(size) if isinstance(size, (int, float)) else float(sum((_work(case).get("transfers") or {}).values()))


def _large_transfer_bandwidth(sizes: list[float], times: list[float], latency_s: float,
                              fitted: float) -> tuple[float, str]:
    """Bandwidth of the largest transfers, those within ``LARGE_TRANSFER_SPAN`` of the largest
    size: the median of size / (time - latency). A single line through every size is pulled by
    the small ones wherever the curve is not one alpha-beta (host memory copies go from cache to
    DRAM as they grow); the large transfers are what a bandwidth is quoted for."""
    largest = max(sizes)
    rates = [s / (t - latency_s) for s, t in zip(sizes, times) if s >= largest / LARGE_TRANSFER_SPAN and t > latency_s]
    if not rates:
        return fitted, "bandwidth from the fit over every size"
    bandwidth = statistics.median(rates)
    return bandwidth, (f"bandwidth: median over the {len(rates)} transfer(s) of {format_bytes(largest / LARGE_TRANSFER_SPAN)}"
                       f" or more, less the fitted latency (the fit over every size: {fitted / 1e9:.3g} GB/s)")


def _transfers(cases: list[Case], spec: SpecView) -> tuple[list[CaseFigures], dict[str, Any]]:
    """Per transfer kind: alpha-beta fit over sizes (pinned host memory when there is some)."""
    by_kind: dict[str, list[Case]] = {}
    for case in cases:
        kind = _shape(case).get("kind") or next(iter(_work(case).get("transfers") or {}), "h2d")
        by_kind.setdefault(str(kind), []).append(case)
    figures, points, fits = [], {}, {}
    for kind, group in by_kind.items():
        pinned = [c for c in group if _shape(c).get("pinned")]
        used = pinned or group
        used_ids = {id(c) for c in used}
        sizes = [_transfer_bytes(c) for c in used]
        times = [time_s(c) or 0.0 for c in used]
        points[kind] = [{"case": c.get("id"), "bytes": _transfer_bytes(c), "time_s": time_s(c),
                         "pinned": bool(_shape(c).get("pinned")), "counted": id(c) in used_ids} for c in group]
        notes = ["pinned host memory" if pinned else "pageable or unspecified host memory"]
        fit_json: dict[str, Any] | None = None
        try:
            fit = fit_alpha_beta(sizes, times)
            bandwidth, latency = fit.bandwidth_bytes_per_s, fit.latency_s
            fit_json = {"r2": fit.r2, "points": fit.points}
            fits[kind] = {"bandwidth": bandwidth, "latency_s": latency, **fit_json}
            if bandwidth is None:
                notes.append("transfer time does not grow with size: no bandwidth")
        except UsageError:
            bandwidth, latency = max(s / t for s, t in zip(sizes, times)), None
            notes.append("one transfer size only: no latency fit, bandwidth of that size")
        if bandwidth is not None and latency is not None:
            bandwidth, large_note = _large_transfer_bandwidth(sizes, times, latency, bandwidth)
            notes.append(large_note)
            fits[kind]["bandwidth"] = bandwidth
        rates = [s / t for s, t in zip(sizes, times)]
        best = used[rates.index(max(rates))]
        peak, source, spec_latency = spec.link(kind)
        figures.append(CaseFigures(f"transfer:{kind}", bandwidth, "B/s", used, str(best.get("id")), peak, source, notes,
                                   {"bandwidth": bandwidth, "latency_s": latency, "spec_latency_s": spec_latency,
                                    "fit": fit_json}))
    return figures, {"points": points, "fits": fits}


def _overheads(cases: list[Case]) -> tuple[list[CaseFigures], dict[str, Any]]:
    by_op: dict[str, list[tuple[float, Case]]] = {}
    for case in cases:
        launches = int(_work(case).get("launches") or 0)
        per_op = time_s(case) / launches if launches else time_s(case)
        by_op.setdefault(str(_work(case).get("op")), []).append((per_op, case))
    figures = []
    for op, timed in by_op.items():
        best, case = min(timed, key=lambda item: item[0])
        figures.append(CaseFigures(op, best, "s", [c for _, c in timed], str(case.get("id")),
                                   notes=["fastest variant" if len(timed) > 1 else "one variant"]))
    points = [{"case": c.get("id"), "op": op, "kind": _shape(c).get("kind"), "time_s": t}
              for op, timed in by_op.items() for t, c in timed]
    return figures, {"points": points}


def _contention(cases: list[Case]) -> tuple[list[CaseFigures], dict[str, Any], list[str]]:
    pairs: dict[str, dict[str, list[Case]]] = {}
    for case in cases:
        shape = _shape(case)
        pairs.setdefault(str(shape.get("pair")), {}).setdefault(str(shape.get("role")), []).append(case)
    figures, rows, notes = [], [], []
    for pair, roles in pairs.items():
        if not roles.get("alone") or not roles.get("contended"):
            notes.append(f"contention pair {pair!r} lacks its {'alone' if not roles.get('alone') else 'contended'} case")
            continue
        alone = statistics.median(time_s(c) for c in roles["alone"])
        contended = statistics.median(time_s(c) for c in roles["contended"])
        aggressor = _shape(roles["contended"][0]).get("aggressor")
        figures.append(CaseFigures(f"slowdown:{pair}", contended / alone, "x", roles["alone"] + roles["contended"],
                                   notes=[f"aggressor: {aggressor}"] if aggressor else []))
        rows.append({"pair": pair, "aggressor": aggressor, "alone_s": alone, "contended_s": contended,
                     "slowdown": contended / alone})
    return figures, {"pairs": rows}, notes


def find_ceilings(run: Mapping[str, Any]) -> tuple[list[CaseFigures], dict[str, Any], list[str]]:
    """One run's ceiling figures, curves (JSON-ready) and run-level notes."""
    spec = SpecView((run.get("target") or {}).get("spec"))
    by_op: dict[str, list[Case]] = {}
    unusable = 0
    for case in run.get("cases") or ():
        if not usable(case):
            unusable += 1
            continue
        by_op.setdefault(str(_work(case).get("op") or ""), []).append(case)
    figures: list[CaseFigures] = []
    curves: dict[str, Any] = {}
    notes: list[str] = []
    if unusable:
        notes.append(f"{unusable} case(s) without a time (all samples discarded) left out")
    unknown = sorted(op or "(none)" for op in by_op if op not in KNOWN_OPS)
    if unknown:
        notes.append(f"cases of ops the profile does not read: {', '.join(unknown)}")
    for op, quantity in (("fma", "flops"), ("gemm", "gemm")):
        if by_op.get(op):
            figures.extend(_best_rates(by_op[op], op, quantity, spec))
    if by_op.get("fma") or by_op.get("gemm"):
        curves["flops"] = _flops_curve(by_op.get("fma", []) + by_op.get("gemm", []))
    if by_op.get("stream"):
        found, curves["stream"] = _stream(by_op["stream"], spec)
        figures.extend(found)
    capacities: dict[str, CaseFigures] = {}
    for op, key in (("read", "bandwidth"), ("copy", "copy")):
        if not by_op.get(op):
            continue
        group, threads = _bandwidth_group([c for c in by_op[op] if _working_set(c)])
        note = "" if op == "read" else " (copy cases)"
        levels, caps, curve = _levels(group, bytes_per_s, "bandwidth", "B/s", "bandwidth_bytes_per_s", 1.0, spec, note,
                                      threads)
        curves[key] = {**curve, "threads": threads}
        if op == "copy" and by_op.get("read"):
            continue     # copies only stand in for read cases when there are none
        have = {f.name for f in figures}
        figures.extend(f for f in levels if f.name not in have)
        for cap in caps:
            capacities.setdefault(cap.name, cap)
    if by_op.get("chase"):
        levels, caps, curves["latency"], walk = _latency_levels([c for c in by_op["chase"] if _working_set(c)], spec)
        if walk:
            curves["latency_random"] = walk
        figures.extend(levels)
        for cap in caps:
            kept = capacities.setdefault(cap.name, cap)
            if kept is not cap and kept.value and cap.value and max(kept.value / cap.value,
                                                                    cap.value / kept.value) > CAPACITY_DISAGREE:
                kept.notes.append(f"the latency curve puts this boundary at {format_bytes(cap.value)}")
    figures.extend(capacities.values())
    if by_op.get("transfer"):
        found, curves["transfer"] = _transfers(by_op["transfer"], spec)
        figures.extend(found)
    overhead_cases = [c for op in ("launch", "dispatch", "wakeup") for c in by_op.get(op, [])]
    if overhead_cases:
        found, curves["overhead"] = _overheads(overhead_cases)
        figures.extend(found)
    if by_op.get("contention"):
        found, curves["contention"], pair_notes = _contention(by_op["contention"])
        figures.extend(found)
        notes.extend(pair_notes)
    return [f for f in figures if f.value is None or math.isfinite(f.value)], curves, notes
