"""Plots of a sweep as inline SVG text: latency against energy with every spot labelled by its
configurations (labels placed apart) and the sensitivity of the end-to-end time."""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import require_extra
from .plots import legend_outside, new_figure, svg_text
from .units import humanize_axis

def place_labels(anchors: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]],
                 avoid: Sequence[tuple[float, float]] = (), radius: float = 4.0) -> list[tuple[float, float] | None]:
    """Offsets (display units) for a label per anchor so that no two labels overlap and no label
    covers an anchor or an ``avoid`` point; None where no candidate offset is free.

    ``sizes`` are the labels' (width, height); candidates are tried nearest first around the point.
    """
    candidates = [(dx, dy) for ring in (1.0, 2.0, 3.2, 4.5) for dx, dy in
                  ((6, 4), (6, -14), (-6, 4), (-6, -14), (0, 10), (0, -20), (14, -5), (-14, -5))
                  for dx, dy in [(dx * ring, dy * ring)]]
    placed: list[tuple[float, float, float, float]] = []
    points = list(anchors) + list(avoid)
    out: list[tuple[float, float] | None] = []
    for (x, y), (width, height) in zip(anchors, sizes):
        chosen = None
        for dx, dy in candidates:
            left = x + dx if dx >= 0 else x + dx - width
            box = (left, y + dy, left + width, y + dy + height)
            if any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                continue
            if any(box[0] - radius < px < box[2] + radius and box[1] - radius < py < box[3] + radius for px, py in points):
                continue
            chosen = (dx, dy)
            placed.append(box)
            break
        out.append(chosen)
    return out


def _same_spot(result: Any) -> list[tuple[float, float, list[int]]]:
    """The configurations grouped by where they fall (latency and energy equal to 4 digits)."""
    groups: dict[tuple[float, float], list[int]] = {}
    for index, point in enumerate(result.points):
        key = (float(f"{point.latency_s:.4g}"), float(f"{point.energy_j:.4g}"))
        groups.setdefault(key, []).append(index)
    return [(latency, energy, members) for (latency, energy), members in groups.items()]


def _members_text(members: Sequence[int]) -> str:
    shown = ",".join(f"#{m}" for m in members[:3])
    return shown + (f" +{len(members) - 3}" if len(members) > 3 else "")


def plot_pareto(result: Any) -> Any:
    """Latency against energy of every configuration of a sweep: each spot labelled with its
    configurations' numbers (those of the table; several at one spot are said so), the Pareto
    front joined, the unchanged machine starred; labels placed so that none overlaps another."""
    figure = new_figure(7.6, 4.6)
    axes = figure.add_subplot()
    spots = _same_spot(result)
    front = set(result.front)
    sizes = [8 + 6 * min(len(m), 6) for _, _, m in spots]
    axes.scatter([s[0] for s in spots], [s[1] for s in spots], s=sizes, color="#999999", zorder=2,
                 label="configurations (bigger: several at one spot)")
    ordered = sorted(result.front, key=lambda i: result.points[i].latency_s)
    axes.plot([result.points[i].latency_s for i in ordered], [result.points[i].energy_j for i in ordered], "o-",
              color="#c0392b", markersize=5, zorder=3, label="Pareto front")
    if result.baseline is not None:
        axes.scatter([result.baseline.latency_s], [result.baseline.energy_j], marker="*", s=140, color="#2c3e50",
                     zorder=4, label="unchanged machine")
    latencies = [s[0] for s in spots] + ([result.baseline.latency_s] if result.baseline is not None else [])
    energies = [s[1] for s in spots] + ([result.baseline.energy_j] if result.baseline is not None else [])
    span_x = (max(latencies) - min(latencies)) or max(latencies) * 0.1
    span_y = (max(energies) - min(energies)) or max(energies) * 0.1
    axes.set_xlim(min(latencies) - 0.12 * span_x, max(latencies) + 0.3 * span_x)
    axes.set_ylim(min(energies) - 0.15 * span_y, max(energies) + 0.2 * span_y)
    axes.set(xlabel="end-to-end latency", ylabel="energy per step")
    humanize_axis(axes, "x", "s")
    humanize_axis(axes, "y", "J")
    axes.grid(True, alpha=0.3)
    figure.canvas.draw()
    transform = axes.transData
    anchors = [tuple(transform.transform((s[0], s[1]))) for s in spots]
    texts = [_members_text(m) for _, _, m in spots]
    font_px = 7.5 * figure.dpi / 72.0
    label_sizes = [(0.62 * font_px * len(t), 1.3 * font_px) for t in texts]
    avoid = [tuple(transform.transform((result.baseline.latency_s, result.baseline.energy_j)))] if result.baseline else []
    for (latency, energy, members), text, offset in zip(spots, texts, place_labels(anchors, label_sizes, avoid)):
        if offset is None:
            continue
        axes.annotate(text, (latency, energy), xytext=(offset[0] * 72.0 / figure.dpi, offset[1] * 72.0 / figure.dpi),
                      textcoords="offset points", fontsize=7.5, ha="left" if offset[0] >= 0 else "right",
                      va="bottom", color="#c0392b" if front & set(members) else "#444444")
    legend_outside(axes)
    return figure


def plot_sensitivity(result: Any) -> Any:
    """The latency swing of every swept parameter over its range, largest first."""
    if not result.ranking:
        return None
    figure = new_figure(7.6, max(2.0, 0.9 + 0.35 * len(result.ranking)))
    axes = figure.add_subplot()
    names = [s.parameter for s in result.ranking][::-1]
    axes.barh(names, [100 * s.swing for s in result.ranking][::-1], color="#2980b9")
    axes.set(xlabel="end-to-end latency swing over the parameter's range")
    humanize_axis(axes, "x", "%")
    axes.grid(True, axis="x", alpha=0.3)
    return figure


def sweep_svgs(result: Any) -> list[tuple[str, str]]:
    """(title, inline SVG) of a sweep's plots: latency against energy, then the sensitivity."""
    require_extra("matplotlib", "report")
    plots = [("Latency against energy", svg_text(plot_pareto(result)))]
    figure = plot_sensitivity(result)
    if figure is not None:
        plots.append(("Sensitivity of the end-to-end time", svg_text(figure)))
    return plots


__all__ = ["place_labels", "plot_pareto", "plot_sensitivity", "sweep_svgs"]
