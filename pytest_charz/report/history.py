"""A case's history: its medians across runs (or across the changes a baseline store recorded),
ordered in time, and the steps in them.

Step detection (:func:`detect_steps`) is a pure function over sequences, binary segmentation
with a robust (L1) cost, as asv's step detection fits piecewise-constant levels:

1. On a segment of points (all of them at first) work on y = ln(median), so a step is a ratio.
   Try every split into a left and a right part; keep the one with the least L1 cost, the sum
   of |y - median of its part| over both parts (the earliest on a tie).
2. Accept it as a step when the change d = median(right) - median(left) is
   * beyond the threshold: |d| > ln(1 + threshold), a ratio above 1 + threshold or below
     1 / (1 + threshold) (5% by default);
   * beyond twice the segment's noise, the larger of the typical run's own interval (the median
     relative half-width ln(hi / lo) / 2 of the points' 95% CIs of the median) and the scatter
     between runs (1.4826 x the median absolute deviation of y from its part's median); and
   * clear of the intervals: where both parts have CIs, the median of one part's lower bounds lies
     above the median of the other part's upper bounds (for a slowdown: right above left).
3. After a step, repeat on each part; a rejected split ends its segment. Each step's levels
   are the medians of the final segments either side of it.

A single last run that is beyond all this is a step (the latest run slowed); a step needs no
minimum number of runs on either side, so three runs can show one.

:func:`trends` builds the history document (``HISTORY``) from ordered points per case; the
points come from run files or a baseline store (:mod:`pytest_charz.report.history_command`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..formats import Format

HISTORY = Format("charz-history", 1, "charz history")
DEFAULT_THRESHOLD = 0.05
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Step:
    """A change of level: ``index`` is the first point of the new level; ``before`` and
    ``after`` the medians of the levels either side (the points' units), ``ratio`` after / before."""

    index: int
    before: float
    after: float

    @property
    def ratio(self) -> float:
        return self.after / self.before


def _l1(values: np.ndarray) -> float:
    return float(np.abs(values - np.median(values)).sum()) if values.size else 0.0


def best_split(y: Sequence[float]) -> int | None:
    """The split k (1 <= k < len(y)) of ``y`` into y[:k] and y[k:] with the least total L1 cost
    (deviations from each part's median), the earliest on a tie; None for fewer than 2 values."""
    values = np.asarray(y, dtype=float)
    best: tuple[float, int] | None = None
    for k in range(1, values.size):
        cost = _l1(values[:k]) + _l1(values[k:])
        if best is None or cost < best[0] - 1e-12:
            best = (cost, k)
    return None if best is None else best[1]


def _noise(y: np.ndarray, k: int, halfwidths: Sequence[float | None]) -> float:
    residuals = np.concatenate([y[:k] - np.median(y[:k]), y[k:] - np.median(y[k:])])
    scatter = MAD_TO_SIGMA * float(np.median(np.abs(residuals)))
    known = [w for w in halfwidths if w is not None and math.isfinite(w)]
    return max(scatter, float(np.median(known)) if known else 0.0)


def _clear(left: Sequence[tuple[float, float] | None], right: Sequence[tuple[float, float] | None],
           rising: bool) -> bool:
    lows_l = [c[0] for c in left if c]
    highs_l = [c[1] for c in left if c]
    lows_r = [c[0] for c in right if c]
    highs_r = [c[1] for c in right if c]
    if not (lows_l and lows_r):
        return True         # no intervals on a side: the threshold and the scatter decide
    if rising:
        return float(np.median(lows_r)) > float(np.median(highs_l))
    return float(np.median(highs_r)) < float(np.median(lows_l))


def detect_steps(medians: Sequence[float], intervals: Sequence[tuple[float, float] | None] | None = None,
                 threshold: float = DEFAULT_THRESHOLD) -> list[Step]:
    """The steps in a series of positive ``medians`` (time order), each point optionally with
    its confidence interval ``(lo, hi)`` (same units; None when unknown), by the rule of the
    module docstring, in order of ``index``.

    Parameters
    ----------
    medians : sequence of float
        One median per point, all > 0.
    intervals : sequence of (float, float) or None, optional
        Each point's interval of the median, or None for a point without one.
    threshold : float
        The smallest relative change that is a step (0.05: 5%).
    """
    from ..verdict import check_threshold

    check_threshold(threshold)
    values = [float(m) for m in medians]
    if any(not (math.isfinite(v) and v > 0) for v in values):
        raise ValueError(f"step detection needs positive finite medians, got {list(medians)!r}")
    cis = list(intervals) if intervals is not None else [None] * len(values)
    if len(cis) != len(values):
        raise ValueError("one interval (or None) per median")
    if len(values) < 2:
        return []
    y = np.log(np.asarray(values))
    halfwidths = [math.log(c[1] / c[0]) / 2 if c and c[0] > 0 and c[1] >= c[0] else None for c in cis]
    steps: list[Step] = []
    pending = [(0, len(values))]
    while pending:
        start, stop = pending.pop()
        if stop - start < 2:
            continue
        k = best_split(y[start:stop])
        assert k is not None
        part = y[start:stop]
        change = float(np.median(part[k:]) - np.median(part[:k]))
        noise = _noise(part, k, halfwidths[start:stop])
        if (abs(change) > math.log1p(threshold) and abs(change) > 2.0 * noise
                and _clear(cis[start:start + k], cis[start + k:stop], change > 0)):
            steps.append(Step(start + k, math.exp(float(np.median(part[:k]))), math.exp(float(np.median(part[k:])))))
            pending += [(start, start + k), (start + k, stop)]
    # each step's levels are those of the final segments either side of it
    bounds = [0, *sorted(s.index for s in steps), len(values)]
    levels = [math.exp(float(np.median(y[a:b]))) for a, b in zip(bounds, bounds[1:])]
    return [Step(index, levels[i], levels[i + 1]) for i, index in enumerate(bounds[1:-1])]


def sparkline(values: Sequence[float | None]) -> str:
    """The values as a row of eighth blocks, lowest to highest on a log scale (``·`` where a
    value is missing); a flat series is a row of middle blocks."""
    blocks = "▁▂▃▄▅▆▇█"
    known = [math.log(v) for v in values if v]
    if not known:
        return "·" * len(values)
    low, high = min(known), max(known)
    out = []
    for v in values:
        if not v:
            out.append("·")
        elif high - low < 1e-12:
            out.append(blocks[3])
        else:
            out.append(blocks[min(7, int((math.log(v) - low) / (high - low) * 8))])
    return "".join(out)


def _endpoint(point: Mapping[str, Any]) -> dict[str, Any]:
    return {key: point.get(key) for key in ("label", "created", "commit")}


def case_trend(case_id: str, points: Sequence[Mapping[str, Any]], threshold: float,
               suite: str = "") -> dict[str, Any]:
    """One case's trend: its ``points`` (time order; each with ``median_s``, ``ci_s`` or None,
    ``label``, ``created``, ``commit``, and optionally ``samples``, ``verdict``, ``reason``) and
    the steps in their medians, each with the runs either side and the commit range between."""
    where = [i for i, p in enumerate(points) if p.get("median_s")]
    placed = [points[i] for i in where]
    steps = detect_steps([p["median_s"] for p in placed], [tuple(p["ci_s"]) if p.get("ci_s") else None
                                                            for p in placed], threshold)
    out = []
    for step in steps:
        before, after = placed[step.index - 1], placed[step.index]
        first, last = before.get("commit"), after.get("commit")
        commits = (f"{first[:10]}..{last[:10]}" if first and last and first != last
                   else "the same commit" if first and first == last else "commits not recorded")
        out.append({"index": where[step.index], "before_s": step.before, "after_s": step.after,
                    "ratio": step.ratio, "from": _endpoint(before), "to": _endpoint(after), "commits": commits,
                    "reason": after.get("reason") or ""})
    return {"id": case_id, "suite": suite, "points": [dict(p) for p in points], "steps": out}


def trends(cases: Mapping[str, Sequence[Mapping[str, Any]]], source: str, threshold: float = DEFAULT_THRESHOLD,
           runs: Sequence[Mapping[str, Any]] = (), suites: Mapping[str, str] | None = None,
           notes: Sequence[str] = ()) -> dict[str, Any]:
    """The history document: ``source`` ("runs" or "store"), the ``runs`` in time order (for
    runs), each case's :func:`case_trend`, and a summary."""
    built = [case_trend(case_id, points, threshold, (suites or {}).get(case_id, ""))
             for case_id, points in cases.items()]
    steps = [s for case in built for s in case["steps"]]
    summary = {"cases": len(built), "with_steps": sum(1 for c in built if c["steps"]),
               "slower": sum(1 for s in steps if s["ratio"] > 1), "faster": sum(1 for s in steps if s["ratio"] < 1)}
    return {**HISTORY.stamp(), "source": source, "threshold": threshold, "runs": [dict(r) for r in runs],
            "notes": list(notes), "summary": summary, "cases": built}


__all__ = ["DEFAULT_THRESHOLD", "HISTORY", "Step", "best_split", "case_trend", "detect_steps", "sparkline", "trends"]
