"""The terminal summary: one row per measured case of a run."""
from __future__ import annotations

from typing import TYPE_CHECKING

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
    if median and ci:
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


def summary_lines(run: "Run", verbose: bool = False) -> list[str]:
    """The summary table of ``run``'s cases, the count of each verdict and of flagged cases."""
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
    return out
