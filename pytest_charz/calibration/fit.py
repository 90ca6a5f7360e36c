"""Fitting a model to observations: efficiency per op class and conformal bands per regime.

Per op class (``op:dtype`` for single-dtype FLOPs, else ``op``; see
:func:`~pytest_charz.calibration.efficiency.calibration_key`), :func:`fit` fits predicted / measured
time against log10 of the class's size (FLOPs for compute-bound classes, bytes for memory-bound
ones, accesses, launches or transfer bytes otherwise) with
:func:`~pytest_charz.calibration.efficiency.fit_efficiency`. Interval factors are split-conformal
on leave-one-out residuals: each calibration case is predicted by the table refitted without it,
so a residual is an honest out-of-sample error. Bands per regime are the relative error
``(low_factor - 1, high_factor - 1)`` of that regime's residuals.

A band's ``method`` says how it was made: ``conformal`` (the regime's own residuals), ``pooled``
(too few of its own for the level: the residuals of all regimes) or ``range`` (too few in all:
the widest residuals seen, coverage not guaranteed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import UsageError
from ..models.base import REGIMES, Model, Prediction
from ..models.ceilings import Ceilings
from ..work import Work
from .efficiency import ModelFit, EfficiencyTable, conformal_interval, fit_efficiency
from .observations import Observation, measured_ceilings, measured_op_costs, model_ceilings, net_bandwidths
from .predictor import Predictor

_SIZE_OF_REGIME = {"compute": "flops", "memory": "bytes", "latency": "accesses", "launch": "launches",
                   "transfer": "transfers"}


# -- fitting --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fitted:
    """A model calibrated on some cases of one target, ready to predict others."""

    model: Model
    ceilings: Ceilings
    calibration: ModelFit
    bands: Mapping[str, Mapping[str, Any]]
    residuals: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def predictor(self) -> Predictor:
        """The prediction core of this fit: its model, ceilings, calibration and bands."""
        return Predictor.of(self.model, self.ceilings, self.calibration, self.bands)

    def predict(self, work: Work) -> Prediction:
        """The calibrated prediction, its interval from the band of its regime."""
        return self.predictor.predict(work)


def _size_amount(members: Sequence[tuple[Observation, Prediction]]) -> str:
    regimes = [p.regime for _, p in members]
    preferred = _SIZE_OF_REGIME[max(set(regimes), key=lambda r: (regimes.count(r), r))]
    for amount in (preferred, *_SIZE_OF_REGIME.values()):
        probe = EfficiencyTable("", amount, (0.0,), (1.0,))
        if all(probe.size_of(c.work) > 0 for c, _ in members):
            return amount
    raise UsageError("no size amount is positive for every case of the class")


def _fit_tables(points: Sequence[tuple[Observation, Prediction]], knots: int) -> dict[str, EfficiencyTable]:
    by_class: dict[str, list[tuple[Observation, Prediction]]] = {}
    by_op: dict[str, list[tuple[Observation, Prediction]]] = {}
    for case, prediction in points:
        by_class.setdefault(case.calibration_key, []).append((case, prediction))
        by_op.setdefault(case.work.op, []).append((case, prediction))
    tables: dict[str, EfficiencyTable] = {}
    for groups in (by_op, by_class):  # class tables replace op tables of the same name
        for name, members in groups.items():
            try:
                amount = _size_amount(members)
            except UsageError:
                continue  # a class mixing works of no common size (e.g. flops-only and bytes-only) gets no table
            probe = EfficiencyTable(name, amount, (0.0,), (1.0,))
            sizes = [probe.size_of(c.work) for c, _ in members]
            # knots=0: a knot at every calibrated size (at most 64), so the efficiency follows a
            # staircase (cache levels) from one calibrated size to the next.
            count = knots or min(64, len(set(sizes)))
            tables[name] = fit_efficiency([(size, p.time_s, c.measured_s) for size, (c, p) in zip(sizes, members)],
                                          op=name, size=amount, knots=count)
    return tables


def _factors(residuals: Sequence[float], level: float) -> tuple[float, float, str] | None:
    if not residuals:
        return None
    try:
        return (*conformal_interval(residuals, level), "conformal")
    except UsageError:
        return math.exp(min(residuals)), math.exp(max(residuals)), "range"


def fit(model: Model, cases: Sequence[Observation], spec: Ceilings, level: float = 0.9, knots: int = 0,
        measured_from: Sequence[Observation] | None = None) -> Fitted:
    """Calibrate ``model`` on ``cases`` (one target; spec ceilings ``spec``).

    Missing figures are measured on ``measured_from`` (default: ``cases``). Cases the model does
    not cover are left out. Raises UsageError when it covers none of them.
    """
    sources = measured_from or cases
    with_costs = getattr(model, "with_costs", None)
    costs = measured_op_costs(sources) if with_costs is not None else None
    if with_costs is not None and costs is not None:
        model = with_costs(costs)
        # A framework op's bytes over its whole time charge its dispatch twice once the model
        # adds the dispatch: such ops give bandwidth only net of their dispatch.
        kernels = [c for c in sources if not (c.work.launches and c.work.bytes and c.work.op != "dispatch")]
        ceilings = model_ceilings(model.name, spec, measured_ceilings(kernels, spec))
        net = {level: figure for level, figure in net_bandwidths(sources, costs).items()
               if figure.value > (ceilings.bandwidth(level) or 0.0)}
        if net:
            ceilings = ceilings.with_overrides(bandwidth_bytes_per_s=net)
    else:
        ceilings = model_ceilings(model.name, spec, measured_ceilings(sources, spec))
    points = [(c, p) for c in cases for p in [model.predict(c.work, ceilings)] if p.covered and p.time_s > 0]
    if not points:
        raise UsageError(f"model {model.name!r} covers none of the {len(cases)} calibration case(s)")
    tables = _fit_tables(points, knots)
    if with_costs is not None:
        return _fit_by_class(model, ceilings, points, tables, costs, level)
    residuals: dict[str, list[float]] = {}
    for index, (case, prediction) in enumerate(points):
        rest = [point for other, point in enumerate(points) if other != index and point[0].calibration_key == case.calibration_key]
        if not rest:
            continue  # a class of one case has no out-of-sample residual
        loo = ModelFit(model.name, _fit_tables(rest, knots))
        predicted = Predictor.of(model, ceilings, loo).predict(case.work)
        residuals.setdefault(prediction.regime, []).append(math.log(case.measured_s / predicted.time_s))
    pooled = [r for values in residuals.values() for r in values]
    interval = _factors(pooled, level)
    calibration = ModelFit(model.name, tables, interval[:2] if interval else (1.0, 1.0), level if interval else 0.0)
    bands = _bands(residuals, points, interval, level)
    return Fitted(model, ceilings, calibration, bands, {r: tuple(v) for r, v in residuals.items()})


def _fit_by_class(model: Model, ceilings: Ceilings, points: Sequence[tuple[Observation, Prediction]],
                  tables: Mapping[str, EfficiencyTable], costs: Any, level: float) -> Fitted:
    """A model with op-class figures: class fits (:mod:`.classes`) and bands from their residuals."""
    from ..models.opclass import dispatch_s
    from .classes import fit_classes_with_residuals

    classes, by_point = fit_classes_with_residuals(
        [(c.work, p.time_s, c.measured_s, c.work.op) for c, p in points], level,
        [dispatch_s(p) for _, p in points])
    residuals: dict[str, list[float]] = {}
    for (_, prediction), residual in zip(points, by_point):
        if residual is not None:
            residuals.setdefault(prediction.regime, []).append(residual)
    pooled = [r for values in residuals.values() for r in values]
    interval = _factors(pooled, level)
    calibration = ModelFit(model.name, tables, interval[:2] if interval else (1.0, 1.0),
                              level if interval else 0.0, classes, costs)
    return Fitted(model, ceilings, calibration, _bands(residuals, points, interval, level),
                  {r: tuple(v) for r, v in residuals.items()})


def _bands(residuals: Mapping[str, Sequence[float]], points: Sequence[tuple[Observation, Prediction]],
           interval: tuple[float, float, str] | None, level: float) -> dict[str, dict[str, Any]]:
    bands: dict[str, dict[str, Any]] = {}
    for regime in REGIMES:
        own = list(residuals.get(regime, []))
        if not own and not any(p.regime == regime for _, p in points):
            continue
        made = _factors(own, level)
        if (made is None or made[2] == "range") and interval is not None and interval[2] == "conformal":
            made = (interval[0], interval[1], "pooled")
        if made is None:
            continue
        bands[regime] = {"lo": made[0] - 1.0, "hi": made[1] - 1.0, "n": len(own), "level": level,
                         "coverage": None, "method": made[2]}
    return bands


def band_coverage(fitted: Fitted, held_out: Sequence[Observation]) -> dict[str, float | None]:
    """Per regime, the fraction of held-out cases whose measured median lies in the interval."""
    inside: dict[str, list[bool]] = {}
    for case in held_out:
        prediction = fitted.predict(case.work)
        if prediction.covered and prediction.regime in fitted.bands:
            low, high = prediction.interval_s
            inside.setdefault(prediction.regime, []).append(low <= case.measured_s <= high)
    return {regime: (sum(flags) / len(flags) if flags else None) for regime, flags in inside.items()}
