"""A finished sweep as text: the table, the Pareto front, the sensitivity ranking, as Markdown and
as one self-contained HTML page (the plots are drawn by the command and passed in as SVG text).
Everything here reads a :class:`~.sweep.SweepResult` and computes nothing the result lacks."""
from __future__ import annotations

import html
from typing import Any, Sequence

from .sweep import SweepPoint, SweepResult

#: Rows of the full table a Markdown or HTML report shows (the JSON has them all).
TABLE_LIMIT = 200

_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "u"), (1e-9, "n"))


def si(value: float | None, unit: str) -> str:
    """``value`` with an SI prefix and ``unit`` (``3.35 TB/s``, ``1.2 ms``); ``-`` for None."""
    if value is None:
        return "-"
    if value == 0:
        return f"0 {unit}".strip()
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}".strip()
    return f"{value:.3g} {unit}".strip()


def parameter_value(result: SweepResult, name: str, value: float) -> str:
    unit = (result.parameters.get(name) or {}).get("unit", "")
    if unit in ("B/s", "B", "W", "s"):
        return si(value, unit)
    return f"{value:.4g}" + (f" {unit}" if unit and unit not in ("units",) else "")


def _point_cells(result: SweepResult, point: SweepPoint) -> list[str]:
    return [*(parameter_value(result, axis.name, point.values[axis.name]) for axis in result.axes),
            si(point.latency_s, "s"), si(point.energy_j, "J"), si(point.average_power_w, "W"),
            f"{point.tokens_per_s:.4g}" if point.tokens_per_s is not None else "-",
            si(point.joules_per_token, "J") if point.joules_per_token is not None else "-", point.bottleneck or "-"]


def table(result: SweepResult, limit: int | None = TABLE_LIMIT) -> tuple[list[str], list[list[str]]]:
    """Every configuration in grid order (the first ``limit``), marked when on the Pareto front."""
    headers = ["#", *(axis.name for axis in result.axes), "latency", "energy", "power", "tokens/s", "J/token",
               "bottleneck", "front"]
    front = set(result.front)
    shown = result.points if limit is None else result.points[:limit]
    rows = [[str(i), *_point_cells(result, p), "yes" if i in front else ""] for i, p in enumerate(shown)]
    return headers, rows


def front_table(result: SweepResult) -> tuple[list[str], list[list[str]]]:
    """The Pareto front of latency against energy, fastest first."""
    headers = ["#", *(axis.name for axis in result.axes), "latency", "energy", "power", "tokens/s", "J/token",
               "bottleneck"]
    return headers, [[str(i), *_point_cells(result, result.points[i])] for i in result.front]


def sensitivity_table(result: SweepResult) -> tuple[list[str], list[list[str]]]:
    """The parameters ranked by how much they move the end-to-end latency."""
    headers = ["rank", "parameter", "range", "latency at low", "latency at high", "swing", "elasticity"]
    rows = []
    for rank, s in enumerate(result.ranking, 1):
        rows.append([str(rank), s.parameter,
                     f"{parameter_value(result, s.parameter, s.low)} .. {parameter_value(result, s.parameter, s.high)}",
                     si(s.latency_low_s, "s"), si(s.latency_high_s, "s"), f"{100 * s.swing:.1f}%",
                     f"{s.elasticity:+.2f}" if s.elasticity is not None else "-"])
    return headers, rows


def headline(result: SweepResult) -> list[str]:
    """A few sentences: what was swept, the fastest and the most frugal configuration, and the
    parameter that matters most."""
    lines = [f"{len(result.points)} configurations of {_short_workload(result)} on {result.target} "
             f"(machine {result.machine}); {len(result.front)} on the Pareto front of latency against energy."]
    if result.baseline is not None:
        lines.append(f"Unchanged machine: {si(result.baseline.latency_s, 's')}, {si(result.baseline.energy_j, 'J')} "
                     f"({result.baseline.bottleneck or 'no bottleneck named'}).")
    if result.points:
        fastest = min(range(len(result.points)), key=lambda i: (result.points[i].latency_s, i))
        frugal = min(range(len(result.points)), key=lambda i: (result.points[i].energy_j, i))
        lines.append(f"Fastest: #{fastest} at {si(result.points[fastest].latency_s, 's')}; least energy: #{frugal} "
                     f"at {si(result.points[frugal].energy_j, 'J')}.")
    if result.ranking:
        top = result.ranking[0]
        direction = "shortens" if top.latency_high_s < top.latency_low_s else "lengthens"
        lines.append(f"Most sensitive: {top.parameter}: raising it from {parameter_value(result, top.parameter, top.low)} "
                     f"to {parameter_value(result, top.parameter, top.high)} {direction} the end-to-end time "
                     f"from {si(top.latency_low_s, 's')} to {si(top.latency_high_s, 's')} (geometric mean over "
                     "the other parameters).")
    return lines


