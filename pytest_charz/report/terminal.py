"""The terminal summary: one row per measured case of a run, the time each suite file took,
and why the cases that got no reference got none (each reason said once, with its cases)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from .units import format_bandwidth, format_flops, format_time

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


def summary_lines(run: "Run", verbose: bool = False) -> list[str]:
    """The summary table of ``run``'s cases, the count of each verdict and of flagged cases, the
    time per suite file, and why cases got no reference."""
    cases = run.cases
    headers = ["case", "median", "CI95", "samples", "achieved", "% peak", "flags"]
    rows = [case_row(c) for c in cases]
    if any(len(r) > len(headers) for r in rows):
        headers.append("verdict")
        rows = [r + [""] * (len(headers) - len(r)) for r in rows]
    try:
        from tabulate import tabulate

        table = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    except ImportError:
        widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
        lines = ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)) for r in [headers, *rows]]
        table = "\n".join(lines)
    out = [f"target: {run.target.id} ({run.target.name})   cases: {len(cases)}"]
    out.extend(table.splitlines())
    outcomes: dict[str, int] = {}
    for case in cases:
        outcome = case.verdict.outcome if case.verdict is not None else ""
        if outcome:
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    if outcomes:
        order = ("pass", "new", "inconclusive", "explained", "drift", "model-error")
        out.append("verdicts: " + ", ".join(f"{outcomes[o]} {o}" for o in order if o in outcomes))
    noisy = sum(1 for c in cases if "noisy" in c.flags)
    suspicious = sum(1 for c in cases if set(c.flags) - {"noisy"})
    if noisy or suspicious:
        out.append(f"{noisy} case(s) missed the noise target; {suspicious} case(s) flagged for conditions "
                   "(steal, other-load, throttled, cpu-clock-changed, discarded)")
    unknown = sum(1 for c in cases if c.measurement.median_s is not None and not c.measurement.ci_known)
    if unknown:
        out.append(f"{unknown} case(s) with too few samples for a CI of the median: CI unknown")
    out.extend(reference_gap_lines(cases))
    out.extend(suite_time_lines(cases))
    return out
