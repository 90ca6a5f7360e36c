"""The change of a case from its stored reference: the ratio of medians with its CI, on raw
times and, where this case and its reference's sessions ran the device's reference kernel
(:mod:`pytest_charz.measure.pace`), on normalised ones; which of the two is tighter; and the
smallest change the comparison can detect now.

The rules (see :mod:`pytest_charz.verdict` for the verdict built on them): r = measured median /
expected median, its percentile-bootstrap ``1 - alpha`` CI [lo, hi] widened by how far an
unchanged session may fall from the reference (:func:`pytest_charz.measure.stats.session_spread`,
``s``) to [lo / (1 + s), hi / (1 - s)], and a Mann-Whitney U test. ``drift`` when the widened CI
lies beyond 1 +- threshold, |r - 1| exceeds both the threshold and the largest distance of a
reference session, and p < alpha; ``none`` when the widened CI lies inside 1 +- threshold;
``provisional`` for a drift against a reference that has not settled; else ``undecided``. The
expected median is the reference median (raw), or the median of the sessions' normalised
medians times this case's kernel median (normalised).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from .measure import stats
from .measure.sampler import Measurement
from .units import format_time

# The bootstrap resamples medians of at most this many samples per side (evenly spaced order
# statistics beyond it): bounded memory for long runs, and a wider, so conservative, interval.
BOOTSTRAP_MAX_SAMPLES = 2000
BOOTSTRAP_RESAMPLES = 2000
#: The prediction interval of a new unchanged session is a 99% one, not 95%: a gate judges every
#: case of a run, and at 95% an unchanged run of 40 cases would be expected to show two sessions
#: outside their interval (the drift benchmark saw one in 12 case-runs so). The price is a larger
#: smallest detectable change, which each verdict states.
SESSION_LEVEL = 0.99


class StoredReference(Protocol):
    """What the rules read of a case's reference (:class:`pytest_charz.store.Reference` is one)."""

    @property
    def median_s(self) -> float: ...
    @property
    def ci_s(self) -> tuple[float, float]: ...
    @property
    def samples_s(self) -> tuple[float, ...]: ...
    @property
    def mode(self) -> str: ...
    @property
    def created(self) -> str: ...
    @property
    def sessions(self) -> int: ...
    @property
    def sessions_to_settle(self) -> int: ...
    @property
    def settled(self) -> bool: ...
    @property
    def spread(self) -> float: ...
    @property
    def session_pairs(self) -> tuple[tuple[float, float | None], ...]: ...
    @property
    def pace_kind(self) -> str: ...
    @property
    def normalised_sessions(self) -> tuple[float, ...]: ...
    @property
    def normalised_median(self) -> float | None: ...


@dataclass(frozen=True)
class Basis:
    """One way of comparing with the reference: raw times, or times normalised by the reference
    kernel. ``expected_s`` is the reference median this measurement is compared with (for the
    normalised basis: the normalised reference times this case's kernel median), ``spread`` how
    far an unchanged session may fall from it (:func:`stats.session_spread`)."""

    name: str
    expected_s: float
    spread: float
    largest: float


@dataclass(frozen=True)
class Change:
    state: str                     # none, drift, provisional, undecided, incomparable, absent
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    p_value: float | None = None
    line: str = ""
    resolution: float | None = None
    detectable: float | None = None


@dataclass(frozen=True)
class Comparison:
    """The change on the basis used (``change``), with the other basis's beside it."""

    change: Change
    basis: str = "raw"
    pace_kind: str = ""
    raw: Change | None = None
    normalised: Change | None = None


def bases(measurement: Measurement, reference: StoredReference) -> tuple[Basis, Basis | None]:
    """The raw basis, and the normalised one where this case and every session of its reference
    ran the same reference kernel."""
    raw_values = [median for median, _ in reference.session_pairs]
    raw = Basis("raw", reference.median_s, stats.session_spread(raw_values, SESSION_LEVEL), reference.spread)
    pace = measurement.pace
    normalised = reference.normalised_sessions
    center = reference.normalised_median
    pace_s = pace.median_s if pace is not None else None
    if pace is None or not pace_s or not normalised or center is None or pace.kind != reference.pace_kind:
        return raw, None
    # The kernel's own median is uncertain by its CI: a looser kernel widens the normalised spread.
    own = pace.rel_ci_halfwidth or 0.0
    largest = max(abs(v / center - 1.0) for v in normalised)
    return raw, Basis("normalised", center * pace_s, stats.session_spread(normalised, SESSION_LEVEL) + own, largest)


