"""Building the capability profile: the measured ceilings of a target, from one or more runs.

The profile reads the case conventions of ``docs/run-format.md`` (``work.op`` and ``work.shape``)
and turns cases into ceilings, each with its evidence (cases, samples, conditions) and caveats.
With several runs of one target, a ceiling's value is the median over runs of each run's figure.
The ceilings are then held to what the hardware can do (:mod:`.sanity`): a multi-thread case
slower than its one-thread twin, an FMA peak below a GEMM of its dtype, a level faster than a
nearer one, a rate far below the spec with no cause are flagged with their evidence, kept out of
the ceiling and named in the bottom line.
Nothing here measures, prints or plots: ``charz profile`` (:mod:`pytest_charz.report.profile_command`)
writes and prints what :func:`build_profile` returns.

Profile JSON (version 1)::

    {"version": 1, "kind": "charz-profile", "created": ISO-8601,
     "target": {"id", "name", "kind", "origin", "compute_units"},
     "runs": [{"path", "created", "status", "cases"}],
     "left_out" (only when runs were given that could not be merged): [{"path", "reason"}],
     "provenance": {"hosts", "os", "cpu", "python", "suite_git", "device", "libraries", "differs"},
     "bottom_line": [{"name", "value", "unit", "fraction_of_spec", "range", "unstable", "evidence", "caveat",
                      "flagged" (flagged ceilings only: their flag rules)}],
     "ceilings": [{"name", "value", "unit", "spec", "spec_source", "fraction_of_spec",
                   "evidence": {"cases", "best_case", "samples", "discarded", "runs", "values",
                                "from_runs" (several runs: the paths of the runs that gave the figure),
                                "by_host" (runs of several hosts: {host: figure}), "conditions": {...}},
                   "caveats": [...],
                   # flagged by profile/sanity.py only: "flags": [{"rule", "text", evidence...}] and,
                   # where the rule replaced or dropped the figure, "measured" (the figure itself)
                   # transfer:<kind> also: "bandwidth", "latency_s", "fit": {"r2", "points"}}],
     "curves": {"bandwidth" | "copy" | "latency" | "latency_random" | "stream" | "flops" | "transfer"
                | "overhead" | "contention": ...},
     "caveats": [...]}
"""
from __future__ import annotations

import os
import statistics
from typing import Any, Sequence

from ..errors import CharzError
from ..formats import PROFILE
from ..measure.clock import utc_now_iso
from ..records import Run
from ..units import format_in
from .bottomline import bottom_line
from .cases import evidence_of, find_ceilings
from .energy import energy_section
from .figures import CaseFigures, SpecView
from .sanity import check_ceilings

_TRANSFER_MEDIAN_KEYS = ("bandwidth", "latency_s", "bus_bandwidth")
#: Runs whose figures of one ceiling spread more than this (relative to their median) make it unstable.
RUN_STABLE = 0.05


def check_same_target(runs: Sequence[Run], paths: Sequence[str]) -> None:
    """Raise CharzError when the runs are not all of one target (naming both)."""
    first = runs[0].target.id
    for run, path in zip(runs[1:], paths[1:]):
        other = run.target.id
        if other != first:
            raise CharzError(
                f"runs of different targets cannot make one profile: {paths[0]} is of target {first!r} "
                f"but {path} is of target {other!r}")


def _merge_key(run: Run) -> tuple[str, str]:
    """What runs must share to be merged: the identity of the hardware (the baseline key of the
    target, which for a host CPU carries its fingerprint) and the scope (full or smoke)."""
    from ..scope import scope_of_run
    from ..store import run_target_key

    return run_target_key(run), scope_of_run(run)[0]


