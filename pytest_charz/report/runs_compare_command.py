"""``charz compare RUN_A RUN_B [RUN_C...]``: run files case by case. The comparison is
:func:`pytest_charz.report.runs_compare.compare_runs`'s, its text, Markdown and HTML
:mod:`pytest_charz.report.runs_compare_report`'s; this module reads, prints and writes, and says
when ``--fail-over`` finds a case slowed beyond it (exit 1).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Sequence

from .compare_command import compare_paths


def add_run_compare_options(parser: Any) -> None:
    """The options of ``charz compare`` that apply to run files."""
    from .runs_compare import DEFAULT_THRESHOLD, GROUP_KEYS, SORT_KEYS
    from .runs_compare_report import COLUMNS, DEFAULT_COLUMNS

    parser.add_argument("--sort", default="ratio", choices=SORT_KEYS,
                        help="runs: case order (default ratio: the most slowed first)")
    parser.add_argument("--columns", default=None,
                        help=f"runs: comma-separated columns of {', '.join(COLUMNS)} "
                             f"(default {','.join(DEFAULT_COLUMNS)})")
    parser.add_argument("--group-by", default="none", choices=GROUP_KEYS, help="runs: one table per group")
    parser.add_argument("--fail-over", type=float, default=None, metavar="PCT",
                        help="runs: exit 1 when a case slowed beyond PCT percent, its ratio and the lower end "
                             "of its 95%% interval both above 1 + PCT/100 (for CI)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="runs: the relative change that counts: slower or faster beyond it, same within it "
                             "(default 0.05)")
    parser.add_argument("--histogram", action="append", default=[], metavar="CASE",
                        help="runs: the sample histogram of CASE (an id, a glob or a unique part of one); "
                             "repeatable")
    parser.add_argument("--format", default="text", choices=["text", "markdown", "json"],
                        help="runs: what is printed (default text, fitted to the terminal width)")


def read_compared(path: str) -> tuple[str, Any]:
    """("run", Run) or ("profile", document) for the file at ``path``."""
    from ..errors import UsageError
    from ..formats import PROFILE, RUN, read_json
    from ..records import Run
    from ..run import load_run

    if path.endswith(".partial.jsonl") or not os.path.exists(path):
        return "run", load_run(path)
    data = read_json(path, "charz profile or run file")
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == RUN.kind:
        return "run", Run.from_json(data, path)
    if kind == PROFILE.kind:
        return "profile", PROFILE.check(data, path)
    raise UsageError(f"{path}: neither a charz run file nor a profile (kind={kind!r}); charz compare takes "
                     "run files (.json, .json.gz, .partial.jsonl) or profiles (.profile.json)")


def compare_runs_command(args: Any, runs: Sequence[Any]) -> int:
    """``charz compare RUN...``: the case-by-case comparison printed (``--format``) and, with
    ``-o`` or ``--name``, written as JSON, Markdown and HTML. Returns 1 when ``--fail-over``
    finds a case slowed beyond it, else 0."""
    from ..errors import MissingExtraError, check_positive
    from ..formats import atomic_write_json, atomic_write_text, dumps_json
    from . import runs_compare_report as report
    from .progress import Progress
    from .runs_compare import compare_runs, find_cases, slowed_beyond, sort_cases

    # every option is checked before the comparison, which takes seconds on whole runs
    columns = report.check_columns(getattr(args, "columns", None))
    sort, group_by = getattr(args, "sort", "ratio"), getattr(args, "group_by", "none")
    limit = getattr(args, "fail_over", None)
    if limit is not None:
        check_positive("--fail-over", limit)
    ids = list(dict.fromkeys(case.id for run in runs for case in run.cases))
    case_ids = [i for pattern in getattr(args, "histogram", None) or () for i in find_cases(ids, pattern)]
    with Progress("charz compare", total=len(ids), unit="case") as progress:
        comparison = compare_runs(runs, getattr(args, "threshold", 0.05), on_case=progress.step)
    failed = slowed_beyond(comparison, limit) if limit is not None else []
    html_ids = case_ids
    if not case_ids:
        # the HTML page shows the histogram of the most slowed case when none was asked for
        compared = [c for c in comparison["cases"] if any(r and r["interval"] for r in c["ratios"])]
        html_ids = [sort_cases(compared, "ratio")[0]["id"]] if compared else []
    samples = {case_id: [list(next((c.measurement.samples_s for c in run.cases if c.id == case_id), ()))
                         for run in runs] for case_id in dict.fromkeys(case_ids + html_ids)}
    written = []
    if getattr(args, "out_dir", None) is not None or getattr(args, "name", None) is not None:
        out = compare_paths(getattr(args, "out_dir", None), getattr(args, "name", None) or "run-comparison",
                            runs[0].path)
        atomic_write_json(out["json"], comparison)
        atomic_write_text(out["md"], report.render_markdown(comparison, columns=columns, sort=sort, group_by=group_by))
        written = [out["json"], out["md"]]
        try:
            atomic_write_text(out["html"], report.render_html(comparison, {i: samples[i] for i in html_ids},
                                                              columns=columns, sort=sort, group_by=group_by))
            written.append(out["html"])
        except MissingExtraError as exc:
            print(f"charz: HTML comparison not written: {exc}", file=sys.stderr)
    fmt = getattr(args, "format", "text")
    if fmt == "json":
        print(dumps_json(comparison))
    elif fmt == "markdown":
        print(report.render_markdown(comparison, columns=columns, sort=sort, group_by=group_by), end="")
    else:
        from .text import terminal_width

        width = terminal_width()
        print(report.render_text(comparison, columns=columns, sort=sort, group_by=group_by, width=width), end="")
        for case_id in case_ids:
            print()
            print(report.histogram_text(comparison, case_id, samples[case_id], width=width), end="")
    for path in written:
        print(f"wrote {path}", file=sys.stderr if fmt == "json" else sys.stdout)
    if failed:
        print(f"charz: {len(failed)} case(s) slowed beyond {limit:g}% (ratio and the lower end of its 95% interval "
              f"above {1 + limit / 100:.4g}):", file=sys.stderr)
        for hit in failed:
            print(f"  {hit['id']}: {hit['run']} {hit['ratio']:.3f}x [{hit['interval'][0]:.3f}, "
                  f"{hit['interval'][1]:.3f}]", file=sys.stderr)
        return 1
    return 0


__all__ = ["add_run_compare_options", "compare_runs_command", "read_compared", "terminal_width"]
