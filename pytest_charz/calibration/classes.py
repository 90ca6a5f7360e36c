"""Calibration that transfers: efficiency per op class and dtype, with what it was fitted on.

A suite case's variant keys (``gemm:fp32@kernel=..,threads=..``) are carried by no user's Work,
so a model with op-class figures (``opclass``) is calibrated per **class key** instead:
``<op class>:<dtype>`` (:func:`~pytest_charz.models.opclass_costs.op_class_of`,
:func:`~pytest_charz.models.opclass_costs.work_dtype`; a transcendental function and a skinny GEMM
have keys of their own, :func:`.class_keys.class_key`), and per op class alone (every dtype
pooled) as the fallback of a dtype not calibrated. Any Work or graph op of the class gets it.

A :class:`ClassFit` is an :class:`~.efficiency.EfficiencyTable` over log10 of the class's size
(FLOPs for GEMM-like classes but bytes for a skinny GEMM, :func:`.class_keys.key_size_amount`;
launches for dispatch; bytes for the rest) with at most
``CLASS_KNOTS`` knots (a smooth curve transfers to shapes between and beside the calibrated ones
better than a knot per size), the range of sizes it was fitted on, the cases' count and ops, and
interval factors from leave-one-out residuals (each case predicted by the class refitted without
it): conformal at the level when the class has enough residuals (``conformal``), else
**normalised** conformal over every class (``normalized``): each residual divided by its class's
scale (its root mean square, moderated across the classes by empirical Bayes:
:mod:`.moderated`), the pool's conformal quantiles of those scores, times the class's own scale. A
class that scatters little gets a narrow interval, one that scatters much a wide one, though
neither has the 19 residuals a 90% conformal interval of its own needs. A key's residuals are
those of the cases it prices, whose class key it is: ``gemm:fp32``'s curve pools every GEMM, but
its interval is the square products' error, not the skinny ones' (priced by ``gemm.skinny:fp32``);
a pooled key that is no case's own (every dtype, every function) takes its members'. Only **interior**
residuals count: a case at either end of its class's sizes, once left out, is predicted by
extrapolation, and extrapolation has its own widening (below); counted as well, it widened every
interval in the range by the extrapolation error (on the development VMs the pooled 90% interval
was x0.49-x2.40 with the ends, while 20 of 22 held-out ops were within 15%).

Outside the fitted range the prediction is **extrapolated**: the efficiency stays at the end
knot's, and the interval of the time that is not the op's dispatch (which the dispatch cases
measure at any size) widens by ``EXTRAPOLATION_WIDENING`` in log space per decade outside, and
the prediction's notes say so. Below the range a class of one dtype prices a small op on a
line in kernel time instead (:func:`small_end`), the line through its two smallest cases (their
fixed cost and rate), with the op's own dispatch on top, undivided by the end knot's efficiency.
What is fixed is judged in the model's own kernel time, not the size. The line falls to that
fixed cost, which the smallest cases measured, so its interval is not widened.

A class of :data:`LINE_CLASSES` is two costs of different sizes, which no one curve over one
size follows: an unbatched attention (``attention.math``) runs its two products, which the model
prices at the measured GEMM rate, and passes over its score matrix (a softmax and the masking of
ATen's ``_safe_softmax``), which grow with the score elements and not the head dim. Its
calibrated time is the model's plus a line in its score elements (:func:`score_line`), fitted on
the class's cases, not the model's divided by an efficiency.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import FormatError, UsageError
from ..models.opclass import ALLOC_KIND, dispatch_extra_s, dispatch_s
from ..models.opclass_costs import gemm_dims, op_class_of
from .class_keys import class_key, fitted_keys, key_size_amount, keyed_class_of, lookup_keys
from .efficiency import (CALIBRATION_VERSION, RECORD_KINDS, EfficiencyTable, check_record_version, conformal_interval,
                         fit_efficiency)
from .moderated import scale_prior

if TYPE_CHECKING:
    from ..models.base import Prediction
    from ..work import Work

#: Knots of a class's efficiency curve, chosen on the calibration alone: over the op-class suite's
#: cases on the Zen 4 guest (two sets of three rounds) the median |leave-one-out residual| was
#: 0.107 and 0.081 with 3 knots, 0.102 and 0.067 with 4, 0.105 and 0.072 with 5, 0.108 and 0.073
#: with 6 (2: 0.109, 0.086).
CLASS_KNOTS = 4
#: Interval widening, in natural-log units per decade of size outside the fitted range: a factor
#: of 1.35 per decade on each side (a calibrated efficiency curve is flat past its end knots while
#: the real one keeps moving: on the development VMs a 10x smaller elementwise op than calibrated
#: ran 1.2-1.5x slower per byte).
EXTRAPOLATION_WIDENING = 0.3
#: Keyed classes calibrated as the model's time plus a line in their score elements (module
#: docstring). ``attention.math``: on a Xeon core, 4 heads of 128 x 32 took 236-241 us and of
#: 128 x 64 (the same scores, twice the FLOPs) 297-303 us; the model's products at the GEMM rate
#: leave 2.2-2.5 ns per score element (a profile of the call: softmax 45 us, ``isneginf`` 27,
#: ``all`` 56, ``where`` 51, for 65,536 scores). Over FLOPs the curve put the 64-wide heads between
#: the 32-wide and the larger ones and read them -11..-15%.
LINE_CLASSES = frozenset({"attention.math"})


@dataclass(frozen=True)
class ClassFit:
    """One class key's calibration: efficiency over size, fitted range, interval factors."""

    key: str
    table: EfficiencyTable
    log10_range: tuple[float, float]
    n: int
    ops: tuple[str, ...]
    factors: tuple[float, float]
    method: str
    # The class's kernel time near its smallest cases (measured less the dispatch the model
    # priced) as a fixed cost in seconds plus seconds per second of the model's kernel time
    # (:func:`small_end`); None when it has none.
    small: tuple[float, float] | None = None
    # A class of LINE_CLASSES: seconds fixed and per score element on top of the model's time
    # (:func:`score_line`); its table is then flat
    line: tuple[float, float] | None = None

    def apply(self, prediction: "Prediction", work: "Work", floor_s: float) -> "Prediction":
        """``prediction`` divided by the class's efficiency (never below ``floor_s``), its interval
        from the class's factors, widened and noted when the work's size is outside the range.

        Below the fitted range the efficiency's end knot alone would let the time shrink with the
        work to nothing; a small op's time is mostly a fixed cost instead (the framework's and the
        kernel's setup: a CPU ``scaled_dot_product_attention`` 37-55 us at any size a decode step
        gives it, whose model priced it at 9 us from its smallest calibrated case's efficiency).
        So there the time is the affine line through the class's smallest cases (``small``): their
        fixed cost plus the model's kernel time of this work at their rate, plus the op's own
        dispatch, which the end knot's efficiency would have divided too."""
        size = self.table.size_of(work)
        # the fresh pages of a large output are the operating system's cost, which no class
        # microbenchmark pays (their outputs stay below the threshold), and a dispatch variant's
        # extra (a scalar operand, a module call) its own dispatch case's: not the class's efficiency
        pages_s = sum(v for term, v in prediction.breakdown.items() if term.startswith(f"{ALLOC_KIND}:"))
        unscaled_s = pages_s + dispatch_extra_s(prediction)
        if self.line is not None:
            time_s = max(on_score_line(prediction.time_s, work, self.line), floor_s)
        else:
            time_s = max((prediction.time_s - unscaled_s) / self.table.at(size) + unscaled_s, floor_s)
        low, high = self.factors
        notes = list(prediction.notes)
        x = math.log10(size) if size > 0 else self.log10_range[0]
        on_small_end = x < self.log10_range[0] and self.small is not None and self.line is None
        if on_small_end:
            fixed_s, per_model_s = self.small
            # the line is in kernel time (small_end): the work's own dispatch comes on top, as the
            # model priced it, so an op priced alone is its kernel priced in a graph plus the
            # dispatch the graph's host pays
            own_dispatch_s = dispatch_s(prediction)
            line = fixed_s + per_model_s * max(prediction.time_s - pages_s - own_dispatch_s, 0.0) + pages_s \
                + own_dispatch_s
            # the line, above or below the end knot's efficiency: that efficiency divides the op's
            # dispatch too, which a class of slow small kernels does not slow (a 1-float rsqrt
            # priced 1.20 us at the pooled transcendental end knot's 0.585, on a Xeon core where
            # it took 0.73-0.79 us and the line says 0.95)
            time_s = max(line, floor_s)
        outside = max(self.log10_range[0] - x, x - self.log10_range[1], 0.0)
        if outside > 0 and on_small_end:
            # the line's time falls to its fixed cost, which the smallest cases measured: its
            # error does not grow with the decades below them, as a flat end knot's does
            notes.append(f"below the calibrated range of {self.key} by {outside:.2g} decade(s): on its smallest "
                         f"cases' line, fixed cost {self.small[0] * 1e6:.3g} us plus this work's share "
                         "(interval not widened)")
        elif outside > 0:
            widen = math.exp(EXTRAPOLATION_WIDENING * outside)
            # only what the size scales is extrapolated: the op's dispatch is the dispatch cases'
            # figure at any size (a 128-float add outside the elementwise range is mostly dispatch)
            dispatched = min(dispatch_s(prediction) / prediction.time_s, 1.0) if prediction.time_s > 0 else 0.0
            low = dispatched * low + (1.0 - dispatched) * low / widen
            high = dispatched * high + (1.0 - dispatched) * high * widen
            notes.append(f"extrapolated: {self.table.size} {size:.3g} is {outside:.2g} decade(s) outside the "
                         f"calibrated range {10 ** self.log10_range[0]:.3g}-{10 ** self.log10_range[1]:.3g} of "
                         f"{self.key} (interval widened x{widen:.2f} on the {100 * (1 - dispatched):.0f}% of the "
                         "time that is not dispatch)")
        notes.append(f"calibrated as {self.key} ({self.n} case(s), {self.method} interval)")
        return replace(prediction, time_s=time_s, interval_s=(time_s * low, time_s * high),
                       model=f"{prediction.model}+calibration", notes=tuple(notes))

    def to_json(self) -> dict[str, Any]:
        data = {"version": CALIBRATION_VERSION, "kind": RECORD_KINDS["ClassFit"], "key": self.key,
                "table": self.table.to_json(), "log10_range": list(self.log10_range), "n": self.n,
                "ops": list(self.ops), "factors": list(self.factors), "method": self.method,
                "small_kernel_end": list(self.small) if self.small is not None else None}
        if self.line is not None:   # only a class of LINE_CLASSES has one
            data["score_line"] = list(self.line)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ClassFit":
        check_record_version("ClassFit", data)
        try:
            low, high = data["log10_range"]
            f_low, f_high = data["factors"]
            # absent in files written before it. Not read: an older file's "small" (a line in
            # the class's size, fixed cost mistaken on memory-bound cases) and "small_end" (whose
            # fixed cost held the cases' dispatch, which a graph's host then paid again)
            small = data.get("small_kernel_end")
            line = data.get("score_line")   # absent in files written before it
            return cls(str(data["key"]), EfficiencyTable.from_json(data["table"]), (float(low), float(high)),
                       int(data["n"]), tuple(str(o) for o in data.get("ops") or ()), (float(f_low), float(f_high)),
                       str(data["method"]), (float(small[0]), float(small[1])) if small else None,
                       (float(line[0]), float(line[1])) if line else None)
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"ClassFit JSON is malformed: {exc}") from exc