def comparable_runs(runs: Sequence[Run], paths: Sequence[str]) -> tuple[list[int], list[dict[str, str]]]:
    """Which of ``runs`` one profile merges, and the others with the reason each was left out.

    Runs merge when they were measured on the same hardware identity and are of one scope: a
    2-case smoke run merged into a full run would pull the full run's figures towards its own
    short-budget ones, and two CPU generations under one name are two machines. The kept group
    is the one of the first full run given (the first run when none is full); the order of the
    runs given is kept."""
    from ..scope import FULL, scope_of_run

    keys = [_merge_key(run) for run in runs]
    chosen = next((key for key in keys if key[1] == FULL), keys[0])
    kept = [index for index, key in enumerate(keys) if key == chosen]
    left_out = []
    for index, key in enumerate(keys):
        if key == chosen:
            continue
        if key[0] != chosen[0]:
            reason = (f"measured on other hardware ({key[0]}) than {paths[kept[0]]} ({chosen[0]}): "
                      "profile each machine apart and compare them (charz compare)")
        else:
            why = "; ".join(scope_of_run(runs[index])[1]) or "a full run"
            reason = (f"a {key[1]} run ({why}) is not comparable with the {chosen[1]} run {paths[kept[0]]}: "
                      "their budgets or selections differ")
        left_out.append({"path": paths[index], "reason": reason})
    return kept, left_out


def _provenance(runs: Sequence[Run]) -> dict[str, Any]:
    """What the runs were measured on, and which of those fields differ between them."""
    def pick(run: Run) -> dict[str, Any]:
        prov = run.provenance
        device = run.device
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
    summary["hosts"] = sorted({str(run.provenance.get("host")) for run in runs})
    summary["differs"] = [key for key in picked[0] if any(p[key] != picked[0][key] for p in picked[1:])]
    return summary


def _spread_caveat(values: list[float], unit: str) -> str | None:
    """The run-to-run spread of a ceiling's values (relative to their median), None for one run."""
    if len(values) < 2:
        return None
    middle = statistics.median(values)
    if not middle:
        return None
    spread = (max(values) - min(values)) / abs(middle)
    return f"spread over {len(values)} runs: {100 * spread:.1f}% (min {format_in(min(values), unit)}, max {format_in(max(values), unit)})"


def _by_host(found: list[tuple[int, CaseFigures]], hosts: Sequence[str]) -> dict[str, float]:
    """A ceiling's figure per host (the median over that host's runs), hosts in sorted order."""
    per_host: dict[str, list[float]] = {}
    for index, figure in found:
        if figure.value is not None:
            per_host.setdefault(hosts[index], []).append(figure.value)
    return {host: statistics.median(per_host[host]) for host in sorted(per_host)}


def _host_caveat(by_host: dict[str, float], unit: str) -> str | None:
    """How far the hosts' figures of one ceiling are apart (relative to their median), naming each."""
    values = list(by_host.values())
    if len(values) < 2 or not statistics.median(values):
        return None
    middle = statistics.median(values)
    spread = (max(values) - min(values)) / abs(middle)
    each = ", ".join(f"{host} {format_in(value, unit)}" for host, value in by_host.items())
    return f"differs between hosts by {100 * spread:.1f}% ({each})"


def _combine(name: str, found: list[tuple[int, CaseFigures]], run_count: int, kind: str,
             hosts: Sequence[str] = ()) -> dict[str, Any]:
    """One ceiling from each run's figure of it: median value, pooled evidence and caveats.

    ``hosts`` names each run's host; when the runs come from more than one, the evidence has the
    figure per host (``by_host``) and a caveat says how far the hosts are apart."""
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
    # Unstable: a run's DRAM probe moved (the figure says so), or the runs differ by more than 5%.
    unstable = any(f.extra.get("unstable") for _, f in found)
    if len(values) > 1 and statistics.median(values) and \
            (max(values) - min(values)) / abs(statistics.median(values)) > RUN_STABLE:
        unstable = True
        caveats.append(f"unstable: the runs give {format_in(min(values), first.unit)} to {format_in(max(values), first.unit)} (a range, "
                       f"not one figure); see the DRAM probes' spread for the cause")
    # Only with several hosts: one host's figure is the ceiling itself (and the files stay as they were).
    if len(set(hosts)) > 1:
        by_host = _by_host(found, hosts)
        evidence["by_host"] = by_host
        between = _host_caveat(by_host, first.unit)
        if between:
            caveats.append(between)
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
    # flags of every run's figure (profile/sanity.py), each with its run when there are several
    flags = [{**flag, "run": index} if run_count > 1 else dict(flag)
             for index, figure in found for flag in figure.extra.get("flags") or ()]
    extra.pop("flags", None)
    if flags:
        extra["flags"] = flags
    for key in _TRANSFER_MEDIAN_KEYS:
        if key in extra:
            numbers = [f.extra[key] for _, f in found if f.extra.get(key) is not None]
            extra[key] = statistics.median(numbers) if numbers else None
    if "fit" in extra:
        fits = [f.extra["fit"] for _, f in found if f.extra.get("fit")]
        extra["fit"] = {"r2": min(fit["r2"] for fit in fits), "points": sum(fit["points"] for fit in fits)} if fits else None
    ceiling.update(extra)
    if unstable:
        ceiling["unstable"] = True
    if len(values) > 1:
        ceiling["range"] = [min(values), max(values)]
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


