"""A run comparison (:mod:`pytest_charz.report.runs_compare`) as text that fits a terminal,
Markdown, and one self-contained HTML page whose first figure is the ratio chart with intervals;
and a case's sample histogram, as text bars and as a plot.

Runs are named A, B, C... in tables (a legend gives each file, time and commit), so a table of
three runs still fits 100 columns.
"""
from __future__ import annotations

import html
import math
import string
from typing import Any, Mapping, Sequence

from .markdown import render_table
from .runs_compare import grouped, histogram, sort_cases
from .units import format_ratio, format_time

COLUMNS = ("case", "suite", "op", "median", "ci", "ratio", "p", "change", "verdict", "samples")
DEFAULT_COLUMNS = ("case", "median", "ratio", "change", "verdict")
CHART_CASES = 30        # the ratio chart shows the cases that changed most; the table has them all
SHOWN_ROWS = 20         # a longer case table shows its first rows, the whole table folded after them
BLOCKS = " ▏▎▍▌▋▊▉█"


def letters(comparison: Mapping[str, Any]) -> list[str]:
    count = len(comparison["runs"])
    return [string.ascii_uppercase[i] if i < 26 else f"R{i + 1}" for i in range(count)]


def check_columns(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """The ``--columns`` list (comma-separated names of :data:`COLUMNS`); UsageError naming a bad one."""
    from ..errors import UsageError

    if text is None:
        return DEFAULT_COLUMNS
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    bad = [n for n in names if n not in COLUMNS]
    if bad or not names:
        raise UsageError(f"--columns takes a comma-separated list of {', '.join(COLUMNS)}; got {text!r}")
    return tuple(names)


def short_id(case: Mapping[str, Any], group_by: str) -> str:
    """The case's id as a table shows it: without the suite when the table is grouped by suite,
    else without the suites' directory."""
    case_id = str(case["id"])
    suite = str(case.get("suite") or "")
    if group_by == "suite" and suite and case_id.startswith(suite + "::"):
        return case_id[len(suite) + 2:]
    head, sep, tail = case_id.partition("::")
    return head.rsplit("/", 1)[-1] + sep + tail


def ratio_text(ratio: Mapping[str, Any] | None) -> str:
    if not ratio or ratio["ratio"] is None:
        return "-"
    if ratio["interval"]:
        low, high = ratio["interval"]
        return f"{ratio['ratio']:.4g}x [{low:.4g}, {high:.4g}]"
    return f"{ratio['ratio']:.4g}x (no interval)"


def table(comparison: Mapping[str, Any], cases: Sequence[Mapping[str, Any]], columns: Sequence[str],
          group_by: str = "none") -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the case table for ``columns``; per-run columns expand to one per run."""
    names = letters(comparison)
    headers: list[str] = []
    for column in columns:
        if column == "median":
            headers += [f"{n} median" for n in names]
        elif column == "ci":
            headers += [f"{n} 95% CI" for n in names]
        elif column == "ratio":
            headers += [f"{n}/{names[0]} [95% CI]" for n in names[1:]]
        elif column in ("p", "change"):
            headers += [f"{n} {column}" for n in names[1:]] if len(names) > 2 else [column]
        elif column == "verdict":
            headers.append("verdict " + "/".join(names))
        elif column == "samples":
            headers.append("n " + "/".join(names))
        else:
            headers.append(column)
    rows = []
    for case in cases:
        row: list[str] = []
        sides = case["runs"]
        for column in columns:
            if column == "case":
                row.append(short_id(case, group_by))
            elif column in ("suite", "op"):
                row.append(str(case.get(column) or "-"))
            elif column == "median":
                row += [format_time(s["median_s"], 4) if s else "-" for s in sides]
            elif column == "ci":
                row += [f"{format_time(s['ci_s'][0])}-{format_time(s['ci_s'][1])}" if s and s["ci_s"] else "-"
                        for s in sides]
            elif column == "ratio":
                row += [ratio_text(r) for r in case["ratios"]]
            elif column == "p":
                row += [f"{r['p_value']:.2g}" if r and r["p_value"] is not None else "-" for r in case["ratios"]]
            elif column == "change":
                row += [r["change"] if r else "absent" for r in case["ratios"]]
            elif column == "verdict":
                row.append("/".join((s["verdict"] or "-") if s else "absent" for s in sides))
            elif column == "samples":
                row.append("/".join(str(s["samples"]) if s else "-" for s in sides))
        rows.append(row)
    return headers, rows


def _clip(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    keep = max(1, width - 1)
    head = keep // 2
    return text[:head] + "…" + text[len(text) - (keep - head):]


def fit_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, shrink: int = 0,
              least: int = 16) -> str:
    """Aligned plain text, two spaces between columns; when wider than ``width`` (0: no limit),
    column ``shrink`` is cut in its middle (``…``) down to ``least`` characters, then, if still
    too wide, the last column (down to 8)."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    total = sum(widths) + 2 * (len(widths) - 1)
    if width and total > width and widths:
        widths[shrink] = max(min(least, widths[shrink]), widths[shrink] - (total - width))
        total = sum(widths) + 2 * (len(widths) - 1)
        if total > width:
            widths[-1] = max(min(8, widths[-1]), widths[-1] - (total - width))
    lines = []
    for row in [list(headers), ["-" * w for w in widths], *rows]:
        cells = [_clip(str(c), w).ljust(w) if i < len(row) - 1 else _clip(str(c), w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def short_time(created: str | None) -> str:
    """An ISO time stamp to the minute, as tables show it (``2026-12-01 07:54``; ``undated``)."""
    if not created:
        return "undated"
    return created[:16].replace("T", " ") + (" UTC" if created.endswith(("+00:00", "Z")) else "")


def wrapped(lines: Sequence[str], width: int) -> list[str]:
    """Prose ``lines`` wrapped at ``width`` (0: as they are), continuation lines indented."""
    import textwrap

    if not width:
        return list(lines)
    return [part for line in lines
            for part in textwrap.wrap(line, width, subsequent_indent="    ", break_on_hyphens=False) or [""]]


def legend_lines(comparison: Mapping[str, Any]) -> list[str]:
    out = []
    for name, run in zip(letters(comparison), comparison["runs"]):
        commit = (run.get("commit") or "")[:10] + ("+dirty" if run.get("dirty") else "") or "no commit"
        role = " (baseline)" if name == "A" else ""
        out.append(f"{name}  {run['label']}{role}: {short_time(run['created'])}, {commit}, {run['cases']} cases, "
                   f"target {run['target_key']}")
    return out


def summary_lines(comparison: Mapping[str, Any]) -> list[str]:
    names = letters(comparison)
    out = []
    for name, part in zip(names[1:], comparison["summary"]):
        counts = ", ".join(f"{part[c]} {c}" for c in ("slower", "faster", "same", "undecided", "unknown",
                                                      "incomparable") if part[c])
        geomean = f"; geometric mean ratio {format_ratio(part['geomean_ratio'])}" if part["geomean_ratio"] else ""
        only = "".join(f"; {n} only in {who}" for n, who in ((part["only_baseline"], names[0]),
                                                             (part["only_this"], name)) if n)
        out.append(f"{name} vs {names[0]}: {part['compared']} cases in both ({counts or 'none compared'}){geomean}"
                   f"{only}; threshold +-{comparison['threshold']:.1%}")
    return out


def render_text(comparison: Mapping[str, Any], *, columns: Sequence[str] = DEFAULT_COLUMNS, sort: str = "ratio",
                group_by: str = "none", width: int = 0) -> str:
    """The comparison for a terminal: legend, summary, caveats, then the table(s), ``width``
    columns at most (0: no limit)."""
    out = wrapped(legend_lines(comparison) + summary_lines(comparison)
                  + [f"caveat: {c}" for c in comparison["caveats"]], width)
    shrink = list(columns).index("case") if "case" in columns else 0
    for name, cases in grouped(sort_cases(comparison["cases"], sort), group_by):
        headers, rows = table(comparison, cases, columns, group_by)
        out += ["", f"{group_by}: {name} ({len(cases)} cases)"] if name else [""]
        out.append(fit_table(headers, rows, width, shrink))
    return "\n".join(out) + "\n"


def render_markdown(comparison: Mapping[str, Any], *, columns: Sequence[str] = DEFAULT_COLUMNS,
                    sort: str = "ratio", group_by: str = "none") -> str:
    """The comparison as a Markdown document."""
    out = ["# Run comparison: " + " vs ".join(r["label"] for r in comparison["runs"]), ""]
    out += [f"- {line}" for line in legend_lines(comparison)] + [""]
    out += summary_lines(comparison) + [""]
    if comparison["caveats"]:
        out += ["## Caveats", "", *(f"- {c}" for c in comparison["caveats"]), ""]
    for name, cases in grouped(sort_cases(comparison["cases"], sort), group_by):
        headers, rows = table(comparison, cases, columns, group_by)
        out += [f"## {name}" if name else "## Cases", "", render_table(headers, rows), ""]
    return "\n".join(out).rstrip() + "\n"


def histogram_text(comparison: Mapping[str, Any], case_id: str, samples_by_run: Sequence[Sequence[float]],
                   width: int = 0, bins: int = 16) -> str:
    """Each run's per-call samples of ``case_id`` as bars on one grid (text)."""
    names = letters(comparison)
    counted = histogram(samples_by_run, bins)
    edges = counted["edges_s"]
    head = [f"histogram of {case_id}: per-call time, {len(edges) - 1} bins"]
    if not edges:
        return head[0] + ": no samples\n"
    labels = [format_time(e, 3) for e in edges[:-1]]
    label_width = max(len(x) for x in labels)
    per_run = max(8, ((width or 100) - label_width - 2) // len(samples_by_run) - 7)
    top = max([max(c) for c in counted["counts"] if c] + [1])
    header = " " * label_width + "  " + "".join(
        f"{names[i]} (n={len(s)})".ljust(per_run + 7) for i, s in enumerate(samples_by_run))
    lines = head + [header.rstrip()]
    for b, label in enumerate(labels):
        cells = []
        for counts in counted["counts"]:
            eighths = round(counts[b] / top * per_run * 8)
            bar = "█" * (eighths // 8) + (BLOCKS[eighths % 8] if eighths % 8 else "")
            cells.append(bar.ljust(per_run) + f" {counts[b]:>5} ")
        lines.append(label.rjust(label_width) + "  " + "".join(cells).rstrip())
    outside = [f"{names[i]}: {lo} below {format_time(edges[0])}, {hi} above {format_time(edges[-1])}"
               for i, (lo, hi) in enumerate(zip(counted["below"], counted["above"])) if lo or hi]
    if outside:
        lines += wrapped(["outside the grid (1st-99th percentile of all samples): " + "; ".join(outside)], width)
    return "\n".join(lines) + "\n"


def _chart_cases(comparison: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    def change(case: Mapping[str, Any]) -> float:
        known = [abs(math.log(r["ratio"])) for r in case["ratios"] if r and r["interval"]]
        return max(known) if known else -1.0
    placed = [c for c in comparison["cases"] if change(c) >= 0]
    return sorted(placed, key=lambda c: (-change(c), c["id"]))[:CHART_CASES]


def plot_ratios(comparison: Mapping[str, Any]) -> Any:
    """The ratio chart: each case's ratio to the baseline with its 95% interval (log axis), the
    +-threshold band shaded; the cases that changed most, the largest at the top. None when no
    case has an interval."""
    from .plots import new_figure
    from .units import humanize_axis

    cases = _chart_cases(comparison)
    if not cases:
        return None
    names = letters(comparison)
    figure = new_figure()
    figure.set_size_inches(7.0, 1.4 + 0.24 * len(cases))
    axes = figure.add_subplot()
    t = comparison["threshold"]
    axes.axvspan(1 - t, 1 + t, color="0.92", label=f"within +-{t:.0%}")
    axes.axvline(1.0, color="black", linewidth=0.8)
    colours = {"slower": "tab:red", "faster": "tab:green", "same": "tab:grey"}
    others = len(names) - 1
    for index in range(others):
        offset = (index - (others - 1) / 2) * 0.25
        for change in ("slower", "faster", "same", "undecided"):
            chosen = [(row, c["ratios"][index]) for row, c in enumerate(cases)
                      if c["ratios"][index] and c["ratios"][index]["interval"]
                      and c["ratios"][index]["change"] == change]
            if not chosen:
                continue
            xs = [r["ratio"] for _, r in chosen]
            # a percentile interval may miss its own point estimate: no negative error bar
            errors = [[max(0.0, r["ratio"] - r["interval"][0]) for _, r in chosen],
                      [max(0.0, r["interval"][1] - r["ratio"]) for _, r in chosen]]
            axes.errorbar(xs, [len(cases) - 1 - row + offset for row, _ in chosen], xerr=errors, fmt="o",
                          markersize=3, capsize=2, color=colours.get(change, "tab:orange"),
                          label=f"{names[index + 1]}/{names[0]} {change}" if others > 1 else change)
    axes.set_yticks(range(len(cases)), [_short(short_id(c, "none"), 48) for c in reversed(cases)], fontsize="small")
    axes.set_xscale("log")
    axes.set(xlabel=f"time ratio to {names[0]} (95% interval; > 1 is slower)",
             title=f"Largest changes: {len(cases)} of {_compared(comparison)} cases compared")
    humanize_axis(axes, "x", "x")
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure


def _compared(comparison: Mapping[str, Any]) -> int:
    return sum(1 for c in comparison["cases"] if any(r and r["interval"] for r in c["ratios"]))


def _short(text: str, most: int) -> str:
    return _clip(text, most)


def plot_histogram(comparison: Mapping[str, Any], case_id: str, samples_by_run: Sequence[Sequence[float]],
                   bins: int = 16) -> Any:
    """Each run's per-call samples of ``case_id`` on one grid of bins, its median marked."""
    import numpy as np

    from .plots import new_figure
    from .units import humanize_axis

    counted = histogram(samples_by_run, bins)
    if not counted["edges_s"]:
        return None
    names = letters(comparison)
    figure = new_figure()
    axes = figure.add_subplot()
    edges = counted["edges_s"]
    for index, (counts, samples) in enumerate(zip(counted["counts"], samples_by_run)):
        if not samples:
            continue
        line = axes.stairs(counts, edges, label=f"{names[index]} (n={len(samples)})", linewidth=1.4)
        axes.axvline(float(np.median(samples)), color=line.get_edgecolor(), linestyle="--", linewidth=0.9)
    axes.set(xlabel="time per call (dashed: median)", ylabel="samples", title=_short(case_id, 70))
    humanize_axis(axes, "x", "s")
    axes.legend(fontsize="small")
    return figure


def render_html(comparison: Mapping[str, Any], histograms: Mapping[str, Sequence[Sequence[float]]], *,
                columns: Sequence[str] = DEFAULT_COLUMNS, sort: str = "ratio", group_by: str = "none") -> str:
    """One HTML page: the bottom line and the ratio chart first, then the histograms, the runs,
    caveats and the case table(s), folded (needs matplotlib: extra ``report``)."""
    from ..errors import require_extra
    from .html import CSS, folded_table
    from .plots import svg_text

    require_extra("matplotlib", "report")
    title = "Run comparison: " + " vs ".join(r["label"] for r in comparison["runs"])
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>",
             "<ul class=\"meta\">" + "".join(f"<li>{html.escape(s)}</li>" for s in summary_lines(comparison)) + "</ul>"]
    if comparison["caveats"]:
        # that the runs are of different machines comes before any ratio between them
        parts.append("<ul>" + "".join(f'<li class="caveat">{html.escape(c)}</li>' for c in comparison["caveats"])
                     + "</ul>")
    chart = plot_ratios(comparison)
    if chart is not None:
        parts.append(f'<div class="plot">{svg_text(chart)}</div>')
    for case_id, samples in histograms.items():
        figure = plot_histogram(comparison, case_id, samples)
        if figure is not None:
            parts.append(f'<h2>Samples of {html.escape(case_id)}</h2><div class="plot">{svg_text(figure)}</div>')
    parts.append("<h2>Runs</h2><ul class=\"meta\">" + "".join(
        f"<li>{html.escape(line)}</li>" for line in legend_lines(comparison)) + "</ul>")
    parts.append(f"<h2>Cases</h2><p>{len(comparison['cases'])} cases, sorted by {html.escape(sort)}.</p>")
    for name, cases in grouped(sort_cases(comparison["cases"], sort), group_by):
        headers, rows = table(comparison, cases, columns, group_by)
        parts.append((f"<h3>{html.escape(name)}</h3>" if name else "")
                     + folded_table(headers, rows, shown=SHOWN_ROWS, what="cases"))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


__all__ = ["COLUMNS", "DEFAULT_COLUMNS", "check_columns", "fit_table", "histogram_text", "plot_histogram",
           "plot_ratios", "render_html", "render_markdown", "render_text", "short_time", "table", "wrapped"]
