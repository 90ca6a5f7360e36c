"""The drift gate's power on this machine now, for the session summary: how many cases can be
judged at their threshold, the smallest change each can detect, and, said once, a threshold set
below what the machine allows.

Each verdict carries its case's ``resolution`` (the smallest change its comparison tells from
the spread of its reference sessions and its own CI) and ``detectable_change`` (the smallest
called drift at its threshold), :mod:`pytest_charz.verdict`. A case can be judged at its
threshold when its resolution is within it; one that cannot turns every change near the
threshold into ``inconclusive``, so the summary says so once rather than leaving a stream of
inconclusive cases unexplained.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:
    from .records import CaseRecord


@dataclass(frozen=True)
class CasePower:
    """One judged case's power: its id, threshold, resolution and detectable change (fractions;
    None while its reference gathers sessions)."""

    case_id: str
    threshold: float
    resolution: float | None
    detectable_change: float | None

    @property
    def judgeable(self) -> bool:
        return self.resolution is not None and self.resolution <= self.threshold


def case_powers(cases: Iterable["CaseRecord"]) -> list[CasePower]:
    """The power of each case that was compared with a reference (cases without a verdict or
    without a reference are left out: there is no change to detect)."""
    powers = []
    for case in cases:
        verdict = case.verdict
        if verdict is None or verdict.ratio is None:
            continue
        powers.append(CasePower(case.id, verdict.threshold, verdict.resolution, verdict.detectable_change))
    return powers


def _range(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.1%}" if abs(high - low) < 5e-4 else f"{low:.1%}-{high:.1%}"


def power_lines(cases: Iterable["CaseRecord"]) -> list[str]:
    """The summary's lines about the gate's power, one group per threshold in use::

        gate power: 3 of 4 cases can be judged at the 5.0% threshold (smallest detectable
        change 6.1-9.0%, median 7.2%); 2 more gather reference sessions
        the 5.0% threshold is below what this machine allows now for 1 case (it tells changes
        over 26.0% from noise): a change at the threshold is inconclusive there, never drift;
        judge it at --charz-threshold=0.27 or compare two revisions in one session (charz ab)

    Empty when no case was compared with a reference.
    """
    powers = case_powers(cases)
    lines: list[str] = []
    for threshold in sorted({p.threshold for p in powers}):
        group = [p for p in powers if p.threshold == threshold]
        known = [p for p in group if p.resolution is not None]
        gathering = len(group) - len(known)
        judgeable = [p for p in known if p.judgeable]
        line = f"gate power: {len(judgeable)} of {len(known)} cases can be judged at the {threshold:.1%} threshold"
        detectable = [p.detectable_change for p in known if p.detectable_change is not None]
        if detectable:
            line += (f" (smallest detectable change {_range(detectable)}, median"
                     f" {float(np.median(detectable)):.1%})")
        if gathering:
            line += f"; {gathering} more gather{'s' if gathering == 1 else ''} reference sessions"
        lines.append(line)
        below = [p for p in known if not p.judgeable]
        if below:
            resolutions = [p.resolution for p in below if p.resolution is not None]
            one = len(below) == 1
            needed = max(resolutions)
            lines.append(
                f"the {threshold:.1%} threshold is below what this machine allows now for {len(below)}"
                f" case{'' if one else 's'} ({'it tells' if one else 'they tell'} changes over {_range(resolutions)}"
                f" from noise): a change at the threshold is inconclusive there, never drift; judge"
                f" {'it' if one else 'them'} at --charz-threshold={_ceil_fraction(needed)} or compare two"
                " revisions in one session (charz ab)")
    return lines


def _ceil_fraction(value: float) -> str:
    """``value`` rounded up to two decimals, as a threshold option's value (at most 0.99)."""
    return f"{min(0.99, np.ceil(value * 100.0 - 1e-9) / 100.0):.2f}"


__all__ = ["CasePower", "case_powers", "power_lines"]
