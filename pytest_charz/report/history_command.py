"""``charz history RUN... | DIRECTORY | BASELINES``: each case's trend across run files (ordered by
their recorded time, then commit) or across the changes a baseline store recorded, with the
steps :func:`pytest_charz.report.history.detect_steps` finds and the commits between them;
printed as text (or JSON), written with ``-o``/``--name`` as JSON and one HTML page.
"""
from __future__ import annotations

import glob
import os
import sys
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from ..errors import UsageError
from .history import DEFAULT_THRESHOLD, trends

RUN_SUFFIXES = (".json", ".json.gz", ".partial.jsonl")


def add_history_options(parser: Any) -> None:
    """The arguments and options of ``charz history``."""
    parser.add_argument("paths", nargs="+", help="run files, directories of run files (.charz/runs), or a baseline "
                                                 "store directory (baselines/ or baselines/<target>)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="the smallest change that is a step, as a fraction (default 0.05)")
    parser.add_argument("--case", action="append", default=[], metavar="PATTERN",
                        help="only the cases whose id matches this glob (or contains it); repeatable")
    parser.add_argument("--all", action="store_true", help="list every case, not only those with a step")
    parser.add_argument("--format", default="text", choices=["text", "json"], help="what is printed (default text)")
    parser.add_argument("-o", "--out-dir", default=None, help="write <name>.json and <name>.html here")
    parser.add_argument("--name", default=None, help="base name of the files written (default: history)")


def _parsed_time(created: str) -> datetime:
    try:
        moment = datetime.fromisoformat(created)
    except (TypeError, ValueError):
        return datetime.max.replace(tzinfo=timezone.utc)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _peek_kind(path: str) -> str | None:
    from ..errors import FormatError
    from ..formats import read_json

    if path.endswith(".partial.jsonl"):
        return "charz-run"
    try:
        data = read_json(path)
    except FormatError:
        return None
    return data.get("kind") if isinstance(data, dict) else None


def _is_store(directory: str) -> bool:
    files = glob.glob(os.path.join(glob.escape(directory), "*.json")) + glob.glob(
        os.path.join(glob.escape(directory), "*", "*.json"))
    return any(_peek_kind(f) == "charz-baseline" for f in sorted(files)[:8])


def classify(paths: Sequence[str]) -> tuple[str, list[str], list[str]]:
    """(``"runs"`` or ``"store"``, the files to read, notes on what was skipped). A directory
    holding baseline files is a store; any other directory gives its run files (other kinds of
    JSON in it are skipped, with a note); a file named on the command line must be a run."""
    runs: list[str] = []
    stores: list[str] = []
    notes: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            if _is_store(path):
                stores.append(path)
                continue
            found = sorted(f for f in os.listdir(path) if f.endswith(RUN_SUFFIXES))
            others = [f for f in found if _peek_kind(os.path.join(path, f)) != "charz-run"]
            runs += [os.path.join(path, f) for f in found if f not in others]
            if others:
                notes.append(f"{path}: skipped {len(others)} file(s) that are not runs ({', '.join(others[:3])}"
                             f"{', ...' if len(others) > 3 else ''})")
        elif os.path.exists(path) or os.path.exists(path + ".partial.jsonl"):
            runs.append(path)
        else:
            raise UsageError(f"{path}: no such run file or directory")
    if stores and runs:
        raise UsageError("charz history reads either run files or a baseline store, not both")
    if stores:
        return "store", stores, notes
    if not runs:
        raise UsageError("no run file found in " + ", ".join(paths))
    return "runs", runs, notes


def run_points(paths: Sequence[str]) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]],
                                                   dict[str, str], list[str]]:
    """The runs in time order (then commit; a copy of a run, such as ``latest.json``, once),
    each case's points across them, each case's suite, and notes."""
    from ..run import load_run
    from .runs_compare import run_identity, run_label

    # latest.json is a copy of the newest run: read last, so the run keeps its own file's name
    from .progress import Progress

    loaded = []
    with Progress("charz history", total=len(paths), unit="run") as progress:
        for path in sorted(paths, key=lambda p: os.path.basename(p).startswith("latest.")):
            progress.step(f"reading {os.path.basename(path)}")
            loaded.append(load_run(path))
    notes: list[str] = []
    seen: dict[tuple[Any, ...], str] = {}
    runs = []
    for run in loaded:
        ident = run_identity(run)
        key = (ident["created"], ident["commit"], ident["host"], ident["cases"])
        if key in seen:
            notes.append(f"{run.path} is the same run as {seen[key]}: read once")
            continue
        seen[key] = run.path
        runs.append((run, ident))
    runs.sort(key=lambda pair: (_parsed_time(pair[1]["created"]), pair[1]["commit"] or ""))
    machines = sorted({ident["target_key"] for _, ident in runs})
    if len(machines) > 1:
        notes.append(f"the runs are of {len(machines)} targets or CPUs ({', '.join(machines)}): a step between "
                     "two of them may be the change of machine")
    cases: dict[str, list[dict[str, Any]]] = {}
    suites: dict[str, str] = {}
    described = []
    for index, (run, ident) in enumerate(runs):
        label = run_label(run.path)
        described.append({"label": label, **ident})
        for case in run.cases:
            m = case.measurement
            suites.setdefault(case.id, case.suite)
            cases.setdefault(case.id, [None] * len(runs))[index] = {  # type: ignore[list-item]
                "label": label, "created": ident["created"], "commit": ident["commit"], "median_s": case.median_s,
                "ci_s": list(m.ci_s) if m.ci_known and m.ci_s else None, "samples": len(m.samples_s),
                "verdict": case.verdict.outcome if case.verdict is not None else None}
    # a run without the case is a gap in its trend, kept so the points line up with the runs
    filled = {case_id: [p or {"label": described[i]["label"], "created": described[i]["created"],
                              "commit": described[i]["commit"], "median_s": None, "ci_s": None}
                        for i, p in enumerate(points)] for case_id, points in cases.items()}
    return described, filled, suites, notes


