"""A history document (:mod:`pytest_charz.report.history`) as text for a terminal and as one
self-contained HTML page: the cases with steps first, each a plot of its medians with their
intervals and the steps marked with the commits between, then every case in a folded table."""
from __future__ import annotations

import html
import math
from typing import Any, Mapping, Sequence

from .history import sparkline
from .runs_compare_report import fit_table, short_time, wrapped
from .units import format_time

PLOTTED_CASES = 12


def _short_case(case_id: str) -> str:
    head, sep, tail = case_id.partition("::")
    return head.rsplit("/", 1)[-1] + sep + tail


def step_text(step: Mapping[str, Any], source: str) -> str:
    """One step in words: ``+30.0% at 3 (1 ms -> 1.3 ms), commits 1a2b..3c4d``."""
    where = f"at {step['index'] + 1}" if source == "runs" else f"at {short_time(step['to'].get('created'))}"
    commits = step["commits"]
    text = (f"{step['ratio'] - 1:+.1%} {where} ({format_time(step['before_s'])} -> {format_time(step['after_s'])}), "
            + (f"commits {commits}" if ".." in commits else commits))
    return text + (f": {step['reason']}" if step.get("reason") and source == "store" else "")


def _ordered(history: Mapping[str, Any], every: bool) -> list[Mapping[str, Any]]:
    def size(case: Mapping[str, Any]) -> float:
        return max((abs(math.log(s["ratio"])) for s in case["steps"]), default=0.0)
    cases = [c for c in history["cases"] if every or c["steps"]]
    return sorted(cases, key=lambda c: (-size(c), c["id"]))


def summary_line(history: Mapping[str, Any]) -> str:
    s = history["summary"]
    runs = history["runs"]
    if history["source"] == "runs" and runs:
        span = f"{len(runs)} runs from {short_time(runs[0]['created'])} to {short_time(runs[-1]['created'])}"
    else:
        span = "the changes of a baseline store"
    return (f"history of {span}: {s['cases']} cases, {s['with_steps']} with a step ({s['slower']} slower, "
            f"{s['faster']} faster); a step is beyond +-{history['threshold']:.1%} and beyond the runs' noise")


def run_lines(history: Mapping[str, Any]) -> list[str]:
    return [f"{i + 1:>3}  {r['label']}: {short_time(r['created'])}, {(r.get('commit') or 'no commit')[:10]}"
            f"{'+dirty' if r.get('dirty') else ''}, {r['cases']} cases" for i, r in enumerate(history["runs"])]


def render_text(history: Mapping[str, Any], every: bool = False, width: int = 0) -> str:
    """The history for a terminal: the runs, then the cases with a step (all with ``every``),
    largest step first: trend (one block per run), latest median, the steps."""
    out = wrapped([summary_line(history), *run_lines(history), *(f"note: {n}" for n in history["notes"])], width)
    cases = _ordered(history, every)
    if not cases:
        out.append("no case has a step" + ("" if every else " (--all lists every case)"))
        return "\n".join(out) + "\n"
    rows, steps = [], []
    for case in cases:
        medians = [p.get("median_s") for p in case["points"]]
        latest = next((m for m in reversed(medians) if m), None)
        rows.append([_short_case(case["id"]), sparkline(medians), format_time(latest, 4),
                     str(len(case["steps"]))])
        steps.append([step_text(s, history["source"]) for s in case["steps"]])
    lines = fit_table(["case", "trend", "latest", "steps"], rows, width, shrink=0, least=24).splitlines()
    out += ["", *lines[:2]]
    for line, said in zip(lines[2:], steps):
        # each step on lines of its own under its case, wrapped to the width
        out += [line, *wrapped([f"    {text}" for text in said], width)]
    return "\n".join(out) + "\n"


