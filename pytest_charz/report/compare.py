"""Comparing capability profiles: targets side by side through their measured evidence.

Pure: profiles in, a ``formats.COMPARISON`` document out, and that document as one HTML page
(:func:`render_html`: the bottom line per workload class, the plots with the ratio chart first,
the caveats grouped, then the tables); nothing here reads files or prints (``charz compare``,
:mod:`pytest_charz.report.compare_command`, does that).

Comparison JSON (version 1)::

    {"kind": "charz-comparison", "version": 1, "created": ISO-8601, "baseline": 0,
     "targets": [{"label", "path", "id", "name", "kind", "runs"}],
     "ceilings": [{"name", "unit", "better": "higher" | "lower" | null, "class",
                   "values": [value or null per target],
                   "ratios": [value / baseline value, or null],
                   "intervals": [[min_B / max_A, max_B / min_A] or null],
                   "interval_notes": ["baseline" | "single run" | "missing" | null],
                   "unstable": [bool per target],
                   "winner": target index or null, "margin": best / runner-up advantage or null}],
     "classes": [{"class", "ceilings": [common names], "scores": [geometric-mean advantage over the
                  baseline per target], "winner", "margin"}],
     "cpus": {"identities": [CPU identity document or null per target], "differs": [[what differs from
              the baseline's CPU, e.g. "caches"] per target], "same": true when none differs},
     "caveats": [...]}

Two CPU profiles of different CPUs are said to be so first: the first caveats name what differs
(model name, family/model, features or vector ISA, native dtypes, caches, cores), and a ceiling
of a dtype native on one CPU only says that its ratio measures the instruction set. A profile's
CPU identity is its target's ``identity`` (an identity document, ``targets/identity.py``) where
the profile records one, else what its own figures tell (:func:`profile_identity`).

A ratio is always ``value / baseline value``; an *advantage* turns it so that above 1 is better
(the ratio for FLOP/s and bandwidth, its inverse for latency, launch, dispatch, wakeup, slowdown).
"""
from __future__ import annotations

import math
import re
import statistics
from typing import Any, Mapping, Sequence

from ..formats import COMPARISON
from ..measure.clock import utc_now_iso
from ..targets.identity import CACHE_LEVELS, NATIVE_DTYPES, describe_identity, identity_differences, is_native

#: Workload classes and the ceiling names each holds (a prefix ending in ":" or an exact name).
CLASSES: dict[str, tuple[str, ...]] = {
    "compute": ("flops:", "gemm:"),
    "memory": ("bandwidth:",),
    "latency": ("latency:",),
    "runtime": ("launch", "dispatch", "wakeup"),
    "movement": ("transfer:", "collective:"),
}
_HIGHER = ("flops:", "gemm:", "bandwidth:", "transfer:", "collective:")
_LOWER = ("latency:", "launch", "dispatch", "wakeup", "slowdown:")
#: Two figures closer than this (relative) are a tie.
TIE = 1e-9
_LANES_ISA = re.compile(r"lanes \(([a-z0-9_]+)\)")


def _matches(name: str, pattern: str) -> bool:
    if pattern.endswith(":"):
        return name.startswith(pattern)
    return name == pattern or name.startswith(pattern + ":")


def better_direction(name: str) -> str | None:
    """``"higher"``, ``"lower"`` or None (no better side, e.g. a capacity) for a ceiling name."""
    if any(_matches(name, p) for p in _HIGHER):
        return "higher"
    if any(_matches(name, p) for p in _LOWER):
        return "lower"
    return None


def workload_class(name: str) -> str | None:
    """The workload class of a ceiling (see :data:`CLASSES`), None when it belongs to none."""
    for klass, patterns in CLASSES.items():
        if any(_matches(name, p) for p in patterns):
            return klass
    return None


def run_values(ceiling: Mapping[str, Any] | None) -> tuple[float, float] | None:
    """(min, max) of a ceiling over runs: its ``range``, else its evidence's values; None for one run."""
    if not ceiling:
        return None
    if ceiling.get("range") and len(ceiling["range"]) == 2:
        low, high = ceiling["range"]
        return float(low), float(high)
    values = [v for v in (ceiling.get("evidence") or {}).get("values") or () if v is not None]
    if len(values) > 1:
        return float(min(values)), float(max(values))
    return None


def ratio_interval(base: Mapping[str, Any] | None, other: Mapping[str, Any] | None) -> list[float] | None:
    """[min_B / max_A, max_B / min_A] from both ceilings' values over runs; None unless both have several."""
    a, b = run_values(base), run_values(other)
    if a is None or b is None or a[0] <= 0 or a[1] <= 0:
        return None
    return [b[0] / a[1], b[1] / a[0]]


