"""Two or more runs side by side, case by case: each case's median in every run, its ratio to the
first run (the baseline) with a bootstrap interval, and what changed.

The figures come from the samples each run file stores: the ratio of medians and its percentile
bootstrap interval are :func:`pytest_charz.measure.stats.bootstrap_ratio_ci`'s, the rank test
:func:`~pytest_charz.measure.stats.mann_whitney_u`'s. A case's ``change`` against the baseline,
with threshold t (``--threshold``, 5% by default) and the interval at 95%:

``slower`` / ``faster``
    the ratio is beyond 1 +- t, its whole interval is beyond 1 +- t on the same side, and the
    Mann-Whitney p is below 0.01 (the verdict's drift rule, between two runs);
``same``
    the whole interval lies inside 1 +- t;
``undecided``
    anything else: the interval straddles the threshold, or the tests disagree;
``unknown``
    a side has fewer kept samples than a 95% interval of the median needs (6);
``incomparable``
    the runs measured the case in different modes (hot and cold samples).

``slowed_beyond(comparison, pct)`` is the rule of ``--fail-over PCT``: a case fails when its ratio
and the lower end of its interval both exceed 1 + PCT/100, so a case fails only when even the
most favourable reading of its samples is a slowdown beyond PCT.

Everything here is pure: runs in, a JSON-ready document (``RUN_COMPARISON``) out.
"""
from __future__ import annotations

import fnmatch
import math
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import UsageError
from ..formats import Format
from ..measure import stats
from ..records import CaseRecord, Run

RUN_COMPARISON = Format("charz-run-comparison", 1, "charz run comparison")
LEVEL = 0.95
ALPHA = 0.01
DEFAULT_THRESHOLD = 0.05
# The bootstrap resamples at most this many order statistics per side: a case's comparison
# costs a few milliseconds whatever its sample count, and the thinned interval is wider (conservative).
MAX_SAMPLES = 500
RESAMPLES = 1000
CHANGES = ("slower", "undecided", "unknown", "incomparable", "same", "faster")
SORT_KEYS = ("ratio", "name", "change", "median", "p")
GROUP_KEYS = ("none", "suite", "test", "op", "change")


def run_label(path: str) -> str:
    """A short name of a run file: its file name without ``.json``, ``.gz``, ``.run``."""
    name = os.path.basename(path)
    for suffix in (".partial.jsonl", ".gz", ".json", ".run"):
        name = name.removesuffix(suffix)
    return name or path


def _labels(paths: Sequence[str]) -> list[str]:
    labels = [run_label(p) for p in paths]
    return [f"{label}#{i + 1}" if labels.count(label) > 1 else label for i, label in enumerate(labels)]


def run_identity(run: Run) -> dict[str, Any]:
    """What a reader needs to place a run: when, which commit, which machine and target."""
    from ..store import run_target_key

    git = run.provenance.get("suite_git") or {}
    cpu = run.provenance.get("cpu") or {}
    return {"path": run.path, "created": run.created, "status": run.status,
            "commit": git.get("commit") if isinstance(git, Mapping) else None,
            "dirty": bool(git.get("dirty")) if isinstance(git, Mapping) else False,
            "target": run.target.id, "target_key": run_target_key(run), "host": run.provenance.get("host"),
            "cpu": cpu.get("model") if isinstance(cpu, Mapping) else None,
            "quick": bool(run.settings.get("quick")), "cases": len(run.cases)}


def _side(case: CaseRecord) -> dict[str, Any]:
    m = case.measurement
    return {"median_s": case.median_s, "ci_s": list(m.ci_s) if m.ci_known and m.ci_s else None,
            "samples": len(m.samples_s), "mode": m.mode,
            "verdict": case.verdict.outcome if case.verdict is not None else None, "flags": list(case.flags)}


def compare_cases(base: CaseRecord, other: CaseRecord, threshold: float) -> dict[str, Any]:
    """The ratio other / base of the medians, its interval, the rank test's p and the change
    (module docstring); ``note`` says why a figure is missing."""
    a, b = base.measurement, other.measurement
    if base.median_s is None or other.median_s is None:
        return {"ratio": None, "interval": None, "p_value": None, "change": "unknown",
                "note": "no kept samples in " + ("the baseline" if base.median_s is None else "this run")}
    ratio = other.median_s / base.median_s
    if a.mode and b.mode and a.mode != b.mode:
        return {"ratio": ratio, "interval": None, "p_value": None, "change": "incomparable",
                "note": f"measured {a.mode} in the baseline, {b.mode} here"}
    need = stats.ci_min_samples(LEVEL)
    if min(len(a.samples_s), len(b.samples_s)) < need:
        return {"ratio": ratio, "interval": None, "p_value": None, "change": "unknown",
                "note": f"fewer than {need} kept samples: no {LEVEL:.0%} interval"}
    boot = stats.bootstrap_ratio_ci(stats.order_statistics(a.samples_s, MAX_SAMPLES),
                                    stats.order_statistics(b.samples_s, MAX_SAMPLES),
                                    level=LEVEL, resamples=RESAMPLES, seed=0)
    p_value = stats.mann_whitney_u(a.samples_s, b.samples_s).p_value
    if ratio > 1 + threshold and boot.low > 1 + threshold and p_value < ALPHA:
        change = "slower"
    elif ratio < 1 - threshold and boot.high < 1 - threshold and p_value < ALPHA:
        change = "faster"
    elif 1 - threshold < boot.low and boot.high < 1 + threshold:
        change = "same"
    else:
        change = "undecided"
    return {"ratio": ratio, "interval": [boot.low, boot.high], "p_value": p_value, "change": change, "note": ""}


