"""Calibration data: what calibration learns about a model, and the two fitting primitives.

* :class:`EfficiencyTable`: per op class, efficiency (predicted / measured time) as a
  piecewise-linear function of log10 of the work's size, flat beyond its end knots.
* :class:`ModelFit`: a model's efficiency tables and its conformal interval factors, applied
  to that model's predictions by :meth:`ModelFit.apply`.
* :func:`fit_efficiency`: least squares on log error (SciPy) -> EfficiencyTable.
* :func:`conformal_interval`: split-conformal (low, high) time factors from held-out log ratios.

Both records carry a ``version`` in their JSON form; an unknown version is a FormatError.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..errors import FormatError, UsageError

if TYPE_CHECKING:
    from ..models.base import Prediction
    from ..models.opclass_costs import OpCosts
    from ..work import Work
    from .classes import ClassFit

CALIBRATION_VERSION = 1


#: The ``kind`` of each record nested in a calibration file.
RECORD_KINDS = {"ModelFit": "charz-model-fit", "EfficiencyTable": "charz-efficiency-table",
                "ClassFit": "charz-class-fit"}


def check_record_version(kind: str, data: Mapping[str, Any]) -> None:
    """A nested record's ``version`` (and its ``kind``, when it has one: records of files written
    before kinds were nested get theirs in the file's migration)."""
    if data.get("version") != CALIBRATION_VERSION:
        raise FormatError(f"{kind} JSON version {data.get('version')!r} is not {CALIBRATION_VERSION}")
    if "kind" in data and data["kind"] != RECORD_KINDS[kind]:
        raise FormatError(f"not a {kind} record (kind={data['kind']!r}, expected {RECORD_KINDS[kind]!r})")


SIZE_AMOUNTS = ("flops", "bytes", "accesses", "launches", "transfers")
# Shape keys that name a variant of an op whose efficiency differs wholesale: the thread count
# (a read sweep on one core is half as fast as on two), the STREAM kernel, the transfer kind.
VARIANT_KEYS = ("kernel", "kind", "pinned", "threads", "role")


def calibration_key(work: "Work") -> str:
    """The key of ``work``'s efficiency table: ``op:dtype`` when its FLOPs are of one dtype, else
    ``op`` (``""`` for no op), with the variant keys of its shape (``read@threads=2``)."""
    name = f"{work.op}:{next(iter(work.flops))}" if len(work.flops) == 1 else work.op
    variants = [f"{key}={work.shape[key]}" for key in VARIANT_KEYS if key in work.shape]
    return f"{name}@{','.join(variants)}" if variants else name


@dataclass(frozen=True)
class EfficiencyTable:
    """Efficiency (predicted / measured time) of op class ``op`` against log10 of a work size.

    ``size`` names the Work amount the size is (``flops``: total FLOPs, ``bytes``: total bytes,
    ``accesses``, ``launches``, ``transfers``: total transfer bytes). Between knots efficiency is
    linear in log10(size); beyond the end knots it is flat.
    """

    op: str
    size: str
    log10_sizes: tuple[float, ...]
    efficiency: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.size not in SIZE_AMOUNTS:
            raise UsageError(f"EfficiencyTable.size must be one of {', '.join(SIZE_AMOUNTS)}; got {self.size!r}")
        knots = tuple(float(x) for x in self.log10_sizes)
        values = tuple(float(e) for e in self.efficiency)
        if not knots or len(knots) != len(values):
            raise UsageError("EfficiencyTable needs as many efficiencies as knots, at least one")
        if any(b <= a for a, b in zip(knots, knots[1:])):
            raise UsageError(f"EfficiencyTable knots must increase, got {knots!r}")
        if any(not (math.isfinite(e) and e > 0) for e in values):
            raise UsageError(f"EfficiencyTable efficiencies must be finite and positive, got {values!r}")
        object.__setattr__(self, "log10_sizes", knots)
        object.__setattr__(self, "efficiency", values)

    def size_of(self, work: "Work") -> float:
        if self.size == "flops":
            return work.total_flops
        if self.size == "bytes":
            return work.total_bytes
        if self.size == "transfers":
            return sum(work.transfers.values())
        return float(getattr(work, self.size))

    def at(self, size: float) -> float:
        """Efficiency at ``size`` (a size of 0 or less takes the first knot's value)."""
        import numpy as np

        x = math.log10(size) if size > 0 else self.log10_sizes[0]
        return float(np.interp(x, self.log10_sizes, self.efficiency))

    def to_json(self) -> dict[str, Any]:
        return {"version": CALIBRATION_VERSION, "kind": RECORD_KINDS["EfficiencyTable"], "op": self.op, "size": self.size,
                "log10_sizes": list(self.log10_sizes), "efficiency": list(self.efficiency)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "EfficiencyTable":
        check_record_version("EfficiencyTable", data)
        try:
            return cls(str(data["op"]), str(data["size"]), tuple(data["log10_sizes"]), tuple(data["efficiency"]))
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"EfficiencyTable JSON is malformed: {exc}") from exc


