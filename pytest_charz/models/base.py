"""The model protocol and its result, :class:`Prediction`.

A model is data in, data out: ``predict(work, ceilings) -> Prediction``. It never measures, reads
options or prints. A model that cannot predict some work (a dtype without a peak on the target, an
op it does not know) returns ``Prediction.not_covered(model, reason)``: no number at all rather
than a made-up one.

Terms are named ``<kind>:<key>`` (``compute:bf16``, ``memory:dram``, ``latency:l2``,
``link:h2d``, ``collective:all-reduce``) or just ``launch``; the kind gives the regime.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, runtime_checkable

from ..errors import FormatError, UsageError
from ..formats import PREDICTION

if TYPE_CHECKING:
    from ..work import Work
    from .ceilings import Ceilings

REGIMES = ("compute", "memory", "latency", "launch", "transfer")
_REGIME_OF_KIND = {
    "compute": "compute",
    "memory": "memory",
    "latency": "latency",
    "launch": "launch",
    "dispatch": "launch",          # a framework's host dispatch per op (models.opclass)
    "alloc": "launch",             # fresh pages of an op's output, host overhead per op (models.opclass)
    "link": "transfer",
    "collective": "transfer",
}


def regime_of(bound: str) -> str:
    """The regime of a bound or term name: ``memory:l2`` -> ``memory``, ``link:h2d`` -> ``transfer``."""
    kind = bound.split(":", 1)[0]
    if kind not in _REGIME_OF_KIND:
        raise UsageError(f"bound {bound!r} is not of a known kind ({', '.join(_REGIME_OF_KIND)})")
    return _REGIME_OF_KIND[kind]


class Uncovered(Exception):
    """Raised inside a model when the work needs something the model or the ceilings lack."""


@dataclass(frozen=True)
class Prediction:
    """A model's predicted time for one execution of a work, with what limits it.

    ``interval_s`` is the model's own (low, high) uncertainty in seconds; before calibration it is
    ``(time_s, time_s)``. ``breakdown`` gives seconds per term; ``bound`` names the dominating
    term and ``regime`` its kind. When ``covered`` is False, ``reason`` says why and the times are
    NaN (written as null in JSON). ``notes`` say what a user should know of a covered prediction
    (``extrapolated: ...`` when a calibration is applied outside the sizes it was fitted on).
    """

    time_s: float
    interval_s: tuple[float, float]
    bound: str
    breakdown: Mapping[str, float]
    model: str
    covered: bool = True
    reason: str = ""
    notes: tuple[str, ...] = ()
    regime: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "breakdown", dict(self.breakdown))
        object.__setattr__(self, "notes", tuple(str(note) for note in self.notes))
        object.__setattr__(self, "interval_s", (float(self.interval_s[0]), float(self.interval_s[1])))
        if not self.covered:
            if not self.reason:
                raise UsageError(f"an uncovered prediction of {self.model!r} needs a reason")
            return
        low, high = self.interval_s
        if not (math.isfinite(self.time_s) and self.time_s >= 0):
            raise UsageError(f"Prediction.time_s must be finite and >= 0, got {self.time_s!r}")
        if not (0 <= low <= high):
            raise UsageError(f"Prediction.interval_s must be 0 <= low <= high, got {self.interval_s!r}")
        object.__setattr__(self, "regime", regime_of(self.bound))

    @classmethod
    def not_covered(cls, model: str, reason: str) -> "Prediction":
        nan = math.nan
        return cls(nan, (nan, nan), "", {}, model, covered=False, reason=reason)

    @classmethod
    def of_terms(cls, model: str, time_s: float, bound: str, breakdown: Mapping[str, float]) -> "Prediction":
        """An uncalibrated prediction: the interval is the point itself."""
        return cls(time_s, (time_s, time_s), bound, breakdown, model)

    def with_interval(self, low_s: float, high_s: float) -> "Prediction":
        return replace(self, interval_s=(low_s, high_s))

    def to_json(self) -> dict[str, Any]:
        return {
            **PREDICTION.stamp(),
            "model": self.model,
            "time_s": _finite_or_none(self.time_s),
            "interval_s": [_finite_or_none(v) for v in self.interval_s],
            "bound": self.bound,
            "regime": self.regime,
            "breakdown": dict(self.breakdown),
            "covered": self.covered,
            "reason": self.reason,
            # notes only when there are some: the predictions written before them stay as they were
            **({"notes": list(self.notes)} if self.notes else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Prediction":
        data = PREDICTION.check_nested(data, "a case's prediction")
        try:
            low, high = data["interval_s"]
            prediction = cls(
                _none_to_nan(data["time_s"]),
                (_none_to_nan(low), _none_to_nan(high)),
                str(data["bound"]),
                {str(k): float(v) for k, v in data["breakdown"].items()},
                str(data["model"]),
                covered=bool(data["covered"]),
                reason=str(data.get("reason", "")),
                notes=tuple(str(note) for note in data.get("notes") or ()),
            )
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"Prediction JSON is malformed: {exc}") from exc
        if prediction.regime != data.get("regime", prediction.regime):
            raise FormatError(f"Prediction JSON regime {data['regime']!r} does not match bound {prediction.bound!r}")
        return prediction


@runtime_checkable
class Model(Protocol):
    """A performance model: a name and a pure ``predict``."""

    @property
    def name(self) -> str: ...

    def predict(self, work: "Work", ceilings: "Ceilings") -> Prediction: ...


def guarded(model: str, build: Callable[[], Prediction]) -> Prediction:
    """``build()``, or a not-covered prediction carrying the :class:`Uncovered` reason it raised."""
    try:
        return build()
    except Uncovered as gap:
        return Prediction.not_covered(model, str(gap))


# Terms of these kinds add up within their group (one compute pipeline runs all dtypes' FLOPs; one
# copy queue runs the transfers in turn); groups and the remaining terms overlap with each other.
_SUMMED_KINDS = {"compute": "compute", "link": "transfer", "collective": "transfer"}


def overlapped(terms: Mapping[str, float]) -> tuple[float, str]:
    """Time and bound of terms that overlap: the slowest group or term, groups summed inside.

    Returns ``(0.0, "")`` for no terms.
    """
    groups: dict[str, list[tuple[str, float]]] = {}
    for name, seconds in terms.items():
        kind = name.split(":", 1)[0]
        groups.setdefault(_SUMMED_KINDS.get(kind, name), []).append((name, seconds))
    best_time, best_bound = 0.0, ""
    for members in groups.values():
        total = sum(seconds for _, seconds in members)
        if total > best_time or not best_bound:
            best_time = total
            best_bound = max(members, key=lambda member: member[1])[0]
    return best_time, best_bound


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _none_to_nan(value: Any) -> float:
    return math.nan if value is None else float(value)