def _advantage(ratio: float, better: str | None) -> float:
    return ratio if better == "higher" else 1.0 / ratio


def _winner(scores: Sequence[float | None]) -> tuple[int | None, float | None]:
    """Index of the best advantage and its margin over the runner-up; (None, 1.0) for a tie."""
    placed = sorted(((s, i) for i, s in enumerate(scores) if s is not None and s > 0), reverse=True)
    if len(placed) < 2:
        return None, None
    (best, index), (second, _) = placed[0], placed[1]
    if best <= second * (1 + TIE):
        return None, 1.0
    return index, best / second


def labels(profiles: Sequence[Mapping[str, Any]], paths: Sequence[str]) -> list[str]:
    """A short name per profile: its target id, with the file's name when two share an id."""
    ids = [str((p.get("target") or {}).get("id")) for p in profiles]
    return [f"{t} ({path.rsplit('/', 1)[-1]})" if ids.count(t) > 1 else t for t, path in zip(ids, paths)]


def _ceiling_row(name: str, found: list[Mapping[str, Any] | None]) -> dict[str, Any]:
    better = better_direction(name)
    values = [c.get("value") if c else None for c in found]
    base = values[0]
    ratios: list[float | None] = []
    intervals: list[list[float] | None] = []
    notes: list[str | None] = []
    for index, (ceiling, value) in enumerate(zip(found, values)):
        if index == 0:
            ratios.append(1.0 if base else None)
            intervals.append(None)
            notes.append("baseline")
            continue
        ratios.append(value / base if value is not None and base else None)
        if value is None or base is None:
            intervals.append(None)
            notes.append("missing")
            continue
        interval = ratio_interval(found[0], ceiling)
        intervals.append(interval)
        notes.append(None if interval else "single run")
    winner, margin = (None, None)
    if better is not None and base:
        winner, margin = _winner([_advantage(r, better) if r else None for r in ratios])
    unit = next((c.get("unit") for c in found if c), "")
    return {"name": name, "unit": unit, "better": better, "class": workload_class(name), "values": values,
            "ratios": ratios, "intervals": intervals, "interval_notes": notes,
            "unstable": [bool(c and c.get("unstable")) for c in found], "winner": winner, "margin": margin}


