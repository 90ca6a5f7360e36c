"""Capability profile: the measured ceilings of a target, from one or more run files.

The profile reads the case conventions of ``docs/run-format.md`` (``work.op`` and ``work.shape``)
and turns cases into ceilings, each with its evidence (cases, samples, conditions) and caveats.
With several runs of one target, a ceiling's value is the median over runs of each run's figure.
Nothing here measures, prints or plots except :func:`profile_command`.

Profile JSON (version 1)::

    {"version": 1, "kind": "charz-profile", "created": ISO-8601,
     "target": {"id", "name", "kind", "origin", "compute_units"},
     "runs": [{"path", "created", "status", "cases"}],
     "provenance": {"hosts", "os", "cpu", "python", "suite_git", "device", "libraries", "differs"},
     "ceilings": [{"name", "value", "unit", "spec", "spec_source", "fraction_of_spec",
                   "evidence": {"cases", "best_case", "samples", "discarded", "runs", "values",
                                "conditions": {...}},
                   "caveats": [...],
                   # transfer:<kind> also: "bandwidth", "latency_s", "fit": {"r2", "points"}}],
     "curves": {"bandwidth" | "copy" | "latency" | "latency_random" | "stream" | "flops" | "transfer"
                | "overhead" | "contention": ...},
     "caveats": [...]}
"""
from __future__ import annotations

import datetime
import os
import statistics
import sys
from typing import Any, Mapping, Sequence

from .errors import CharzError, FormatError
from .profile_cases import CaseFigures, evidence_of, find_ceilings

PROFILE_VERSION = 1
PROFILE_KIND = "charz-profile"
_TRANSFER_MEDIAN_KEYS = ("bandwidth", "latency_s")


def check_same_target(runs: Sequence[Mapping[str, Any]], paths: Sequence[str]) -> None:
    """Raise CharzError when the runs are not all of one target (naming both)."""
    first = (runs[0].get("target") or {}).get("id")
    for run, path in zip(runs[1:], paths[1:]):
        other = (run.get("target") or {}).get("id")
        if other != first:
            raise CharzError(
                f"runs of different targets cannot make one profile: {paths[0]} is of target {first!r} "
                f"but {path} is of target {other!r}")