def lookup(classes: Mapping[str, ClassFit], work: "Work") -> ClassFit | None:
    """The fit of the work's most specific key that was calibrated (:func:`lookup_keys`) and whose
    curve can place it (a skinny GEMM's curve is over bytes: a Work of FLOPs and a shape only goes
    on to ``gemm:<dtype>``, over FLOPs); the most specific calibrated one when none can."""
    found = [classes[key] for key in lookup_keys(work) if key in classes]
    return next((fit for fit in found if fit.table.size_of(work) > 0), found[0] if found else None)


# A point: (work, uncalibrated predicted seconds, measured seconds, suite op)
Point = tuple["Work", float, float, str]


def small_end(table: EfficiencyTable, members: Sequence[Point],
              host_s: Mapping[int, float] | None = None) -> tuple[float, float] | None:
    """``(fixed seconds, measured seconds per second of the model's kernel time)``: the line, in
    kernel time on both axes (the model's uncalibrated time and the measured time, each less the
    dispatch the model priced, ``host_s`` by the point's id), through the class's two sizes the
    model prices smallest (each the median of its cases), the fixed cost never below zero and the
    slope never negative; None with fewer than two such sizes. Whether the smallest cases are
    mostly fixed cost or not: without a line, the end knot's efficiency divided a smaller op's
    whole prediction, its dispatch included, which the dispatch cases measure whole (a held-out
    chain's 64-float ops on a Xeon core, 0.67 us a relu against a 0.664 us dispatch case, priced
    9-10% over, by the elementwise class's 0.87). Against the model's
    time, not the size: a case bound by its bytes (a skinny GEMM reading its weights) has that
    cost in the model's time already, and only what the model's kernel does not explain is fixed.
    Less the dispatch: a graph's op is priced as its kernel (no launches) with its host paying the
    dispatch; a fixed cost holding the cases' dispatch charged it twice there (a 64-element add of
    a captured chain, 0.8 us of kernel floor beside its 0.9 us dispatch: +64% end to end)."""
    host_s = host_s or {}
    by_size: dict[float, list[tuple[float, float]]] = {}
    for point in members:
        work, predicted_s, measured_s, _ = point
        dispatch = host_s.get(id(point), 0.0)
        kernel_s = max(predicted_s - dispatch, 0.0)
        by_size.setdefault(table.size_of(work), []).append((kernel_s, max(measured_s - dispatch, 0.0)))
    medians = sorted((statistics.median(k for k, _ in pairs), statistics.median(m for _, m in pairs))
                     for size, pairs in by_size.items() if size > 0)
    medians = [(k, m) for k, m in medians if k > 0 and m > 0]
    if len(medians) < 2 or medians[1][0] <= medians[0][0]:
        return None
    (k0, t0), (k1, t1) = medians[:2]
    slope = max((t1 - t0) / (k1 - k0), 0.0)
    fixed = max(t0 - slope * k0, 0.0)
    return fixed, slope


