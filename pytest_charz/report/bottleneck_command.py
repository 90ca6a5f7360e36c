"""``charz bottleneck RUN [--profile P] [--case PATTERN] [--format text|md|json] [-o OUT]``: what
limits each case of a run (and each op of its workload cases), with the evidence.

The verdicts are :func:`pytest_charz.evidence.bottleneck.attribute_case`'s, against the ceilings
of ``--profile`` or, without it, of the capability profile the run itself gives (both filled
from the run's target spec); this module reads, selects, renders and writes.
"""
from __future__ import annotations

import argparse
import fnmatch
import sys
from typing import Any, Mapping

FORMATS = ("text", "md", "json")


def add_bottleneck_options(parser: argparse.ArgumentParser) -> None:
    """The ``charz bottleneck`` arguments."""
    parser.add_argument("run", help="run file (.json, .json.gz or the session's .partial.jsonl journal)")
    parser.add_argument("--profile", default=None,
                        help="capability profile JSON whose ceilings the cases are held against "
                             "(default: the profile of the run itself)")
    parser.add_argument("--case", default=None, metavar="PATTERN",
                        help="only the cases whose id (or its test part) matches this glob, or contains it")
    parser.add_argument("--format", default="text", choices=FORMATS, help="text (default), md or json")
    parser.add_argument("-o", "--out", default=None, help="file to write (default: print)")


def select_cases(case_ids: list[str], pattern: str | None) -> list[str]:
    """The ids matching ``pattern`` (a glob of the whole id or of its part after the suite's path,
    or a substring); UsageError naming some ids when none does."""
    from ..errors import UsageError

    if pattern is None:
        return case_ids
    chosen = [i for i in case_ids if fnmatch.fnmatchcase(i, pattern) or pattern in i
              or fnmatch.fnmatchcase(i.split("::", 1)[-1], pattern)]
    if not chosen:
        known = ", ".join(case_ids[:5]) + (", ..." if len(case_ids) > 5 else "")
        raise UsageError(f"no case of the run matches {pattern!r}; its cases are {known or 'none'}")
    return chosen


def build_document(run_path: str, profile_path: str | None = None, pattern: str | None = None,
                   profile: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``formats.BOTTLENECKS`` document of the run at ``run_path`` (its cases matching ``pattern``)."""
    from ..evidence.bottleneck import attribute_case, context_for
    from ..profile import build_profile, load_profile
    from ..run import load_run
    from .bottleneck_report import bottleneck_document

    run = load_run(run_path)
    if profile is None:
        profile = load_profile(profile_path) if profile_path else build_profile([run], [run_path])
    context = context_for(run, profile)
    chosen = set(select_cases([case.id for case in run.cases], pattern))
    verdicts = [attribute_case(case, context) for case in run.cases if case.id in chosen]
    return bottleneck_document(run, verdicts, context, run_path,
                               profile_path or "the capability profile of the run itself")


def bottleneck_command(args: Any) -> int:
    """Print (or write to ``--out``) the run's bottlenecks in ``--format``; returns 0. ``--out``
    is checked (a file path, not a directory) before the run is read."""
    from ..formats import atomic_write_json, atomic_write_text, check_output_file, dumps_json
    from .bottleneck_report import render_markdown, render_text

    out = getattr(args, "out", None)
    if out:
        check_output_file(out, "-o/--out")
    document = build_document(args.run, getattr(args, "profile", None), getattr(args, "case", None))
    form = getattr(args, "format", "text") or "text"
    if form == "json":
        if out:
            atomic_write_json(out, document)
        else:
            sys.stdout.write(dumps_json(document, "charz bottleneck --format json") + "\n")
    else:
        from .text import terminal_width

        text = render_markdown(document) if form == "md" else render_text(
            document, width=120 if out else terminal_width())
        if out:
            atomic_write_text(out, text)
        else:
            sys.stdout.write(text)
    if out:
        print(f"wrote {out}")
    return 0
