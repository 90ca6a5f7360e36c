"""``charz compare A.profile.json B.profile.json...``: targets side by side, as JSON, Markdown and
self-contained HTML (roofline overlay, bandwidth and latency curves of every target on one axis),
with a summary table printed.

The comparison itself is :func:`pytest_charz.report.compare.compare_profiles`'s; this module reads
the profiles, renders, writes and prints.
"""
from __future__ import annotations

import html
import os
import statistics
import sys
from typing import Any, Mapping, Sequence

from .markdown import format_value, render_table

_CLASS_NOTE = "geometric mean of the advantage over the baseline on the ceilings every profile has"


def _ratio_text(row: Mapping[str, Any], index: int) -> str:
    ratio = row["ratios"][index]
    if ratio is None:
        return "-"
    interval = row["intervals"][index]
    if interval:
        return f"{ratio:.3g}x [{interval[0]:.3g}, {interval[1]:.3g}]"
    return f"{ratio:.3g}x ({row['interval_notes'][index]})"


def _winner_text(names: Sequence[str], winner: int | None, margin: float | None) -> str:
    if winner is None:
        return "tie" if margin == 1.0 else "-"
    return f"{names[winner]} by {margin:.3g}x"


def comparison_rows(comparison: Mapping[str, Any], with_ratios: bool = True) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the ceilings table: each target's value, ratio (and interval) to the
    baseline, the better side and the winner."""
    names = [t["label"] for t in comparison["targets"]]
    headers = ["ceiling", *names]
    if with_ratios:
        headers += [f"{n} / {names[0]}" for n in names[1:]]
    headers += ["better", "winner"]
    rows = []
    for row in comparison["ceilings"]:
        cells = [row["name"], *(format_value(v, row["unit"]) + (" (unstable)" if u else "")
                                for v, u in zip(row["values"], row["unstable"]))]
        if with_ratios:
            cells += [_ratio_text(row, i) for i in range(1, len(names))]
        cells += [row["better"] or "-", _winner_text(names, row["winner"], row["margin"])]
        rows.append(cells)
    return headers, rows


def class_rows(comparison: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the workload classes table (scores are advantages over the baseline)."""
    names = [t["label"] for t in comparison["targets"]]
    rows = [[c["class"], *(f"{s:.3g}x" for s in c["scores"]), _winner_text(names, c["winner"], c["margin"]),
             ", ".join(c["ceilings"])] for c in comparison["classes"]]
    return ["class", *names, "winner", "ceilings"], rows


def render_markdown(comparison: Mapping[str, Any]) -> str:
    """The comparison as a Markdown document."""
    out = ["# Comparison: " + " vs ".join(t["label"] for t in comparison["targets"]), ""]
    for i, target in enumerate(comparison["targets"]):
        out.append(f"- **{target['label']}**{' (baseline)' if i == 0 else ''}: `{target['path']}`, "
                   f"{target.get('name')} ({target.get('kind')}), {target['runs']} run(s)")
    out.append("")
    if comparison["caveats"]:
        out += ["## Caveats", "", *(f"- {c}" for c in comparison["caveats"]), ""]
    headers, rows = class_rows(comparison)
    if rows:
        out += ["## Workload classes", "", f"Scores: {_CLASS_NOTE}.", "", render_table(headers, rows), ""]
    headers, rows = comparison_rows(comparison)
    out += ["## Ceilings", "", "Ratios are value / baseline; the interval spans the runs of both profiles.", "",
            render_table(headers, rows) if rows else "No ceiling in these profiles.", ""]
    return "\n".join(out).rstrip() + "\n"


def _ceiling_value(profile: Mapping[str, Any], prefixes: Sequence[str]) -> float | None:
    values = [c["value"] for c in profile.get("ceilings") or ()
              if c.get("value") and c["name"].startswith(tuple(prefixes))]
    return max(values) if values else None


def plot_roofline_overlay(profiles: Sequence[Mapping[str, Any]], names: Sequence[str]) -> Any:
    """Each target's attainable FLOP/s against intensity: best flops/gemm peak, DRAM bandwidth slope."""
    from .plots import new_figure

    roofs: list[tuple[str, float, float | None]] = []
    for profile, name in zip(profiles, names):
        peak = _ceiling_value(profile, ("flops:", "gemm:"))
        if peak:
            roofs.append((name, peak, _ceiling_value(profile, ("bandwidth:dram",))))
    if not roofs:
        return None
    figure = new_figure()
    axes = figure.add_subplot()
    ridges = [peak / bw for _, peak, bw in roofs if bw]
    low, high = min(ridges + [1.0]) / 100, max(ridges + [1.0]) * 100
    xs = [low * (high / low) ** (i / 80) for i in range(81)]
    for name, peak, bandwidth in roofs:
        axes.plot(xs, [min(peak, x * bandwidth) if bandwidth else peak for x in xs], "-",
                  label=f"{name}" + ("" if bandwidth else " (no DRAM bandwidth)"))
    axes.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte of DRAM)",
             ylabel="attainable FLOP/s", title="Roofline overlay")
    axes.legend(fontsize="small")
    return figure