def score_elements(work: "Work") -> float:
    """The elements of an attention's score matrix (query rows x keys x heads and batch), 0 when
    its shape does not say."""
    dims = gemm_dims(work, "attention")
    return dims[0] * dims[1] * dims[3] if dims else 0.0


def on_score_line(model_s: float, work: "Work", line: tuple[float, float]) -> float:
    """The model's time of ``work`` plus ``line``'s fixed seconds and seconds per score element."""
    return model_s + line[0] + line[1] * score_elements(work)


def score_line(members: Sequence[Point]) -> tuple[float, float] | None:
    """``(fixed seconds, seconds per score element)``: the least-squares line of what the members'
    measured times exceed the model's by, over their score elements; through zero when the free
    line's fixed cost came out negative, the slope never negative. None with fewer than two
    score sizes."""
    xs = [score_elements(work) for work, _, _, _ in members]
    ys = [measured_s - predicted_s for _, predicted_s, measured_s, _ in members]
    if len({x for x in xs if x > 0}) < 2:
        return None
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    per = max(sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread, 0.0)
    fixed = mean_y - per * mean_x
    if fixed < 0:
        fixed, per = 0.0, max(sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs), 0.0)
    return fixed, per


def _table(key: str, amount: str, points: Sequence[Point]) -> EfficiencyTable:
    probe = EfficiencyTable(key, amount, (0.0,), (1.0,))
    sizes = [probe.size_of(w) for w, _, _, _ in points]
    return fit_efficiency([(s, p, m) for s, (_, p, m, _) in zip(sizes, points)], op=key, size=amount,
                          knots=min(CLASS_KNOTS, len(set(sizes))))


