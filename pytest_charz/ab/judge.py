"""The A/B judgement: each case's B/A ratio from rounds measured side by side, paired by round.

Pure: typed values in, a :class:`CaseComparison` out; no processes, no files.

Within one process a case is tight (its median's CI is often below +-1%), but between processes
the same case moves by far more (the core clock, the neighbours, the physical pages a process
got). So the samples of one round are pooled per side into that round's median, and each round
gives one paired ratio r_i = median(B_i) / median(A_i) of two processes run back to back: what
moves slowly (clock, neighbours) is common to both and cancels. The case's ratio is the median
of the r_i, with the distribution-free ``1 - alpha`` CI of that median over rounds
(:func:`pytest_charz.measure.stats.median_ci`, the interval the verdict uses for a case's median):
the rounds, not the samples, are the independent observations, so the process-to-process
spread is inside the interval rather than a source of false alarms.

Where every round timed the case's reference kernel on both sides (``measurement.pace``, the
short fixed workload the sampler runs between a CPU case's batches), the ratios are also
normalised by it (each side in units of its own process's kernel), and where every round
recorded the core clock (``core_clock_mhz``) by that (time x clock: cycles); the judgement uses
the narrower normalised estimate where it is narrower than the raw one, says so, and keeps the
raw one beside it.

The threshold rule is the verdict's: ``slower`` when the CI lies entirely above 1 + threshold,
``faster`` entirely below 1 - threshold, ``same`` entirely inside 1 +- threshold, and
``inconclusive`` otherwise, or with fewer rounds than a CI at that level needs (6 at 95%, 8 at
99%).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..measure import stats
from ..verdict import check_alpha, check_threshold

AB_OUTCOMES = ("slower", "faster", "same", "inconclusive")
DECIDED = ("slower", "faster", "same")
#: The interval over rounds is a 95% one: see :mod:`pytest_charz.ab.session` for why that holds.
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class CaseSamples:
    """One case measured in one process: its kept per-call samples (seconds), the core clock the
    process measured around it (MHz; None when not measured) and the flags its conditions raised."""

    samples_s: tuple[float, ...]
    clock_mhz: float | None = None
    flags: tuple[str, ...] = ()          # the case's condition flags in that process (other-load, steal, ...)
    pace_s: float | None = None          # the median of the reference kernel timed between its batches


@dataclass(frozen=True)
class RatioEstimate:
    """Median of the paired per-round ratios and its ``level`` CI (None when too few rounds)."""

    ratio: float
    ci: tuple[float, float] | None
    ratios: tuple[float, ...]

    def width(self) -> float:
        return self.ci[1] - self.ci[0] if self.ci else math.inf

    def to_json(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "ci": list(self.ci) if self.ci else None, "per_round": list(self.ratios)}


@dataclass(frozen=True)
class CaseComparison:
    """One case's A/B judgement. ``basis`` is "raw", "kernel-normalised" or "clock-normalised":
    which estimate decided (``normalised`` is the narrower of the two normalised ones)."""

    case_id: str
    outcome: str
    message: str
    rounds: int
    raw: RatioEstimate | None
    normalised: RatioEstimate | None
    basis: str
    median_a_s: float | None
    median_b_s: float | None
    threshold: float
    alpha: float

    @property
    def decision(self) -> RatioEstimate | None:
        return self.normalised if self.basis != "raw" else self.raw

    @property
    def fails(self) -> bool:
        """A CI gate fails on a case that slowed beyond the threshold."""
        return self.outcome == "slower"

    def to_json(self) -> dict[str, Any]:
        decision = self.decision
        return {
            "id": self.case_id, "outcome": self.outcome, "fails": self.fails, "message": self.message,
            "rounds": self.rounds, "basis": self.basis,
            "ratio": decision.ratio if decision else None,
            "ratio_ci": list(decision.ci) if decision and decision.ci else None,
            "raw": self.raw.to_json() if self.raw else None,
            "normalised": self.normalised.to_json() if self.normalised else None,
            "median_a_s": self.median_a_s, "median_b_s": self.median_b_s,
            "threshold": self.threshold, "alpha": self.alpha,
        }


def paired_rounds(rounds: Sequence[tuple[CaseSamples | None, CaseSamples | None]]
                  ) -> list[tuple[CaseSamples, CaseSamples]]:
    """The rounds in which both sides kept samples of the case (a round missing either is dropped)."""
    return [(a, b) for a, b in rounds if a is not None and b is not None and a.samples_s and b.samples_s]


def estimate(ratios: Sequence[float], level: float) -> RatioEstimate:
    """Median of ``ratios`` and the distribution-free ``level`` CI of that median (None below
    :func:`~pytest_charz.measure.stats.ci_min_samples` ratios)."""
    return RatioEstimate(stats.median(ratios), stats.known_median_ci(ratios, level), tuple(ratios))


def outcome_at(ci: tuple[float, float] | None, threshold: float) -> str:
    """The threshold rule on a ratio's CI (see the module docstring)."""
    if ci is None:
        return "inconclusive"
    lo, hi = ci
    if lo > 1.0 + threshold:
        return "slower"
    if hi < 1.0 - threshold:
        return "faster"
    if 1.0 - threshold < lo and hi < 1.0 + threshold:
        return "same"
    return "inconclusive"


