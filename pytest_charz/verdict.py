"""Verdicts: one case's measurement against its model's prediction and its stored reference.

Outcomes, in the order they are decided:

``inconclusive``
    No kept samples, or too few for a CI of the median (under 6 at 95%: unknown, never zero); or
    too noisy to decide: the CI's relative half-width exceeds ``threshold / 2`` (the message says
    why); or one of the questions below has no stable answer.
``drift`` / ``explained``
    The change from the reference (:mod:`pytest_charz.reference_change`), ratio r = measured
    median / reference median, with a percentile-bootstrap ``1 - alpha`` CI [lo, hi] of r and a
    two-sided Mann-Whitney U test:

    * the reference is the median of the sessions that measured it (at least
      ``sessions_to_settle`` clean ones, ``store.REFERENCE_SESSIONS``, before drift is judged: until
      then a change is inconclusive), and its uncertainty s is how far an unchanged session may
      fall from that median (the largest distance seen, or the 99% prediction interval of a new
      session, whichever is larger): r's CI is widened to [lo / (1 + s), hi / (1 - s)];
    * drift when |r - 1| exceeds the threshold and every session's distance, the widened CI lies
      entirely beyond 1 +- threshold (lo > 1 + threshold or hi < 1 - threshold), and U's p < alpha;
    * no drift when the widened CI lies inside 1 +- threshold (a machine whose sessions spread by
      more than the threshold never says "no drift": it says what change it can detect);
    * anything else (the CI straddles the threshold, or the CI and the U test disagree) is
      inconclusive: the change may or may not exceed the threshold.

    Where the case and every session of its reference ran the device's reference kernel between
    their batches (:mod:`pytest_charz.measure.pace`), r is also computed on times normalised by
    it, and the verdict judges on the normalised ratio where its sessions are tighter (the raw
    one beside it, ``basis`` says which). A raw drift that the normalised ratio puts within the
    threshold is ``explained`` (cause ``pace:``): the machine's pace moved, not the case. Each
    verdict says the smallest change the comparison can detect now (``detectable_change``).

    A change only fails once all the evidence agrees it is beyond the threshold, so a case
    whose true change is below the threshold cannot fail by chance beyond the small ``alpha``
    of each test together (and in practice far less: see the property test).
    A drift becomes ``explained`` when :func:`pytest_charz.explain.find_cause` finds a recorded
    cause (disturbed interval, changed conditions, changed versions) that could make a change of
    that direction and size; so does an undecided change whose ratio is beyond the threshold.
``model-error``
    A covered prediction with a validated error band (lo, hi), from the model's validation in
    this regime and never widened here: the measurement's ``1 - alpha`` CI of the median lies
    entirely outside [t (1 + lo), t (1 + hi)]. A median outside with a CI reaching into the band
    is inconclusive. When the interval itself was disturbed (steal, other load, clock change,
    throttling, a shared device) the miss is ``explained`` instead. A prediction that does not
    cover the case is reported as such and no model error is judged.
``new``
    No reference yet, and nothing above applies.
``pass``
    Otherwise.

By default only ``model-error`` and ``drift`` fail; ``strict=True`` fails everything except
``pass`` and ``new``.

Everything here is pure: typed values in, a :class:`Verdict` out. What the baseline store does
around a verdict (saving, accepting, adding sessions) is :mod:`pytest_charz.store.policy`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from .errors import FormatError, UsageError
from .explain import find_cause
from .formats import VERDICT
from .measure import stats
from .measure.sampler import Measurement
from .reference_change import StoredReference, judge_change, paced_cause, paced_doubt
from .units import format_time

if TYPE_CHECKING:
    from .models.base import Prediction

OUTCOMES = ("pass", "model-error", "drift", "explained", "inconclusive", "new")
FAILING = ("model-error", "drift")
# The verdict's messages print times with one digit more than the reports' tables.
_TIME_DIGITS = 4


@dataclass(frozen=True)
class Verdict:
    """The judgement of one case. ``message`` is the human account with all the evidence.

    ``ratio`` is measured median / reference median with its ``ratio_ci``; ``p_value`` the
    Mann-Whitney p against the reference samples; ``model_error`` measured / predicted - 1;
    ``cause`` the recorded cause of an ``explained`` outcome; ``baseline`` what the store did
    (``""`` when judged without one).
    """

    outcome: str
    fails: bool
    message: str
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None
    p_value: float | None = None
    model_error: float | None = None
    cause: str | None = None
    threshold: float = 0.05
    alpha: float = 0.01
    strict: bool = False
    baseline: str = ""
    # Which times the change was judged on: "raw", or "normalised" by the reference kernel
    # (``pace_kind``) where its sessions were tighter; both ratios are kept.
    basis: str = "raw"
    pace_kind: str = ""
    raw_ratio: float | None = None
    normalised_ratio: float | None = None
    # The gate's power now: the smallest change this case's comparison can tell from the spread of
    # its reference sessions and its own CI (``resolution``), and the smallest that would be
    # called drift at ``threshold`` (``detectable_change``); None before the reference has settled.
    resolution: float | None = None
    detectable_change: float | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise UsageError(f"verdict outcome must be one of {', '.join(OUTCOMES)}; got {self.outcome!r}")

    def to_json(self) -> dict[str, Any]:
        def finite(value: float | None) -> float | None:
            return value if value is not None and math.isfinite(value) else None

        return {
            **VERDICT.stamp(), "outcome": self.outcome, "fails": self.fails, "message": self.message,
            "ratio": finite(self.ratio), "ratio_ci": [finite(v) for v in self.ratio_ci] if self.ratio_ci else None,
            "p_value": finite(self.p_value), "model_error": finite(self.model_error), "cause": self.cause,
            "threshold": self.threshold, "alpha": self.alpha, "strict": self.strict, "baseline": self.baseline,
            "basis": self.basis, "pace_kind": self.pace_kind, "raw_ratio": finite(self.raw_ratio),
            "normalised_ratio": finite(self.normalised_ratio), "resolution": finite(self.resolution),
            "detectable_change": finite(self.detectable_change),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Verdict":
        data = VERDICT.check_nested(data, "a case's verdict")
        try:
            ci = data.get("ratio_ci")
            return cls(
                outcome=str(data["outcome"]), fails=bool(data["fails"]), message=str(data["message"]),
                ratio=data.get("ratio"), ratio_ci=(ci[0], ci[1]) if ci else None, p_value=data.get("p_value"),
                model_error=data.get("model_error"), cause=data.get("cause"),
                threshold=float(data.get("threshold", 0.05)), alpha=float(data.get("alpha", 0.01)),
                strict=bool(data.get("strict", False)), baseline=str(data.get("baseline", "")),
                basis=str(data.get("basis") or "raw"), pace_kind=str(data.get("pace_kind") or ""),
                raw_ratio=data.get("raw_ratio"), normalised_ratio=data.get("normalised_ratio"),
                resolution=data.get("resolution"), detectable_change=data.get("detectable_change"),
            )
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"Verdict JSON is malformed: {exc}") from None


def fails_for(outcome: str, strict: bool) -> bool:
    """Whether ``outcome`` fails the test: model-error and drift; under ``strict`` all but pass and new."""
    return outcome not in ("pass", "new") if strict else outcome in FAILING


def check_threshold(threshold: float, where: str = "") -> float:
    """``threshold`` as a float: a fraction in (0, 1). ``where`` (a case id) prefixes the error."""
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 < threshold < 1:
        prefix = f"{where}: " if where else ""
        raise UsageError(f"{prefix}drift threshold must be a fraction in (0, 1), e.g. 0.05 for 5%; got {threshold!r}")
    return float(threshold)


def check_alpha(alpha: float) -> float:
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 < alpha < 0.5:
        raise UsageError(f"significance level alpha must be in (0, 0.5), e.g. 0.01; got {alpha!r}")
    return float(alpha)


def check_band(band: Mapping[str, Any]) -> tuple[float, float]:
    """The band's (lo, hi) relative errors: -1 < lo <= hi, e.g. {"lo": -0.15, "hi": 0.10}."""
    try:
        lo, hi = float(band["lo"]), float(band["hi"])
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"a model error band needs numbers 'lo' and 'hi' (relative errors), got {dict(band)!r}") from None
    if not (-1.0 < lo <= hi and math.isfinite(hi)):
        raise UsageError(f"a model error band needs -1 < lo <= hi, got lo={lo!r}, hi={hi!r}")
    return lo, hi


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def _time(seconds: float | None) -> str:
    return format_time(seconds, _TIME_DIGITS)