def _groups(points: Sequence[Point]) -> dict[str, list[Point]]:
    groups: dict[str, list[Point]] = {}
    for point in points:
        if op_class_of(point[0]):
            for key in fitted_keys(point[0]):
                groups.setdefault(key, []).append(point)
    return groups


def fit_classes(points: Sequence[Point], level: float, host_s: Sequence[float] | None = None) -> dict[str, ClassFit]:
    """Class fits of ``points`` (module docstring); classes whose works have no positive size are
    left out. ``host_s``: per point, the seconds of its predicted time that are its dispatch
    (:func:`small_end`; none when not given)."""
    return fit_classes_with_residuals(points, level, host_s)[0]


def fit_classes_with_residuals(points: Sequence[Point], level: float, host_s: Sequence[float] | None = None
                               ) -> tuple[dict[str, ClassFit], list[float | None]]:
    """Class fits and, per point, its leave-one-out log residual ``ln(measured / calibrated)`` in
    its class key (None for a point of no class or of no positive size; the ends of a class's
    sizes included, though only interior residuals set the interval factors). ``host_s`` as for
    :func:`fit_classes`."""
    hosts = {id(point): seconds for point, seconds in zip(points, host_s or ())}
    fits: dict[str, tuple[EfficiencyTable, list[Point]]] = {}
    lines: dict[str, tuple[float, float]] = {}   # a class of LINE_CLASSES: its line, its table flat
    for key, members in _groups(points).items():
        amount = key_size_amount(key)
        probe = EfficiencyTable(key, amount, (0.0,), (1.0,))
        members = [p for p in members if probe.size_of(p[0]) > 0]
        if not members:
            continue
        line = score_line(members) if keyed_class_of(key) in LINE_CLASSES else None
        if line is None:
            fits[key] = (_table(key, amount, members), members)
        else:
            lines[key] = line
            fits[key] = (EfficiencyTable(key, amount, (min(math.log10(probe.size_of(p[0])) for p in members),),
                                         (1.0,)), members)
    residuals: dict[str, list[float]] = {}       # interior leave-one-out residuals per key
    own_residuals: dict[str, list[float]] = {}   # those of the key's own cases (class_key is the key)
    by_point: dict[int, float] = {}
    scored: list[tuple[str, float]] = []         # (class key, interior residual), once per point
    for key, (table, members) in fits.items():
        member_sizes = [table.size_of(p[0]) for p in members]
        for index, point in enumerate(members):
            work, predicted_s, measured_s, _ = point
            rest = [p for other, p in enumerate(members) if other != index]
            if key in lines:
                residual = math.log(measured_s / on_score_line(predicted_s, work, score_line(rest) or (0.0, 0.0)))
            else:
                loo = _table(key, table.size, rest) if rest else table
                residual = math.log(measured_s * loo.at(loo.size_of(work)) / predicted_s)
            others = [size for other, size in enumerate(member_sizes) if other != index]
            inside = bool(others) and min(others) < member_sizes[index] < max(others)
            if inside:
                residuals.setdefault(key, []).append(residual)
            if key == class_key(work):
                by_point[id(point)] = residual
                if inside:
                    scored.append((key, residual))
                    own_residuals.setdefault(key, []).append(residual)
    # normalised conformal: each interior residual in units of its class's scale, one pool of
    # those scores for every class, each class's interval its scale times the pool's quantiles
    prior = scale_prior(list(own_residuals.values()))
    # a key's interval is the error of the predictions it makes: its own cases' residuals where
    # it has them; a pooled key that is no case's own (every dtype, every function) prices only
    # what no key of its own was calibrated for, and its members stand for that
    interval_residuals = {key: own_residuals.get(key) or residuals.get(key, []) for key in fits}
    scales = {key: prior.moderate(interval_residuals[key]) for key in fits}
    scores = [r / scales[key] for key, r in scored]
    try:  # conformal_interval gives exp of the quantiles: back to score units
        low_score, high_score = (math.log(f) for f in (conformal_interval(scores, level) if scores else (1.0, 1.0)))
        pooled_method = "normalized"
    except UsageError:
        low_score, high_score, pooled_method = min(scores), max(scores), "range"
    out: dict[str, ClassFit] = {}
    for key, (table, members) in fits.items():
        own = interval_residuals[key]
        try:
            factors, method = conformal_interval(own, level), "conformal"
        except UsageError:
            factors = (math.exp(scales[key] * low_score), math.exp(scales[key] * high_score))
            method = pooled_method
        sizes = [math.log10(table.size_of(w)) for w, _, _, _ in members]
        line = lines.get(key)
        out[key] = ClassFit(key, table, (min(sizes), max(sizes)), len(members),
                            tuple(sorted({op for _, _, _, op in members})), factors, method,
                            # a pooled key (every dtype, or no dtype) mixes cases whose small
                            # ends differ: only a class of one dtype has one
                            small_end(table, members, hosts) if _one_dtype(key) and line is None else None, line)
    return out, [by_point.get(id(point)) for point in points]


