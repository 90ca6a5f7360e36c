"""The validation report (Markdown and one self-contained HTML file) from a validation JSON.

Everything shown is read from the JSON that :mod:`pytest_charz.validation.models` writes; plots are
inline SVG drawn with matplotlib's Agg canvas (imported only when plots are drawn).
"""
from __future__ import annotations

import html
import math
from typing import Any, Mapping, Sequence

from .html import CSS as _CSS
from .html import html_table
from .markdown import render_table
from .units import format_time

REGIME_COLOURS = {"compute": "#1f77b4", "memory": "#d62728", "latency": "#2ca02c", "launch": "#9467bd",
                  "transfer": "#ff7f0e"}


def _pct(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{100 * value:.1f}%"


def summary_rows(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Held-out rows: model, regime, n, MAPE, median and P90 |error|, bias, interval coverage."""
    headers = ["model", "regime", "n", "MAPE", "median |err|", "P90 |err|", "bias", "coverage"]
    rows = []
    for model, table in report["tables"].items():
        for regime, s in table.items():
            rows.append([model, regime, str(s["n"]), _pct(s["mape"]), _pct(s["median_abs"]), _pct(s["p90_abs"]),
                         _pct(s["bias"]), _pct(s["coverage"])])
    return headers, rows


def _case_rows(cases: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    headers = ["case", "target", "calibrated on", "regime", "measured", "predicted", "interval", "error", "limit"]
    rows = [[c["case"], c["target"], c["calibrated_on"], c["regime"], format_time(c["measured_s"]),
             format_time(c["predicted_s"]), f"{format_time(c['interval_s'][0])}-{format_time(c['interval_s'][1])}",
             _pct(c["error"]), _pct(c["limit"])] for c in cases]
    return headers, rows


def _transfer_rows(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["model", "calibrated on", "tested on", "regime", "n", "median |err|", "P90 |err|", "bias", "coverage"]
    rows = [[t["model"], t["calibrated_on"], t["tested_on"], t["regime"], str(t["n"]), _pct(t["median_abs"]),
             _pct(t["p90_abs"]), _pct(t["bias"]), _pct(t["coverage"])] for t in report.get("transfer") or ()]
    return headers, rows


def _calibration_rows(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["model", "target", "calibrated on", "held out", "bands (regime: lo..hi, method, n)", "measured figures"]
    rows = []
    for model, targets in (report.get("calibrations") or {}).items():
        for target, c in targets.items():
            bands = "; ".join(f"{r}: {_pct(b['lo'])}..{_pct(b['hi'])} ({b['method']}, n={b['n']})"
                              for r, b in c["bands"].items())
            rows.append([model, target, ", ".join(c["fitted_on"]), ", ".join(c["held_out"]) or "-", bands or "-",
                         ", ".join(c.get("ceilings_filled") or ()) or "-"])
    return headers, rows


def _sections(report: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]], str]]:
    """(title, headers, rows, text when empty) of every table, in report order."""
    sections = [("Held-out error by model and regime", *summary_rows(report), "No model scored any case.")]
    for model in report["models"]:
        sections.append((f"{model}: held-out cases outside the interval", *_case_rows(report["outside_interval"][model]),
                         "None."))
        missing = report["not_covered"].get(model) or []
        sections.append((f"{model}: cases the model does not cover", ["case", "target", "reason"],
                         [[m["case"], m["target"], m["reason"]] for m in missing], "None."))
    sections.append(("Transfer: calibrated on one run or target, tested on another", *_transfer_rows(report),
                     "Needs runs of two or more targets, or two or more runs."))
    for model in report["models"]:
        sections.append((f"{model}: where the model stops transferring", *_case_rows(report["stops_transferring"][model]),
                         "No case beyond twice the calibrated P90 error or outside its interval."))
    sections.append(("What was calibrated and held out", *_calibration_rows(report), "No calibration."))
    sections += workload_sections(report)
    return sections


def _summary_cells(s: Mapping[str, Any]) -> list[str]:
    return [str(s["n"]), _pct(s["median_abs"]), _pct(s["p90_abs"]), _pct(s["within_2x"]), _pct(s["coverage"])]


def workload_rows(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per model and target: ops, workloads end to end and both, calibrated on microbenchmarks only."""
    headers = ["model", "target", "tested on", "n", "median |err|", "P90 |err|", "within 2x", "coverage"]
    rows = [[w["model"], w["target"], part, *_summary_cells(w[key])]
            for w in report.get("workloads") or ()
            for part, key in (("ops", "ops"), ("workloads end to end", "workloads"), ("ops and workloads", "all"))]
    return headers, rows


def workload_sections(report: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]], str]]:
    """The workload transfer's tables: the summary, error per op class, where it stops transferring."""
    if not report.get("workloads"):
        return []
    sections = [("Workloads: calibrated on microbenchmarks only, tested on workload ops and end to end",
                 *workload_rows(report), "No workload case.")]
    for w in report["workloads"]:
        classes = [[name, *_summary_cells(s)] for name, s in w["by_class"].items()]
        sections.append((f"{w['model']} on {w['target']}: error per op class",
                         ["op class", "n", "median |err|", "P90 |err|", "within 2x", "coverage"], classes, "None."))
        worst = [[c["name"], c["level"], c["op_class"], format_time(c["measured_s"]), format_time(c["predicted_s"]),
                  f"{format_time(c['interval_s'][0])}-{format_time(c['interval_s'][1])}", _pct(c["error"]),
                  "; ".join(n for n in c["notes"] if n.startswith("extrapolated")) or "-"]
                 for c in w["stops_transferring"]]
        sections.append((f"{w['model']} on {w['target']}: ops and workloads beyond 2x or outside the interval",
                         ["name", "level", "op class", "measured", "predicted", "interval", "error", "note"], worst,
                         "None."))
    return sections


