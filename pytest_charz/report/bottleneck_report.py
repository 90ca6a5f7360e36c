"""Bottleneck tables: the versioned document of a run's bottlenecks (``formats.BOTTLENECKS``) and
its text, Markdown and HTML renderings, per case and, for workload cases, per op.

The verdicts are :mod:`pytest_charz.evidence.bottleneck`'s; this module only lays them out. The
renderers read the document (a mapping), so a saved JSON renders the same as a fresh one.
"""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..formats import BOTTLENECKS
from .markdown import render_table
from .units import format_bandwidth, format_flops, format_time

if TYPE_CHECKING:
    from ..evidence.bottleneck import Bottleneck, BottleneckContext
    from ..hookspec import ReportSection
    from ..records import Run

#: Evidence items shown per case in the tables (the JSON holds all of them).
TOP_EVIDENCE = 3


def bottleneck_document(run: "Run", bottlenecks: Sequence["Bottleneck"], context: "BottleneckContext",
                        run_path: str, profile_path: str | None) -> dict[str, Any]:
    """The ``formats.BOTTLENECKS`` document of ``run``'s bottlenecks and what they were read against."""
    from ..evidence import bottleneck_rules as rules
    from ..measure.clock import utc_now_iso

    return {
        **BOTTLENECKS.stamp(), "created": utc_now_iso(), "run": run_path,
        "target": {"id": run.target.id, "name": run.target.name, "kind": run.target.kind},
        "ceilings": context.ceilings_origin or "none", "profile": profile_path, "model": context.model,
        "dispatch": {"value_s": context.dispatch_s, "source": context.dispatch_source},
        "rules": {"clear_margin": rules.CLEAR_MARGIN, "near_ceiling": rules.NEAR_CEILING,
                  "beyond_ceiling": rules.BEYOND_CEILING, "unexplained": rules.UNEXPLAINED,
                  "interference_slowdown": rules.INTERFERENCE_SLOWDOWN},
        "cases": [b.to_json() for b in bottlenecks],
    }