@dataclass(frozen=True)
class ModelFit:
    """What calibration learned about one model: efficiency per op class and interval factors.

    ``tables`` maps an op class to its table; the key ``""`` serves every other op. ``interval``
    is ``(low_factor, high_factor)`` from :func:`conformal_interval` at ``level``. ``classes``
    (models with op-class figures only): fits per op class and dtype that apply to any Work of
    the class (:mod:`.classes`), before any table; ``costs``: the op-class figures measured on
    the calibration cases (:class:`~pytest_charz.models.opclass_costs.OpCosts`).
    """

    model: str
    tables: Mapping[str, EfficiencyTable] = field(default_factory=dict)
    interval: tuple[float, float] = (1.0, 1.0)
    level: float = 0.0
    classes: Mapping[str, "ClassFit"] = field(default_factory=dict)
    costs: "OpCosts | None" = None

    def __post_init__(self) -> None:
        low, high = (float(self.interval[0]), float(self.interval[1]))
        if not (0 <= low <= high and math.isfinite(high)):
            raise UsageError(f"ModelFit.interval must be finite with 0 <= low <= high, got {self.interval!r}")
        object.__setattr__(self, "interval", (low, high))
        object.__setattr__(self, "tables", dict(self.tables))
        object.__setattr__(self, "classes", dict(self.classes))

    def apply(self, prediction: "Prediction", work: "Work", floor_s: float,
              bands: Mapping[str, Mapping[str, Any]] | None = None) -> "Prediction":
        """``prediction`` (of this calibration's model, on the ceilings it was fitted against)
        divided by the efficiency fitted for ``work``, never below ``floor_s`` (the roofline bound).

        The fit is, first found: the class fit of the work's most specific class key
        (:func:`.classes.lookup`, models with op-class figures), with its own interval; else the
        table of the work's calibration key (:func:`calibration_key`), of its op, or the ``""``
        table, with the interval of ``bands[regime]`` (relative errors ``lo``, ``hi``) when there
        is one, else the pooled factors. The breakdown keeps the uncalibrated terms; the model
        name gains ``+calibration``. This is the only place a calibration changes a prediction.
        """
        if not prediction.covered:
            return prediction
        if self.classes:
            from .classes import lookup

            fitted = lookup(self.classes, work)
            if fitted is not None:
                return fitted.apply(prediction, work, floor_s)
        table = self.tables.get(calibration_key(work)) or self.tables.get(work.op) or self.tables.get("")
        time_s = prediction.time_s / table.at(table.size_of(work)) if table else prediction.time_s
        time_s = max(time_s, floor_s)
        band = (bands or {}).get(prediction.regime)
        if band is not None:
            low, high = 1.0 + float(band["lo"]), 1.0 + float(band["hi"])
        else:
            low, high = self.interval
        return replace(prediction, time_s=time_s, interval_s=(time_s * low, time_s * high),
                       model=f"{prediction.model}+calibration")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"version": CALIBRATION_VERSION, "kind": RECORD_KINDS["ModelFit"], "model": self.model,
                                "level": self.level,
                                "interval": list(self.interval),
                                "tables": {op: table.to_json() for op, table in self.tables.items()}}
        # classes and costs only when fitted: the calibrations of other models stay as they were
        if self.classes:
            from .classes import classes_to_json

            data["classes"] = classes_to_json(self.classes)
        if self.costs is not None:
            data["costs"] = self.costs.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ModelFit":
        check_record_version("ModelFit", data)
        try:
            tables = {str(op): EfficiencyTable.from_json(t) for op, t in (data.get("tables") or {}).items()}
            low, high = data.get("interval", (1.0, 1.0))
            from ..models.opclass_costs import OpCosts
            from .classes import classes_from_json

            classes = classes_from_json(data.get("classes") or {})
            costs = OpCosts.from_json(data["costs"]) if data.get("costs") else None
            return cls(str(data["model"]), tables, (float(low), float(high)), float(data.get("level", 0.0)),
                       classes, costs)
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"ModelFit JSON is malformed: {exc}") from exc


