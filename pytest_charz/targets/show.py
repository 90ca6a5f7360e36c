"""Text views of targets for ``charz targets`` and ``charz targets show NAME``.

Data in, text out: these functions never read options and never print.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from .spec import Figure, Link, TargetSpec

_NONE = "-"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    try:
        from tabulate import tabulate
    except ImportError:
        widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
        lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip()
                 for line in (headers, ["-" * width for width in widths], *rows)]
        return "\n".join(lines)
    return str(tabulate(rows, headers=list(headers), tablefmt="simple", disable_numparse=True))


def _scaled(value: float | None, scale: float, digits: int = 1) -> str:
    return _NONE if value is None else f"{value / scale:,.{digits}f}"


def format_catalogue(specs: Iterable[TargetSpec] | Mapping[str, TargetSpec]) -> str:
    """One row per target: id, name, vendor, kind, aliases, dense bf16/fp32/fp64 peaks in
    TFLOP/s, DRAM bandwidth in TB/s and capacity in GiB; ``-`` where a figure is not known."""
    items = list(specs.values()) if isinstance(specs, Mapping) else list(specs)
    rows = []
    for spec in sorted(items, key=lambda item: item.id):
        dram = spec.level("dram")
        capacity = dram.capacity_bytes.value if dram and dram.capacity_bytes else None
        rows.append([
            spec.id, spec.identity.name, spec.identity.vendor, spec.identity.kind,
            ", ".join(spec.identity.aliases) or _NONE,
            _scaled(spec.peak("bf16"), 1e12), _scaled(spec.peak("fp32"), 1e12),
            _scaled(spec.peak("fp64"), 1e12), _scaled(spec.bandwidth("dram"), 1e12, 2),
            _scaled(capacity, 2**30, 0),
        ])
    headers = ["id", "name", "vendor", "kind", "aliases", "bf16 TFLOP/s", "fp32 TFLOP/s",
               "fp64 TFLOP/s", "DRAM TB/s", "DRAM GiB"]
    return _table(headers, rows)


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:,.4g} {prefix}{unit}"
    return f"{value:,.4g} {unit}"


def _binary(value: float) -> str:
    for scale, prefix in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if value >= scale:
            return f"{value / scale:,.4g} {prefix}"
    return f"{value:,.0f} B"


def _figure(figure: Figure | None, render: str) -> str:
    return _NONE if figure is None else f"{render}  [{figure.source}]"


def _link(link: Link) -> list[str]:
    latency = link.latency_us
    return [link.name, str(link.count),
            _figure(link.bandwidth_bytes_per_s, _si(link.bandwidth_bytes_per_s.value, "B/s")),
            _figure(latency, f"{latency.value:g} us") if latency else _NONE]


def format_spec(spec: TargetSpec) -> str:
    """Every figure of ``spec`` with its unit and source, then the full citations."""
    ident, compute = spec.identity, spec.compute
    lines = [f"{ident.name} ({ident.id})",
             f"  vendor {ident.vendor}, kind {ident.kind}, backend {ident.backend}"
             + (f", architecture {ident.architecture}" if ident.architecture else ""),
             f"  aliases: {', '.join(ident.aliases) or _NONE}",
             f"  recognised by name: {', '.join(ident.match_name) or _NONE}; "
             f"PCI ids: {', '.join(ident.pci_device_ids) or _NONE}",
             f"  origin: {spec.origin or _NONE}", "", "Compute"]
    clocks = [("units", _figure(compute.units, f"{compute.units.value:g} {compute.unit_name}"))]
    for label, clock in (("base clock", compute.clock_base_mhz),
                         ("boost clock", compute.clock_boost_mhz)):
        clocks.append((label, _figure(clock, f"{clock.value:g} MHz") if clock else _NONE))
    lines += [f"  {label:<12} {text}" for label, text in clocks]
    for title, peaks in (("dense peak", compute.peak_flops),
                         ("vector peak", compute.vector_peak_flops)):
        for dtype, figure in peaks.items():
            unit = "OP/s" if dtype.startswith("int") else "FLOP/s"
            lines.append(f"  {title} {dtype:<5} {_figure(figure, _si(figure.value, unit))}")
    lines += ["", "Memory"]
    rows = [[level.name, level.label, level.scope,
             _figure(level.capacity_bytes, _binary(level.capacity_bytes.value))
             if level.capacity_bytes else _NONE,
             _figure(level.bandwidth_bytes_per_s, _si(level.bandwidth_bytes_per_s.value, "B/s"))
             if level.bandwidth_bytes_per_s else _NONE,
             _figure(level.latency_ns, f"{level.latency_ns.value:g} ns")
             if level.latency_ns else _NONE]
            for level in spec.memory]
    lines.append(_table(["level", "label", "scope", "capacity", "bandwidth", "latency"], rows))
    links = ([["host: " + row[0], *row[1:]] for row in [_link(spec.host_link)]]
             if spec.host_link else [])
    links += [["peer: " + row[0], *row[1:]] for row in map(_link, spec.peer_links)]
    lines += ["", "Links (bandwidth per direction, per link)"]
    lines.append(_table(["link", "count", "bandwidth", "latency"], links) if links else "  none")
    power = spec.power
    lines += ["", "Power"]
    if power is None or (power.tdp_w is None and power.idle_w is None):
        lines.append("  none published")
    else:
        for label, watts in (("TDP", power.tdp_w), ("idle", power.idle_w)):
            if watts is not None:
                lines.append(f"  {label:<5} {_figure(watts, f'{watts.value:g} W')}")
    if spec.priors is not None:
        lines += ["", "Priors (spec-only predictions; marked 'prior:' in the ceilings)"]
        lines += _priors(spec)
    if spec.notes:
        lines += ["", "Notes"] + [f"  - {note}" for note in spec.notes]
    lines += ["", "Sources"] + [f"  {key}: {citation}" for key, citation in spec.sources.items()]
    return "\n".join(lines)


def _priors(spec: TargetSpec) -> list[str]:
    priors = spec.priors
    assert priors is not None
    lines = []
    for label, figure, unit in (("launch", priors.launch_us, "us"),
                                ("host link latency", priors.host_link_latency_us, "us"),
                                ("peer link latency", priors.peer_link_latency_us, "us"),
                                ("host link", priors.host_link_bandwidth_bytes_per_s, "B/s"),
                                ("peer link", priors.peer_link_bandwidth_bytes_per_s, "B/s")):
        if figure is not None:
            text = _si(figure.value, unit) if unit == "B/s" else f"{figure.value:g} {unit}"
            lines.append(f"  {label:<18} {_figure(figure, text)}")
    for level, figure in priors.latency_ns.items():
        lines.append(f"  {'latency ' + level:<18} {_figure(figure, f'{figure.value:g} ns')}")
    for level, figure in priors.bandwidth_bytes_per_s.items():
        lines.append(f"  {'bandwidth ' + level:<18} {_figure(figure, _si(figure.value, 'B/s'))}")
    for key, figure in priors.efficiency.items():
        lines.append(f"  {'achievable ' + key:<18} {_figure(figure, f'{figure.value:.1%}')}")
    for dtype, figure in priors.gemm_tile_us.items():
        lines.append(f"  {'gemm tile ' + dtype:<18} {_figure(figure, f'{figure.value:g} us')}")
    return lines
