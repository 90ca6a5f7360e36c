"""``charz profile RUN.json...``: build the capability profile of the runs, write it as JSON,
Markdown and HTML, and print a summary.

The profile itself is :func:`pytest_charz.profile.build_profile`'s; this module only decides
where the files go, writes them and prints.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Sequence


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
    runs = [load_run(path) for path in run_paths]
    profile = build_profile(runs, run_paths)
    atomic_write_json(paths["json"], profile)
    atomic_write_text(paths["md"], render_markdown(profile))
    written = [paths["json"], paths["md"]]
    try:
        from .html import render_html

        atomic_write_text(paths["html"], render_html(profile))
        written.append(paths["html"])
    except MissingExtraError as exc:
        print(f"charz: HTML profile not written: {exc}", file=sys.stderr)
    target = profile["target"]
    print(f"profile of {target.get('id')} ({target.get('name')}) from {len(runs)} run(s)")
    headers, rows = ceiling_rows(profile, with_evidence=False)
    print(render_table(headers, rows, markdown=False))
    for path in written:
        print(f"wrote {path}")
    return 0
