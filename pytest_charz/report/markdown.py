"""Markdown rendering of a capability profile (and the text tables the CLI prints)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .units import format_bandwidth, format_bytes, format_flops, format_quantity, format_time


def format_value(value: float | None, unit: str) -> str:
    """A ceiling's value in human units (``-`` when unknown); :func:`.units.format_quantity`."""
    return format_quantity(value, unit)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], markdown: bool = True) -> str:
    """A Markdown pipe table, or aligned plain text (tabulate's when installed) for a terminal."""
    if markdown:
        lines = ["| " + " | ".join(_cell(h) for h in headers) + " |",
                 "|" + "|".join("---" for _ in headers) + "|"]
        lines.extend("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)
        return "\n".join(lines)
    try:
        from tabulate import tabulate

        return str(tabulate([list(map(str, r)) for r in rows], headers=list(headers), tablefmt="simple",
                            disable_numparse=True))
    except ImportError:
        widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
        return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(r, widths)) for r in [headers, *rows])


def _conditions_text(conditions: Mapping[str, Any]) -> str:
    parts = []
    steal = conditions.get("max_steal_fraction")
    if steal:
        parts.append(f"steal<={100 * steal:.1f}%")
    if conditions.get("other_load_seen"):
        parts.append("other load")
    if conditions.get("throttle_reasons"):
        parts.append("throttled: " + ",".join(conditions["throttle_reasons"]))
    change = conditions.get("max_cpu_freq_change")
    if change is not None and change > 0.05:
        parts.append(f"clock change {100 * change:.0f}%")
    if not conditions.get("clocks_readable", True):
        parts.append("clocks unread")
    return "; ".join(parts) or "clean"


def _runs_text(evidence: Mapping[str, Any], runs: int) -> str:
    """Which of several merged runs a figure came from (``evidence["runs"]``, 0-based), e.g.
    ", from runs 1 and 3 of 3" (the run list above the table numbers them from 1); empty for one run."""
    used = [int(i) + 1 for i in evidence.get("runs") or () if isinstance(i, int)]
    if runs < 2 or not used:
        return ""
    if len(used) == runs:
        return f", from all {runs} runs"
    named = ", ".join(str(i) for i in used[:-1]) + (" and " if len(used) > 1 else "") + str(used[-1])
    return f", from run{'s' if len(used) > 1 else ''} {named} of {runs}"