def _intro(report: Mapping[str, Any]) -> list[str]:
    lines = [f"created {report['created']}; error = {report['error']}; interval level {report['level']:.0%}",
             f"split: {report['split']}"]
    lines += [f"run {r['path'] or '-'}: target {r['target']}, created {r['created']}, {r['cases']} cases"
              for r in report["runs"]]
    lines += [f"skipped {model}: {reason}" for model, reason in report["skipped"].items()]
    return lines


def render_markdown(report: Mapping[str, Any]) -> str:
    """The validation as Markdown: the tables of the HTML report, without plots."""
    parts = ["# Model validation", "", *[f"- {line}" for line in _intro(report)], ""]
    for title, headers, rows, empty in _sections(report):
        parts += [f"## {title}", "", render_table(headers, rows) if rows else empty, ""]
    return "\n".join(parts)


def plot_scatter(report: Mapping[str, Any], model: str) -> Any:
    """Predicted against measured time (log-log), coloured by regime, held-out and transfer cases."""
    from .plots import new_figure

    figure = new_figure()
    axes = figure.add_subplot()
    cases = [c for c in report["cases"] if c["model"] == model]
    for regime, colour in REGIME_COLOURS.items():
        for kind, marker in (("held-out", "o"), ("transfer", "^")):
            mine = [c for c in cases if c["regime"] == regime and c["kind"] == kind]
            if mine:
                axes.scatter([c["predicted_s"] for c in mine], [c["measured_s"] for c in mine], c=colour,
                             marker=marker, label=f"{regime} ({kind})", alpha=0.8)
    values = [v for c in cases for v in (c["predicted_s"], c["measured_s"]) if v > 0]
    if values:
        low, high = min(values) / 1.5, max(values) * 1.5
        axes.plot([low, high], [low, high], color="#888", linewidth=0.8, label="measured = predicted")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("predicted time (s)")
    axes.set_ylabel("measured time (s)")
    axes.legend(fontsize="small")
    return figure


def plot_error_cdf(report: Mapping[str, Any]) -> Any:
    """Cumulative distribution of held-out |error|, one line per model."""
    from .plots import new_figure

    figure = new_figure()
    axes = figure.add_subplot()
    for model in report["models"]:
        errors = sorted(abs(c["error"]) for c in report["cases"] if c["model"] == model and c["kind"] == "held-out")
        if errors:
            axes.step([100 * e for e in errors], [(i + 1) / len(errors) for i in range(len(errors))], where="post",
                      label=model)
    axes.set_xscale("symlog", linthresh=1.0)
    axes.set_xlabel("held-out |measured / predicted - 1| (%)")
    axes.set_ylabel("fraction of cases")
    axes.legend(fontsize="small")
    return figure


def plot_svgs(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(title, inline SVG) of every plot the report has data for."""
    from .plots import svg_text

    plots = [(f"{model}: predicted vs measured", svg_text(plot_scatter(report, model))) for model in report["models"]]
    if report["models"]:
        plots.append(("Held-out error CDF per model", svg_text(plot_error_cdf(report))))
    return plots


def render_html(report: Mapping[str, Any], plots: bool = True) -> str:
    """One HTML document with the tables and (``plots``) inline SVG plots; no external reference."""
    drawn = plot_svgs(report) if plots else []
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>Model validation</title><style>{_CSS}</style></head><body>", "<h1>Model validation</h1>",
             "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in _intro(report)) + "</ul>"]
    for title, headers, rows, empty in _sections(report):
        body = html_table(headers, rows) if rows else f"<p>{html.escape(empty)}</p>"
        parts.append(f"<h2>{html.escape(title)}</h2>{body}")
    if drawn:
        parts.append("<h2>Plots</h2>")
        parts += [f'<h3>{html.escape(title)}</h3><div class="plot">{svg}</div>' for title, svg in drawn]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
