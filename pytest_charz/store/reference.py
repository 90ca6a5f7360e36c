"""A case's reference measurement and the history of its changes, as the baseline store keeps them."""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..errors import FormatError, UsageError
from ..explain import conditions_summary, provenance_summary
from ..measure import clock
from ..measure.stats import order_statistics

if TYPE_CHECKING:
    from ..records import CaseRecord

MAX_REFERENCE_SAMPLES = 200
NEW_CASE_REASON = "new case"
# A reference settles once this many clean sessions measured it: one session on a shared or
# virtual machine can be an outlier (turbo state, neighbours), and a gate that judges against
# it raises false alarms. Until then the reference gathers sessions and drift is not judged.
REFERENCE_SESSIONS = 3


def thin_samples(samples_s: Sequence[float], limit: int = MAX_REFERENCE_SAMPLES) -> tuple[float, ...]:
    """At most ``limit`` samples, evenly spaced order statistics of ``samples_s`` (sorted).

    Keeps the distribution's shape (median, quantiles) for rank tests and bootstraps; with more
    than ``limit`` samples the kept set is a quantile grid, which makes tests on it conservative.
    """
    return order_statistics(samples_s, limit)


def now_iso() -> str:
    """The current time as the store stamps it: UTC, to the second."""
    return clock.utc_now_iso(timespec="seconds")