def _caveats(identities: Sequence[Mapping[str, Any]]) -> list[str]:
    base = identities[0]
    out = []
    for ident in identities[1:]:
        if ident["target_key"] != base["target_key"]:
            out.append(f"{run_label(ident['path'])} is of another target or CPU ({ident['target_key']}) than the "
                       f"baseline ({base['target_key']}): its ratios compare machines, not changes")
        if ident["quick"] != base["quick"]:
            out.append(f"{run_label(ident['path'])} is a {'quick' if ident['quick'] else 'full'} run, the baseline "
                       f"a {'quick' if base['quick'] else 'full'} one: their sampling budgets differ")
    for ident in identities:
        if ident["status"] != "complete":
            out.append(f"{run_label(ident['path'])} is {ident['status']}: some of its cases may be missing")
    return out


def compare_runs(runs: Sequence[Run], threshold: float = DEFAULT_THRESHOLD,
                 labels: Sequence[str] | None = None,
                 on_case: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The comparison document of ``runs`` (at least two; the first is the baseline): each case
    of any run, in the baseline's case order, then the others' new cases. ``on_case(case_id)``
    is called before each case is compared (a progress bar's step)."""
    from ..verdict import check_threshold

    if len(runs) < 2:
        raise UsageError("a comparison needs at least two runs")
    check_threshold(threshold)
    names = list(labels) if labels is not None else _labels([r.path for r in runs])
    by_run = [{case.id: case for case in run.cases} for run in runs]
    order: list[str] = []
    seen: set[str] = set()
    for run in runs:
        for case in run.cases:
            if case.id not in seen:
                seen.add(case.id)
                order.append(case.id)
    cases = []
    for case_id in order:
        if on_case is not None:
            on_case(case_id)
        present = [cases_of.get(case_id) for cases_of in by_run]
        first = next(c for c in present if c is not None)
        base = present[0]
        ratios = [None if base is None or other is None else compare_cases(base, other, threshold)
                  for other in present[1:]]
        cases.append({"id": case_id, "suite": first.suite, "test": first.test, "label": first.label,
                      "op": first.work.op or "", "params": dict(first.params),
                      "runs": [None if c is None else _side(c) for c in present], "ratios": ratios})
    identities = [run_identity(run) for run in runs]
    summary = []
    for index, name in enumerate(names[1:]):
        compared = [c["ratios"][index] for c in cases if c["ratios"][index] is not None]
        counts = {change: sum(1 for r in compared if r["change"] == change) for change in CHANGES}
        logs = [math.log(r["ratio"]) for r in compared if r["ratio"] and r["change"] != "incomparable"]
        summary.append({"run": name, "compared": len(compared), **counts,
                        "only_baseline": sum(1 for c in cases if c["runs"][0] and not c["runs"][index + 1]),
                        "only_this": sum(1 for c in cases if c["runs"][index + 1] and not c["runs"][0]),
                        "geomean_ratio": math.exp(float(np.mean(logs))) if logs else None})
    return {**RUN_COMPARISON.stamp(), "threshold": threshold, "level": LEVEL, "alpha": ALPHA,
            "runs": [{"label": name, **ident} for name, ident in zip(names, identities)],
            "caveats": _caveats(identities), "summary": summary, "cases": cases}


def slowed_beyond(comparison: Mapping[str, Any], percent: float) -> list[dict[str, Any]]:
    """The cases that slowed beyond ``percent`` against the baseline in any run: ratio and the
    lower end of its interval both above 1 + percent/100 (a case without an interval never
    fails). One entry per case and run: ``id``, ``run``, ``ratio``, ``interval``."""
    from ..errors import check_positive

    limit = 1.0 + check_positive("--fail-over", percent) / 100.0
    out = []
    for case in comparison["cases"]:
        for index, ratio in enumerate(case["ratios"]):
            if ratio and ratio["interval"] and ratio["ratio"] > limit and ratio["interval"][0] > limit:
                out.append({"id": case["id"], "run": comparison["runs"][index + 1]["label"],
                            "ratio": ratio["ratio"], "interval": ratio["interval"]})
    return out


def _worst_ratio(case: Mapping[str, Any]) -> float:
    known = [r["ratio"] for r in case["ratios"] if r and r["ratio"] is not None]
    return max(known) if known else -math.inf


def _change_rank(case: Mapping[str, Any]) -> int:
    ranks = [CHANGES.index(r["change"]) for r in case["ratios"] if r]
    return min(ranks) if ranks else len(CHANGES)


def sort_cases(cases: Sequence[Mapping[str, Any]], key: str) -> list[Mapping[str, Any]]:
    """``cases`` ordered by ``key``: ``ratio`` (the most slowed first), ``name``, ``change``
    (slower, undecided, unknown, incomparable, same, faster; then by ratio), ``median`` (the
    baseline's, longest first) or ``p`` (the smallest p first)."""
    from ..errors import check_choice

    check_choice("--sort", key, SORT_KEYS)
    if key == "name":
        return sorted(cases, key=lambda c: c["id"])
    if key == "change":
        return sorted(cases, key=lambda c: (_change_rank(c), -_worst_ratio(c), c["id"]))
    if key == "median":
        def median(case: Mapping[str, Any]) -> float:
            side = next((s for s in case["runs"] if s and s["median_s"] is not None), None)
            return side["median_s"] if side else -math.inf
        return sorted(cases, key=lambda c: (-median(c), c["id"]))
    if key == "p":
        def p_value(case: Mapping[str, Any]) -> float:
            known = [r["p_value"] for r in case["ratios"] if r and r["p_value"] is not None]
            return min(known) if known else math.inf
        return sorted(cases, key=lambda c: (p_value(c), c["id"]))
    return sorted(cases, key=lambda c: (-_worst_ratio(c), c["id"]))


def group_of(case: Mapping[str, Any], key: str) -> str:
    """The group ``case`` falls in for ``--group-by key`` (``""`` for ``none``)."""
    from ..errors import check_choice

    check_choice("--group-by", key, GROUP_KEYS)
    if key == "none":
        return ""
    if key == "change":
        ranks = [r["change"] for r in case["ratios"] if r]
        return min(ranks, key=CHANGES.index) if ranks else "not in the baseline"
    return str(case.get(key) or "-")


def grouped(cases: Sequence[Mapping[str, Any]], key: str) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """``cases`` in groups, groups in the order their first case comes, each keeping the order."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for case in cases:
        groups.setdefault(group_of(case, key), []).append(case)
    return list(groups.items())


def find_cases(comparison_or_ids: Mapping[str, Any] | Sequence[str], pattern: str, most: int = 12) -> list[str]:
    """The case ids ``pattern`` names: the id itself, else the ids a glob matches (its brackets
    read literally, else as a character class; at most ``most``), else the one id that contains
    it; UsageError otherwise, naming candidates."""
    ids = ([c["id"] for c in comparison_or_ids["cases"]] if isinstance(comparison_or_ids, Mapping)
           else list(comparison_or_ids))
    if pattern in ids:
        return [pattern]
    # case ids hold brackets ([fp64-1024]): read them literally first, as a glob's character class after
    literal = pattern.replace("[", "[[]")
    matched = ([i for i in ids if fnmatch.fnmatchcase(i, literal)]
               or [i for i in ids if fnmatch.fnmatchcase(i, pattern)])
    if matched:
        return matched[:most]
    containing = [i for i in ids if pattern in i]
    if len(containing) == 1:
        return containing
    if containing:
        shown = ", ".join(containing[:4]) + (", ..." if len(containing) > 4 else "")
        raise UsageError(f"--histogram {pattern!r} names {len(containing)} cases ({shown}); give the full id or a glob")
    raise UsageError(f"--histogram {pattern!r} names no case of these runs")


def histogram(samples_by_run: Sequence[Sequence[float]], bins: int = 16) -> dict[str, Any]:
    """Counts of each run's samples (seconds per call) on one grid of ``bins`` equal bins over
    the pooled samples from their 1st to 99th percentile; samples outside fall in ``below`` and
    ``above`` (counted, never dropped)."""
    pooled = np.concatenate([np.asarray(s, dtype=float) for s in samples_by_run if len(s)] or [np.zeros(0)])
    if pooled.size == 0:
        return {"edges_s": [], "counts": [[] for _ in samples_by_run], "below": [0] * len(samples_by_run),
                "above": [0] * len(samples_by_run)}
    low, high = (float(v) for v in np.percentile(pooled, [1.0, 99.0]))
    if not high > low:
        low, high = float(pooled.min()), float(pooled.max())
    if not high > low:
        low, high = low * 0.99, low * 1.01 if low > 0 else 1e-12
    edges = np.linspace(low, high, bins + 1)
    counts, below, above = [], [], []
    for samples in samples_by_run:
        x = np.asarray(samples, dtype=float)
        counts.append([int(v) for v in np.histogram(x[(x >= low) & (x <= high)], bins=edges)[0]])
        below.append(int(np.count_nonzero(x < low)))
        above.append(int(np.count_nonzero(x > high)))
    return {"edges_s": [float(e) for e in edges], "counts": counts, "below": below, "above": above}


__all__ = ["CHANGES", "GROUP_KEYS", "RUN_COMPARISON", "SORT_KEYS", "compare_cases", "compare_runs", "find_cases",
           "group_of", "grouped", "histogram", "run_identity", "run_label", "slowed_beyond", "sort_cases"]
