"""The validation report (Markdown and one self-contained HTML file) from a validation JSON.

Everything shown is read from the JSON that :mod:`pytest_charz.validation.models` writes; plots are
inline SVG drawn with matplotlib's Agg canvas (imported only when plots are drawn).
"""
from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from .markdown import render_table
from .units import format_percent, format_time

REGIME_COLOURS = {"compute": "#1f77b4", "memory": "#d62728", "latency": "#2ca02c", "launch": "#9467bd",
                  "transfer": "#ff7f0e"}


def _pct(value: float | None) -> str:
    return format_percent(value)


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
    """Predicted against measured time (log-log), coloured by regime, held-out and transfer cases,
    each prediction's interval drawn as a horizontal bar."""
    from .plots import legend_outside, new_figure
    from .units import humanize_axis

    figure = new_figure(6.4, 4.0)
    axes = figure.add_subplot()
    cases = [c for c in report["cases"] if c["model"] == model]
    for regime, colour in REGIME_COLOURS.items():
        for kind, marker in (("held-out", "o"), ("transfer", "^")):
            mine = [c for c in cases if c["regime"] == regime and c["kind"] == kind]
            if not mine:
                continue
            bounded = [c for c in mine if c.get("interval_s") and c["interval_s"][0] > 0]
            if bounded:
                axes.hlines([c["measured_s"] for c in bounded], [c["interval_s"][0] for c in bounded],
                            [c["interval_s"][1] for c in bounded], colors=colour, alpha=0.25, linewidth=0.8)
            axes.scatter([c["predicted_s"] for c in mine], [c["measured_s"] for c in mine], c=colour, s=14,
                         marker=marker, label=f"{regime} ({kind})", alpha=0.8)
    values = [v for c in cases for v in (c["predicted_s"], c["measured_s"]) if v > 0]
    if values:
        low, high = min(values) / 1.5, max(values) * 1.5
        axes.plot([low, high], [low, high], color="#888", linewidth=0.8, label="measured = predicted")
        axes.plot([], [], "-", color="#888", alpha=0.4, label="prediction interval")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("predicted time")
    axes.set_ylabel("measured time")
    humanize_axis(axes, "x", "s")
    humanize_axis(axes, "y", "s")
    axes.grid(True, which="major", alpha=0.25)
    legend_outside(axes)
    return figure


def plot_error_cdf(report: Mapping[str, Any]) -> Any:
    """Cumulative distribution of held-out |error|, one line per model."""
    from .plots import legend_outside, new_figure
    from .units import humanize_axis

    figure = new_figure(6.4, 4.0)
    axes = figure.add_subplot()
    for model in report["models"]:
        errors = sorted(abs(c["error"]) for c in report["cases"] if c["model"] == model and c["kind"] == "held-out")
        if errors:
            axes.step([100 * e for e in errors], [(i + 1) / len(errors) for i in range(len(errors))], where="post",
                      label=model)
    axes.set_xscale("symlog", linthresh=1.0)
    axes.set_xlabel("held-out |measured / predicted - 1|")
    axes.set_ylabel("share of cases")
    from matplotlib.ticker import FixedLocator

    axes.xaxis.set_major_locator(FixedLocator([0, 1, 10, 100, 1000, 10000]))
    humanize_axis(axes, "x", "%")
    humanize_axis(axes, "y", "fraction")
    axes.grid(True, which="major", alpha=0.25)
    legend_outside(axes)
    return figure


def plot_svgs(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(title, inline SVG) of every plot the report has data for: the error CDF of every model
    first, then one predicted-vs-measured scatter per model."""
    from .plots import svg_text

    if not report["models"]:
        return []
    plots = [("Held-out error CDF per model", svg_text(plot_error_cdf(report)))]
    plots += [(f"{model}: predicted vs measured", svg_text(plot_scatter(report, model))) for model in report["models"]]
    return plots


def _headline(report: Mapping[str, Any]) -> list[tuple[str, bool]]:
    items = []
    for model, table in report["tables"].items():
        s = table.get("all")
        if s and s.get("n"):
            items.append((f"{model}: median |err| {_pct(s['median_abs'])}, P90 {_pct(s['p90_abs'])}, "
                          f"coverage {_pct(s['coverage'])} (n={s['n']})", False))
    return items


def _not_covered_summary(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    rows = []
    for model in report["models"]:
        by_reason: dict[str, list[str]] = {}
        for missing in report["not_covered"].get(model) or ():
            by_reason.setdefault(str(missing["reason"]), []).append(str(missing["case"]))
        for reason, cases in sorted(by_reason.items(), key=lambda item: -len(item[1])):
            rows.append([model, reason, str(len(cases)), cases[0]])
    return ["model", "reason", "cases", "for example"], rows


def _count_text(names: str) -> str:
    return "-" if names == "-" else f"{len(names.split(', '))} cases"


def _html_sections(report: Mapping[str, Any]) -> list[str]:
    from .html import FOLD_ROWS, folded, folded_table, html_table

    parts = []
    for title, headers, rows, empty in _sections(report):
        if title.endswith(": cases the model does not cover"):
            continue
        if not rows:
            body = f"<p>{html.escape(empty)}</p>"
        elif title == "What was calibrated and held out":
            counted = [[row[0], row[1], _count_text(row[2]), _count_text(row[3]), *row[4:]] for row in rows]
            body = html_table(headers, counted) + folded("Every case calibrated on and held out", html_table(headers, rows))
        elif len(rows) > FOLD_ROWS:
            body = f"<p>{len(rows)} rows; the first 10:</p>" + folded_table(headers, rows, shown=10)
        else:
            body = html_table(headers, rows)
        parts.append(f"<h2>{html.escape(title)}</h2>{body}")
        if title == "Held-out error by model and regime":
            headers, rows = _not_covered_summary(report)
            if rows:
                full = "".join(
                    folded(f"{model}: {len(report['not_covered'][model])} cases",
                           html_table(["case", "target", "reason"], [[m["case"], m["target"], m["reason"]]
                                                                     for m in report["not_covered"][model]]))
                    for model in report["models"] if report["not_covered"].get(model))
                parts.append("<h2>Cases the models do not cover, by reason</h2>" + html_table(headers, rows)
                             + folded("Every case not covered, per model", full))
    return parts


def render_html(report: Mapping[str, Any], plots: bool = True) -> str:
    """One HTML document: the held-out error of every model in a line, the plots (error CDF
    first), then the tables, each long one summarized by its first rows with the whole table
    folded; what was run and how it was split last. No external reference."""
    from .html import headline_list, page, plot_grid

    drawn = plot_svgs(report) if plots else []
    runs = report.get("runs") or []
    subtitle = (f"{len(runs)} run(s), {len(report['models'])} model(s); error = {report['error']}; "
                f"interval level {report['level']:.0%}")
    parts = [headline_list(_headline(report)), plot_grid(drawn), *_html_sections(report),
             "<h2>What was validated</h2><ul class=\"meta\">"
             + "".join(f"<li>{html.escape(line)}</li>" for line in _intro(report)) + "</ul>"]
    return page("Model validation", parts, subtitle)