def compare_on(measurement: Measurement, reference: StoredReference, basis: Basis, threshold: float,
             alpha: float) -> Change:
    assert measurement.median_s is not None
    ratio = measurement.median_s / basis.expected_s
    level = 1.0 - alpha
    # The kept samples are one session's; centred on the basis's expected median.
    scale = basis.expected_s / float(np.median(reference.samples_s))
    reference_samples = [v * scale for v in reference.samples_s]
    boot = stats.bootstrap_ratio_ci(reference_samples, stats.order_statistics(measurement.samples_s, BOOTSTRAP_MAX_SAMPLES),
                                    level=level, resamples=BOOTSTRAP_RESAMPLES, seed=0)
    p_value = stats.mann_whitney_u(reference_samples, measurement.samples_s).p_value
    # The reference median is itself uncertain by how far its sessions may fall apart.
    spread = min(basis.spread, 0.5)
    lo, hi = boot.low / (1.0 + spread), boot.high / (1.0 - spread)
    # Drift needs lo > 1 + threshold, and lo is about ratio (1 - h) / (1 + spread): the smallest
    # change called drift is (1 + threshold) (1 + spread) / (1 - h) - 1.
    half = min((boot.high - boot.low) / (boot.high + boot.low), 0.5) if boot.high + boot.low > 0 else 0.5
    resolution = (1.0 + spread) / (1.0 - half) - 1.0
    detectable = (1.0 + threshold) * (1.0 + resolution) - 1.0
    widened = ", widened by the spread of the reference's sessions" if spread else ""
    line = (f"ratio {ratio:.3f} ({level:.0%} CI {lo:.3f}-{hi:.3f}{widened}), Mann-Whitney p={p_value:.2g}")
    beyond = lo > 1.0 + threshold or hi < 1.0 - threshold
    # No drift when the widened CI lies within the threshold: this session's own CI and the
    # reference's uncertainty together rule out a change of the threshold's size. A reference
    # whose sessions may fall further apart than the threshold cannot tell a change of that size
    # from its usual spread, either way: such a case is inconclusive (never "no drift": a 10%
    # slowdown of a case whose sessions spread by 20% often lands inside this session's own CI
    # of the reference) unless the change is beyond the widened interval (so beyond the spread too).
    if beyond and abs(ratio - 1.0) > max(threshold, basis.largest) and p_value < alpha and not reference.settled:
        state = "provisional"
    elif beyond and abs(ratio - 1.0) > max(threshold, basis.largest) and p_value < alpha:
        state = "drift"
    elif 1.0 - threshold < lo and hi < 1.0 + threshold:
        state = "none"
    else:
        state = "undecided"
    known = reference.settled
    return Change(state, ratio, (lo, hi), p_value, line, resolution if known else None, detectable if known else None)


