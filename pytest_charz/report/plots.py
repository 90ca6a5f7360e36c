"""The reports' plots as inline SVG text (matplotlib, Agg canvas, no pyplot state): a capability
profile's, a profile comparison's and a sweep's.

Each plot is drawn only when its document has the data it shows. Every axis shows human units
(:func:`pytest_charz.report.units.humanize_axis`: GB/s, KiB .. GiB, ns .. ms), never a raw
``3e11``; a legend sits outside the axes, so it covers no data; an interval the data has (the
spread over runs, a ratio's interval) is drawn. The SVG is made self-contained for embedding in
HTML: no XML prolog, no DOCTYPE, no metadata block and no namespace URLs; text stays text
(``svg.fonttype = none``), so no font is embedded or fetched.
"""
from __future__ import annotations

import io
import re
import statistics
from typing import Any, Callable, Mapping, Sequence

from ..errors import require_extra
from .units import format_bandwidth, format_bytes, format_flops, format_quantity, humanize_axis

TITLES = {
    "roofline": "Roofline: a roof per memory level, the cases placed on it",
    "bandwidth": "Bandwidth vs working set",
    "copy": "Copy bandwidth vs working set",
    "latency": "Latency staircase",
    "transfer": "Transfer bandwidth vs size",
    "contention": "Contention slowdowns",
}
#: Memory levels a roofline draws a roof for, innermost first (``bandwidth:<level>`` ceilings).
LEVELS = ("l1", "l2", "l3", "dram")
_LEVEL_COLOURS = {"l1": "#2ca02c", "l2": "#17becf", "l3": "#9467bd", "dram": "#d62728"}


def new_figure(width: float = 7.0, height: float = 4.2) -> Any:
    """A fresh matplotlib Figure (``width`` x ``height`` inches) on its own Agg canvas (no pyplot
    state); MissingExtraError naming the ``report`` extra when matplotlib is not installed."""
    require_extra("matplotlib", "report")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    return figure


def svg_text(figure: Any) -> str:
    """``figure`` as self-contained inline SVG text: no prolog, metadata or namespace URLs, text
    kept as text, the same bytes for the same figure."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "charz-profile"}):
        figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)
    return text.strip()


def finish_curve_axes(axes: Any, xlabel: str, ylabel: str, unit: str) -> None:
    """A curve over working-set size: log axes in bytes and ``unit``, a light grid, the legend
    outside the plot."""
    axes.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel)
    humanize_axis(axes, "x", "B")
    humanize_axis(axes, "y", unit)
    axes.grid(True, which="major", alpha=0.25)
    legend_outside(axes)


def legend_outside(axes: Any) -> None:
    """The legend of ``axes`` to the right of the plot, where it covers no data."""
    handles, _ = axes.get_legend_handles_labels()
    if handles:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False,
                    borderaxespad=0.0)


def _ceilings(profile: Mapping[str, Any], prefix: str) -> dict[str, Mapping[str, Any]]:
    return {c["name"][len(prefix):]: c for c in profile.get("ceilings") or () if c["name"].startswith(prefix)}


def grouped(items: Sequence[Mapping[str, Any]], key: Callable[[Mapping[str, Any]], Any]) -> dict[Any, list[Mapping[str, Any]]]:
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def geometric(low: float, high: float, count: int) -> list[float]:
    return [low * (high / low) ** (i / (count - 1)) for i in range(count)]


def level_roofs(profile: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(level, measured bandwidth) of every memory level the profile measured, innermost first."""
    found = _ceilings(profile, "bandwidth:")
    return [(level, float(found[level]["value"])) for level in LEVELS if (found.get(level) or {}).get("value")]


