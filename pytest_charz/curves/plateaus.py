"""Plateaus of a curve over working-set sizes: memory levels and the boundaries between them.

:func:`detect_levels` finds the plateaus of a bandwidth-vs-working-set curve (or the steps of a
latency staircase) and the working-set sizes where one level gives way to the next. Pure functions
over sequences (no pytest, no I/O); the capability profile names the levels it finds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import UsageError

# Two neighbouring plateaus are distinct levels when one is more than this factor above the other
# (a bandwidth drop of more than 20%, or a latency rise of more than 25%).
DEFAULT_MIN_STEP_RATIO = 1.25
# Relative noise assumed at least, so that a noiseless curve is not cut at every wiggle.
_NOISE_FLOOR = 0.02
# A cache level's step, from its last flat size to the next level's first, spans at most this
# factor in working set; a wider run of short segments holds a level of its own.
_MAX_TRANSITION_SPAN = 8.0


@dataclass(frozen=True)
class Plateau:
    """A run of consecutive sizes with the same level of a quantity (median ``value``)."""

    first_index: int
    last_index: int             # inclusive, indices into the size-sorted curve
    first_size_bytes: float
    last_size_bytes: float
    value: float


@dataclass(frozen=True)
class LevelBoundary:
    """Where one plateau gives way to the next: a capacity estimate with its bracket."""

    capacity_bytes: float       # size where the curve crosses the geometric midpoint of the plateaus
    lower_size_bytes: float     # last size of the plateau before
    upper_size_bytes: float     # first size of the plateau after
    value_before: float
    value_after: float

    @property
    def ratio(self) -> float:
        """``value_after / value_before``: below 1 for a bandwidth drop, above 1 for a latency rise."""
        return self.value_after / self.value_before


@dataclass(frozen=True)
class LevelFit:
    """Plateaus in order of size and the boundaries between consecutive ones."""

    sizes_bytes: tuple[float, ...]   # sorted
    values: tuple[float, ...]        # in the order of ``sizes_bytes``
    plateaus: tuple[Plateau, ...]
    boundaries: tuple[LevelBoundary, ...]


def _check_curve(sizes: Sequence[float], values: Sequence[float], what: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(sizes, dtype=float)
    y = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.shape != y.shape:
        raise UsageError(f"{what}: sizes and values must be 1-D sequences of equal length, got {x.shape} and {y.shape}")
    if x.size == 0:
        raise UsageError(f"{what}: needs at least one point")
    if not (np.all(np.isfinite(x)) and np.all(x > 0) and np.all(np.isfinite(y)) and np.all(y > 0)):
        raise UsageError(f"{what}: sizes and values must be finite and positive")
    return x, y


def _segment_costs(y: np.ndarray) -> np.ndarray:
    """cost[i, j]: squared error of y[i..j] (inclusive) about its mean."""
    n = y.size
    prefix = np.concatenate([[0.0], np.cumsum(y)])
    prefix_sq = np.concatenate([[0.0], np.cumsum(y * y)])
    cost = np.full((n, n), np.inf)
    for i in range(n):
        for j in range(i, n):
            count = j - i + 1
            total = prefix[j + 1] - prefix[i]
            cost[i, j] = max(prefix_sq[j + 1] - prefix_sq[i] - total * total / count, 0.0)
    return cost


def _optimal_segments(y: np.ndarray, penalty: float) -> list[tuple[int, int]]:
    """Piecewise-constant segmentation minimising squared error + ``penalty`` per segment."""
    n = y.size
    cost = _segment_costs(y)
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    start_of = np.zeros(n + 1, dtype=int)
    for end in range(1, n + 1):
        candidates = [best[s] + cost[s, end - 1] + penalty for s in range(end)]
        s = int(np.argmin(candidates))
        best[end], start_of[end] = candidates[s], s
    segments = []
    end = n
    while end > 0:
        segments.append((int(start_of[end]), end - 1))
        end = int(start_of[end])
    return segments[::-1]


def _merge_small_steps(y: np.ndarray, segments: list[tuple[int, int]], min_log_step: float) -> list[tuple[int, int]]:
    """Merge neighbouring segments whose levels differ by less than ``min_log_step``, closest first."""
    segments = list(segments)
    while len(segments) > 1:
        levels = [float(np.median(y[a : b + 1])) for a, b in segments]
        steps = [abs(levels[i + 1] - levels[i]) for i in range(len(levels) - 1)]
        i = int(np.argmin(steps))
        if steps[i] >= min_log_step:
            break
        segments[i : i + 2] = [(segments[i][0], segments[i + 1][1])]
    return segments


def _drop_spikes(y: np.ndarray, segments: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge single-point segments inside the curve that lie above both neighbours or below both
    (a disturbed measurement, not a memory level: a level spans sizes, and a step between two
    levels lies between them) into the neighbour whose level is closer."""
    segments = list(segments)
    k = 1
    while k < len(segments) - 1:
        a, b = segments[k]
        if a != b:
            k += 1
            continue
        before = float(np.median(y[segments[k - 1][0] : segments[k - 1][1] + 1]))
        after = float(np.median(y[segments[k + 1][0] : segments[k + 1][1] + 1]))
        if min(before, after) <= y[a] <= max(before, after):
            k += 1
            continue
        if abs(y[a] - before) <= abs(y[a] - after):
            segments[k - 1 : k + 1] = [(segments[k - 1][0], b)]
        else:
            segments[k : k + 2] = [(a, segments[k + 1][1])]
        k = max(1, k - 1)
    return segments


