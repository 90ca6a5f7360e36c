"""Plots of a capability profile as inline SVG text (matplotlib, Agg canvas, no pyplot state).

Each plot is drawn only when the profile has the curve it shows. The SVG is made
self-contained for embedding in HTML: no XML prolog, no DOCTYPE, no metadata block and no
namespace URLs; text stays text (``svg.fonttype = none``), so no font is embedded or fetched.
"""
from __future__ import annotations

import io
import re
from typing import Any, Callable, Mapping

from ..errors import require_extra
from .units import format_bytes

TITLES = {
    "roofline": "Roofline: measured ceilings against spec peaks",
    "bandwidth": "Bandwidth vs working set",
    "copy": "Copy bandwidth vs working set",
    "latency": "Latency staircase",
    "transfer": "Transfer bandwidth vs size",
    "contention": "Contention slowdowns",
}


def new_figure() -> Any:
    """A fresh matplotlib Figure on its own Agg canvas (no pyplot state); MissingExtraError naming
    the ``report`` extra when matplotlib is not installed."""
    require_extra("matplotlib", "report")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.0, 4.2))
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


def _ceilings(profile: Mapping[str, Any], prefix: str) -> dict[str, Mapping[str, Any]]:
    return {c["name"][len(prefix):]: c for c in profile.get("ceilings") or () if c["name"].startswith(prefix)}


def plot_roofline(profile: Mapping[str, Any]) -> Any:
    points = [p for p in (profile.get("curves") or {}).get("flops", {}).get("points", [])]
    if not points:
        return None
    figure = new_figure()
    axes = figure.add_subplot()
    intensities = [p["intensity_flop_per_byte"] for p in points if p.get("intensity_flop_per_byte")]
    low = min(intensities + [0.1]) / 4
    high = max(intensities + [100.0]) * 4
    xs = [low * (high / low) ** (i / 60) for i in range(61)]
    dram = _ceilings(profile, "bandwidth:").get("dram") or {}

    def roof(peak: float, bandwidth: float | None) -> list[float]:
        return [min(peak, x * bandwidth) if bandwidth else peak for x in xs]

    spec_peaks: dict[str, float] = {}
    for quantity in ("flops", "gemm"):
        for dtype, ceiling in sorted(_ceilings(profile, f"{quantity}:").items()):
            if ceiling.get("value"):
                axes.plot(xs, roof(ceiling["value"], dram.get("value")), "-", label=f"measured {quantity} {dtype}")
            if ceiling.get("spec"):
                spec_peaks.setdefault(dtype, ceiling["spec"])
    for dtype, peak in sorted(spec_peaks.items()):
        axes.plot(xs, roof(peak, dram.get("spec")), ":", label=f"spec peak {dtype}")
    for (op, dtype), group in _grouped(points, lambda p: (p["op"], p["dtype"])).items():
        placed = [p for p in group if p.get("intensity_flop_per_byte")]
        if placed:
            axes.plot([p["intensity_flop_per_byte"] for p in placed], [p["flop_per_s"] for p in placed], "o",
                      label=f"{op} {dtype} cases")
    axes.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte of DRAM)", ylabel="FLOP/s",
             title=TITLES["roofline"])
    axes.legend(fontsize="small")
    return figure


def _grouped(items: list[Mapping[str, Any]], key: Callable[[Mapping[str, Any]], Any]) -> dict[Any, list[Mapping[str, Any]]]:
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def _plot_levels(profile: Mapping[str, Any], key: str, ylabel: str, scale: float) -> Any:
    curve = (profile.get("curves") or {}).get(key)
    if not curve or not curve.get("points"):
        return None
    figure = new_figure()
    axes = figure.add_subplot()
    runs = _grouped(curve["points"], lambda p: p.get("run", 0))
    for run, points in sorted(runs.items()):
        label = f"run {run}" if len(runs) > 1 else "measured"
        if key == "latency" and (profile.get("curves") or {}).get("latency_random"):
            label += ", page-local walk"
        axes.plot([p["working_set_bytes"] for p in points], [p["value"] * scale for p in points], "o-",
                  label=label, markersize=3)
    if key == "latency":
        walk = ((profile.get("curves") or {}).get("latency_random") or {}).get("points") or []
        for run, points in sorted(_grouped(walk, lambda p: p.get("run", 0)).items()):
            axes.plot([p["working_set_bytes"] for p in points], [p["value"] * scale for p in points], "s--",
                      label=f"{'run ' + str(run) + ', ' if len(runs) > 1 else ''}random walk (TLB misses)",
                      markersize=3)
    labelled: set[str] = set()
    for boundary in curve.get("boundaries") or ():
        axes.axvline(boundary["capacity_bytes"], color="grey", linestyle="--", linewidth=0.8)
        if boundary["level"] in labelled:
            continue
        labelled.add(boundary["level"])
        axes.annotate(f"{boundary['level']} ~{format_bytes(boundary['capacity_bytes'])}",
                      (boundary["capacity_bytes"], 0.95), xycoords=("data", "axes fraction"), rotation=90,
                      fontsize="small", ha="right", va="top")
    threads = int(curve.get("threads") or 1)
    xlabel = "working set (bytes)" + (f", total over {threads} threads" if threads > 1 else "")
    axes.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel, title=TITLES[key])
    axes.legend(fontsize="small")
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
            grid = [min(sizes) * (max(sizes) / min(sizes)) ** (i / 50) for i in range(51)]
            fit = ceiling.get("fit") or {}
            axes.plot(grid, [b / (ceiling["latency_s"] + b / ceiling["bandwidth"]) for b in grid], "-",
                      label=f"{kind} fit: {ceiling['bandwidth'] / 1e9:.3g} GB/s, {ceiling['latency_s'] * 1e6:.3g} us"
                            + (f", r2={fit['r2']:.3f}" if fit.get("r2") is not None else ""))
    axes.set(xscale="log", yscale="log", xlabel="transfer size (bytes)", ylabel="bandwidth (B/s)",
             title=TITLES["transfer"])
    axes.legend(fontsize="small")
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
    axes.set(ylabel="contended / alone time", title=TITLES["contention"])
    return figure


def plot_svgs(profile: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(title, inline SVG) of every plot the profile has data for, in report order.

    Raises MissingExtraError (extra ``report``) when matplotlib is not installed.
    """
    require_extra("matplotlib", "report")
    makers: list[tuple[str, Callable[[], Any]]] = [
        ("roofline", lambda: plot_roofline(profile)),
        ("bandwidth", lambda: _plot_levels(profile, "bandwidth", "bandwidth (B/s)", 1.0)),
        ("copy", lambda: _plot_levels(profile, "copy", "bandwidth (B/s)", 1.0)),
        ("latency", lambda: _plot_levels(profile, "latency", "latency per access (ns)", 1e9)),
        ("transfer", lambda: plot_transfers(profile)),
        ("contention", lambda: plot_contention(profile)),
    ]
    out = []
    for key, make in makers:
        figure = make()
        if figure is not None:
            out.append((TITLES[key], svg_text(figure)))
    return out


__all__ = ["TITLES", "plot_svgs", "plot_roofline", "plot_transfers", "plot_contention"]
