"""``charz profile RUN.json...``: build the capability profile of the runs, write it as JSON,
Markdown and HTML, and print a summary.

The profile itself is :func:`pytest_charz.profile.build_profile`'s; this module only decides
where the files go, writes them and prints.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Sequence


def profile_paths(run_paths: Sequence[str], out_dir: str | None, name: str | None) -> dict[str, str]:
    """Where ``charz profile`` writes: ``<out_dir>/<name>.{json,md,html}``.

    Defaults: the first run's directory, and the first run's file stem plus ``.profile``
    (``run.json``, ``run.json.gz`` and ``run.json.partial.jsonl`` all give ``run.profile``).
    UsageError for an ``out_dir`` that is a file, or a ``name`` with a directory part or ``..``:
    what is written stays inside the directory given.
    """
    from ..formats import check_file_name, check_output_directory

    if out_dir is not None:
        check_output_directory(out_dir, "-o/--out-dir")
    if name is not None:
        check_file_name(name, "--name")
    first = run_paths[0]
    directory = out_dir or os.path.dirname(os.path.abspath(first))
    if name is None:
        stem = os.path.basename(first)
        for suffix in (".json.partial.jsonl", ".partial.jsonl", ".json.gz", ".json"):
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
                break
        name = stem + ".profile"
    base = os.path.join(directory, name)
    return {"json": base + ".json", "md": base + ".md", "html": base + ".html"}


def provenance_lines(profile: Mapping[str, Any]) -> list[str]:
    """Which runs the profile's figures came from: each run left out with its reason, and with
    several runs merged, how many figures each gave and the figures some runs lack."""
    lines = [f"left out {item.get('path')}: {item.get('reason')}" for item in profile.get("left_out") or ()]
    runs = [str(run.get("path")) for run in profile.get("runs") or ()]
    if len(runs) < 2:
        return lines
    ceilings = profile.get("ceilings") or []
    counts = {path: 0 for path in runs}
    partial = []
    for ceiling in ceilings:
        sources = (ceiling.get("evidence") or {}).get("from_runs") or []
        for path in sources:
            counts[path] = counts.get(path, 0) + 1
        if len(sources) < len(runs):
            partial.append(f"{ceiling.get('name')} ({', '.join(sources) or 'no run'})")
    lines.append("figures from: " + ", ".join(f"{path} ({count} of {len(ceilings)})" for path, count in counts.items())
                 + "; each figure is the median over the runs that measured it")
    if partial:
        shown = ", ".join(partial[:6]) + (f", and {len(partial) - 6} more" if len(partial) > 6 else "")
        lines.append(f"measured in only some runs: {shown}")
    return lines


def profile_command(args: Any) -> int:
    """``charz profile RUN.json...``: write the profile as JSON, Markdown and HTML; print a summary.

    ``args`` has ``runs`` (paths), ``out_dir`` and ``name`` (either may be None). The HTML needs
    matplotlib (extra ``report``); without it JSON and Markdown are still written and the
    command says why the HTML is missing. Returns the exit status (0). The output directory and
    name are checked before any run is read (:func:`profile_paths`).
    """
    from ..errors import MissingExtraError
    from ..formats import atomic_write_json, atomic_write_text
    from ..profile import build_profile
    from ..run import load_run
    from .markdown import ceiling_rows, render_markdown, render_table

    run_paths = list(args.runs)
    paths = profile_paths(run_paths, getattr(args, "out_dir", None), getattr(args, "name", None))
    from .progress import Progress

    with Progress("charz profile", total=len(run_paths) + 3) as progress:
        runs = []
        for path in run_paths:
            progress.step(f"reading {os.path.basename(path)}")
            runs.append(load_run(path))
        progress.step("building the profile")
        profile = build_profile(runs, run_paths)
        progress.step("writing JSON and Markdown")
        atomic_write_json(paths["json"], profile)
        atomic_write_text(paths["md"], render_markdown(profile))
        written = [paths["json"], paths["md"]]
        progress.step("drawing the HTML page")
        try:
            from .html import render_html

            atomic_write_text(paths["html"], render_html(profile))
            written.append(paths["html"])
        except MissingExtraError as exc:
            print(f"charz: HTML profile not written: {exc}", file=sys.stderr)
    target = profile["target"]
    merged = profile.get("runs") or []
    print(f"profile of {target.get('id')} ({target.get('name')}) from {len(merged)} run(s)"
          + (f" of the {len(runs)} given" if len(merged) != len(runs) else ""))
    for line in provenance_lines(profile):
        print(line)
    headers, rows = ceiling_rows(profile, with_evidence=False)
    print(render_table(headers, rows, markdown=False))
    for path in written:
        print(f"wrote {path}")
    return 0