#: Workload parameters a sweep page's subtitle names (the rest are in its folded details).
_KEY_PARAMS = ("batch", "context", "seq", "dtype", "num_layers", "tp")


def title(result: SweepResult) -> str:
    """A short title: the workload, its phase and the target (its parameters are said apart)."""
    workload = result.workload
    return f"Sweep: {workload.get('name', '?')} {workload.get('phase', '')}".rstrip() + f" on {result.target}"


def subtitle(result: SweepResult) -> str:
    """One line under the title: the workload's main parameters and what was varied."""
    shown = _key_params(result)
    varied = ", ".join(f"{axis.name} ({len(axis.values)} values)" for axis in result.axes)
    return "; ".join(part for part in (shown, f"{len(result.points)} configurations varying {varied}") if part)


def _key_params(result: SweepResult) -> str:
    params = result.workload.get("params") or {}
    return ", ".join(f"{k.replace('_', ' ')} {params[k]}" for k in _KEY_PARAMS if k in params)


def _short_workload(result: SweepResult) -> str:
    workload = result.workload
    name = f"{workload.get('name', '?')} {workload.get('phase', '')}".strip()
    return name + (f" ({_key_params(result)})" if _key_params(result) else "")


def _markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(text: Any) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def render_markdown(result: SweepResult) -> str:
    """The sweep as Markdown: headline, sensitivity ranking, Pareto front, table."""
    parts = [f"# {title(result)}", "", subtitle(result), "", *headline(result), ""]
    parts += ["## Sensitivity: which parameter moves the end-to-end time most", "",
              _markdown_table(*sensitivity_table(result)), ""]
    parts += ["## Pareto front: latency against energy", "", _markdown_table(*front_table(result)), ""]
    headers, rows = table(result)
    more = len(result.points) - len(rows)
    parts += ["## All configurations" + (f" (first {len(rows)} of {len(result.points)}; all in the JSON)" if more else ""),
              "", _markdown_table(headers, rows), ""]
    return "\n".join(parts)


#: The page style (the report layer's pages look the same; this module may not import them).
_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.2em auto; max-width: 1320px; padding: 0 1em; color: #222; }
h1 { font-size: 1.45em; margin: 0.2em 0 0.3em; } h2 { font-size: 1.2em; margin-top: 1.4em; }
p, li, summary, figcaption, h1 { overflow-wrap: anywhere; } .sub { color: #555; margin: 0 0 0.6em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; overflow-wrap: anywhere; }
th { background: #f0f0f0; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 0.6em 1.2em; }
figure.plot { margin: 0; min-width: 0; } figure.plot figcaption { font-weight: 600; margin-bottom: 0.2em; }
.plot svg { max-width: 100%; height: auto; display: block; }
details > summary { cursor: pointer; font-weight: 600; margin: 0.3em 0; }
"""
#: Rows of the configurations table shown before the rest is folded (the page holds them all).
FOLD_ROWS = 25


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _folded(summary: str, inner: str) -> str:
    return f"<details><summary>{html.escape(summary)}</summary>{inner}</details>"


def render_html(result: SweepResult, plots: Sequence[tuple[str, str]] = ()) -> str:
    """The sweep as one HTML page, top-down: a short title and the workload's main parameters,
    the headline, the plots (``(title, inline SVG)`` pairs), the sensitivity and the Pareto
    front, then every configuration (the first rows shown, the whole table folded) and every
    parameter of the workload. The page refers to nothing outside itself."""
    heading = title(result)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(heading)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{html.escape(heading)}</h1>", f'<p class="sub">{html.escape(subtitle(result))}</p>',
             *(f"<p>{html.escape(line)}</p>" for line in headline(result))]
    if plots:
        parts.append('<section class="plots">' + "".join(
            f'<figure class="plot"><figcaption>{html.escape(plot_title)}</figcaption>{svg}</figure>'
            for plot_title, svg in plots) + "</section>")
    parts += ["<h2>Sensitivity</h2>", _html_table(*sensitivity_table(result)),
              "<h2>Pareto front: latency against energy</h2>", _html_table(*front_table(result))]
    headers, rows = table(result)
    parts.append(f"<h2>All configurations ({len(rows)} of {len(result.points)} shown; all in the JSON)</h2>")
    if len(rows) > FOLD_ROWS:
        parts += [_html_table(headers, rows[:FOLD_ROWS]),
                  _folded(f"All {len(rows)} configurations ({len(rows) - FOLD_ROWS} more)", _html_table(headers, rows))]
    else:
        parts.append(_html_table(headers, rows))
    params = result.workload.get("params") or {}
    if params:
        parts.append(_folded("Every workload parameter",
                             _html_table(["parameter", "value"], [[k, v] for k, v in sorted(params.items())])))
    parts.append("</body></html>")
    return "\n".join(parts)


__all__ = ["front_table", "headline", "render_html", "render_markdown", "sensitivity_table", "si", "subtitle", "table",
           "title"]