def _class_rows(rows: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    out = []
    for klass in CLASSES:
        common = [r for r in rows if r["class"] == klass and all(v for v in r["values"])]
        if not common:
            continue
        scores: list[float | None] = []
        for index in range(count):
            logs = [math.log(_advantage(r["ratios"][index], r["better"])) for r in common]
            scores.append(math.exp(statistics.fmean(logs)))
        winner, margin = _winner(scores)
        out.append({"class": klass, "ceilings": [r["name"] for r in common], "scores": scores,
                    "winner": winner, "margin": margin})
    return out


def _versions(profile: Mapping[str, Any]) -> dict[str, Any]:
    prov = profile.get("provenance") or {}
    found: dict[str, Any] = {"python": prov.get("python")}
    found.update({f"library {k}": v for k, v in (prov.get("libraries") or {}).items()})
    found.update({f"device {k}": v for k, v in ((prov.get("device") or {}).get("versions") or {}).items()})
    return found


def _spec_figure(found: Mapping[str, Mapping[str, Any]], name: str) -> Any:
    return (found.get(name) or {}).get("spec")


def profile_identity(profile: Mapping[str, Any]) -> dict[str, Any] | None:
    """The identity document of a CPU profile's CPU; None for a profile of another kind.

    The target's ``identity`` where the profile records one; else (``source`` "profile figures")
    what the profile's own figures tell: the target's name and compute units (cores), the spec
    capacities of its ``capacity:`` ceilings (caches), the vector ISA its fp64/fp32 peaks were
    derived with, and per dtype measured (bf16, fp16, int8) whether the spec had a native peak
    for it (known only where the spec had fp32 or fp64 peaks at all).
    """
    target = profile.get("target") or {}
    if target.get("kind") != "cpu":
        return None
    if isinstance(target.get("identity"), Mapping):
        return dict(target["identity"])
    found = {c["name"]: c for c in profile.get("ceilings") or () if c.get("name")}
    isa = None
    for name in ("flops:fp64", "flops:fp32", "gemm:fp64", "gemm:fp32"):
        match = _LANES_ISA.search(str((found.get(name) or {}).get("spec_source") or ""))
        if match:
            isa = match.group(1)
            break
    peaks_known = any(_spec_figure(found, f"{kind}:{dt}") for kind in ("flops", "gemm") for dt in ("fp32", "fp64"))
    native: dict[str, bool] = {}
    for dtype in NATIVE_DTYPES:
        measured = [f"{kind}:{dtype}" for kind in ("flops", "gemm") if f"{kind}:{dtype}" in found]
        if measured and peaks_known:
            native[dtype] = any(_spec_figure(found, name) for name in measured)
    caches = {level: int(_spec_figure(found, f"capacity:{level}")) for level in CACHE_LEVELS
              if _spec_figure(found, f"capacity:{level}")}
    return {"source": "profile figures", "model_name": target.get("name"), "vendor": None, "family": None,
            "model": None, "stepping": None, "features": None, "vector_isa": isa, "native_dtypes": None,
            "native_by_dtype": native, "cache_bytes": caches, "cores": target.get("compute_units"),
            "logical_cpus": None, "fingerprint": None}


def _cpu_section(identities: Sequence[Mapping[str, Any] | None], names: list[str]) -> dict[str, Any]:
    differs: list[list[str]] = []
    for identity, name in zip(identities, names):
        if identities[0] is None or identity is None or identity is identities[0]:
            differs.append([])
            continue
        differs.append([what for what, _ in identity_differences(identities[0], identity, (names[0], name))])
    return {"identities": list(identities), "differs": differs, "same": not any(differs)}


def _cpu_caveats(identities: Sequence[Mapping[str, Any] | None], names: list[str],
                 rows: list[dict[str, Any]]) -> list[str]:
    """The caveats said before any other: which profiles are of another CPU than the baseline's
    and what differs; then each ceiling whose dtype is native on some of those CPUs only."""
    base = identities[0]
    caveats: list[str] = []
    other_cpus: list[int] = []
    for index, (identity, name) in enumerate(zip(identities, names)):
        if index == 0 or base is None or identity is None:
            continue
        found = identity_differences(base, identity, (names[0], name))
        if not found:
            continue
        caveats.append(f"different CPUs: {name} is not the CPU of {names[0]}; they differ in "
                       + "; ".join(f"{what}: {detail}" for what, detail in found)
                       + f". Every ratio and winner between them compares two CPUs, not one CPU's change "
                       f"({names[0]}: {describe_identity(base)}; {name}: {describe_identity(identity)})")
        other_cpus.append(index)
    for row in rows:
        dtype = row["name"].split(":", 1)[-1]
        if not row["name"].startswith(("flops:", "gemm:")) or dtype not in NATIVE_DTYPES:
            continue
        for index in other_cpus:
            natives = [is_native(identities[0], dtype), is_native(identities[index], dtype)]
            if None in natives or natives[0] == natives[1] or row["ratios"][index] is None:
                continue
            native, other = (names[0], names[index]) if natives[0] else (names[index], names[0])
            caveats.append(f"{row['name']}: {dtype} is native on {native} only ({other} converts it), so its "
                           f"ratio {row['ratios'][index]:.3g}x measures the instruction set, not a like-for-like speed")
    return caveats


def _caveats(profiles: Sequence[Mapping[str, Any]], names: list[str], rows: list[dict[str, Any]]) -> list[str]:
    caveats: list[str] = []
    kinds = [str((p.get("target") or {}).get("kind") or "-") for p in profiles]
    if len(set(kinds)) > 1:
        caveats.append("targets of different kinds (" + ", ".join(f"{n}: {k}" for n, k in zip(names, kinds))
                       + "): the same ceiling name may measure different hardware paths")
    versions = [_versions(p) for p in profiles]
    for key in sorted({k for v in versions for k in v}):
        seen = [v.get(key) for v in versions]
        if any(s != seen[0] for s in seen[1:]):
            caveats.append(f"software versions differ: {key} is "
                           + ", ".join(f"{s if s is not None else 'absent'} ({n})" for s, n in zip(seen, names)))
    for profile, name in zip(profiles, names):
        if len(profile.get("runs") or ()) <= 1:
            caveats.append(f"{name} is a single run: its ratios have no run-to-run interval")
        differs = (profile.get("provenance") or {}).get("differs") or []
        if differs:
            caveats.append(f"{name}: its runs differ in {', '.join(differs)}")
    for row in rows:
        for name, unstable in zip(names, row["unstable"]):
            if unstable:
                caveats.append(f"{row['name']} is unstable in {name}: it moved between runs or with the run's "
                               "DRAM probes (see its caveats there), so its ratio may not hold in another run")
        missing = [n for n, v in zip(names, row["values"]) if v is None]
        if missing:
            caveats.append(f"{row['name']} is missing from {', '.join(missing)}: not compared")
    return caveats


def compare_profiles(profiles: Sequence[Mapping[str, Any]], paths: Sequence[str] | None = None) -> dict[str, Any]:
    """The comparison document of ``profiles`` (the first is the baseline), named by ``paths``."""
    paths = list(paths) if paths is not None else [f"profile-{i}" for i in range(len(profiles))]
    names = labels(profiles, paths)
    order: list[str] = []
    by_profile: list[dict[str, Mapping[str, Any]]] = []
    for profile in profiles:
        found = {c["name"]: c for c in profile.get("ceilings") or () if c.get("name")}
        order.extend(n for n in found if n not in order)
        by_profile.append(found)
    rows = [_ceiling_row(name, [found.get(name) for found in by_profile]) for name in order]
    targets = [{"label": label, "path": path, "id": (p.get("target") or {}).get("id"),
                "name": (p.get("target") or {}).get("name"), "kind": (p.get("target") or {}).get("kind"),
                "runs": len(p.get("runs") or ())} for label, path, p in zip(names, paths, profiles)]
    identities = [profile_identity(p) for p in profiles]
    return {**COMPARISON.stamp(), "created": utc_now_iso(), "baseline": 0, "targets": targets,
            "ceilings": rows, "classes": _class_rows(rows, len(profiles)),
            "cpus": _cpu_section(identities, names),
            "caveats": _cpu_caveats(identities, names, rows) + _caveats(profiles, names, rows)}


def _bottom_line(comparison: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """Per workload class, who is ahead and by how much (the class scores' winner and margin)."""
    names = [t["label"] for t in comparison["targets"]]
    items = []
    for klass in comparison.get("classes") or ():
        if klass["winner"] is None:
            text = f"{klass['class']}: tie" if klass["margin"] == 1.0 else f"{klass['class']}: -"
        else:
            text = f"{klass['class']}: {names[klass['winner']]} ahead by {klass['margin']:.3g}x"
        items.append((f"{text} ({len(klass['ceilings'])} ceilings)", False))
    differs = [d for d in (comparison.get("cpus") or {}).get("differs") or () if d]
    if differs:
        items.append(("different CPUs: " + ", ".join(sorted({w for d in differs for w in d})) + " differ", True))
    return items


def comparison_caveats(comparison: Mapping[str, Any]) -> list[tuple[str, list[str], int]]:
    """The comparison's caveats grouped: one that starts with a ceiling's name is said once for
    every ceiling it concerns (``7x is unstable in B: ... (bandwidth:dram, latency:dram, ...)``)."""
    from .html import group_caveats, split_subject

    names = [row["name"] for row in comparison.get("ceilings") or ()]
    return group_caveats(split_subject(caveat, names) for caveat in comparison.get("caveats") or ())


def render_html(comparison: Mapping[str, Any], profiles: Sequence[Mapping[str, Any]]) -> str:
    """The comparison as one HTML document (needs matplotlib: extra ``report``): who is ahead per
    workload class, the ratio chart and the overlays, the caveats grouped, the class and ceiling
    tables, the targets compared. Refers to nothing outside itself."""
    import html

    from .compare_command import class_rows, comparison_rows
    from .html import caveat_list, folded_table, headline_list, html_table, page, plot_grid
    from .compare_plots import comparison_svgs

    names = [t["label"] for t in comparison["targets"]]
    parts = [headline_list(_bottom_line(comparison)), plot_grid(comparison_svgs(comparison, profiles))]
    groups = comparison_caveats(comparison)
    if groups:
        parts.append(f"<h2>Caveats ({len(groups)} distinct, {sum(g[2] for g in groups)} in all)</h2>"
                     + caveat_list(groups))
    headers, rows = class_rows(comparison)
    if rows:
        parts.append("<h2>Workload classes</h2><p>Scores: geometric mean of the advantage over the baseline on "
                     "the ceilings every profile has (above 1x: better than the baseline).</p>"
                     + html_table(headers, rows))
    headers, rows = comparison_rows(comparison)
    parts.append("<h2>Ceilings</h2>" + (folded_table(headers, rows, what="ceilings") if rows
                                        else "<p>No ceiling in these profiles.</p>"))
    parts.append("<h2>Targets</h2>" + '<ul class="meta">' + "".join(
        f"<li><b>{html.escape(t['label'])}</b>{' (baseline)' if i == 0 else ''}: {html.escape(str(t['path']))}, "
        f"{html.escape(str(t.get('name')))} ({html.escape(str(t.get('kind')))}), {t['runs']} run(s)</li>"
        for i, t in enumerate(comparison["targets"])) + "</ul>")
    subtitle = f"baseline {names[0]}; " + "; ".join(
        f"{t['label']}: {t.get('name')} ({t.get('kind')}), {t['runs']} run(s)" for t in comparison["targets"])
    return page("Comparison: " + " vs ".join(names), parts, subtitle)


__all__ = ["CLASSES", "better_direction", "compare_profiles", "comparison_caveats", "labels", "profile_identity",
           "ratio_interval", "render_html", "run_values", "workload_class"]
