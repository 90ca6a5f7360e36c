"""Plots of a comparison of capability profiles as inline SVG text: the ratio of every ceiling
to the baseline with its interval, the roofline overlay and the bandwidth and latency curves of
every target on one axis (the profile's own plots are :mod:`pytest_charz.report.plots`')."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..errors import require_extra
from .plots import finish_curve_axes, geometric, legend_outside, level_roofs, new_figure, spread, svg_text
from .units import format_bandwidth, format_flops, humanize_axis

def _best(profile: Mapping[str, Any], prefixes: Sequence[str]) -> float | None:
    values = [c["value"] for c in profile.get("ceilings") or () if c.get("value") and c["name"].startswith(tuple(prefixes))]
    return max(values) if values else None


def plot_roofline_overlay(profiles: Sequence[Mapping[str, Any]], names: Sequence[str]) -> Any:
    """Each target's roofline on one axis: its best flops/gemm peak under a roof per memory level
    it measured (DRAM solid, the caches thinner)."""
    drawn = [(name, peak, level_roofs(profile)) for profile, name in zip(profiles, names)
             for peak in [_best(profile, ("flops:", "gemm:"))] if peak]
    if not drawn:
        return None
    ridges = [peak / bandwidth for _, peak, roofs in drawn for _, bandwidth in roofs]
    low, high = min(ridges + [1.0]) / 10, max(ridges + [1.0]) * 30
    xs = geometric(low, high, 80)
    figure = new_figure(7.6, 4.4)
    axes = figure.add_subplot()
    colours = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
    for index, (name, peak, roofs) in enumerate(drawn):
        colour = colours[index % len(colours)]
        if not roofs:
            axes.plot([xs[0], xs[-1]], [peak, peak], "-", color=colour, label=f"{name}: {format_flops(peak)} (no bandwidth)")
        for level, bandwidth in roofs:
            axes.plot(xs, [min(peak, x * bandwidth) for x in xs], "-", color=colour,
                      linewidth=2.0 if level == "dram" else 0.9, alpha=1.0 if level == "dram" else 0.6,
                      label=f"{name}: {level.upper()} {format_bandwidth(bandwidth)}")
    axes.set(xscale="log", yscale="log", xlim=(xs[0], xs[-1]), xlabel="arithmetic intensity (FLOP per byte)",
             ylabel="attainable FLOP/s")
    humanize_axis(axes, "x", "")
    humanize_axis(axes, "y", "FLOP/s")
    axes.grid(True, which="major", alpha=0.25)
    legend_outside(axes)
    return figure


def plot_curve_overlay(profiles: Sequence[Mapping[str, Any]], names: Sequence[str], key: str) -> Any:
    """The ``bandwidth`` or ``latency`` curve of every target on one axis: the median over runs
    per working set, and the range over runs shaded where a profile has several."""
    unit, ylabel = ("s", "latency per access") if key == "latency" else ("B/s", "bandwidth")
    curves = [(n, ((p.get("curves") or {}).get(key) or {}).get("points") or []) for p, n in zip(profiles, names)]
    if not any(points for _, points in curves):
        return None
    figure = new_figure()
    axes = figure.add_subplot()
    for name, points in curves:
        if not points:
            continue
        sizes, middle, lows, highs = spread(points, lambda p: p["value"])
        line, = axes.plot(sizes, middle, "o-", markersize=3, label=name)
        if len({p.get("run", 0) for p in points}) > 1:
            axes.fill_between(sizes, lows, highs, color=line.get_color(), alpha=0.2, linewidth=0)
    finish_curve_axes(axes, "working set", ylabel, unit)
    return figure


def plot_ratio_chart(comparison: Mapping[str, Any]) -> Any:
    """Every ceiling's ratio to the baseline (log axis, 1x marked), one marker per other target,
    its interval over runs as a bar where known; green where the target is better, red where
    worse, grey where no side is better."""
    targets = comparison.get("targets") or []
    rows = [r for r in comparison.get("ceilings") or () if any(x for x in (r.get("ratios") or [])[1:])]
    if len(targets) < 2 or not rows:
        return None
    figure = new_figure(7.6, max(2.4, 0.75 + 0.24 * len(rows) * max(1, len(targets) - 1) ** 0.5))
    axes = figure.add_subplot()
    count = len(targets) - 1
    markers = ("o", "s", "^", "D", "v", "P")
    values: list[float] = []
    for offset_index in range(count):
        index = offset_index + 1
        offset = (offset_index - (count - 1) / 2) * (0.6 / max(count, 1))
        for position, row in enumerate(rows):
            ratio = row["ratios"][index]
            if not ratio:
                continue
            values.append(ratio)
            advantage = ratio if row.get("better") == "higher" else 1.0 / ratio if row.get("better") == "lower" else None
            colour = "#888888" if advantage is None or abs(advantage - 1) < 1e-9 else (
                "#2ca02c" if advantage > 1 else "#d62728")
            interval = (row.get("intervals") or [None] * len(targets))[index]
            y = position + offset
            if interval:
                values.extend(interval)
                axes.plot(interval, [y, y], "-", color=colour, linewidth=2.0, alpha=0.6)
            axes.plot([ratio], [y], markers[offset_index % len(markers)], color=colour, markersize=5)
    for offset_index in range(count):
        axes.plot([], [], markers[offset_index % len(markers)], color="#444444",
                  label=f"{targets[offset_index + 1]['label']} / {targets[0]['label']}")
    axes.plot([], [], "-", color="#444444", linewidth=2.0, alpha=0.6, label="interval over runs")
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.set_yticks(range(len(rows)), [r["name"] for r in rows], fontsize="small")
    axes.invert_yaxis()
    low, high = min(values + [1.0]), max(values + [1.0])
    axes.set(xscale="log", xlim=(low / 1.4, high * 1.4), xlabel="ratio to the baseline (green: better, red: worse)")
    humanize_axis(axes, "x", "x")
    axes.grid(True, axis="x", which="major", alpha=0.25)
    legend_outside(axes)
    return figure


def comparison_svgs(comparison: Mapping[str, Any], profiles: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(title, inline SVG) of a profile comparison's plots: the ratio chart, the roofline
    overlay, the bandwidth and latency curves (each when there is data for it)."""
    require_extra("matplotlib", "report")
    names = [t["label"] for t in comparison.get("targets") or ()]
    makers = [("Ratio to the baseline", lambda: plot_ratio_chart(comparison)),
              ("Roofline overlay", lambda: plot_roofline_overlay(profiles, names)),
              ("Bandwidth curves", lambda: plot_curve_overlay(profiles, names, "bandwidth")),
              ("Latency curves", lambda: plot_curve_overlay(profiles, names, "latency"))]
    out = []
    for title, make in makers:
        figure = make()
        if figure is not None:
            out.append((title, svg_text(figure)))
    return out


__all__ = ["comparison_svgs", "plot_curve_overlay", "plot_ratio_chart", "plot_roofline_overlay"]