def _provenance(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    def pick(run: Mapping[str, Any]) -> dict[str, Any]:
        prov = run.get("provenance") or {}
        device = run.get("device") or {}
        return {
            "os": (prov.get("os") or {}).get("platform"),
            "cpu": (prov.get("cpu") or {}).get("model"),
            "python": (prov.get("python") or {}).get("version"),
            "suite_git": prov.get("suite_git"),
            "device": {"backend": device.get("backend"), "name": device.get("name"),
                       "versions": device.get("versions") or {}},
            "libraries": prov.get("libraries") or {},
        }

    picked = [pick(run) for run in runs]
    summary = dict(picked[0])
    summary["hosts"] = sorted({str((run.get("provenance") or {}).get("host")) for run in runs})
    summary["differs"] = [key for key in picked[0] if any(p[key] != picked[0][key] for p in picked[1:])]
    return summary


def _spread_caveat(values: list[float], unit: str) -> str | None:
    if len(values) < 2:
        return None
    middle = statistics.median(values)
    if not middle:
        return None
    spread = (max(values) - min(values)) / abs(middle)
    return f"spread over {len(values)} runs: {100 * spread:.1f}% (min {min(values):.4g}, max {max(values):.4g} {unit})"


def _combine(name: str, found: list[tuple[int, CaseFigures]], run_count: int, kind: str) -> dict[str, Any]:
    """One ceiling from each run's figure of it: median value, pooled evidence and caveats."""
    first = found[0][1]
    values = [f.value for _, f in found if f.value is not None]
    value = statistics.median(values) if values else None
    cases = [case for _, f in found for case in f.cases]
    evidence, caveats = evidence_of(cases, kind)
    evidence["best_case"] = first.best_case
    evidence["runs"] = sorted({i for i, _ in found})
    evidence["values"] = values
    for _, figure in found:
        caveats.extend(note for note in figure.notes if note not in caveats)
    spread = _spread_caveat(values, first.unit)
    if spread:
        caveats.append(spread)
    if run_count > 1 and len(found) < run_count:
        caveats.append(f"measured in {len(found)} of {run_count} runs")
    if run_count == 1:
        caveats.append("single run")
    if name.startswith("capacity:") and value and first.spec and not 0.5 <= value / first.spec <= 2.0:
        caveats.append(f"differs from the spec's {first.spec / 2**20:.4g} MiB by more than 2x: the spec's "
                       "figure may not be what one core sees (a cache shared, partitioned by sub-NUMA "
                       "clustering, or a virtual machine's view of the host)")
    elif name.startswith(("flops:", "gemm:")) and value and first.spec and value > 1.05 * first.spec:
        caveats.append("above the spec's peak: the peak was derived at a lower clock than the cores ran at")
    ceiling: dict[str, Any] = {"name": name, "value": value, "unit": first.unit, "spec": first.spec,
                               "spec_source": first.spec_source,
                               "fraction_of_spec": value / first.spec if value is not None and first.spec else None}
    extra = dict(first.extra)
    for key in _TRANSFER_MEDIAN_KEYS:
        if key in extra:
            numbers = [f.extra[key] for _, f in found if f.extra.get(key) is not None]
            extra[key] = statistics.median(numbers) if numbers else None
    if "fit" in extra:
        fits = [f.extra["fit"] for _, f in found if f.extra.get("fit")]
        extra["fit"] = {"r2": min(fit["r2"] for fit in fits), "points": sum(fit["points"] for fit in fits)} if fits else None
    ceiling.update(extra)
    ceiling["evidence"] = evidence
    ceiling["caveats"] = caveats
    return ceiling


def _merge_curves(per_run: list[dict[str, Any]]) -> dict[str, Any]:
    """Pool each curve's points over runs (each point and fit says its run)."""
    merged: dict[str, Any] = {}
    for index, curves in enumerate(per_run):
        for key, curve in curves.items():
            target = merged.setdefault(key, {})
            for field, content in curve.items():
                if isinstance(content, list):
                    target.setdefault(field, []).extend({**item, "run": index} if isinstance(item, dict) else item
                                                        for item in content)
                elif isinstance(content, dict) and key == "transfer":
                    sub = target.setdefault(field, {})
                    for name, items in content.items():
                        if isinstance(items, list):
                            sub.setdefault(name, []).extend({**item, "run": index} for item in items)
                        else:
                            sub.setdefault(name, []).append({**items, "run": index})
                else:
                    target.setdefault(field, content)
    return merged


def build_profile(runs: Sequence[Mapping[str, Any]], paths: Sequence[str] | None = None) -> dict[str, Any]:
    """The capability profile (version 1 JSON mapping) of one target from its run mappings.

    ``paths`` name the runs in the profile (defaults to ``run-<i>``). Raises CharzError when the
    runs are of different targets.
    """
    if not runs:
        raise CharzError("a profile needs at least one run")
    paths = list(paths) if paths is not None else [f"run-{i}" for i in range(len(runs))]
    check_same_target(runs, paths)
    target = dict(runs[0].get("target") or {})
    spec = target.get("spec") or {}
    kind = str(target.get("kind") or (spec.get("identity") or {}).get("kind") or "")
    by_name: dict[str, list[tuple[int, CaseFigures]]] = {}
    curves_per_run: list[dict[str, Any]] = []
    profile_caveats: list[str] = []
    for index, run in enumerate(runs):
        figures, curves, notes = find_ceilings(run)
        for figure in figures:
            by_name.setdefault(figure.name, []).append((index, figure))
        curves_per_run.append(curves)
        profile_caveats.extend(f"{paths[index]}: {note}" for note in notes)
        if run.get("status") != "complete":
            profile_caveats.append(f"{paths[index]}: run status is {run.get('status')!r}; it may lack cases")
    if len(runs) == 1:
        profile_caveats.insert(0, "single run: no run-to-run spread is known")
    units = (spec.get("compute") or {}).get("units") or {}
    return {
        "version": PROFILE_VERSION,
        "kind": PROFILE_KIND,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "target": {"id": target.get("id"), "name": target.get("name"), "kind": kind,
                   "origin": target.get("origin"), "compute_units": units.get("value")},
        "runs": [{"path": path, "created": run.get("created"), "status": run.get("status"),
                  "cases": len(run.get("cases") or [])} for path, run in zip(paths, runs)],
        "provenance": _provenance(runs),
        "ceilings": [_combine(name, found, len(runs), kind) for name, found in by_name.items()],
        "curves": _merge_curves(curves_per_run),
        "caveats": profile_caveats,
    }


def load_profile(path: str) -> dict[str, Any]:
    """Read a profile JSON file written by :func:`profile_command`, checking kind and version."""
    import json

    try:
        with open(path) as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise FormatError(f"{path}: no such profile file") from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, Mapping) or data.get("kind") != PROFILE_KIND:
        raise FormatError(f"{path}: not a charz profile")
    if data.get("version") != PROFILE_VERSION:
        raise FormatError(f"{path}: profile version {data.get('version')!r} is not supported "
                          f"(this pytest-charz reads version {PROFILE_VERSION})")
    return dict(data)


def profile_paths(run_paths: Sequence[str], out_dir: str | None, name: str | None) -> dict[str, str]:
    """Where ``charz profile`` writes: ``<out_dir>/<name>.{json,md,html}``.

    Defaults: the first run's directory, and the first run's file stem plus ``.profile``.
    """
    first = run_paths[0]
    directory = out_dir or os.path.dirname(os.path.abspath(first))
    if name is None:
        stem = os.path.basename(first)
        for suffix in (".partial.jsonl", ".json"):
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
    command says why the HTML is missing.
    """
    from .errors import MissingExtraError
    from .report.markdown import ceiling_rows, render_markdown, render_table
    from .run import atomic_write_json, load_run

    runs = [load_run(path) for path in args.runs]
    profile = build_profile(runs, list(args.runs))
    paths = profile_paths(list(args.runs), getattr(args, "out_dir", None), getattr(args, "name", None))
    atomic_write_json(paths["json"], profile)
    _write_text(paths["md"], render_markdown(profile))
    written = [paths["json"], paths["md"]]
    try:
        from .report.html import render_html

        _write_text(paths["html"], render_html(profile))
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


def _write_text(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
