"""Memory levels read from both curves and the OS's cache description, with physical sanity.

The read-bandwidth curve and the latency staircase each find boundaries on their own
(:func:`pytest_charz.curves.plateaus.detect_levels`); either can be misled: a bandwidth curve
that dips and rises inside one level makes two plateaus and a boundary where no cache ends
(the recorded Zen 5 guest, see ``docs/design-notes.md``). This module reads the levels once for
both curves:

- candidates are the boundaries where the curve moves the physical way (bandwidth falls,
  latency rises); a rise in bandwidth is never a level boundary;
- each cache level of the spec (sysfs on a host) takes, from each curve, the candidate nearest
  its capacity inside its window (between the geometric midpoints to the neighbouring levels'
  capacities), a per-core level's bandwidth boundary divided by the threads sharing the set;
- where both curves have one and they agree within ``CAPACITY_AGREE``, the capacity is their
  geometric mean; where they disagree, the one nearer the OS's figure, with a caveat naming both;
- each level's figure is the median of the points between its boundaries (transitions excluded
  by ``EDGE_MARGIN``), and the figures must order physically: bandwidth non-increasing and
  latency non-decreasing from ``l1`` to ``dram``, else a caveat names the pair.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from ..curves.plateaus import LevelBoundary, LevelFit, detect_levels
from ..units import format_bytes, format_in
from .figures import Case, CaseFigures, SpecView, working_set
from .levels import curve_noise, steady_cases

#: Two curves agree on a boundary when one is within this factor of the other.
CAPACITY_AGREE = 1.5
#: Points within this factor of a boundary are the transition, not the level.
EDGE_MARGIN = 1.2
#: A level's figure may exceed the previous (faster) level's by this much before it is flagged
#: (two measurements of one level differ by about this much between runs).
ORDER_TOLERANCE = 0.05
#: A level whose points spread over more than this factor gets a note with the range.
FLAT_LEVEL_SPREAD = 1.25


@dataclass
class Curve:
    """One curve over working sets: its fitted cases (size-sorted), values and level fit."""

    quantity: str                       # "bandwidth" or "latency"
    unit: str
    cases: list[Case]
    values: list[float]
    threads: int
    fit: LevelFit
    spec_key: str
    spec_scale: float
    note: str = ""
    left_out: int = 0                   # points that missed their noise target, not fitted

    @property
    def falls(self) -> bool:
        """Whether the quantity falls as working sets leave a level (bandwidth does)."""
        return self.quantity == "bandwidth"


def make_curve(cases: list[Case], value_of: Callable[[Case], float], quantity: str, unit: str, threads: int,
               spec_key: str, spec_scale: float, note: str = "") -> Curve | None:
    """The curve of ``cases`` (those that may shape levels), None with fewer than two sizes."""
    fitted = steady_cases(sorted(cases, key=lambda c: working_set(c) or 0.0))
    sizes = [working_set(c) or 0.0 for c in fitted]
    if len(set(sizes)) < 2 or not all(s > 0 for s in sizes):
        return None
    values = [value_of(c) for c in fitted]
    fit = detect_levels(sizes, values, noise=curve_noise(fitted))
    return Curve(quantity, unit, fitted, values, threads, fit, spec_key, spec_scale, note, len(cases) - len(fitted))


def _left_out_note(curve: Curve) -> list[str]:
    if not curve.left_out:
        return []
    return [f"{curve.left_out} point(s) of the {curve.quantity} curve missed their noise target and were not used "
            "to find the levels"]


@dataclass
class _Pick:
    curve: Curve
    boundary: LevelBoundary
    capacity_bytes: float               # per core for a per-core level


@dataclass
class Reading:
    """What both curves say: level figures, capacities, profile-level notes and the table."""

    figures: list[CaseFigures] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    table: list[dict[str, Any]] = field(default_factory=list)


def _scale(curve: Curve, level: str, spec: SpecView) -> int:
    """Threads sharing the working set of ``curve`` that one core's ``level`` holds a share of."""
    return curve.threads if spec.per_unit(level) else 1


def _candidates(curve: Curve) -> list[LevelBoundary]:
    """Boundaries where the curve moves the physical way as the working set leaves a level."""
    return [b for b in curve.fit.boundaries if (b.ratio < 1) == curve.falls]