def plot_roofline(profile: Mapping[str, Any]) -> Any:
    """Attainable FLOP/s against arithmetic intensity: one roof per memory level measured (L1,
    L2, L3, DRAM) under the highest measured compute ceiling, each measured compute ceiling and
    spec peak as a line, and the FMA/GEMM cases placed at their intensity (FLOP per DRAM byte)."""
    points = list((profile.get("curves") or {}).get("flops", {}).get("points", []))
    compute = [(f"{quantity} {dtype}", float(c["value"]), c.get("spec"))
               for quantity in ("flops", "gemm") for dtype, c in sorted(_ceilings(profile, f"{quantity}:").items())
               if c.get("value")]
    if not points and not compute:
        return None
    roofs = level_roofs(profile)
    top = max([value for _, value, _ in compute] + [p["flop_per_s"] for p in points if p.get("flop_per_s")])
    ridges = [top / bandwidth for _, bandwidth in roofs]
    intensities = [p["intensity_flop_per_byte"] for p in points if p.get("intensity_flop_per_byte")]
    low = min(intensities + ridges + [1.0]) / 8
    high = max(intensities + ridges + [10.0]) * 4
    xs = geometric(low, high, 80)
    figure = new_figure(7.6, 4.4)
    axes = figure.add_subplot()
    for level, bandwidth in roofs:
        axes.plot(xs, [min(top, x * bandwidth) for x in xs], "-", color=_LEVEL_COLOURS[level], linewidth=1.6,
                  label=f"{level.upper()} roof: {format_bandwidth(bandwidth)}")
    for (name, value, _), style in zip(compute, ("-", "--", "-.", ":", (0, (5, 1)), (0, (1, 1)), (0, (3, 5, 1, 5)))):
        axes.plot([xs[0], xs[-1]], [value, value], linestyle=style, color="#555555", linewidth=0.9,
                  label=f"{name}: {format_flops(value)}")
    spec_peaks: dict[str, float] = {}
    for name, _, spec in compute:
        if spec:
            spec_peaks.setdefault(name.split(" ", 1)[1], float(spec))
    for dtype, peak in sorted(spec_peaks.items()):
        axes.plot([xs[0], xs[-1]], [peak, peak], ":", color="#bbbbbb", linewidth=1.0,
                  label=f"spec peak {dtype}: {format_flops(peak)}")
    for (op, dtype), group in grouped(points, lambda p: (p["op"], p["dtype"])).items():
        placed = [p for p in group if p.get("intensity_flop_per_byte")]
        if placed:
            axes.plot([p["intensity_flop_per_byte"] for p in placed], [p["flop_per_s"] for p in placed], "o",
                      markersize=5, label=f"{op} {dtype} cases ({len(placed)})")
    floor = min([min(top, xs[0] * bw) for _, bw in roofs] + [p["flop_per_s"] for p in points if p.get("flop_per_s")]
                + [top / 100])
    axes.set(xscale="log", yscale="log", xlim=(xs[0], xs[-1]), ylim=(floor / 2, top * 2.5),
             xlabel="arithmetic intensity (FLOP per byte of DRAM traffic)", ylabel="attainable FLOP/s")
    humanize_axis(axes, "x", "")
    humanize_axis(axes, "y", "FLOP/s")
    axes.grid(True, which="major", alpha=0.25)
    legend_outside(axes)
    return figure