def fit_efficiency(
    points: Iterable[Sequence[float]],
    *,
    op: str = "",
    size: str = "flops",
    knots: int = 4,
) -> EfficiencyTable:
    """Fit an :class:`EfficiencyTable` to ``(size, predicted_s, measured_s)`` points.

    Knots sit at quantiles of log10(size) (at most ``knots``, at most one per distinct size);
    efficiencies at the knots minimise the squared log error
    ``sum((ln(predicted / eff(size)) - ln(measured))**2)`` under eff > 0 (scipy.optimize).
    """
    import numpy as np
    from scipy.optimize import least_squares

    rows = [tuple(float(v) for v in p) for p in points]
    if not rows:
        raise UsageError("fit_efficiency needs at least one (size, predicted_s, measured_s) point")
    if any(len(r) != 3 or not all(v > 0 and math.isfinite(v) for v in r) for r in rows):
        raise UsageError("fit_efficiency points must be (size, predicted_s, measured_s), all positive")
    if knots < 1:
        raise UsageError(f"fit_efficiency knots must be >= 1, got {knots!r}")
    x = np.log10([r[0] for r in rows])
    log_efficiency = np.log([r[1] / r[2] for r in rows])
    distinct = np.unique(x)
    grid = np.unique(np.quantile(distinct, np.linspace(0.0, 1.0, min(knots, distinct.size))))

    def residuals(log_knots: np.ndarray) -> np.ndarray:
        return np.log(np.interp(x, grid, np.exp(log_knots))) - log_efficiency

    start = np.full(grid.size, float(np.mean(log_efficiency)))
    fitted = least_squares(residuals, start)
    return EfficiencyTable(op, size, tuple(grid.tolist()), tuple(np.exp(fitted.x).tolist()))


def conformal_interval(residuals: Sequence[float], level: float) -> tuple[float, float]:
    """Split-conformal ``(low_factor, high_factor)`` on predicted time at coverage ``level``.

    ``residuals`` are natural-log ratios ``ln(measured_s / predicted_s)`` of a held-out split.
    Equal-tailed: with n residuals sorted and alpha = 1 - level, the factors are
    ``exp(r[floor((n+1) alpha/2)])`` and ``exp(r[ceil((n+1)(1-alpha/2))])`` (1-based), which
    cover a new exchangeable case with probability >= level. Needs n >= 2/alpha - 1.
    """
    if not 0 < level < 1:
        raise UsageError(f"conformal_interval level must be in (0, 1), got {level!r}")
    ordered = sorted(float(r) for r in residuals)
    n = len(ordered)
    alpha = 1.0 - level
    low_rank = math.floor((n + 1) * alpha / 2 + 1e-9)
    high_rank = math.ceil((n + 1) * (1 - alpha / 2) - 1e-9)
    if low_rank < 1 or high_rank > n:
        needed = math.ceil(2 / alpha - 1 - 1e-9)
        raise UsageError(f"conformal_interval at level {level} needs at least {needed} residuals, got {n}")
    return math.exp(ordered[low_rank - 1]), math.exp(ordered[high_rank - 1])