def ceiling_rows(profile: Mapping[str, Any], with_evidence: bool = True) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the ceilings table: measured, spec, % of spec, evidence, caveats."""
    headers = ["ceiling", "measured", "spec", "% of spec"]
    if with_evidence:
        headers += ["evidence", "caveats"]
    rows = []
    for ceiling in profile.get("ceilings") or ():
        unit = ceiling.get("unit", "")
        measured = format_value(ceiling.get("value"), unit)
        if ceiling.get("latency_s") is not None:
            measured += f" + {format_time(ceiling['latency_s'])} latency"
        fraction = ceiling.get("fraction_of_spec")
        row = [ceiling["name"], measured, format_value(ceiling.get("spec"), unit),
               f"{100 * fraction:.1f}%" if fraction is not None else "-"]
        if with_evidence:
            evidence = ceiling.get("evidence") or {}
            cases = evidence.get("cases") or []
            fit = ceiling.get("fit")
            text = (f"{len(cases)} case(s), {evidence.get('samples', 0)} samples"
                    + (f" (-{evidence['discarded']})" if evidence.get("discarded") else "")
                    + (f", fit r2={fit['r2']:.3f}" if fit else "")
                    + _runs_text(evidence, len(profile.get("runs") or ()))
                    + f"; {_conditions_text(evidence.get('conditions') or {})}")
            row += [text, "; ".join(ceiling.get("caveats") or []) or "-"]
        rows.append(row)
    return headers, rows


def _curve_tables(curves: Mapping[str, Any]) -> list[str]:
    out: list[str] = []

    def section(title: str, headers: list[str], rows: list[list[Any]]) -> None:
        if rows:
            out.extend([f"### {title}", "", render_table(headers, rows), ""])

    for key, title in (("bandwidth", "Bandwidth vs working set (read)"), ("copy", "Copy bandwidth vs working set"),
                       ("latency", "Latency staircase (pointer chase)")):
        curve = curves.get(key)
        if not curve:
            continue
        unit = curve.get("unit", "B/s")
        section(title, ["run", "working set", "measured", "case"],
                [[p.get("run", 0), format_bytes(p["working_set_bytes"]), format_value(p["value"], unit), p["case"]]
                 for p in curve.get("points", [])])
        section(f"{title}: detected boundaries", ["run", "level", "capacity", "between", "before", "after"],
                [[b.get("run", 0), b["level"], format_bytes(b["capacity_bytes"]),
                  f"{format_bytes(b['lower_size_bytes'])} .. {format_bytes(b['upper_size_bytes'])}",
                  format_value(b["value_before"], unit), format_value(b["value_after"], unit)]
                 for b in curve.get("boundaries", [])])
    if curves.get("flops"):
        section("Compute (FMA and GEMM)", ["run", "op", "dtype", "shape", "achieved", "FLOP/byte", "case"],
                [[p.get("run", 0), p["op"], p["dtype"], ",".join(f"{k}={v}" for k, v in (p.get("shape") or {}).items()),
                  format_flops(p["flop_per_s"]),
                  f"{p['intensity_flop_per_byte']:.3g}" if p.get("intensity_flop_per_byte") else "-", p["case"]]
                 for p in curves["flops"]["points"]])
    if curves.get("stream"):
        section("STREAM", ["run", "kernel", "threads", "working set", "bandwidth", "counted", "case"],
                [[p.get("run", 0), p.get("kernel"), p.get("threads"), format_bytes(p["working_set_bytes"] or 0),
                  format_bandwidth(p["bytes_per_s"]), "yes" if p.get("counted") else "no", p["case"]]
                 for p in curves["stream"]["points"]])
    for kind, points in ((curves.get("transfer") or {}).get("points") or {}).items():
        section(f"Transfers: {kind}", ["run", "bytes", "time", "bandwidth", "pinned", "case"],
                [[p.get("run", 0), format_bytes(p["bytes"]), format_time(p["time_s"]),
                  format_bandwidth(p["bytes"] / p["time_s"]), "yes" if p.get("pinned") else "no", p["case"]]
                 for p in points])
    if curves.get("overhead"):
        section("Launch, dispatch and wake-up overheads", ["run", "op", "kind", "per op", "case"],
                [[p.get("run", 0), p["op"], p.get("kind") or "-", format_time(p["time_s"]), p["case"]]
                 for p in curves["overhead"]["points"]])
    if curves.get("contention"):
        section("Contention", ["run", "pair", "aggressor", "alone", "contended", "slowdown"],
                [[p.get("run", 0), p["pair"], p.get("aggressor") or "-", format_time(p["alone_s"]),
                  format_time(p["contended_s"]), f"{p['slowdown']:.3g}x"]
                 for p in curves["contention"].get("pairs", [])])
    return out


def summary_lines(profile: Mapping[str, Any]) -> list[str]:
    """Target, runs and provenance as Markdown bullet lines."""
    target = profile.get("target") or {}
    prov = profile.get("provenance") or {}
    device = prov.get("device") or {}
    lines = [f"- **target**: `{target.get('id')}` ({target.get('name')}, {target.get('kind')}; spec from {target.get('origin') or '-'})"]
    runs = profile.get("runs") or ()
    for number, run in enumerate(runs, 1):
        label = f"run {number}" if len(runs) > 1 else "run"      # the evidence column names runs by number
        lines.append(f"- **{label}** `{run['path']}`: created {run.get('created')}, {run.get('status')}, {run.get('cases')} cases")
    lines.append(f"- **hosts**: {', '.join(prov.get('hosts') or []) or '-'}; **os**: {prov.get('os') or '-'}; "
                 f"**cpu**: {prov.get('cpu') or '-'}; **python**: {prov.get('python') or '-'}")
    lines.append(f"- **device**: {device.get('name') or '-'} ({device.get('backend') or '-'})"
                 + "".join(f"; {k} {v}" for k, v in (device.get("versions") or {}).items()))
    git = prov.get("suite_git")
    if git:
        lines.append(f"- **suite git**: {git if isinstance(git, str) else ', '.join(f'{k}={v}' for k, v in git.items())}")
    libraries = prov.get("libraries") or {}
    if libraries:
        lines.append("- **libraries**: " + ", ".join(f"{k} {v}" for k, v in sorted(libraries.items())))
    if prov.get("differs"):
        lines.append(f"- **differs between runs**: {', '.join(prov['differs'])}")
    return lines


def bottom_line_rows(profile: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the bottom line: the figures to act on, evidence and first caveat; a
    flagged figure (profile/sanity.py) says so after its name, with its rules."""
    rows = []
    for row in profile.get("bottom_line") or ():
        unit = row.get("unit") or ""
        value = format_value(row.get("value"), unit)
        if row.get("range"):
            value += f" (runs: {format_value(row['range'][0], unit)} .. {format_value(row['range'][1], unit)})"
        fraction = row.get("fraction_of_spec")
        flagged = f" (flagged: {', '.join(row['flagged'])})" if row.get("flagged") else ""
        rows.append([row["name"] + (" (unstable)" if row.get("unstable") else "") + flagged, value,
                     f"{100 * fraction:.0f}%" if fraction is not None else "-", row.get("evidence") or "-",
                     row.get("caveat") or "-"])
    return ["figure", "value", "% of spec", "evidence", "caveat"], rows


def render_markdown(profile: Mapping[str, Any], bottlenecks: Mapping[str, Any] | None = None) -> str:
    """The whole profile as a Markdown document; with ``bottlenecks`` (a ``formats.BOTTLENECKS``
    document of its runs), a section of what limits each case after the ceilings."""
    target = profile.get("target") or {}
    out = [f"# Capability profile: {target.get('name') or target.get('id')}", ""]
    headers, rows = bottom_line_rows(profile)
    if rows:
        out += ["## Bottom line", "", render_table(headers, rows), ""]
    out += [*summary_lines(profile), ""]
    if profile.get("caveats"):
        out += ["## Caveats", "", *[f"- {c}" for c in profile["caveats"]], ""]
    headers, rows = ceiling_rows(profile)
    out += ["## Ceilings", "", render_table(headers, rows) if rows else "No ceiling could be read from these runs.", ""]
    sources = [(c["name"], c["spec_source"]) for c in profile.get("ceilings") or () if c.get("spec_source")]
    if sources:
        out += ["Spec figures:", "", *[f"- {name}: {source}" for name, source in sources], ""]
    if bottlenecks is not None:
        from .bottleneck_report import markdown_section

        out += markdown_section(bottlenecks)
    curve_lines = _curve_tables(profile.get("curves") or {})
    if curve_lines:
        out += ["## Curves", "", *curve_lines]
    return "\n".join(out).rstrip() + "\n"