def spread(points: Sequence[Mapping[str, Any]], value: Callable[[Mapping[str, Any]], float]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per working set over runs: sizes, median, min and max."""
    by_size: dict[float, list[float]] = {}
    for point in points:
        by_size.setdefault(float(point["working_set_bytes"]), []).append(value(point))
    sizes = sorted(by_size)
    return (sizes, [statistics.median(by_size[s]) for s in sizes], [min(by_size[s]) for s in sizes],
            [max(by_size[s]) for s in sizes])


def plot_levels(profile: Mapping[str, Any], key: str, ylabel: str, unit: str) -> Any:
    """The profile's ``key`` curve (``bandwidth``, ``copy``, ``latency``) against the working set,
    values in ``unit``: over several runs their median with the range shaded; the levels' detected
    boundaries marked."""
    curve = (profile.get("curves") or {}).get(key)
    if not curve or not curve.get("points"):
        return None
    figure = new_figure()
    axes = figure.add_subplot()
    runs = grouped(curve["points"], lambda p: p.get("run", 0))
    walk_label = ", page-local walk" if key == "latency" and (profile.get("curves") or {}).get("latency_random") else ""
    if len(runs) > 1:
        sizes, middle, lows, highs = spread(curve["points"], lambda p: p["value"])
        axes.fill_between(sizes, lows, highs, color="tab:blue", alpha=0.2, linewidth=0,
                          label=f"range over {len(runs)} runs")
        axes.plot(sizes, middle, "o-", markersize=3, color="tab:blue", label=f"median of runs{walk_label}")
    else:
        points = curve["points"]
        axes.plot([p["working_set_bytes"] for p in points], [p["value"] for p in points], "o-", markersize=3,
                  color="tab:blue", label=f"measured{walk_label}")
    if key == "latency":
        walk = ((profile.get("curves") or {}).get("latency_random") or {}).get("points") or []
        if walk:
            sizes, middle, lows, highs = spread(walk, lambda p: p["value"])
            if len({p.get("run", 0) for p in walk}) > 1:
                axes.fill_between(sizes, lows, highs, color="tab:orange", alpha=0.2, linewidth=0)
            axes.plot(sizes, middle, "s--", markersize=3, color="tab:orange", label="random walk (TLB misses)")
    labelled: set[str] = set()
    for boundary in curve.get("boundaries") or ():
        axes.axvline(boundary["capacity_bytes"], color="grey", linestyle="--", linewidth=0.8)
        if boundary["level"] in labelled:
            continue
        labelled.add(boundary["level"])
        axes.annotate(f"{boundary['level'].upper()} ~{format_bytes(boundary['capacity_bytes'])}",
                      (boundary["capacity_bytes"], 0.97), xycoords=("data", "axes fraction"), rotation=90,
                      fontsize="small", ha="right", va="top")
    threads = int(curve.get("threads") or 1)
    xlabel = "working set" + (f", total over {threads} threads" if threads > 1 else "")
    finish_curve_axes(axes, xlabel, ylabel, unit)
    return figure


def plot_transfers(profile: Mapping[str, Any]) -> Any:
    transfer = (profile.get("curves") or {}).get("transfer") or {}
    if not transfer.get("points"):
        return None
    figure = new_figure()
    axes = figure.add_subplot()
    fitted = _ceilings(profile, "transfer:")
    for kind, points in sorted(transfer["points"].items()):
        for pinned, marker in ((True, "o"), (False, "x")):
            chosen = [p for p in points if bool(p.get("pinned")) == pinned]
            if chosen:
                axes.plot([p["bytes"] for p in chosen], [p["bytes"] / p["time_s"] for p in chosen], marker,
                          markersize=4, label=f"{kind} {'pinned' if pinned else 'pageable'}")
        ceiling = fitted.get(kind) or {}
        if ceiling.get("bandwidth") and ceiling.get("latency_s") is not None:
            sizes = [p["bytes"] for p in points]
            grid = geometric(min(sizes), max(sizes), 51)
            fit = ceiling.get("fit") or {}
            axes.plot(grid, [b / (ceiling["latency_s"] + b / ceiling["bandwidth"]) for b in grid], "-",
                      label=f"{kind} fit: {format_bandwidth(ceiling['bandwidth'])}, "
                            f"{format_quantity(ceiling['latency_s'], 's')}"
                            + (f", r2={fit['r2']:.3f}" if fit.get("r2") is not None else ""))
    axes.set(xscale="log", yscale="log", xlabel="transfer size", ylabel="bandwidth")
    humanize_axis(axes, "x", "B")
    humanize_axis(axes, "y", "B/s")
    axes.grid(True, which="major", alpha=0.25)
    legend_outside(axes)
    return figure


def plot_contention(profile: Mapping[str, Any]) -> Any:
    slowdowns = _ceilings(profile, "slowdown:")
    if not slowdowns:
        return None
    figure = new_figure()
    axes = figure.add_subplot()
    names = sorted(slowdowns)
    axes.bar(range(len(names)), [slowdowns[n]["value"] for n in names], color="tab:red")
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize="small")
    axes.set(ylabel="contended / alone time")
    humanize_axis(axes, "y", "x")
    return figure


def plot_svgs(profile: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(title, inline SVG) of every plot the profile has data for, in report order.

    Raises MissingExtraError (extra ``report``) when matplotlib is not installed.
    """
    require_extra("matplotlib", "report")
    makers: list[tuple[str, Callable[[], Any]]] = [
        ("roofline", lambda: plot_roofline(profile)),
        ("bandwidth", lambda: plot_levels(profile, "bandwidth", "bandwidth", "B/s")),
        ("copy", lambda: plot_levels(profile, "copy", "bandwidth", "B/s")),
        ("latency", lambda: plot_levels(profile, "latency", "latency per access", "s")),
        ("transfer", lambda: plot_transfers(profile)),
        ("contention", lambda: plot_contention(profile)),
    ]
    out = []
    for key, make in makers:
        figure = make()
        if figure is not None:
            out.append((TITLES[key], svg_text(figure)))
    return out


__all__ = ["LEVELS", "TITLES", "finish_curve_axes", "geometric", "grouped", "legend_outside", "level_roofs", "new_figure", "plot_contention",
           "plot_levels", "plot_roofline", "plot_svgs", "plot_transfers", "spread", "svg_text"]