def _absorb_transitions(
    x: np.ndarray, y: np.ndarray, segments: list[tuple[int, int]], min_points: int, min_span_ratio: float,
) -> list[tuple[int, int]]:
    """Drop the segments that are the slope of a step between two levels, not levels themselves.

    A segment is a transition candidate when it lies inside the curve, its level is strictly
    between its neighbours' levels, and it is short: fewer than ``min_points`` points, or sizes
    spanning less than ``min_span_ratio``. A run of candidates is dropped when the segments on
    both sides are solid plateaus (``min_points`` or more) whose levels bracket the whole run,
    and the run is no wider than one step can be (``_MAX_TRANSITION_SPAN``); a wider run holds a
    level, and its widest segment is kept as one.
    """
    def length(segment: tuple[int, int]) -> int:
        return segment[1] - segment[0] + 1

    def span(segment: tuple[int, int]) -> float:
        return float(x[segment[1]] / x[segment[0]])

    def level(segment: tuple[int, int]) -> float:
        return float(np.median(y[segment[0] : segment[1] + 1]))

    forced: set[int] = set()

    def candidate(k: int) -> bool:
        if k in forced or k == 0 or k == len(segments) - 1:
            return False
        lo, hi = sorted((level(segments[k - 1]), level(segments[k + 1])))
        short = length(segments[k]) < min_points or span(segments[k]) < min_span_ratio
        return short and lo < level(segments[k]) < hi

    while True:
        dropped: set[int] = set()
        widened = False
        k = 0
        while k < len(segments):
            if not candidate(k):
                k += 1
                continue
            run_end = k
            while run_end < len(segments) and candidate(run_end):
                run_end += 1
            before, after = segments[k - 1], segments[run_end]
            lo, hi = sorted((level(before), level(after)))
            if (length(before) >= min_points and length(after) >= min_points
                    and all(lo < level(s) < hi for s in segments[k:run_end])):
                if x[after[0]] / x[before[1]] <= _MAX_TRANSITION_SPAN:
                    dropped.update(range(k, run_end))
                else:
                    forced.add(max(range(k, run_end), key=lambda i: (span(segments[i]), length(segments[i]))))
                    widened = True
            k = run_end
        if not widened:
            return [segment for i, segment in enumerate(segments) if i not in dropped]


def _midpoint_crossing(log_x: np.ndarray, log_y: np.ndarray, lo: int, hi: int, target: float) -> float:
    """log size where the piecewise-linear curve between indices lo..hi first crosses ``target``."""
    for i in range(lo, hi):
        y0, y1 = log_y[i], log_y[i + 1]
        if (y0 - target) * (y1 - target) <= 0 and y0 != y1:
            t = (target - y0) / (y1 - y0)
            return float(log_x[i] + t * (log_x[i + 1] - log_x[i]))
    # No crossing (noise at the edges): the geometric midpoint of the bracket.
    return float((log_x[lo] + log_x[hi]) / 2)