def _judge_model(median_s: float, ci_s: tuple[float, float], prediction: "Prediction | None",
                 band: Mapping[str, Any] | None) -> tuple[str, float | None, str]:
    """(state, model error, line); state is none, uncovered, unbanded, inside, outside or undecided."""
    if prediction is None:
        return "none", None, "no model prediction"
    model = prediction.model
    if not prediction.covered:
        return "uncovered", None, f"model {model} does not cover this case: {prediction.reason or 'no reason given'}"
    time_s = prediction.time_s
    if not (math.isfinite(time_s) and time_s > 0):
        return "none", None, f"model {model} predicts {time_s!r} s: model error not judged"
    low_s, high_s = prediction.interval_s
    line = (f"predicted {_time(time_s)} [{_time(low_s)}-{_time(high_s)}] by {model}"
            f" (bound {prediction.bound or '?'}, regime {prediction.regime or '?'})")
    error = median_s / time_s - 1.0
    if band is None:
        return "unbanded", error, f"{line}; model error {_pct(error)}, not judged: no validated band for this regime"
    lo, hi = check_band(band)
    lower, upper = time_s * (1.0 + lo), time_s * (1.0 + hi)
    line += f"; model error {_pct(error)}, band {_pct(lo)}..{_pct(hi)} ({_time(lower)}-{_time(upper)})"
    if ci_s[1] < lower or ci_s[0] > upper:
        return "outside", error, line + ": outside"
    if not lower <= median_s <= upper:
        return "undecided", error, line + ": median outside but its CI reaches into the band"
    return "inside", error, line + ": inside"


