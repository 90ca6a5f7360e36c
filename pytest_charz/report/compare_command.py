"""``charz compare A.profile.json B.profile.json...``: targets side by side, as JSON, Markdown and
self-contained HTML (:func:`pytest_charz.report.compare.render_html`: the ratio chart, roofline and
curve overlays first), with a summary table printed.

``charz compare RUN_A RUN_B [RUN_C...]``: run files case by case (medians, ratio to the first run
with its interval, change, verdicts), printed as text, Markdown or JSON, written with ``-o`` as
JSON, Markdown and HTML; ``--fail-over PCT`` exits 1 when a case slowed beyond PCT.

The comparisons themselves are :func:`pytest_charz.report.compare.compare_profiles`'s and
:func:`pytest_charz.report.runs_compare.compare_runs`'s; this module reads the files, renders,
writes and prints.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Sequence

from .markdown import format_value, render_table

_CLASS_NOTE = "geometric mean of the advantage over the baseline on the ceilings every profile has"


def _ratio_text(row: Mapping[str, Any], index: int) -> str:
    ratio = row["ratios"][index]
    if ratio is None:
        return "-"
    interval = row["intervals"][index]
    if interval:
        return f"{ratio:.3g}x [{interval[0]:.3g}, {interval[1]:.3g}]"
    return f"{ratio:.3g}x ({row['interval_notes'][index]})"


def _winner_text(names: Sequence[str], winner: int | None, margin: float | None) -> str:
    if winner is None:
        return "tie" if margin == 1.0 else "-"
    return f"{names[winner]} by {margin:.3g}x"


def comparison_rows(comparison: Mapping[str, Any], with_ratios: bool = True) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the ceilings table: each target's value, ratio (and interval) to the
    baseline, the better side and the winner."""
    names = [t["label"] for t in comparison["targets"]]
    headers = ["ceiling", *names]
    if with_ratios:
        headers += [f"{n} / {names[0]}" for n in names[1:]]
    headers += ["better", "winner"]
    rows = []
    for row in comparison["ceilings"]:
        cells = [row["name"], *(format_value(v, row["unit"]) + (" (unstable)" if u else "")
                                for v, u in zip(row["values"], row["unstable"]))]
        if with_ratios:
            cells += [_ratio_text(row, i) for i in range(1, len(names))]
        cells += [row["better"] or "-", _winner_text(names, row["winner"], row["margin"])]
        rows.append(cells)
    return headers, rows