def detect_levels(
    sizes_bytes: Sequence[float],
    values: Sequence[float],
    *,
    min_step_ratio: float = DEFAULT_MIN_STEP_RATIO,
    min_points: int = 2,
    min_span_ratio: float = 3.0,
    noise: float | None = None,
) -> LevelFit:
    """Find the plateaus of a curve over working-set sizes and the boundaries between them.

    The curve (bandwidth or latency against working set) is segmented in log-log space by an
    optimal piecewise-constant fit (squared error plus a penalty per segment scaled to the
    noise, estimated from successive differences); a single point inside the curve that lies
    beyond both its neighbours' levels joins the nearer one (a disturbed case, not a level);
    neighbouring segments less than ``min_step_ratio`` apart are merged, and short segments between two plateaus are taken as
    the slope of a step. A boundary's capacity is the size where the curve crosses the geometric
    midpoint of the two plateau levels (linear interpolation in log-log space).

    Parameters
    ----------
    sizes_bytes : sequence of float
        Working-set sizes, in bytes, positive, in any order (sorted here; repeats allowed).
    values : sequence of float
        The quantity at each size (bytes per second, or seconds per access), positive.
    min_step_ratio : float
        Factor by which neighbouring plateaus must differ to be distinct levels (1.25 means a
        bandwidth drop of more than 20%, or a latency rise of more than 25%).
    min_points : int
        Segments with fewer points, between two plateaus with at least this many, may be the
        slope of a step rather than a level.
    min_span_ratio : float
        Segments whose sizes span less than this factor may likewise be the slope of a step.
    noise : float or None
        Relative noise of the values (e.g. the measurements' CI half-widths); estimated from
        the curve when None.

    Returns
    -------
    LevelFit
        Sorted curve, plateaus in order of size (median value each), boundaries between them.
    """
    x, y = _check_curve(sizes_bytes, values, "detect_levels")
    if not min_step_ratio > 1:
        raise UsageError(f"detect_levels: min_step_ratio must be > 1, got {min_step_ratio!r}")
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    log_x, log_y = np.log(x), np.log(y)
    n = x.size
    if noise is None:
        # Robust scale of successive differences; steps are few, so the median sees the noise.
        diffs = np.abs(np.diff(log_y))
        noise = 1.4826 * float(np.median(diffs)) / math.sqrt(2) if diffs.size else 0.0
    # Noise above half a step could not be told from a step anyway; cap it so that sparse curves
    # (one size per level, all differences steps) are still cut.
    sigma = min(max(float(noise), _NOISE_FLOOR), 0.5 * math.log(min_step_ratio))
    # BIC-like: a new segment must explain more than a few noise variances.
    penalty = 4.0 * sigma * sigma * max(math.log(n), 1.0)
    segments = _optimal_segments(log_y, penalty)
    segments = _drop_spikes(log_y, segments)
    segments = _merge_small_steps(log_y, segments, math.log(min_step_ratio))
    plateaus_idx = _absorb_transitions(x, log_y, segments, min_points, min_span_ratio)
    plateaus_idx = _merge_small_steps(log_y, plateaus_idx, math.log(min_step_ratio)) if len(plateaus_idx) > 1 else plateaus_idx
    plateaus = tuple(
        Plateau(a, b, float(x[a]), float(x[b]), float(np.exp(np.median(log_y[a : b + 1]))))
        for a, b in plateaus_idx
    )
    boundaries = []
    for before, after in zip(plateaus, plateaus[1:]):
        target = (math.log(before.value) + math.log(after.value)) / 2
        log_capacity = _midpoint_crossing(log_x, log_y, before.last_index, after.first_index, target)
        boundaries.append(LevelBoundary(
            capacity_bytes=float(math.exp(log_capacity)),
            lower_size_bytes=before.last_size_bytes,
            upper_size_bytes=after.first_size_bytes,
            value_before=before.value,
            value_after=after.value,
        ))
    return LevelFit(tuple(map(float, x)), tuple(map(float, y)), plateaus, tuple(boundaries))
