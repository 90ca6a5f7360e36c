"""Self-contained HTML pages (inline CSS, inline SVG plots, no URLs) and the capability profile's.

Every page reads top-down: its title, the bottom line in a few figures, the plots, then the
details (tables, caveats, provenance). Caveats are grouped (each said once, with how many it
concerns and which); a table longer than :data:`FOLD_ROWS` shows its first rows and keeps the
whole table folded in a ``<details>`` element. The helpers here are those of every page: the
profile's (:func:`render_html`), the profile comparison's, the validation's and the sweep's.
"""
from __future__ import annotations

import html
from typing import Any, Iterable, Mapping, Sequence

from .markdown import bottom_line_rows, format_value

#: The page style of every HTML report: inline, so each file stands alone. Cells wrap anywhere,
#: so no long case id runs out of its box; plots share rows two by two where the window allows.
CSS = """
body { font-family: system-ui, sans-serif; margin: 1.2em auto; max-width: 1320px; padding: 0 1em; color: #222; }
h1 { font-size: 1.45em; margin: 0.2em 0 0.3em; overflow-wrap: anywhere; }
h2 { font-size: 1.2em; margin-top: 1.4em; } h3 { font-size: 1.05em; }
p, li, summary, figcaption { overflow-wrap: anywhere; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
th { background: #f0f0f0; }
.sub { color: #555; margin: 0 0 0.6em; }
.headline { display: flex; flex-wrap: wrap; gap: 0.35em 0.5em; margin: 0.4em 0 0.8em; padding: 0; }
.headline li { list-style: none; border: 1px solid #d8d8d8; border-radius: 4px; padding: 0.15em 0.5em;
               font-size: 0.9em; background: #fafafa; }
.headline li.warn { border-color: #e0a040; background: #fff6e8; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 0.6em 1.2em; }
figure.plot { margin: 0; min-width: 0; }
figure.plot figcaption { font-weight: 600; font-size: 0.95em; margin-bottom: 0.2em; }
.plot svg { max-width: 100%; height: auto; display: block; }
.caveat { color: #8a4b00; }
.count { font-weight: 600; color: #8a4b00; }
details > summary { cursor: pointer; font-weight: 600; margin: 0.3em 0; }
ul.meta { padding-left: 1.2em; font-size: 0.9em; }
sup.ref { color: #8a4b00; }
"""

_WARN = ' class="warn"'

#: Rows a table shows before the rest is folded away (the whole table stays in the page).
FOLD_ROWS = 25


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An HTML table of ``headers`` and ``rows``, every cell escaped."""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def folded_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], shown: int = FOLD_ROWS,
                 what: str = "rows") -> str:
    """The table, or for more than ``shown`` rows its first ``shown`` and the whole table folded
    (``<details>``) after them."""
    if len(rows) <= shown:
        return html_table(headers, rows)
    return (html_table(headers, rows[:shown])
            + f"<details><summary>All {len(rows)} {html.escape(what)} ({len(rows) - shown} more)</summary>"
            + html_table(headers, rows) + "</details>")


def folded(summary: str, inner: str, open_: bool = False) -> str:
    """``inner`` folded under a ``<summary>`` line (escaped)."""
    return f"<details{' open' if open_ else ''}><summary>{html.escape(summary)}</summary>{inner}</details>"


def group_caveats(items: Iterable[tuple[str | None, str]]) -> list[tuple[str, list[str], int]]:
    """(text, subjects, count) per distinct caveat text, in the order first seen: ``items`` are
    (subject or None, text) pairs; a subject is named once however often it repeats a text."""
    groups: dict[str, tuple[list[str], list[int]]] = {}
    for subject, text in items:
        subjects, count = groups.setdefault(text, ([], [0]))
        count[0] += 1
        if subject and subject not in subjects:
            subjects.append(subject)
    return [(text, subjects, count[0]) for text, (subjects, count) in groups.items()]


def split_subject(caveat: str, subjects: Iterable[str]) -> tuple[str | None, str]:
    """(subject, rest) when ``caveat`` starts with one of ``subjects`` (a ceiling name, say)
    followed by a space or a colon; else (None, caveat). The longest subject wins."""
    for subject in sorted(subjects, key=len, reverse=True):
        if caveat.startswith(subject) and caveat[len(subject):len(subject) + 1] in (" ", ":"):
            return subject, caveat[len(subject):].lstrip(": ").strip()
    return None, caveat


def caveat_list(groups: Sequence[tuple[str, list[str], int]], numbered: bool = False, names: int = 6) -> str:
    """The grouped caveats as an HTML list: each text once, with its count and (the first
    ``names`` of) what it concerns; ``numbered`` lists are what the tables' ``[n]`` refer to."""
    items = []
    for text, subjects, count in groups:
        head = f'<span class="count">{count}x</span> ' if count > 1 else ""
        about = ""
        if subjects:
            shown = ", ".join(html.escape(s) for s in subjects[:names])
            more = f" and {len(subjects) - names} more" if len(subjects) > names else ""
            about = f" <i>({shown}{more})</i>"
        items.append(f'<li class="caveat">{head}{html.escape(text)}{about}</li>')
    tag = "ol" if numbered else "ul"
    return f"<{tag}>" + "".join(items) + f"</{tag}>"


def headline_list(items: Sequence[tuple[str, bool]]) -> str:
    """The bottom line as a row of short items (escaped text, flagged ones marked)."""
    if not items:
        return ""
    return '<ul class="headline">' + "".join(
        f"<li{_WARN if warn else ''}>{html.escape(text)}</li>" for text, warn in items) + "</ul>"