def store_points(roots: Sequence[str]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str], list[str]]:
    """Each case's points from the baseline files under ``roots`` (a store, or one target's
    directory of it): one per history entry, in its recorded order, with its reason and commit;
    keyed ``target: case`` when the store holds several targets."""
    from ..formats import read_json
    from ..store import BaselineEntry, check_document

    files = sorted({f for root in roots for pattern in ("*.json", os.path.join("*", "*.json"))
                    for f in glob.glob(os.path.join(glob.escape(root), pattern))})
    documents = []
    for path in files:
        data = read_json(path)
        if isinstance(data, dict) and data.get("kind") == "charz-baseline":
            documents.append((path, check_document(data, path)))
    targets = {str(d.get("target")) for _, d in documents}
    cases: dict[str, list[dict[str, Any]]] = {}
    suites: dict[str, str] = {}
    for path, document in documents:
        for case_id, raw in sorted(document["cases"].items()):
            entry = BaselineEntry.from_json(raw, f"{path}: case {case_id!r}")
            key = f"{document['target']}: {case_id}" if len(targets) > 1 else case_id
            suites[key] = str(document.get("suite") or "")
            cases[key] = [{"label": h.time, "created": h.time, "commit": h.provenance.get("commit"),
                           "median_s": h.median_s, "ci_s": None, "reason": h.reason} for h in entry.history]
            low, high = entry.reference.ci_s
            # the last change left the reference in place: its interval is that point's
            if entry.history and entry.history[-1].median_s == entry.reference.median_s and high > low:
                cases[key][-1]["ci_s"] = [low, high]
    return cases, suites, [f"{len(files)} baseline file(s) of {len(targets)} target(s): {', '.join(sorted(targets))}"]


def _selected(cases: Mapping[str, Any], patterns: Sequence[str]) -> dict[str, Any]:
    import fnmatch

    if not patterns:
        return dict(cases)
    def matches(case_id: str, pattern: str) -> bool:
        # brackets of case ids ([fp64-1024]) are read literally first, as a glob's class after
        return (pattern in case_id or fnmatch.fnmatchcase(case_id, pattern.replace("[", "[[]"))
                or fnmatch.fnmatchcase(case_id, pattern))

    chosen = {k: v for k, v in cases.items() if any(matches(k, p) for p in patterns)}
    if not chosen:
        raise UsageError(f"--case {', '.join(patterns)} matches no case of these runs")
    return chosen


def history_command(args: Any) -> int:
    """``charz history``: read, find the steps, print, write. Returns 0."""
    from ..errors import MissingExtraError
    from ..formats import atomic_write_json, atomic_write_text, dumps_json
    from ..verdict import check_threshold
    from .compare_command import compare_paths
    from .history_report import render_html, render_text

    threshold = check_threshold(args.threshold)
    source, files, notes = classify(args.paths)
    runs: list[dict[str, Any]] = []
    if source == "runs":
        runs, cases, suites, more = run_points(files)
    else:
        cases, suites, more = store_points(files)
    history = trends(_selected(cases, args.case), source, threshold, runs, suites, notes + more)
    if args.format == "json":
        print(dumps_json(history))
    else:
        from .text import terminal_width

        width = terminal_width()
        print(render_text(history, every=args.all, width=width), end="")
    if args.out_dir is not None or args.name is not None:
        out = compare_paths(args.out_dir, args.name or "history", files[0])
        atomic_write_json(out["json"], history)
        written = [out["json"]]
        try:
            atomic_write_text(out["html"], render_html(history))
            written.append(out["html"])
        except MissingExtraError as exc:
            print(f"charz: HTML history not written: {exc}", file=sys.stderr)
        for path in written:
            print(f"wrote {path}", file=sys.stderr if args.format == "json" else sys.stdout)
    return 0


__all__ = ["add_history_options", "classify", "history_command", "run_points", "store_points"]