def class_rows(comparison: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the workload classes table (scores are advantages over the baseline)."""
    names = [t["label"] for t in comparison["targets"]]
    rows = [[c["class"], *(f"{s:.3g}x" for s in c["scores"]), _winner_text(names, c["winner"], c["margin"]),
             ", ".join(c["ceilings"])] for c in comparison["classes"]]
    return ["class", *names, "winner", "ceilings"], rows


def render_markdown(comparison: Mapping[str, Any]) -> str:
    """The comparison as a Markdown document."""
    out = ["# Comparison: " + " vs ".join(t["label"] for t in comparison["targets"]), ""]
    for i, target in enumerate(comparison["targets"]):
        out.append(f"- **{target['label']}**{' (baseline)' if i == 0 else ''}: `{target['path']}`, "
                   f"{target.get('name')} ({target.get('kind')}), {target['runs']} run(s)")
    out.append("")
    if comparison["caveats"]:
        out += ["## Caveats", "", *(f"- {c}" for c in comparison["caveats"]), ""]
    headers, rows = class_rows(comparison)
    if rows:
        out += ["## Workload classes", "", f"Scores: {_CLASS_NOTE}.", "", render_table(headers, rows), ""]
    headers, rows = comparison_rows(comparison)
    out += ["## Ceilings", "", "Ratios are value / baseline; the interval spans the runs of both profiles.", "",
            render_table(headers, rows) if rows else "No ceiling in these profiles.", ""]
    return "\n".join(out).rstrip() + "\n"


def render_html(comparison: Mapping[str, Any], profiles: Sequence[Mapping[str, Any]]) -> str:
    """The comparison as one HTML document with its plots inline (needs matplotlib: extra ``report``)."""
    from .compare import render_html as render_page

    return render_page(comparison, profiles)


def compare_paths(out_dir: str | None, name: str | None, first: str) -> dict[str, str]:
    """Where ``charz compare`` writes: ``<out_dir>/<name>.{json,md,html}`` (defaults: the first
    profile's directory and ``comparison``). UsageError for an ``out_dir`` that is a file, or a
    ``name`` with a directory part or ``..``: what is written stays inside the directory given."""
    from ..formats import check_file_name, check_output_directory

    if out_dir is not None:
        check_output_directory(out_dir, "-o/--out-dir")
    if name is not None:
        check_file_name(name, "--name")
    base = os.path.join(out_dir or os.path.dirname(os.path.abspath(first)), name or "comparison")
    return {"json": base + ".json", "md": base + ".md", "html": base + ".html"}


def compare_command(args: Any) -> int:
    """``charz compare RUN...`` (:func:`~pytest_charz.report.runs_compare_command.compare_runs_command`)
    or ``charz compare PROFILE...``: read every profile (CharzError naming the first unreadable
    one, before anything is written), write the comparison as JSON, Markdown and HTML, print a
    summary. Returns the exit status (0)."""
    from ..errors import CharzError, MissingExtraError
    from ..formats import atomic_write_json, atomic_write_text
    from .compare import compare_profiles
    from .progress import Progress
    from .runs_compare_command import compare_runs_command, read_compared

    paths = list(args.profiles)
    if len(paths) < 2:
        raise CharzError("charz compare needs at least two profiles or two run files")

    with Progress("charz compare", total=len(paths), unit="file") as progress:
        loaded = []
        for path in paths:
            progress.step(f"reading {os.path.basename(path)}")
            loaded.append(read_compared(path))
    kinds = {kind for kind, _ in loaded}
    if kinds == {"run"}:
        return compare_runs_command(args, [run for _, run in loaded])
    if kinds != {"profile"}:
        raise CharzError("charz compare takes either run files or profiles, not both: " + ", ".join(
            f"{path} ({kind})" for path, (kind, _) in zip(paths, loaded)))
    if getattr(args, "fail_over", None) is not None or getattr(args, "histogram", None):
        raise CharzError("--fail-over and --histogram compare run files, not profiles")
    out = compare_paths(getattr(args, "out_dir", None), getattr(args, "name", None), paths[0])
    profiles = [document for _, document in loaded]
    comparison = compare_profiles(profiles, paths)
    atomic_write_json(out["json"], comparison)
    atomic_write_text(out["md"], render_markdown(comparison))
    written = [out["json"], out["md"]]
    try:
        atomic_write_text(out["html"], render_html(comparison, profiles))
        written.append(out["html"])
    except MissingExtraError as exc:
        print(f"charz: HTML comparison not written: {exc}", file=sys.stderr)
    names = [t["label"] for t in comparison["targets"]]
    print(f"comparison of {len(profiles)} profiles, baseline {names[0]}")
    # that the profiles are of different CPUs comes before any ratio between them
    for caveat in comparison["caveats"]:
        if caveat.startswith("different CPUs"):
            print(f"caveat: {caveat}")
    headers, rows = comparison_rows(comparison)
    print(render_table(headers, rows, markdown=False))
    headers, rows = class_rows(comparison)
    if rows:
        print()
        print(render_table(headers[:-1], [r[:-1] for r in rows], markdown=False))
    if comparison["caveats"]:
        print(f"\n{len(comparison['caveats'])} caveat(s):")
        for caveat in comparison["caveats"]:
            print(f"  - {caveat}")
    for path in written:
        print(f"wrote {path}")
    return 0