def _pick(curve: Curve, used: set[int], level: str, capacity: float, window: tuple[float, float],
          floor_total: float, spec: SpecView) -> _Pick | None:
    """The candidate of ``curve`` nearest ``capacity`` (log) inside ``window`` (per-level bytes)."""
    scale = _scale(curve, level, spec)
    found = [(abs(math.log(b.capacity_bytes / scale / capacity)), i, b)
             for i, b in enumerate(_candidates(curve))
             if i not in used and b.capacity_bytes > floor_total
             and window[0] < b.capacity_bytes / scale <= window[1]]
    if not found:
        return None
    _, index, boundary = min(found, key=lambda item: item[0])
    used.add(index)
    return _Pick(curve, boundary, boundary.capacity_bytes / scale)


def _bracket(pick: _Pick) -> list[Case]:
    """The cases of a boundary's step: from its lower to its upper size."""
    low, high = pick.boundary.lower_size_bytes, pick.boundary.upper_size_bytes
    return [c for c in pick.curve.cases if low <= (working_set(c) or 0.0) <= high]


def _where(pick: _Pick, level: str, spec: SpecView) -> str:
    scale = _scale(pick.curve, level, spec)
    share = f" per core (total working set {format_bytes(pick.boundary.capacity_bytes)} over {scale} threads)" \
        if scale > 1 else ""
    return f"the {pick.curve.quantity} curve at {format_bytes(pick.capacity_bytes)}{share}"


def _capacity(level: str, spec_bytes: float, picks: list[_Pick], spec: SpecView,
              reading: Reading) -> float | None:
    """The capacity of ``level`` from the curves' picks (caveats added to the figure)."""
    if not picks:
        reading.notes.append(f"no boundary near the OS's {level} capacity ({format_bytes(spec_bytes)}) in the "
                             "bandwidth or latency curve: capacity:{level} not read".replace("{level}", level))
        return None
    cases = [c for p in picks for c in _bracket(p)]
    cap_spec, cap_source = spec.level(level, "capacity_bytes")
    notes: list[str] = [note for p in picks for note in _left_out_note(p.curve)]
    if len(picks) == 2:
        a, b = (p.capacity_bytes for p in picks)
        ratio = max(a, b) / min(a, b)
        if ratio <= CAPACITY_AGREE:
            value = math.sqrt(a * b)
            notes.append(f"both curves agree within {ratio:.2f}x: {_where(picks[0], level, spec)}, "
                         f"{_where(picks[1], level, spec)}; the capacity is their geometric mean")
            if not 0.5 <= value / spec_bytes <= 2.0:
                notes.append(f"both curves put the boundary at {format_bytes(value)}, {value / spec_bytes:.2g}x the "
                             f"OS's {format_bytes(spec_bytes)}: this machine (a guest, or a partitioned cache) sees "
                             "only part of the cache the OS describes")
        else:
            kept = min(picks, key=lambda p: abs(math.log(p.capacity_bytes / spec_bytes)))
            value = kept.capacity_bytes
            other = picks[1] if kept is picks[0] else picks[0]
            notes.append(f"the curves disagree by {ratio:.2g}x: {_where(kept, level, spec)} (kept: nearer the OS's "
                         f"{format_bytes(spec_bytes)}), {_where(other, level, spec)}")
    else:
        value = picks[0].capacity_bytes
        missing = "latency" if picks[0].curve.quantity == "bandwidth" else "bandwidth"
        notes.append(f"only {_where(picks[0], level, spec)} shows this boundary (none in the {missing} curve)")
    reading.figures.append(CaseFigures(f"capacity:{level}", value, "B", cases, None, cap_spec, cap_source, notes))
    return value


