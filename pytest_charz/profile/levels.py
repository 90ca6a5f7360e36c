"""The memory-level readers of the profile: from a curve over working-set sizes (bandwidth of the
read or copy cases, latency of the chase cases) to the figure of each memory level and the
capacity of each cache level, the levels named after the run's spec (``l1``, ``l2``, ... and
``dram`` where the spec has no cache capacities).

:mod:`.cases` calls these for the ``read``, ``copy`` and ``chase`` cases; the plateaus and
boundaries themselves come from :func:`pytest_charz.curves.plateaus.detect_levels`.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from ..curves.plateaus import LevelFit, detect_levels
from ..units import format_bytes, format_in
from ..work import MEMORY_LEVELS
from .figures import Case, CaseFigures, SpecView, shape, time_s, working_set


def _capacity(boundary_bytes: float, level: str, spec: SpecView, threads: int) -> float:
    """A level's capacity from a boundary of a curve measured with ``threads`` threads, each
    working on its own share: a level private to each core holds one share."""
    return boundary_bytes / threads if spec.per_unit(level) else boundary_bytes


def _level_names(fit: LevelFit, spec: SpecView, threads: int = 1) -> list[str | None]:
    """Memory level of each plateau, in order of size.

    With the spec's cache capacities, the plateau before each boundary takes the cache level
    whose capacity is nearest (in log size) to the boundary's, among the levels after the one
    named before. Once every cache level is named, the next plateau is ``dram``: further steps
    past it are not memory levels (page walks once the page tables themselves miss the caches,
    or a slower memory) and stay unnamed. Otherwise the last plateau is ``dram`` when it starts
    beyond the last-level cache. Without capacities: ``l1``, ``l2``, ... and ``dram`` for the
    last plateau. A plateau left without a level gets None (its figures stay in the curve only).
    """
    plateaus, boundaries = fit.plateaus, fit.boundaries
    caches = spec.cache_levels()
    names: list[str | None] = []
    if caches and all(capacity for _, capacity in caches):
        remaining = list(caches)
        for boundary in boundaries:
            if not remaining:
                names.append(None if "dram" in names else "dram")
                continue
            nearest = min(remaining, key=lambda item: abs(math.log(
                _capacity(boundary.capacity_bytes, item[0], spec, threads) / (item[1] or 1.0))))
            names.append(nearest[0])
            remaining = remaining[remaining.index(nearest) + 1 :]
        llc = spec.llc_bytes() or 0.0
        last = plateaus[-1]
        if "dram" in names:
            names.append(None)
        else:
            names.append("dram" if last.first_size_bytes > llc or not remaining else remaining[0][0])
        return names
    order = [name for name, _ in caches] or [lv for lv in MEMORY_LEVELS if lv != "dram"]
    names = [order[i] if i < len(order) else None for i in range(len(plateaus))]
    if len(plateaus) >= 2:
        names[-1] = "dram"
    return names


def steady_cases(cases: list[Case]) -> list[Case]:
    """The cases of a size-sorted curve that may shape its levels: points that missed their noise
    target stay on the curve but do not shape the levels, as long as two thirds of the curve is
    left (a disturbance during one case is not a level)."""
    steady = [c for c in cases if "noisy" not in c.flags]
    return steady if len(steady) >= max(2.0, 2 * len(cases) / 3) else cases


def curve_noise(cases: list[Case]) -> float | None:
    """The median relative CI half-width of the cases (the curve's noise), None when unknown."""
    known = [float(c.measurement.rel_ci_halfwidth) for c in cases
             if isinstance(c.measurement.rel_ci_halfwidth, (int, float))]
    return statistics.median(known) if known else None


def levels(cases: list[Case], value_of: Callable[[Case], float], quantity: str, unit: str, spec_key: str,
           spec_scale: float, spec: SpecView, source_note: str,
           threads: int = 1) -> tuple[list[CaseFigures], list[CaseFigures], dict[str, Any]]:
    """Level figures (``quantity:<level>``) and capacities (``capacity:<level>``) from one curve
    measured with ``threads`` threads sharing each working set."""
    cases = sorted(cases, key=lambda c: working_set(c) or 0.0)
    fitted = steady_cases(cases)
    used = {id(c) for c in fitted}
    points = [{"case": c.id, "working_set_bytes": working_set(c) or 0.0, "value": value_of(c),
               "used": id(c) in used} for c in cases]
    curve: dict[str, Any] = {"unit": unit, "points": points, "plateaus": [], "boundaries": []}
    cases = fitted
    sizes = [working_set(c) or 0.0 for c in cases]
    values = [value_of(c) for c in cases]
    if len({s for s in sizes}) < 2 or not all(s > 0 for s in sizes):
        return [], [], curve
    fit = detect_levels(sizes, values, noise=curve_noise(cases))
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
        levels_text = ", ".join(format_in(p.value, unit) for p, n in zip(fit.plateaus, names) if n is None)
        for figure in levels:
            figure.notes.append(f"plateaus not matched to a memory level: {levels_text}")
    return levels, capacities, curve


def latency_levels(cases: list[Case], spec: SpecView) -> tuple[list[CaseFigures], list[CaseFigures],
                                                                 dict[str, Any], dict[str, Any] | None]:
    """Latency levels from the chase cases: from the page-local walks when there are some (the
    latency of each level with few TLB misses), else from every chase. The fully random walks
    beside page-local ones make a second curve, latency with a TLB miss on nearly every load,
    and the last level's figure says what such a walk cost at the largest working set."""
    local = [c for c in cases if shape(c).get("pattern") == "page-local"]
    walk = [c for c in cases if shape(c).get("pattern") != "page-local"] if local else []
    # (staircase_cases gives the same choice to the reading that uses both curves)
    note = " (page-local walk: random order within 64 KiB windows)" if local else ""
    found, caps, curve = levels(local or cases, _latency_s, "latency", "s", "latency_ns", 1e-9, spec, note)
    if not walk:
        return found, caps, curve, None
    walk.sort(key=lambda c: working_set(c) or 0.0)
    points = [{"case": c.id, "working_set_bytes": working_set(c), "value": _latency_s(c),
               "hugepages": shape(c).get("hugepages")} for c in walk]
    if found:
        found[-1].notes.append(
            f"a fully random walk (a TLB miss on nearly every load) takes {_latency_s(walk[-1]) * 1e9:.4g} ns per "
            f"load over {format_bytes(working_set(walk[-1]) or 0.0)}")
    return found, caps, curve, {"unit": "s", "points": points}


def bandwidth_group(cases: list[Case]) -> tuple[list[Case], int]:
    """The thread count with the most working sets (ties: more threads) and its cases."""
    groups: dict[int, list[Case]] = {}
    for case in cases:
        groups.setdefault(int(shape(case).get("threads") or 1), []).append(case)
    threads = max(groups, key=lambda t: (len(groups[t]), t))
    return groups[threads], threads


def _latency_s(case: Case) -> float:
    """Seconds per dependent load of a chase case (its whole time when it counts no loads)."""
    accesses = case.work.accesses
    return time_s(case) / accesses if accesses else time_s(case)


def staircase_cases(cases: list[Case]) -> list[Case]:
    """The chase cases that make the latency staircase: the page-local walks when there are some."""
    local = [c for c in cases if shape(c).get("pattern") == "page-local"]
    return local or cases


def latency_per_load_s(case: Case) -> float:
    """Seconds per dependent load of a chase case (see :func:`latency_levels`)."""
    return _latency_s(case)