def build_profile(runs: Sequence[Run], paths: Sequence[str] | None = None) -> dict[str, Any]:
    """The capability profile (a ``formats.PROFILE`` JSON mapping) of one target from its runs.

    ``paths`` name the runs in the profile (defaults to ``run-<i>``). Raises CharzError when the
    runs are of different targets.
    """
    if not runs:
        raise CharzError("a profile needs at least one run")
    paths = list(paths) if paths is not None else [f"run-{i}" for i in range(len(runs))]
    check_same_target(runs, paths)
    kept, left_out = comparable_runs(runs, paths)
    runs, paths = [runs[index] for index in kept], [paths[index] for index in kept]
    target = runs[0].target
    spec = target.spec
    kind = target.kind or (spec.identity.kind if spec is not None else "")
    by_name: dict[str, list[tuple[int, CaseFigures]]] = {}
    curves_per_run: list[dict[str, Any]] = []
    profile_caveats: list[str] = []
    for index, run in enumerate(runs):
        figures, curves, notes = find_ceilings(run)
        for figure in figures:
            by_name.setdefault(figure.name, []).append((index, figure))
        curves_per_run.append(curves)
        profile_caveats.extend(f"{paths[index]}: {note}" for note in notes)
        if run.status != "complete":
            profile_caveats.append(f"{paths[index]}: run status is {run.status!r}; it may lack cases")
    if len(runs) == 1:
        profile_caveats.insert(0, "single run: no run-to-run spread is known")
    profile_caveats[:0] = [f"left out {item['path']}: {item['reason']}" for item in left_out]
    hosts = [str(run.provenance.get("host")) for run in runs]
    ceilings = [_combine(name, found, len(runs), kind, hosts) for name, found in by_name.items()]
    if len(runs) > 1:
        for ceiling in ceilings:
            ceiling["evidence"]["from_runs"] = [paths[index] for index in ceiling["evidence"]["runs"]]
    profile_caveats.extend(check_ceilings(ceilings, SpecView(spec), kind))
    # "version" before "kind": the order profile files have always had (and the golden files hold).
    profile: dict[str, Any] = {
        "version": PROFILE.version,
        "kind": PROFILE.kind,
        "created": utc_now_iso(),
        "target": {"id": target.id, "name": target.name, "kind": kind, "origin": target.origin,
                   "compute_units": spec.compute.units.value if spec is not None else None},
        "runs": [{"path": path, "created": run.created, "status": run.status, "cases": len(run.cases)}
                 for path, run in zip(paths, runs)],
        **({"left_out": left_out} if left_out else {}),
        "provenance": _provenance(runs),
        "ceilings": ceilings,
        "bottom_line": bottom_line(ceilings),
        "curves": _merge_curves(curves_per_run),
        "caveats": profile_caveats,
    }
    energy = energy_section(runs)
    if energy is not None:  # only runs that measured energy: older profiles stay as they were
        profile["energy"] = energy
    return profile


def load_profile(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The profile document at ``path`` (as ``charz profile`` wrote it), its kind and version
    checked by ``formats.PROFILE``; FormatError naming the file otherwise."""
    return PROFILE.load(path)