def plot_grid(plots: Sequence[tuple[str, str]]) -> str:
    """(title, inline SVG) pairs as a grid of captioned figures."""
    if not plots:
        return ""
    return '<section class="plots">' + "".join(
        f'<figure class="plot"><figcaption>{html.escape(title)}</figcaption>{svg}</figure>'
        for title, svg in plots) + "</section>"


def page(title: str, body: Sequence[str], subtitle: str | None = None) -> str:
    """A whole HTML document: ``title`` (escaped), an optional subtitle line, ``body`` parts (HTML)."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    if subtitle:
        parts.append(f'<p class="sub">{html.escape(subtitle)}</p>')
    parts += [part for part in body if part]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


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


def _subtitle(profile: Mapping[str, Any]) -> str:
    target = profile.get("target") or {}
    runs = profile.get("runs") or []
    hosts = ", ".join((profile.get("provenance") or {}).get("hosts") or []) or "-"
    created = ", ".join(sorted({str(r.get("created") or "-")[:10] for r in runs})) or "-"
    return (f"target {target.get('id')} ({target.get('kind')}); {len(runs)} run(s), "
            f"{sum(int(r.get('cases') or 0) for r in runs)} cases, on {hosts}, {created}")


def profile_caveats(profile: Mapping[str, Any]) -> tuple[list[tuple[str, list[str], int]], dict[str, list[int]]]:
    """The profile's caveats grouped (its own, then its ceilings'), and for each ceiling the
    1-based numbers of its caveats in that list."""
    items: list[tuple[str | None, str]] = [(None, c) for c in profile.get("caveats") or ()]
    for ceiling in profile.get("ceilings") or ():
        items += [(ceiling["name"], c) for c in ceiling.get("caveats") or ()]
    groups = group_caveats(items)
    number = {text: i for i, (text, _, _) in enumerate(groups, 1)}
    refs = {c["name"]: [number[t] for t in dict.fromkeys(c.get("caveats") or ())] for c in profile.get("ceilings") or ()}
    return groups, refs


def _refs(numbers: Sequence[int]) -> str:
    return " ".join(f"[{n}]" for n in numbers) or "-"


def _headline(profile: Mapping[str, Any]) -> list[tuple[str, bool]]:
    items = []
    for row in profile.get("bottom_line") or ():
        text = f"{row['name']} {format_value(row.get('value'), row.get('unit') or '')}"
        if row.get("fraction_of_spec") is not None:
            text += f" ({100 * row['fraction_of_spec']:.0f}% of spec)"
        warn = bool(row.get("unstable") or row.get("flagged"))
        if warn:
            text += " (unstable)" if row.get("unstable") else " (flagged)"
        items.append((text, warn))
    return items


def _ceiling_table(profile: Mapping[str, Any], refs: Mapping[str, list[int]]) -> tuple[list[str], list[list[str]]]:
    from .markdown import ceiling_rows

    headers, rows = ceiling_rows(profile)
    names = [c["name"] for c in profile.get("ceilings") or ()]
    index = headers.index("caveats")
    headers = [*headers[:index], "caveats (numbers in the list above)"]
    return headers, [[*row[:index], _refs(refs.get(name, []))] for row, name in zip(rows, names)]


def render_html(profile: Mapping[str, Any], bottlenecks: Mapping[str, Any] | None = None) -> str:
    """The profile as one HTML document with its plots inline (needs matplotlib: extra ``report``);
    with ``bottlenecks`` (a ``formats.BOTTLENECKS`` document), its section after the ceilings.

    Top-down: the bottom-line figures, the plots, the bottom line's table, the caveats grouped,
    the ceilings (each caveat a number into that list), the spec sources, the bottlenecks and
    the runs' provenance. The document refers to nothing outside itself: no scripts,
    stylesheets, fonts or images by URL.
    """
    from .plots import plot_svgs

    plots = plot_svgs(profile)
    target = profile.get("target") or {}
    title = f"Capability profile: {target.get('name') or target.get('id')}"
    groups, refs = profile_caveats(profile)
    parts = [headline_list(_headline(profile)), plot_grid(plots)]
    line_headers, line_rows = bottom_line_rows(profile)
    if line_rows:
        names = [row["name"] for row in profile.get("bottom_line") or ()]
        line_headers = [*line_headers[:-1], "caveats"]
        line_rows = [[*row[:-1], _refs(refs.get(name, []))] for row, name in zip(line_rows, names)]
        parts.append("<h2>Bottom line</h2>" + html_table(line_headers, line_rows))
    if groups:
        parts.append(f"<h2>Caveats ({len(groups)} distinct, {sum(g[2] for g in groups)} in all)</h2>"
                     + caveat_list(groups, numbered=True))
    headers, rows = _ceiling_table(profile, refs)
    parts.append("<h2>Ceilings</h2>"
                 + (folded_table(headers, rows, what="ceilings") if rows
                    else "<p>No ceiling could be read from these runs.</p>"))
    sources = [(c["name"], c["spec_source"]) for c in profile.get("ceilings") or () if c.get("spec_source")]
    if sources:
        grouped = group_caveats((name, source) for name, source in sources)
        parts.append("<h3>Spec figures</h3><ul>" + "".join(
            f"<li>{html.escape(', '.join(names))}: {html.escape(source)}</li>" for source, names, _ in grouped) + "</ul>")
    if bottlenecks is not None:
        from .bottleneck_report import html_section

        parts.append(html_section(bottlenecks))
    parts.append("<h2>Runs and provenance</h2>" + _meta(profile))
    return page(title, parts, _subtitle(profile))


__all__ = ["CSS", "FOLD_ROWS", "caveat_list", "folded", "folded_table", "group_caveats", "headline_list",
           "html_table", "page", "plot_grid", "profile_caveats", "render_html", "split_subject"]