def _level_value(curve: Curve, level: str, low_per_level: float, high_per_level: float, spec: SpecView,
                 prev_level: str | None) -> CaseFigures | None:
    """The figure of ``level`` on ``curve``: the median of its points between the boundaries."""
    low = low_per_level * (_scale(curve, prev_level, spec) if prev_level else 1)
    high = high_per_level * _scale(curve, level, spec) if math.isfinite(high_per_level) else math.inf
    inside = [(c, v) for c, v in zip(curve.cases, curve.values) if low < (working_set(c) or 0.0) <= high]
    core = [(c, v) for c, v in inside if low * EDGE_MARGIN < (working_set(c) or 0.0) < high / EDGE_MARGIN]
    members = core or inside
    if not members:
        return None
    values = [v for _, v in members]
    value = statistics.median(values)
    peak, source = spec.level(level, curve.spec_key, curve.spec_scale)
    notes = [f"median of {len(members)} working sets inside the level's boundaries{curve.note}",
             *_left_out_note(curve)]
    if max(values) / min(values) > FLAT_LEVEL_SPREAD:
        notes.append(f"not flat inside the level: {format_in(min(values), curve.unit)} to {format_in(max(values), curve.unit)} "
                     f"({max(values) / min(values):.2g}x)")
    return CaseFigures(f"{curve.quantity}:{level}", value, curve.unit, [c for c, _ in members], None, peak,
                       source, notes)


def check_order(figures: list[CaseFigures], order: list[str]) -> list[str]:
    """Caveats (added to the figures too) where bandwidth rises or latency falls with the level."""
    notes: list[str] = []
    for quantity, falls in (("bandwidth", True), ("latency", False)):
        named = {f.name.split(":", 1)[1]: f for f in figures if f.name.startswith(quantity + ":") and f.value}
        present = [named[level] for level in order if level in named]
        for faster, slower in zip(present, present[1:]):
            assert faster.value is not None and slower.value is not None
            wrong = (slower.value > faster.value * (1 + ORDER_TOLERANCE) if falls
                     else slower.value < faster.value * (1 - ORDER_TOLERANCE))
            if wrong:
                text = (f"{slower.name} ({format_in(slower.value, slower.unit)}) {'above' if falls else 'below'} {faster.name} "
                        f"({format_in(faster.value, faster.unit)}): not physical (a farther level is never "
                        f"{'faster' if falls else 'quicker'}); a disturbed measurement or a misread level")
                notes.append(text)
                for figure in (faster, slower):
                    figure.notes.append(text)
    return notes


def read_levels(bandwidth: Curve | None, latency: Curve | None, spec: SpecView) -> Reading | None:
    """Level figures and capacities from both curves and the spec's caches; None when the spec
    has no cache capacities (the per-curve reading of :mod:`.levels` stands then)."""
    caches = spec.cache_levels()
    curves = [c for c in (bandwidth, latency) if c is not None]
    if not curves or not caches or not all(capacity for _, capacity in caches):
        return None
    reading = Reading()
    used: dict[int, set[int]] = {id(c): set() for c in curves}
    floors: dict[int, float] = {id(c): 0.0 for c in curves}
    chosen: list[tuple[str, float]] = []
    # Each curve's own boundary bounds its own levels; the consensus only where it has none.
    own: dict[int, dict[str, float]] = {id(c): {} for c in curves}
    for i, (level, capacity) in enumerate(caches):
        assert capacity is not None
        low = math.sqrt(caches[i - 1][1] * capacity) if i else 0.0          # type: ignore[operator]
        nxt = caches[i + 1][1] if i + 1 < len(caches) else None
        high = math.sqrt(capacity * nxt) if nxt else math.inf
        picks = [p for c in curves if (p := _pick(c, used[id(c)], level, capacity, (low, high), floors[id(c)], spec))]
        for p in picks:
            floors[id(p.curve)] = p.boundary.capacity_bytes
            own[id(p.curve)][level] = p.capacity_bytes
        value = _capacity(level, capacity, picks, spec, reading)
        reading.table.append({
            "level": level, "capacity_bytes": value, "os_bytes": capacity,
            "bandwidth_bytes": next((p.capacity_bytes for p in picks if p.curve.quantity == "bandwidth"), None),
            "latency_bytes": next((p.capacity_bytes for p in picks if p.curve.quantity == "latency"), None)})
        if value is not None:
            chosen.append((level, value))
    for curve in curves:
        mine = [(name, own[id(curve)].get(name, value)) for name, value in chosen]
        upper: list[tuple[str, float]] = [*mine, ("dram", math.inf)]
        lower: list[tuple[str | None, float]] = [(None, 0.0), *mine]
        bounds = zip(upper, lower)
        for (name, high_bytes), (prev, low_bytes) in bounds:
            figure = _level_value(curve, name, low_bytes, high_bytes, spec, prev)
            if figure is not None:
                reading.figures.append(figure)
    return reading