def too_noisy_reason(m: Measurement, threshold: float) -> str:
    """Why ``m`` is too noisy for ``threshold``, in one line: a noise target looser than half the
    threshold (meeting it cannot decide), or the target out of reach in the budget (the sampler's note)."""
    decidable = threshold / 2.0
    if m.noise_target > decidable:
        return (f"why: its noise target +-{m.noise_target:.1%} is looser than +-{decidable:.2%}, half the {threshold:.1%}"
                f" threshold; ask for noise <= {decidable:.3g} or a threshold >= {2.0 * m.noise_target:.3g}")
    reach = next((note for note in m.notes if "out of reach" in note), None)
    return f"why: {reach}" if reach else f"why: sampling stopped ({m.stop_reason}) before +-{decidable:.2%}"


def _direction(ratio: float) -> str:
    return f"{abs(ratio - 1.0):.1%} {'slower' if ratio > 1.0 else 'faster'} than the reference"


def judge(measurement: Measurement, prediction: "Prediction | None", band: Mapping[str, Any] | None,
          reference: StoredReference | None, interval: Mapping[str, Any], reference_conditions: Mapping[str, Any] | None,
          provenance: Mapping[str, Any], reference_provenance: Mapping[str, Any] | None,
          threshold: float = 0.05, alpha: float = 0.01, strict: bool = False,
          achieved: Mapping[str, float] | None = None) -> Verdict:
    """Judge one measured case (see the module docstring for the rules); pure and deterministic.

    Parameters
    ----------
    measurement, prediction
        The case's Measurement, and its model's Prediction (None when no model ran).
    band
        The model's validated relative error band ``{"lo", "hi"}`` in this regime; None when not
        validated (model error is then reported, not judged).
    reference, reference_conditions, reference_provenance
        The stored reference and its conditions and provenance summaries; all None for a new case.
    interval, provenance
        The case's :func:`~pytest_charz.explain.conditions_summary` (or Interval JSON), and the
        run's provenance with its device record under ``"device"``.
    threshold, alpha, strict
        The drift threshold in (0, 1), each test's significance level, and whether every outcome
        but pass and new fails.
    achieved
        The case's ``peak_fraction``, named in the message.
    """
    threshold = check_threshold(threshold)
    alpha = check_alpha(alpha)
    m = measurement
    flags = [str(f) for f in interval.get("flags") or ()]

    def verdict(outcome: str, headline: str, lines: list[str], **figures: Any) -> Verdict:
        if flags:
            lines = [*lines, f"conditions: {', '.join(flags)}"]
        return Verdict(outcome, fails_for(outcome, strict), "\n".join([headline, *lines]),
                       threshold=threshold, alpha=alpha, strict=strict, **figures)

    if not m.samples_s or m.median_s is None:
        discards = ", ".join(f"{n} {reason}" for reason, n in sorted(m.discarded.items())) or "none kept"
        return verdict("inconclusive", f"inconclusive: all samples discarded ({discards}); nothing to judge", [])

    median_s = m.median_s
    if not m.ci_known or m.ci_s is None or m.rel_ci_halfwidth is None:
        # Too few samples for a CI of the median: nothing is decided, and so nothing saved (store.policy).
        kept = len(m.samples_s)
        return verdict("inconclusive", f"inconclusive: CI of the median unknown ({kept} sample(s) kept; a"
                                       f" {m.ci_level:.0%} CI needs at least {stats.ci_min_samples(m.ci_level)})",
                       [f"measured {_time(median_s)} (median of {kept}; {m.mode}, stop: {m.stop_reason})",
                        *(f"sampler: {note}" for note in m.notes)])
    ci_s = m.ci_s
    rel = m.rel_ci_halfwidth
    lines = [f"measured {_time(median_s)} (median; {m.ci_level:.0%} CI {_time(ci_s[0])}-"
             f"{_time(ci_s[1])}, +-{rel:.2%}; {len(m.samples_s)} samples, {m.mode}, stop: {m.stop_reason})"]
    # Model error is decided on the wider 1 - alpha interval, for the same stability as drift.
    model_state, model_error, model_line = _judge_model(median_s, stats.median_ci(m.samples_s, 1.0 - alpha), prediction,
                                                        band)
    lines.append(model_line)
    if achieved:
        lines.append("achieved " + ", ".join(f"{fraction:.1%} of the {ceiling} peak"
                                             for ceiling, fraction in sorted(achieved.items())))
    comparison = judge_change(m, reference, threshold, alpha)
    change = comparison.change
    lines.append(change.line)
    figures: dict[str, Any] = {
        "ratio": change.ratio, "ratio_ci": change.ci, "p_value": change.p_value, "model_error": model_error,
        "basis": comparison.basis, "pace_kind": comparison.pace_kind,
        "raw_ratio": comparison.raw.ratio if comparison.raw else None,
        "normalised_ratio": comparison.normalised.ratio if comparison.normalised else None,
        "resolution": change.resolution, "detectable_change": change.detectable}
    # On normalised times a clock that differs from the reference's is no cause: it is divided out.
    cause_conditions = None if comparison.basis == "normalised" else reference_conditions
    paced = paced_cause(comparison, threshold)

    if not rel <= threshold / 2.0:
        return verdict("inconclusive", f"inconclusive: too noisy to decide (CI of the median +-{rel:.2%},"
                                       f" more than half the {threshold:.1%} threshold)", lines + [
                                           too_noisy_reason(m, threshold)], **figures)
    if paced and comparison.raw is not None and comparison.raw.ratio is not None:
        # Raw drift that the reference kernel shows too: the machine's pace moved, not the case.
        raw_ratio = comparison.raw.ratio
        cause = "; ".join(filter(None, [paced, find_cause(interval, reference_conditions, provenance,
                                                          reference_provenance, ratio=raw_ratio, threshold=threshold)]))
        return verdict("explained", f"explained: {_direction(raw_ratio)} raw, not normalised; cause: {cause}", lines,
                       cause=cause, **figures)
    if change.state == "drift":
        assert change.ratio is not None
        cause = find_cause(interval, cause_conditions, provenance, reference_provenance,
                           ratio=change.ratio, threshold=threshold)
        if cause:
            return verdict("explained", f"explained: {_direction(change.ratio)}; cause: {cause}", lines,
                           cause=cause, **figures)
        doubt = paced_doubt(comparison, threshold)
        if doubt:
            return verdict("inconclusive", f"inconclusive: {_direction(change.ratio)} raw, but {doubt}", lines,
                           **figures)
        judged_on = (f" (normalised by the {comparison.pace_kind} reference kernel; raw ratio"
                     f" {figures['raw_ratio']:.3f})" if comparison.basis == "normalised" else "")
        return verdict("drift", f"drift: {_direction(change.ratio)}{judged_on}, beyond the {threshold:.1%} threshold"
                                " and the spread of the reference's sessions, with no recorded cause", lines, **figures)
    if model_state == "outside":
        assert model_error is not None
        cause = find_cause(interval, None, provenance, None, ratio=1.0 + model_error, threshold=0.0)
        if cause:
            return verdict("explained", f"explained: {_pct(model_error)} off the model, outside its band;"
                                        f" cause: {cause}", lines, cause=cause, **figures)
        return verdict("model-error", f"model-error: measured {_time(median_s)} is {_pct(model_error)} off the"
                                      " prediction, outside the model's validated band", lines, **figures)
    if change.state == "provisional":
        assert reference is not None and change.ratio is not None
        return verdict("inconclusive", f"inconclusive: {_direction(change.ratio)}, but the reference holds"
                                       f" {reference.sessions} of {reference.sessions_to_settle} sessions; drift is judged once"
                                       " it has settled", lines, **figures)
    if change.state == "undecided" and change.ratio is not None and abs(change.ratio - 1.0) > threshold:
        # Too uncertain to call drift, but the change looks beyond the threshold and the run
        # recorded something that would make it: say so rather than "inconclusive".
        cause = find_cause(interval, cause_conditions, provenance, reference_provenance,
                           ratio=change.ratio, threshold=threshold)
        if cause:
            return verdict("explained", f"explained: {_direction(change.ratio)} (not significant beyond the"
                                        f" threshold on its own); cause: {cause}", lines, cause=cause, **figures)
    if change.state == "undecided" and change.resolution is not None and change.resolution > threshold:
        assert change.detectable is not None
        return verdict("inconclusive", f"inconclusive: this machine tells only changes over {change.resolution:.1%}"
                                       f" of this case from its noise now, more than the {threshold:.1%} threshold:"
                                       f" the smallest change detectable here is {change.detectable:.1%}",
                       lines, **figures)
    if change.state == "undecided":
        return verdict("inconclusive", "inconclusive: the change from the reference may or may not exceed the"
                                       f" {threshold:.1%} threshold", lines, **figures)
    if change.state == "incomparable":
        return verdict("inconclusive", "inconclusive: the reference is not comparable with this measurement",
                       lines, **figures)
    if model_state == "undecided":
        return verdict("inconclusive", "inconclusive: too close to the model band's edge to decide", lines, **figures)
    if reference is None:
        return verdict("new", "new: no reference yet for this case", lines, **figures)
    return verdict("pass", "pass: no drift from the reference" + (
        " and within the model's band" if model_state == "inside" else ""), lines, **figures)


__all__ = ["OUTCOMES", "StoredReference", "Verdict", "check_alpha", "check_band", "check_threshold",
           "fails_for", "judge", "too_noisy_reason"]
