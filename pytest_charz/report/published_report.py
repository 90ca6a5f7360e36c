"""The published-measurements section of ``charz validate``: the committed table of published GPU
measurements, each row marked fitted-on or held-out, against its spec-only prediction.

Reads only the scored rows (:mod:`pytest_charz.published.score`); computes nothing itself.
"""
from __future__ import annotations

import os
from typing import Sequence

from ..published.score import ScoredRow, held_out_summary, score_rows
from .markdown import render_table
from .units import format_time

HEADERS = ["row", "target", "kind", "role", "published", "measured", "predicted", "error", "priors used"]


def table_rows(scored: Sequence[ScoredRow]) -> list[list[str]]:
    """One row per published measurement: what was published, measured and predicted time,
    signed error (predicted / measured - 1), and the priors the prediction used."""
    rows = []
    for item in scored:
        row = item.row
        error = f"{item.error:+.1%}" if item.error is not None else f"- ({item.reason})"
        rows.append([row.id, row.target, row.kind, row.role, f"{row.value:g} {row.unit}",
                     format_time(item.measured_s, 4), format_time(item.predicted_s, 4), error, ", ".join(item.priors) or "-"])
    return rows


def summary_line(scored: Sequence[ScoredRow]) -> str:
    summary = held_out_summary(scored)
    if summary["median_abs_error"] is None:
        return "published measurements: no held-out row was predicted"
    levels = "".join(f", the {level['rows']} {name} {level['median_abs_error']:.1%}"
                     for name, level in (("LLM serving rows", summary["by_level"]["serving"]),
                                         ("kernel-level rows", summary["by_level"]["kernel"]))
                     if level["rows"])
    return (f"published measurements, spec-only: median |time error| {summary['median_abs_error']:.1%} "
            f"over {summary['rows']} held-out rows on {len(summary['targets'])} targets "
            f"({', '.join(summary['targets'])}){levels}; {summary['within_10pct']} within 10%, "
            f"largest {summary['max_abs_error']:.1%}")


def render_published_markdown(scored: Sequence[ScoredRow]) -> str:
    """The section as Markdown: the summary, the table, what the table says about its rows (their
    notes: an assumption, a known gap) and every source cited."""
    sources = sorted({item.row.source for item in scored})
    lines = ["# Published GPU measurements against spec-only predictions", "",
             "Each row is a published measurement; `predict(work, target=...)` with no profile (datasheet "
             "figures and the target's priors) predicts it. `fitted-on` rows are the ones a prior of the "
             "catalogue was fitted on; only `held-out` rows test the priors. Error = predicted / measured "
             "time - 1.", "", summary_line(scored), "", render_table(HEADERS, table_rows(scored), markdown=True)]
    by_note: dict[str, list[str]] = {}   # rows sharing a note are listed once, in table order
    for item in scored:
        if item.row.note:
            by_note.setdefault(item.row.note, []).append(item.row.id)
    if by_note:
        lines += ["", "## Notes on rows", ""]
        lines += [f"- {', '.join(f'`{name}`' for name in names)}: {note}" for note, names in by_note.items()]
    lines += ["", "## Sources", ""]
    lines += [f"- {source}" for source in sources]
    return "\n".join(lines) + "\n"


def write_published_report(out_dir: str) -> str:
    """Score the packaged table, write ``published.md`` in ``out_dir`` (atomically) and return the
    summary line."""
    from ..formats import atomic_write_text

    scored = score_rows()
    atomic_write_text(os.path.join(out_dir, "published.md"), render_published_markdown(scored))
    return summary_line(scored)