def plot_trend(case: Mapping[str, Any], source: str) -> Any:
    """One case's medians against the runs (or store changes), with their 95% intervals, and a
    dashed line at each step labelled with its change and the commits between."""
    from .plots import new_figure
    from .units import humanize_axis

    points = case["points"]
    placed = [(i, p) for i, p in enumerate(points) if p.get("median_s")]
    if not placed:
        return None
    figure = new_figure()
    figure.set_size_inches(7.0, 3.2)
    axes = figure.add_subplot()
    xs = [i for i, _ in placed]
    ys = [p["median_s"] for _, p in placed]
    low = [max(0.0, p["median_s"] - p["ci_s"][0]) if p.get("ci_s") else 0.0 for _, p in placed]
    high = [max(0.0, p["ci_s"][1] - p["median_s"]) if p.get("ci_s") else 0.0 for _, p in placed]
    axes.errorbar(xs, ys, yerr=[low, high], fmt="o-", markersize=4, capsize=3, label="median, 95% interval")
    # the levels the steps separate, as asv draws them
    steps = case["steps"]
    bounds = [0, *(s["index"] for s in steps), len(points)]
    levels = [steps[0]["before_s"], *(s["after_s"] for s in steps)] if steps else []
    for level, start, stop in zip(levels, bounds, bounds[1:]):
        axes.hlines(level, start - 0.3, stop - 0.7, colors="tab:grey", linewidth=2.0, alpha=0.6)
    for step in steps:
        axes.axvline(step["index"] - 0.5, color="tab:red", linestyle="--", linewidth=1.0)
        axes.annotate(f"{step['ratio'] - 1:+.1%}\n{step['commits']}", (step["index"] - 0.5, 0.97),
                      xycoords=("data", "axes fraction"), fontsize="x-small", ha="right", va="top", color="tab:red")
    names = [str(p.get("commit") or "")[:7] or str(p.get("label") or "")[:10] for p in points]
    axes.set_xticks(range(len(points)), [f"{i + 1}\n{n}" for i, n in enumerate(names)], fontsize="x-small")
    axes.set_xlim(-0.5, len(points) - 0.5)
    axes.set(ylabel="time per call", xlabel="run, commit" if source == "runs" else "change, commit",
             title=_short_case(case["id"])[:80])
    humanize_axis(axes, "y", "s")
    axes.legend(fontsize="small", loc="best")
    return figure


def render_html(history: Mapping[str, Any]) -> str:
    """The history as one HTML page (needs matplotlib: extra ``report``): the summary, the plots
    of the cases with the largest steps, the runs, then every case in a folded table."""
    from ..errors import require_extra
    from .html import CSS, folded_table
    from .plots import svg_text

    require_extra("matplotlib", "report")
    title = "History: " + (" .. ".join(r["label"] for r in history["runs"][:1] + history["runs"][-1:])
                           if history["runs"] else "baseline store")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(summary_line(history))}</p>"]
    stepped = _ordered(history, False)
    for case in stepped[:PLOTTED_CASES]:
        figure = plot_trend(case, history["source"])
        if figure is not None:
            parts.append(f'<div class="plot">{svg_text(figure)}</div>')
    if len(stepped) > PLOTTED_CASES:
        parts.append(f"<p>{len(stepped) - PLOTTED_CASES} more case(s) with a step: in the table below.</p>")
    if history["runs"]:
        parts.append("<h2>Runs</h2><ol>" + "".join(
            f"<li>{html.escape(line.split(None, 1)[1])}</li>" for line in run_lines(history)) + "</ol>")
    if history["notes"]:
        parts.append("<ul>" + "".join(f'<li class="caveat">{html.escape(n)}</li>' for n in history["notes"]) + "</ul>")
    rows: list[Sequence[str]] = []
    for case in _ordered(history, True):
        medians = [p.get("median_s") for p in case["points"]]
        rows.append([case["id"], " ".join(format_time(m) for m in medians),
                     "; ".join(step_text(s, history["source"]) for s in case["steps"]) or "-"])
    parts.append("<h2>Cases</h2><p>The largest step first.</p>"
                 + folded_table(["case", "medians", "steps"], rows, shown=20, what="cases") + "</body></html>")
    return "\n".join(parts) + "\n"


__all__ = ["plot_trend", "render_html", "render_text", "step_text", "summary_line"]
