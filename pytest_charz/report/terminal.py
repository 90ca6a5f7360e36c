"""The terminal summary of a session, problems first: drift and model-error with their figures,
the cases flagged for their conditions by cause, the verdict counts, what the store did, how
many cases the gate can judge at its threshold (:mod:`pytest_charz.gate_power`), why cases got
no reference (each reason said once, with its cases), the time each suite file took and the
slowest cases; the one-row-per-case table on request."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..gate_power import power_lines
from .units import format_bandwidth, format_flops, format_time

PROBLEM_OUTCOMES = ("drift", "model-error")

if TYPE_CHECKING:
    from ..records import CaseRecord, Run


def headline_rate(case: "CaseRecord") -> tuple[str, str]:
    """The case's main achieved rate as text, and its fraction of the target's peak as text."""
    achieved = case.achieved
    fractions = case.peak_fraction
    flops = achieved.get("flop_per_s") or {}
    if flops:
        dtype, rate = max(flops.items(), key=lambda kv: kv[1])
        frac = fractions.get(f"flops:{dtype}")
        return f"{format_flops(rate)} {dtype}", (f"{100 * frac:.1f}%" if frac is not None else "-")
    moved = achieved.get("bytes_per_s") or {}
    if moved:
        level, rate = max(moved.items(), key=lambda kv: kv[1])
        frac = fractions.get(f"bandwidth:{level}")
        return f"{format_bandwidth(rate)} {level}", (f"{100 * frac:.1f}%" if frac is not None else "-")
    transfers = achieved.get("transfer_bytes_per_s") or {}
    if transfers:
        kind, rate = max(transfers.items(), key=lambda kv: kv[1])
        return f"{format_bandwidth(rate)} {kind}", "-"
    latency = (achieved.get("latency_s") or {}).get("access")
    if latency is not None:
        return f"{format_time(latency)}/access", "-"
    launch = (achieved.get("per_launch_s") or {}).get("launch")
    if launch is not None:
        return f"{format_time(launch)}/launch", "-"
    return "-", "-"


def case_row(case: "CaseRecord") -> list[str]:
    m = case.measurement
    median = m.median_s
    ci = m.ci_s
    ci_text = "-"
    if median and not m.ci_known:
        ci_text = "unknown"      # too few samples for a CI of the median: never a zero width
    elif median and ci:
        ci_text = f"±{100 * (ci[1] - ci[0]) / 2 / median:.1f}%"
    rate, peak = headline_rate(case)
    kept = len(m.samples_s)
    samples = f"{kept}" + (f" (-{m.discarded_total})" if m.discarded_total else "")
    verdict = case.verdict.outcome if case.verdict is not None else ""
    row = [case.id.split("::", 1)[-1], format_time(median), ci_text, samples, rate, peak,
           ",".join(case.flags) or "-"]
    if verdict:
        row.append(verdict)
    return row


@dataclass(frozen=True)
class SuiteTime:
    """Time one suite file took, from the run file: ``measuring_s`` the sampler's time of its
    cases (warm-up included), ``wall_s`` the wall time from the end of the case recorded before
    to the end of each of its cases (setup, checks and measuring; the run's first case counts
    its measurement only: what came before it is not in the run file). Seconds."""

    suite: str
    cases: int
    measuring_s: float
    wall_s: float


def suite_times(cases: "Sequence[CaseRecord]") -> list[SuiteTime]:
    """Time per suite file of ``cases``, in the order they were recorded (see :class:`SuiteTime`).

    A case whose snapshots run backwards from the case before (the merged run of several
    pytest-xdist workers) counts its own measurement interval only."""
    measuring: dict[str, float] = {}
    wall: dict[str, float] = {}
    count: dict[str, int] = {}
    previous_end: float | None = None
    for case in cases:
        before, after = case.conditions.before.wall_time, case.conditions.after.wall_time
        own = max(0.0, after - before)
        gap = after - previous_end if previous_end is not None else own
        previous_end = after
        count[case.suite] = count.get(case.suite, 0) + 1
        measuring[case.suite] = measuring.get(case.suite, 0.0) + case.measurement.elapsed_s
        wall[case.suite] = wall.get(case.suite, 0.0) + (gap if gap >= own else own)
    return [SuiteTime(suite, count[suite], measuring[suite], wall[suite]) for suite in count]


def suite_time_lines(cases: "Sequence[CaseRecord]") -> list[str]:
    """``time per suite file``: cases, measuring and wall seconds per suite, and the total."""
    times = suite_times(cases)
    if not times:
        return []
    width = max(len(t.suite) for t in times)
    lines = ["time per suite file (wall: from the case before to the end of each case; measuring: the sampler's):"]
    for t in times:
        lines.append(f"  {t.suite.ljust(width)}  {t.cases:4d} cases  wall {t.wall_s:7.1f} s  measuring {t.measuring_s:7.1f} s")
    lines.append(f"  {'all'.ljust(width)}  {sum(t.cases for t in times):4d} cases  wall {sum(t.wall_s for t in times):7.1f} s"
                 f"  measuring {sum(t.measuring_s for t in times):7.1f} s")
    return lines


def _gap_reason(case: "CaseRecord") -> str | None:
    """Why a judged case got no reference (or its unsettled reference no session), in words
    shared by every case with the same reason; None when it got one or saving was switched off."""
    verdict = case.verdict
    if verdict is None:
        return None
    baseline = verdict.baseline
    if baseline.startswith("kept (not added as a reference session: "):
        return "not added as a reference session: " + baseline.split(": ", 1)[1].rstrip(")")
    if not baseline.startswith("not saved: ") or baseline == "not saved: saving new references is off":
        return None
    if not baseline.startswith("not saved: the measurement is "):
        return baseline.split(": ", 1)[1]
    headline, *lines = verdict.message.splitlines()
    reason = headline.split(" (", 1)[0]
    why = next((line for line in lines if line.startswith("why: ")), "")
    if "is looser than" in why:
        reason += ": its noise target is looser than half the threshold"
    elif "out of reach" in why:
        reason += ": its noise target is out of reach in its budget"
    return reason


def reference_gap_lines(cases: "Sequence[CaseRecord]", shown: int = 3) -> list[str]:
    """Each reason cases got no reference for, once, with how many and the first ``shown``."""
    groups: dict[str, list[str]] = {}
    for case in cases:
        reason = _gap_reason(case)
        if reason is not None:
            groups.setdefault(reason, []).append(case.id.split("::", 1)[-1])
    if not groups:
        return []
    lines = [f"no reference for {sum(len(ids) for ids in groups.values())} case(s):"]
    for reason, ids in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        more = f", and {len(ids) - shown} more" if len(ids) > shown else ""
        lines.append(f"  {len(ids)} {reason}: {', '.join(ids[:shown])}{more}")
    return lines


def _short(case: "CaseRecord") -> str:
    return case.id.split("::", 1)[-1]


def _pct_signed(value: float) -> str:
    return f"{100 * value:+.1f}%"


def _problem_detail(case: "CaseRecord") -> str:
    """The figure behind a drift or model-error verdict, in one phrase."""
    verdict = case.verdict
    assert verdict is not None
    if verdict.outcome == "model-error" and verdict.model_error is not None:
        return f"measured {_pct_signed(verdict.model_error)} against the model"
    if verdict.ratio is not None:
        text = f"{_pct_signed(verdict.ratio - 1.0)} against its reference"
        if verdict.ratio_ci is not None:
            low, high = verdict.ratio_ci
            text += f" (CI {_pct_signed(low - 1.0)} to {_pct_signed(high - 1.0)})"
        return text
    return verdict.message.splitlines()[0] if verdict.message else verdict.outcome


def problem_lines(cases: "Sequence[CaseRecord]", shown: int = 5) -> list[str]:
    """Drift and model-error first, each case with its figure; ``problems: none`` without them."""
    lines: list[str] = []
    for outcome in PROBLEM_OUTCOMES:
        hits = [c for c in cases if c.verdict is not None and c.verdict.outcome == outcome]
        if not hits:
            continue
        hits.sort(key=lambda c: -abs((c.verdict.ratio or 1.0) - 1.0 if outcome == "drift"
                                     else (c.verdict.model_error or 0.0)))
        lines.append(f"{outcome}: {len(hits)} case(s)")
        width = max(len(_short(c)) for c in hits[:shown])
        for case in hits[:shown]:
            lines.append(f"  {_short(case).ljust(width)}  {_problem_detail(case)}")
        if len(hits) > shown:
            lines.append(f"  and {len(hits) - shown} more (the full table: -v or --charz-table)")
    return lines or ["problems: none (no drift, no model-error)"]


def _rel_halfwidth(case: "CaseRecord") -> float:
    rel = case.measurement.rel_ci_halfwidth
    return rel if rel is not None and math.isfinite(rel) else math.inf


def flag_lines(cases: "Sequence[CaseRecord]", shown: int = 3) -> list[str]:
    """Cases flagged for their conditions, by cause with counts and the cases with the widest
    intervals of each; then the cases that missed their noise target."""
    by_flag: dict[str, list["CaseRecord"]] = {}
    for case in cases:
        for flag in case.flags:
            if flag != "noisy":
                by_flag.setdefault(flag, []).append(case)
    lines: list[str] = []
    flagged = sum(1 for c in cases if set(c.flags) - {"noisy"})
    if flagged:
        causes = ", ".join(f"{flag} {len(hit)}" for flag, hit in sorted(by_flag.items(), key=lambda kv: -len(kv[1])))
        lines.append(f"flagged for conditions: {flagged} case(s): {causes}"
                     + (" (a case may have several)" if sum(map(len, by_flag.values())) > flagged else ""))
        for flag, hit in sorted(by_flag.items(), key=lambda kv: -len(kv[1])):
            worst = sorted(hit, key=_rel_halfwidth, reverse=True)[:shown]
            lines.append(f"  {flag}: " + ", ".join(_short(c) for c in worst)
                         + (f", and {len(hit) - len(worst)} more" if len(hit) > len(worst) else ""))
    noisy = [c for c in cases if "noisy" in c.flags]
    if noisy:
        worst = sorted(noisy, key=_rel_halfwidth, reverse=True)[:shown]
        shown_text = ", ".join(f"{_short(c)} ({_halfwidth_text(c)})" for c in worst)
        lines.append(f"{len(noisy)} case(s) missed the noise target; widest: {shown_text}"
                     + (f", and {len(noisy) - len(worst)} more" if len(noisy) > len(worst) else ""))
    unknown = sum(1 for c in cases if c.measurement.median_s is not None and not c.measurement.ci_known)
    if unknown:
        lines.append(f"{unknown} case(s) with too few samples for a CI of the median: CI unknown")
    return lines


def _halfwidth_text(case: "CaseRecord") -> str:
    rel = _rel_halfwidth(case)
    return f"±{100 * rel:.1f}%" if math.isfinite(rel) else "CI unknown"


def reference_lines(cases: "Sequence[CaseRecord]") -> list[str]:
    """How many cases were judged against a reference, and what this run did to the store:
    references saved for new cases, sessions added to references still settling, accepted."""
    judged = [c for c in cases if c.verdict is not None]
    if not judged:
        return []
    counts = {"saved": 0, "session": 0, "accepted": 0, "kept": 0}
    settled_now = 0
    for case in judged:
        baseline = case.verdict.baseline
        if baseline.startswith("saved"):
            counts["saved"] += 1
        elif baseline.startswith("added as reference session"):
            counts["session"] += 1
            parts = baseline.split()
            if len(parts) >= 7 and parts[4] == parts[6]:
                settled_now += 1
        elif baseline.startswith("accepted"):
            counts["accepted"] += 1
        elif baseline.startswith("kept"):
            counts["kept"] += 1
    with_reference = sum(1 for c in judged if c.verdict.ratio is not None)
    parts = [f"{with_reference} of {len(judged)} case(s) judged against a reference"]
    if counts["saved"]:
        parts.append(f"{counts['saved']} new reference(s) saved")
    if counts["session"]:
        parts.append(f"{counts['session']} session(s) added to settling references"
                     + (f" ({settled_now} settled now)" if settled_now else ""))
    if counts["accepted"]:
        parts.append(f"{counts['accepted']} accepted")
    return ["references: " + "; ".join(parts)]


def slowest_lines(cases: "Sequence[CaseRecord]", shown: int = 5) -> list[str]:
    """The cases whose measuring took longest (the sampler's time, warm-up included)."""
    timed = sorted((c for c in cases if c.measurement.elapsed_s > 0), key=lambda c: -c.measurement.elapsed_s)[:shown]
    if len(timed) < 2:
        return []
    width = max(len(_short(c)) for c in timed)
    return ["slowest cases (measuring):"] + [f"  {_short(c).ljust(width)}  {c.measurement.elapsed_s:7.1f} s"
                                             for c in timed]


def _table(cases: "Sequence[CaseRecord]") -> list[str]:
    headers = ["case", "median", "CI95", "samples", "achieved", "% peak", "flags"]
    rows = [case_row(c) for c in cases]
    if any(len(r) > len(headers) for r in rows):
        headers.append("verdict")
        rows = [r + [""] * (len(headers) - len(r)) for r in rows]
    from tabulate import tabulate

    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True).splitlines()