def _headline(outcome: str, ratio: float, threshold: float, rounds: int, needed: int, level: float) -> str:
    change = f"B is {abs(ratio - 1.0):.1%} {'slower' if ratio > 1.0 else 'faster'} than A"
    if outcome == "slower" or outcome == "faster":
        return f"{outcome}: {change}, beyond the {threshold:.1%} threshold"
    if outcome == "same":
        return f"same: B/A {ratio:.3f}, within the {threshold:.1%} threshold"
    if rounds < needed:
        return f"inconclusive: {rounds} paired round(s); a {level:.0%} CI over rounds needs at least {needed}"
    return f"inconclusive: {change}; the interval straddles the {threshold:.1%} threshold"


def _describe(name: str, value: RatioEstimate, level: float) -> str:
    ci = f"{level:.0%} CI {value.ci[0]:.3f}-{value.ci[1]:.3f}" if value.ci else "CI unknown"
    spread = f"rounds {min(value.ratios):.3f}-{max(value.ratios):.3f}"
    return f"{name} B/A {value.ratio:.3f} ({ci}; {spread})"


def _disturbances(pairs: Sequence[tuple[CaseSamples, CaseSamples]]) -> str:
    """How many of the processes flagged each condition, e.g. "other-load in 5, steal in 1"."""
    counts: dict[str, int] = {}
    for flag in (f for a, b in pairs for side in (a, b) for f in set(side.flags)):
        counts[flag] = counts.get(flag, 0) + 1
    return ", ".join(f"{flag} in {n}" for flag, n in sorted(counts.items()))


def judge_case(case_id: str, rounds: Sequence[tuple[CaseSamples | None, CaseSamples | None]],
               threshold: float = 0.05, alpha: float = DEFAULT_ALPHA) -> CaseComparison:
    """Judge one case from its per-round ``(A, B)`` samples (None: not measured that round)."""
    threshold = check_threshold(threshold)
    alpha = check_alpha(alpha)
    level = 1.0 - alpha
    needed = stats.ci_min_samples(level)
    pairs = paired_rounds(rounds)
    if not pairs:
        return CaseComparison(case_id, "inconclusive", "inconclusive: no round measured the case on both sides",
                              0, None, None, "raw", None, None, threshold, alpha)
    medians = [(stats.median(a.samples_s), stats.median(b.samples_s)) for a, b in pairs]
    raw = estimate([mb / ma for ma, mb in medians], level)
    candidates: list[tuple[str, RatioEstimate]] = []
    if all(a.pace_s and b.pace_s for a, b in pairs):
        # each side in units of the reference kernel timed between its own batches, in its process
        candidates.append(("kernel-normalised", estimate(
            [(mb / float(b.pace_s or 1.0)) / (ma / float(a.pace_s or 1.0))
             for (ma, mb), (a, b) in zip(medians, pairs)], level)))
    if all(a.clock_mhz and b.clock_mhz for a, b in pairs):
        # time x clock is cycles: a round whose B process ran on a faster clock is brought back.
        candidates.append(("clock-normalised", estimate(
            [(mb * float(b.clock_mhz or 0.0)) / (ma * float(a.clock_mhz or 0.0))
             for (ma, mb), (a, b) in zip(medians, pairs)], level)))
    name, normalised = min(candidates, key=lambda item: item[1].width()) if candidates else ("", None)
    basis = name if normalised is not None and normalised.width() < raw.width() else "raw"
    decision = normalised if basis != "raw" and normalised is not None else raw
    outcome = outcome_at(decision.ci, threshold)
    pooled_a = stats.median([v for a, _ in pairs for v in a.samples_s])
    pooled_b = stats.median([v for _, b in pairs for v in b.samples_s])
    lines = [_headline(outcome, decision.ratio, threshold, len(pairs), needed, level),
             _describe("raw", raw, level) + (" (decides)" if basis == "raw" else ""),
             f"pooled medians A {pooled_a:.4g} s, B {pooled_b:.4g} s over {len(pairs)} paired round(s)"]
    disturbed = _disturbances(pairs)
    if disturbed:
        lines.append(f"conditions: {disturbed} (of {2 * len(pairs)} processes)")
    if normalised is not None:
        lines.insert(2, _describe(name, normalised, level)
                     + (" (decides: narrower than raw)" if basis == name else ""))
    return CaseComparison(case_id, outcome, "\n".join(lines), len(pairs), raw, normalised, basis,
                          pooled_a, pooled_b, threshold, alpha)


def judge_cases(rounds: Sequence[tuple[Mapping[str, CaseSamples], Mapping[str, CaseSamples]]],
                threshold: float = 0.05, alpha: float = DEFAULT_ALPHA) -> list[CaseComparison]:
    """Every case seen on either side in any round, judged (sorted by case id)."""
    case_ids = sorted({case for a, b in rounds for case in (*a, *b)})
    return [judge_case(case, [(a.get(case), b.get(case)) for a, b in rounds], threshold, alpha)
            for case in case_ids]


def all_decided(comparisons: Sequence[CaseComparison]) -> bool:
    """Whether every case has an answer that more rounds would not change in kind."""
    return bool(comparisons) and all(c.outcome in DECIDED for c in comparisons)


__all__ = ["AB_OUTCOMES", "DECIDED", "DEFAULT_ALPHA", "CaseComparison", "CaseSamples", "RatioEstimate", "all_decided", "estimate",
           "judge_case", "judge_cases", "outcome_at", "paired_rounds"]