def _one_dtype(key: str) -> bool:
    """Whether a class key names one dtype (``copy:fp32``; not ``copy`` nor ``latency:*``)."""
    _, sep, dtype = key.partition(":")
    return bool(sep) and dtype not in ("", "*")


def classes_to_json(classes: Mapping[str, ClassFit]) -> dict[str, Any]:
    return {key: fit.to_json() for key, fit in classes.items()}


def classes_from_json(data: Mapping[str, Any]) -> dict[str, ClassFit]:
    return {str(key): ClassFit.from_json(value) for key, value in data.items()}


def summed_interval(parts: Sequence[tuple[str, float, float, float]]) -> tuple[float, float, float]:
    """``(total, low, high)`` seconds of ops run in turn, from ``(op class, time, low, high)`` each.

    Ops of one class share their calibration's error (one efficiency curve is off for all of
    them), so their distances to the interval ends add linearly; classes are calibrated apart,
    so their summed distances add in quadrature. The low end never goes below zero.
    """
    total = sum(time_s for _, time_s, _, _ in parts)
    below: dict[str, float] = {}
    above: dict[str, float] = {}
    for name, time_s, low, high in parts:
        below[name] = below.get(name, 0.0) + max(0.0, time_s - low)
        above[name] = above.get(name, 0.0) + max(0.0, high - time_s)
    low = total - math.sqrt(sum(v * v for v in below.values()))
    high = total + math.sqrt(sum(v * v for v in above.values()))
    return total, max(0.0, low), high