def summary_lines(run: "Run", verbose: int = 0, table: bool = False) -> list[str]:
    """The session's summary, problems first: drift and model-error with their figures, cases
    flagged by cause with counts, the verdict counts, what the store did, why cases got no
    reference, the time per suite file and the slowest cases. The one-row-per-case table only
    with ``table`` or ``verbose`` > 0; with ``verbose`` < -1 (``-qq``) the problems alone."""
    cases = run.cases
    tests = len({c.nodeid for c in cases})
    count = f"{len(cases)} case(s)" + (f" measured in {tests} test(s) (a test may measure several named cases)"
                                       if tests != len(cases) else "")
    out = [f"target: {run.target.id} ({run.target.name})   {count}"]
    if table or verbose > 0:
        out.extend(_table(cases))
    out.extend(problem_lines(cases))
    if verbose < -1:
        return out
    out.extend(flag_lines(cases))
    outcomes: dict[str, int] = {}
    for case in cases:
        outcome = case.verdict.outcome if case.verdict is not None else ""
        if outcome:
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    if outcomes:
        order = ("pass", "new", "inconclusive", "explained", "drift", "model-error")
        out.append("verdicts: " + ", ".join(f"{outcomes[o]} {o}" for o in order if o in outcomes))
    out.extend(reference_lines(cases))
    out.extend(power_lines(cases))
    out.extend(reference_gap_lines(cases))
    out.extend(suite_time_lines(cases))
    out.extend(slowest_lines(cases))
    if not (table or verbose > 0):
        out.append("the table of every case: pytest -v or --charz-table")
    return out