@dataclass(frozen=True)
class Reference:
    """A case's reference measurement: what later runs are compared with.

    ``conditions`` is :func:`~pytest_charz.explain.conditions_summary` and ``provenance``
    :func:`~pytest_charz.explain.provenance_summary` of the run that measured it.
    """

    median_s: float
    ci_s: tuple[float, float]
    samples_s: tuple[float, ...]
    noise_target: float
    mode: str
    op: str
    conditions: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    created: str = ""
    # Medians of the sessions that measured this reference (``median_s`` is their median);
    # empty for a reference of one session.
    session_medians_s: tuple[float, ...] = ()
    # The reference kernel (measure/pace.py) of the sessions: its kind, its median time in the
    # session whose samples are kept (``pace_s``), and per session beside ``session_medians_s``
    # (None for a session measured without it). Empty and None for references without one.
    pace_kind: str = ""
    pace_s: float | None = None
    session_paces_s: tuple[float | None, ...] = ()

    @property
    def session_pairs(self) -> tuple[tuple[float, float | None], ...]:
        """(median, reference-kernel median or None) of each session that measured this reference."""
        if not self.session_medians_s:
            return ((self.median_s, self.pace_s),)
        paces = self.session_paces_s + (None,) * (len(self.session_medians_s) - len(self.session_paces_s))
        return tuple(zip(self.session_medians_s, paces[:len(self.session_medians_s)]))

    @property
    def normalised_sessions(self) -> tuple[float, ...]:
        """Each session's median / its reference kernel's median; empty unless every session had
        the kernel (a normalised reference of fewer sessions than the raw one would hide spread)."""
        pairs = self.session_pairs
        if not self.pace_kind or any(pace is None or pace <= 0 for _, pace in pairs):
            return ()
        return tuple(median / pace for median, pace in pairs if pace)

    @property
    def normalised_median(self) -> float | None:
        """The median of :attr:`normalised_sessions` (None without them)."""
        values = self.normalised_sessions
        return float(np.median(values)) if values else None

    @property
    def sessions(self) -> int:
        return max(1, len(self.session_medians_s))

    @property
    def sessions_to_settle(self) -> int:
        """How many sessions a reference gathers before drift is judged against it."""
        return REFERENCE_SESSIONS

    @property
    def settled(self) -> bool:
        return self.sessions >= REFERENCE_SESSIONS

    @property
    def spread(self) -> float:
        """Largest relative distance of a session's median from the reference median: how far
        apart sessions of an unchanged case were measured (0 with one session)."""
        if len(self.session_medians_s) < 2:
            return 0.0
        return max(abs(m / self.median_s - 1.0) for m in self.session_medians_s)

    def with_session(self, other: "Reference") -> "Reference":
        """This reference with ``other`` (one more session of the same case) added: the median
        becomes the median of the session medians; the samples and CI kept are those of the
        session nearest to it."""
        medians = (self.session_medians_s or (self.median_s,)) + (other.median_s,)
        median = float(np.median(medians))
        own = float(np.median(self.samples_s))
        pick = other if abs(math.log(other.median_s / median)) < abs(math.log(own / median)) else self
        # A session with another kind of reference kernel (or none) counts as one without it.
        other_pace = other.pace_s if other.pace_kind == self.pace_kind else None
        paces = tuple(pace for _, pace in self.session_pairs) + (other_pace,)
        return Reference(median_s=median, ci_s=pick.ci_s, samples_s=pick.samples_s, noise_target=self.noise_target,
                         mode=self.mode, op=self.op, conditions=pick.conditions, provenance=self.provenance,
                         created=other.created, session_medians_s=tuple(medians), pace_kind=self.pace_kind,
                         pace_s=pick.pace_s if pick.pace_kind == self.pace_kind else None,
                         session_paces_s=paces if self.pace_kind else ())

    def __post_init__(self) -> None:
        if not (isinstance(self.median_s, (int, float)) and math.isfinite(self.median_s) and self.median_s > 0):
            raise UsageError(f"Reference.median_s must be a positive finite time, got {self.median_s!r}")
        if not self.samples_s:
            raise UsageError("a Reference needs at least one sample")
        object.__setattr__(self, "ci_s", (float(self.ci_s[0]), float(self.ci_s[1])))
        object.__setattr__(self, "samples_s", tuple(float(v) for v in self.samples_s))

    @classmethod
    def from_case(cls, case: "CaseRecord", provenance: Mapping[str, Any], created: str | None = None) -> "Reference":
        """The reference a measured case would leave; ``provenance`` is its run's provenance
        (with the run's device record under ``"device"``), ``created`` the time (now if None)."""
        measurement = case.measurement
        median_s = measurement.median_s
        if not measurement.samples_s or median_s is None:
            raise UsageError(f"case {case.id!r} has no kept samples to make a reference of")
        stamp = created if created is not None else now_iso()
        ci = measurement.ci_s or (median_s, median_s)
        return cls(
            median_s=float(median_s),
            ci_s=(float(ci[0]), float(ci[1])),
            samples_s=thin_samples(measurement.samples_s),
            noise_target=float(measurement.noise_target),
            mode=measurement.mode,
            op=case.work.op or "",
            # The summaries read the run file's form of the conditions, as stored references do.
            conditions=conditions_summary(case.conditions.to_json()),
            provenance=provenance_summary(provenance, created=stamp),
            created=stamp,
            # A kernel whose runs all read zero time (a fake clock) is no kernel.
            pace_kind=measurement.pace.kind if measurement.pace is not None and measurement.pace.median_s else "",
            pace_s=measurement.pace.median_s if measurement.pace is not None and measurement.pace.median_s else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "median_s": self.median_s,
            "ci_s": list(self.ci_s),
            "samples_s": list(self.samples_s),
            "noise_target": self.noise_target,
            "mode": self.mode,
            "op": self.op,
            "conditions": copy.deepcopy(dict(self.conditions)),
            "provenance": copy.deepcopy(dict(self.provenance)),
            "created": self.created,
            "session_medians_s": list(self.session_medians_s),
            # Written only with a reference kernel: files of references without one stay as they were.
            **({"pace_kind": self.pace_kind, "pace_s": self.pace_s, "session_paces_s": list(self.session_paces_s)}
               if self.pace_kind else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "reference") -> "Reference":
        try:
            return cls(
                median_s=float(data["median_s"]),
                ci_s=(float(data["ci_s"][0]), float(data["ci_s"][1])),
                samples_s=tuple(float(v) for v in data["samples_s"]),
                noise_target=float(data["noise_target"]) if data.get("noise_target") is not None else math.nan,
                mode=str(data.get("mode", "")),
                op=str(data.get("op", "")),
                conditions=dict(data.get("conditions") or {}),
                provenance=dict(data.get("provenance") or {}),
                created=str(data.get("created", "")),
                session_medians_s=tuple(float(v) for v in data.get("session_medians_s") or ()),
                pace_kind=str(data.get("pace_kind") or ""),
                pace_s=None if data.get("pace_s") is None else float(data["pace_s"]),
                session_paces_s=tuple(None if v is None else float(v) for v in data.get("session_paces_s") or ()),
            )
        except (KeyError, IndexError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"{source}: malformed reference ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class HistoryEntry:
    """One change of a case's reference, with its reason."""

    time: str
    reason: str
    previous_median_s: float | None
    median_s: float
    provenance: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "reason": self.reason, "previous_median_s": self.previous_median_s,
                "median_s": self.median_s, "provenance": dict(self.provenance)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str) -> "HistoryEntry":
        try:
            previous = data.get("previous_median_s")
            return cls(str(data["time"]), str(data["reason"]), None if previous is None else float(previous),
                       float(data["median_s"]), dict(data.get("provenance") or {}))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"{source}: malformed history entry ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class BaselineEntry:
    """Everything the store keeps for one case."""

    reference: Reference
    band: Mapping[str, Any] | None
    history: tuple[HistoryEntry, ...]

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference.to_json(), "band": dict(self.band) if self.band is not None else None,
                "history": [h.to_json() for h in self.history]}

    @classmethod
    def from_json(cls, data: Any, source: str) -> "BaselineEntry":
        if not isinstance(data, Mapping) or not isinstance(data.get("reference"), Mapping):
            raise FormatError(f"{source}: a case must be an object with a 'reference' object")
        band = data.get("band")
        if band is not None and not isinstance(band, Mapping):
            raise FormatError(f"{source}: 'band' must be an object or null, got {type(band).__name__}")
        history = data.get("history") or []
        if not isinstance(history, list):
            raise FormatError(f"{source}: 'history' must be a list")
        return cls(Reference.from_json(data["reference"], source), dict(band) if band is not None else None,
                   tuple(HistoryEntry.from_json(h, source) for h in history))


__all__ = ["BaselineEntry", "HistoryEntry", "MAX_REFERENCE_SAMPLES", "NEW_CASE_REASON", "REFERENCE_SESSIONS",
           "Reference", "now_iso", "thin_samples"]