def plot_curve_overlay(profiles: Sequence[Mapping[str, Any]], names: Sequence[str], key: str) -> Any:
    """The ``bandwidth`` or ``latency`` curve of every target on one axis (median over runs per size)."""
    from .plots import new_figure

    scale, ylabel, title = ((1e9, "latency per access (ns)", "Latency curves") if key == "latency"
                            else (1.0, "bandwidth (B/s)", "Bandwidth curves"))
    curves = [(n, ((p.get("curves") or {}).get(key) or {}).get("points") or []) for p, n in zip(profiles, names)]
    if not any(points for _, points in curves):
        return None
    figure = new_figure()
    axes = figure.add_subplot()
    for name, points in curves:
        by_size: dict[float, list[float]] = {}
        for point in points:
            by_size.setdefault(point["working_set_bytes"], []).append(point["value"])
        if by_size:
            sizes = sorted(by_size)
            axes.plot(sizes, [statistics.median(by_size[s]) * scale for s in sizes], "o-", markersize=3, label=name)
    axes.set(xscale="log", yscale="log", xlabel="working set (bytes)", ylabel=ylabel, title=title)
    axes.legend(fontsize="small")
    return figure


def render_html(comparison: Mapping[str, Any], profiles: Sequence[Mapping[str, Any]]) -> str:
    """The comparison as one HTML document with its plots inline (needs matplotlib: extra ``report``)."""
    from ..errors import require_extra
    from .html import CSS, html_table
    from .plots import svg_text

    require_extra("matplotlib", "report")
    names = [t["label"] for t in comparison["targets"]]
    title = "Comparison: " + " vs ".join(names)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>", f"<h1>{html.escape(title)}</h1>",
             '<ul class="meta">' + "".join(
                 f"<li><b>{html.escape(t['label'])}</b>{' (baseline)' if i == 0 else ''}: {html.escape(str(t['path']))}, "
                 f"{html.escape(str(t.get('name')))} ({html.escape(str(t.get('kind')))}), {t['runs']} run(s)</li>"
                 for i, t in enumerate(comparison["targets"])) + "</ul>"]
    if comparison["caveats"]:
        parts.append("<h2>Caveats</h2><ul>" + "".join(
            f'<li class="caveat">{html.escape(c)}</li>' for c in comparison["caveats"]) + "</ul>")
    headers, rows = class_rows(comparison)
    if rows:
        parts.append(f"<h2>Workload classes</h2><p>Scores: {html.escape(_CLASS_NOTE)}.</p>" + html_table(headers, rows))
    headers, rows = comparison_rows(comparison)
    parts.append("<h2>Ceilings</h2>" + (html_table(headers, rows) if rows else "<p>No ceiling in these profiles.</p>"))
    plots = [plot_roofline_overlay(profiles, names), plot_curve_overlay(profiles, names, "bandwidth"),
             plot_curve_overlay(profiles, names, "latency")]
    plots = [p for p in plots if p is not None]
    if plots:
        parts.append("<h2>Plots</h2>")
        for figure in plots:
            parts.append(f'<div class="plot">{svg_text(figure)}</div>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def compare_paths(out_dir: str | None, name: str | None, first: str) -> dict[str, str]:
    """Where ``charz compare`` writes: ``<out_dir>/<name>.{json,md,html}`` (defaults: the first
    profile's directory and ``comparison``). UsageError for an ``out_dir`` that is a file, or a
    ``name`` with a directory part or ``..``: what is written stays inside the directory given."""
    from ..formats import check_file_name, check_output_directory

    if out_dir is not None:
        check_output_directory(out_dir, "-o/--out-dir")
    if name is not None:
        check_file_name(name, "--name")
    base = os.path.join(out_dir or os.path.dirname(os.path.abspath(first)), name or "comparison")
    return {"json": base + ".json", "md": base + ".md", "html": base + ".html"}


def compare_command(args: Any) -> int:
    """``charz compare PROFILE...``: read every profile (CharzError naming the first unreadable
    one, before anything is written), write the comparison as JSON, Markdown and HTML, print a
    summary. Returns the exit status (0)."""
    from ..errors import CharzError, MissingExtraError
    from ..formats import atomic_write_json, atomic_write_text
    from ..profile import load_profile
    from .compare import compare_profiles

    paths = list(args.profiles)
    if len(paths) < 2:
        raise CharzError("charz compare needs at least two profiles")
    out = compare_paths(getattr(args, "out_dir", None), getattr(args, "name", None), paths[0])
    profiles = [load_profile(path) for path in paths]
    comparison = compare_profiles(profiles, paths)
    atomic_write_json(out["json"], comparison)
    atomic_write_text(out["md"], render_markdown(comparison))
    written = [out["json"], out["md"]]
    try:
        atomic_write_text(out["html"], render_html(comparison, profiles))
        written.append(out["html"])
    except MissingExtraError as exc:
        print(f"charz: HTML comparison not written: {exc}", file=sys.stderr)
    names = [t["label"] for t in comparison["targets"]]
    print(f"comparison of {len(profiles)} profiles, baseline {names[0]}")
    # that the profiles are of different CPUs comes before any ratio between them
    for caveat in comparison["caveats"]:
        if caveat.startswith("different CPUs"):
            print(f"caveat: {caveat}")
    headers, rows = comparison_rows(comparison)
    print(render_table(headers, rows, markdown=False))
    headers, rows = class_rows(comparison)
    if rows:
        print()
        print(render_table(headers[:-1], [r[:-1] for r in rows], markdown=False))
    if comparison["caveats"]:
        print(f"\n{len(comparison['caveats'])} caveat(s):")
        for caveat in comparison["caveats"]:
            print(f"  - {caveat}")
    for path in written:
        print(f"wrote {path}")
    return 0
