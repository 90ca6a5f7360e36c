"""One self-contained HTML file of a capability profile: inline CSS, inline SVG plots, no URLs."""
from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from .markdown import bottom_line_rows, ceiling_rows

#: The page style of every HTML report (profiles, validation): inline, so each file stands alone.
CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; } h3 { font-size: 1.05em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
.caveat { color: #8a4b00; }
.plot svg { max-width: 100%; height: auto; }
ul.meta { padding-left: 1.2em; }
"""


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An HTML table of ``headers`` and ``rows``, every cell escaped."""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _meta(profile: Mapping[str, Any]) -> str:
    target = profile.get("target") or {}
    prov = profile.get("provenance") or {}
    device = prov.get("device") or {}
    items = [f"<b>target</b>: {html.escape(str(target.get('id')))} ({html.escape(str(target.get('name')))}, "
             f"{html.escape(str(target.get('kind')))}; spec from {html.escape(str(target.get('origin') or '-'))})"]
    for run in profile.get("runs") or ():
        items.append(f"<b>run</b> {html.escape(str(run['path']))}: created {html.escape(str(run.get('created')))}, "
                     f"{html.escape(str(run.get('status')))}, {run.get('cases')} cases")
    items.append(f"<b>hosts</b>: {html.escape(', '.join(prov.get('hosts') or []))}; "
                 f"<b>os</b>: {html.escape(str(prov.get('os') or '-'))}; <b>cpu</b>: {html.escape(str(prov.get('cpu') or '-'))}; "
                 f"<b>python</b>: {html.escape(str(prov.get('python') or '-'))}")
    items.append(f"<b>device</b>: {html.escape(str(device.get('name') or '-'))} ({html.escape(str(device.get('backend') or '-'))})")
    libraries = prov.get("libraries") or {}
    if libraries:
        items.append("<b>libraries</b>: " + html.escape(", ".join(f"{k} {v}" for k, v in sorted(libraries.items()))))
    if prov.get("differs"):
        items.append("<b>differs between runs</b>: " + html.escape(", ".join(prov["differs"])))
    return '<ul class="meta">' + "".join(f"<li>{item}</li>" for item in items) + "</ul>"


def render_html(profile: Mapping[str, Any], bottlenecks: Mapping[str, Any] | None = None) -> str:
    """The profile as one HTML document with its plots inline (needs matplotlib: extra ``report``);
    with ``bottlenecks`` (a ``formats.BOTTLENECKS`` document), its section after the ceilings.

    The document refers to nothing outside itself: no scripts, stylesheets, fonts or images by URL.
    """
    from .plots import plot_svgs

    plots = plot_svgs(profile)
    target = profile.get("target") or {}
    title = f"Capability profile: {target.get('name') or target.get('id')}"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(str(title))}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(str(title))}</h1>",
    ]
    line_headers, line_rows = bottom_line_rows(profile)
    if line_rows:
        parts.append("<h2>Bottom line</h2>" + html_table(line_headers, line_rows))
    parts.append(_meta(profile))
    if profile.get("caveats"):
        parts.append("<h2>Caveats</h2><ul>" + "".join(
            f'<li class="caveat">{html.escape(c)}</li>' for c in profile["caveats"]) + "</ul>")
    headers, rows = ceiling_rows(profile)
    parts.append("<h2>Ceilings</h2>"
                 + (html_table(headers, rows) if rows else "<p>No ceiling could be read from these runs.</p>"))
    sources = [(c["name"], c["spec_source"]) for c in profile.get("ceilings") or () if c.get("spec_source")]
    if sources:
        parts.append("<h3>Spec figures</h3><ul>" + "".join(
            f"<li>{html.escape(name)}: {html.escape(source)}</li>" for name, source in sources) + "</ul>")
    if bottlenecks is not None:
        from .bottleneck_report import html_section

        parts.append(html_section(bottlenecks))
    if plots:
        parts.append("<h2>Plots</h2>")
        for plot_title, svg in plots:
            parts.append(f'<h3>{html.escape(plot_title)}</h3><div class="plot">{svg}</div>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