def _value_text(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit == "s":
        return format_time(value)
    if unit == "B/s":
        return format_bandwidth(value)
    if unit == "FLOP/s":
        return format_flops(value)
    if unit == "fraction":
        return f"{100 * value:.1f}%"
    if unit == "x":
        return f"{value:.3g}x"
    return f"{value:.3g} {unit}".rstrip()


def evidence_text(evidence: Mapping[str, Any], with_source: bool = False) -> str:
    """One cited fact as text: ``what: value vs against (fraction) [source]``."""
    text = str(evidence["what"])
    value = _value_text(evidence.get("value"), str(evidence.get("unit") or ""))
    if value:
        text += f": {value}"
    if evidence.get("against"):
        text += f" vs {evidence['against']}"
    if evidence.get("fraction") is not None:
        text += f" ({evidence['fraction']:.2f})"
    if with_source and evidence.get("source"):
        text += f" [{evidence['source']}]"
    return text


def _alternative_text(alternatives: Sequence[Mapping[str, Any]]) -> str:
    if not alternatives:
        return "-"
    first = alternatives[0]
    text = str(first["kind"]) + (f" ({first['term']})" if first.get("term") and first["term"] != first["kind"] else "")
    if first.get("margin") is not None:
        text += f", {first['margin']:.3g}x smaller"
    if first.get("note"):
        text += f", {first['note']}"
    return text


def case_rows(document: Mapping[str, Any], top: int = TOP_EVIDENCE) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the per-case table: bottleneck, confidence, top evidence, runner-up."""
    rows = []
    for case in document.get("cases") or ():
        shown = [evidence_text(e) for e in case.get("evidence") or ()][:top]
        rows.append([case["subject"], case["kind"], case["confidence"], format_time(case.get("measured_s")),
                     "; ".join(shown) or "-", _alternative_text(case.get("alternatives") or ())])
    return ["case", "bottleneck", "confidence", "measured", "evidence", "runner-up"], rows


def op_rows(case: Mapping[str, Any], top: int = 1) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of one workload case's ops."""
    rows = []
    for op in case.get("ops") or ():
        name = str(op["subject"]).rsplit(" :: ", 1)[-1]
        shown = [evidence_text(e) for e in op.get("evidence") or ()][:top]
        rows.append([name, op.get("op_class") or "-", format_time(op.get("measured_s")), op["kind"],
                     op["confidence"], "; ".join(shown) or "-"])
    return ["op", "class", "time", "bottleneck", "confidence", "evidence"], rows


def _counts(document: Mapping[str, Any]) -> str:
    counts: dict[str, int] = {}
    for case in document.get("cases") or ():
        counts[case["kind"]] = counts.get(case["kind"], 0) + 1
    return ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _header_lines(document: Mapping[str, Any]) -> list[str]:
    dispatch = document.get("dispatch") or {}
    return [f"ceilings: {document.get('ceilings')}; model: {document.get('model')}",
            f"host dispatch per op: {format_time(dispatch.get('value_s'))} ({dispatch.get('source')})",
            f"cases by bottleneck: {_counts(document) or '-'}"]


def markdown_section(document: Mapping[str, Any], level: int = 2) -> list[str]:
    """The bottlenecks as Markdown lines: a per-case table, then one table per workload case."""
    mark = "#" * level
    out = [f"{mark} Bottlenecks", "", *(f"- {line}" for line in _header_lines(document)), ""]
    headers, rows = case_rows(document)
    out += [render_table(headers, rows) if rows else "No case to attribute.", ""]
    for case in document.get("cases") or ():
        if case.get("ops"):
            headers, rows = op_rows(case)
            out += [f"{mark}# Ops of {case['subject']}", "", render_table(headers, rows), ""]
    return out


def render_markdown(document: Mapping[str, Any]) -> str:
    """The bottleneck document as a Markdown page."""
    target = document.get("target") or {}
    lines = [f"# Bottlenecks: {target.get('name') or target.get('id')}", "", f"Run: `{document.get('run')}`", "",
             *markdown_section(document)]
    return "\n".join(lines).rstrip() + "\n"


#: Ops of a workload case shown in the text (the longest first); Markdown and JSON hold all.
TEXT_OPS = 12


def render_text(document: Mapping[str, Any], width: int = 120) -> str:
    """The per-case table (and each workload case's longest ops) as aligned text no wider than
    ``width``: the evidence wraps, and a workload case shows its ``TEXT_OPS`` longest ops."""
    from .text import fitted_table

    import textwrap

    lines = [*(wrapped for line in _header_lines(document)
               for wrapped in textwrap.wrap(line, width, subsequent_indent="  ")), ""]
    headers, rows = case_rows(document, top=2)
    if not rows:
        lines.append("no case to attribute")
    for subject, kind, confidence, measured, evidence, runner_up in rows:
        # one case per record: its id whole on the first line, what limits it and why wrapped below
        lines.append(subject)
        detail = f"{kind} ({confidence} confidence), {measured}: {evidence}" + (
            f"; runner-up: {runner_up}" if runner_up != "-" else "")
        lines.extend(textwrap.wrap(detail, width, initial_indent="    ", subsequent_indent="    "))
    for case in document.get("cases") or ():
        if case.get("ops"):
            headers, rows = op_rows(case)
            order = sorted(range(len(rows)), key=lambda i: -(case["ops"][i].get("measured_s") or 0.0))
            shown = [rows[i] for i in sorted(order[:TEXT_OPS])]
            title = f"ops of {case['subject']}" + (f" (the {len(shown)} longest of {len(rows)}; all with "
                                                    "--format md or json):" if len(rows) > len(shown) else ":")
            lines += ["", *textwrap.wrap(title, width, subsequent_indent="  "),
                      fitted_table(headers, shown, width, shrink=(5, 0, 1), keep_end=(0,))]
    return "\n".join(lines) + "\n"


def html_section(document: Mapping[str, Any]) -> str:
    """The bottlenecks as an HTML fragment (the page's CSS and table style): the per-case table,
    then each workload case's ops, the longest first; a long table shows its first rows and keeps
    the whole folded."""
    from .html import folded_table

    parts = ["<h2>Bottlenecks</h2>", '<ul class="meta">' + "".join(
        f"<li>{html.escape(line)}</li>" for line in _header_lines(document)) + "</ul>"]
    headers, rows = case_rows(document)
    parts.append(folded_table(headers, rows, what="cases") if rows else "<p>No case to attribute.</p>")
    for case in document.get("cases") or ():
        if case.get("ops"):
            headers, rows = op_rows(case)
            order = sorted(range(len(rows)), key=lambda i: -(case["ops"][i].get("measured_s") or 0.0))
            parts.append(f"<h3>Ops of {html.escape(str(case['subject']))} ({len(rows)}, the longest first)</h3>"
                         + folded_table(headers, [rows[i] for i in order], what="ops"))
    return "\n".join(parts)


def report_sections(run: "Run", profile: Mapping[str, Any] | None = None) -> list["ReportSection"]:
    """A terminal section of the run's bottlenecks, for a ``pytest_charz_report_sections``
    implementation (a conftest: ``return report_sections(run)``); the ceilings are ``profile``'s,
    else those of the profile the run itself gives."""
    from ..evidence.bottleneck import attribute_run, context_for
    from ..hookspec import ReportSection
    from ..profile import build_profile

    context = context_for(run, profile if profile is not None else build_profile([run]))
    document = bottleneck_document(run, attribute_run(run, context), context, run.path or "this session", None)
    return [ReportSection("charz: bottlenecks", tuple(render_text(document).rstrip("\n").splitlines()))]