def judge_change(measurement: Measurement, reference: StoredReference | None, threshold: float,
                  alpha: float) -> Comparison:
    if reference is None:
        return Comparison(Change("absent", line="no reference yet"))
    sessions = (f"median of {reference.sessions} sessions, up to {reference.spread:.1%} apart" if reference.sessions > 1
                else "1 session")
    ref_line = (f"reference {_time(reference.median_s)} ({sessions}; CI {_time(reference.ci_s[0])}-"
                f"{_time(reference.ci_s[1])}, {len(reference.samples_s)} samples kept, {reference.created or 'undated'})")
    if reference.mode and reference.mode != measurement.mode:
        return Comparison(Change("incomparable", line=f"{ref_line} was measured {reference.mode}, this run"
                                                        f" {measurement.mode}: not comparable; accept a new reference"))
    raw_basis, normalised_basis = bases(measurement, reference)
    raw = compare_on(measurement, reference, raw_basis, threshold, alpha)
    normalised = (compare_on(measurement, reference, normalised_basis, threshold, alpha)
                  if normalised_basis is not None else None)
    # The normalised times are used where their sessions are tighter than the raw ones.
    use_normalised = normalised_basis is not None and normalised_basis.spread < raw_basis.spread
    chosen, basis = (normalised, normalised_basis) if use_normalised else (raw, raw_basis)
    assert chosen is not None and basis is not None
    lines = [ref_line]
    if normalised is not None and normalised_basis is not None:
        kind = reference.pace_kind
        lines.append(f"normalised by the {kind} reference kernel run between the batches: {normalised.line};"
                     f" its reference sessions may fall +-{normalised_basis.spread:.1%} apart normalised,"
                     f" +-{raw_basis.spread:.1%} raw: judged on the "
                     + ("normalised ratio (tighter), raw beside it" if use_normalised else "raw ratio (tighter)"))
        lines.append(f"raw: {raw.line}")
    else:
        why = ("no reference kernel on this device" if measurement.pace is None
               else "the reference was measured without the same reference kernel")
        lines.append(f"raw: {raw.line} ({why})")
    lines.append(f"drift threshold +-{threshold:.1%}; " + _power_line(chosen, basis, reference))
    line = "\n".join(lines)
    return Comparison(replace(chosen, line=line), basis.name, reference.pace_kind if normalised else "", raw, normalised)


def _power_line(change: Change, basis: Basis, reference: StoredReference) -> str:
    if change.detectable is None or change.resolution is None:
        return (f"smallest detectable change unknown until the reference has settled ({reference.sessions} of"
                f" {reference.sessions_to_settle} sessions)")
    return (f"smallest change detectable here now {change.detectable:.1%} (this machine tells"
            f" {change.resolution:.1%} from its noise: reference sessions +-{min(basis.spread, 0.5):.1%}, this"
            " comparison's CI)")


def _raw_drift_pace(comparison: Comparison) -> tuple[float, float, str] | None:
    """For a raw drift with a normalised comparison beside it: how far the reference kernel moved
    (raw ratio over normalised ratio), the normalised ratio, and the move in words; else None."""
    raw, normalised = comparison.raw, comparison.normalised
    if raw is None or normalised is None or raw.state != "drift" or raw.ratio is None or normalised.ratio is None:
        return None
    pace_ratio = raw.ratio / normalised.ratio
    moved = (f"the {comparison.pace_kind or 'reference'} reference kernel ran {abs(pace_ratio - 1.0):.1%}"
             f" {'slower' if pace_ratio > 1.0 else 'faster'} than in the reference's sessions")
    return pace_ratio, normalised.ratio, moved


def paced_cause(comparison: Comparison, threshold: float) -> str | None:
    """The cause of a raw drift that does not survive the normalisation: the reference kernel
    ran slower (or faster) by about as much, so the normalised ratio is within the threshold."""
    paced = _raw_drift_pace(comparison)
    if paced is None or abs(paced[1] - 1.0) > threshold:
        return None
    return f"pace: {paced[2]} too (normalised ratio {paced[1]:.3f})"


def paced_doubt(comparison: Comparison, threshold: float) -> str | None:
    """Why a raw drift is not called one though its normalised ratio is beyond the threshold:
    the reference kernel itself moved by more than the threshold in this session, and the
    normalised comparison (looser in the reference's sessions, so not the basis) cannot tell the
    change from its spread. Raw is the tighter basis only while the machine keeps its pace: on
    a Xeon guest whose core ran 16% slower for a session, a GEMM read 25.8% slower raw and 8.4%
    normalised (its CI 0.97-1.16) and was called drift. None when this does not apply."""
    paced = _raw_drift_pace(comparison)
    normalised = comparison.normalised
    if paced is None or comparison.basis != "raw" or normalised is None or normalised.state == "drift":
        return None
    if abs(paced[0] - 1.0) <= threshold:
        return None
    return (f"{paced[2]}: the machine's pace moved, and normalised (ratio {paced[1]:.3f}) the change is"
            " within what its sessions' spread allows")


def _time(seconds: float | None) -> str:
    return format_time(seconds, 4)


__all__ = ["BOOTSTRAP_MAX_SAMPLES", "BOOTSTRAP_RESAMPLES", "Basis", "Change", "Comparison", "StoredReference",
           "bases", "compare_on", "judge_change", "paced_cause", "paced_doubt"]
