"""A run in other tools' formats: pytest-benchmark's JSON, and one row per case for CSV and Parquet.

Pure: a typed :class:`~pytest_charz.records.Run` in, a JSON-ready document or rows out. Nothing
here writes a file or prints (``charz export``, :mod:`pytest_charz.report.export_command`, does),
and nothing imports pytest-benchmark: its layout is reproduced from its own source
(``pytest_benchmark/plugin.py`` ``pytest_benchmark_generate_json``, ``stats.py`` ``Stats`` and
``Metadata.as_dict``), so its ``compare`` command and the CI trackers that read the same file
(github-action-benchmark's ``pytest`` tool) accept what :func:`pytest_benchmark_document` returns.
"""
from __future__ import annotations

import csv
import io
import json
import math
import statistics
from bisect import bisect_left, bisect_right
from typing import Any, Mapping, Sequence

from ..records import CaseRecord, Run

#: The pytest-benchmark release whose JSON layout this module writes (the file's "version").
PYTEST_BENCHMARK_LAYOUT = "5.3.1"
#: The export formats of ``charz export``, and the file suffix each is written with by default.
FORMATS = {"pytest-benchmark": ".benchmark.json", "csv": ".cases.csv", "parquet": ".cases.parquet"}


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None (the exports hold no NaN: a
    JavaScript tracker's JSON.parse refuses it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


# -- pytest-benchmark -----------------------------------------------------------------------------

def _quartiles(data: Sequence[float]) -> tuple[float, float]:
    """Q1 and Q3 as pytest-benchmark computes them (``Stats.q1``/``q3``: Wikipedia's methods 2
    and 3), so the exported quartiles are the ones its own table would show for these samples."""
    n = len(data)
    if n == 1:
        return data[0], data[0]
    if n % 2:
        k, q = n // 4, n % 4
        if q == 1:
            return 0.25 * data[k - 1] + 0.75 * data[k], 0.75 * data[3 * k] + 0.25 * data[3 * k + 1]
        return 0.75 * data[k] + 0.25 * data[k + 1], 0.25 * data[3 * k + 1] + 0.75 * data[3 * k + 2]
    return statistics.median(data[: n // 2]), statistics.median(data[n // 2:])


def benchmark_stats(samples_s: Sequence[float], iterations: int) -> dict[str, Any]:
    """pytest-benchmark's ``stats`` of one benchmark from per-call samples in seconds.

    Every field of ``pytest_benchmark.stats.Stats.fields``, plus ``data`` (the samples, as
    ``--benchmark-json`` writes them) and ``iterations`` (calls per timed sample). ``ops`` is calls
    per second over the samples. Needs at least one sample.
    """
    data = [float(s) for s in samples_s]
    if not data:
        raise ValueError("pytest-benchmark stats need at least one sample")
    ordered = sorted(data)
    mean = statistics.mean(data)
    stddev = statistics.stdev(data) if len(data) > 1 else 0.0
    q1, q3 = _quartiles(ordered)
    iqr = q3 - q1
    if len(data) == 1:
        low_fence = high_fence = data[0]
    else:
        low_fence = ordered[bisect_left(ordered, q1 - 1.5 * iqr)]
        high_fence = ordered[bisect_right(ordered, q3 + 1.5 * iqr) - 1]
    stddev_outliers = sum(1 for s in data if s < mean - stddev or s > mean + stddev)
    iqr_outliers = sum(1 for s in data if s < q1 - 1.5 * iqr or s > q3 + 1.5 * iqr)
    total = sum(data)
    return {
        "min": ordered[0], "max": ordered[-1], "mean": mean, "stddev": stddev, "rounds": len(data),
        "median": statistics.median(data), "iqr": iqr, "q1": q1, "q3": q3,
        "iqr_outliers": iqr_outliers, "stddev_outliers": stddev_outliers,
        "outliers": f"{stddev_outliers};{iqr_outliers}", "ld15iqr": low_fence, "hd15iqr": high_fence,
        "ops": len(data) / total if total else 0, "total": total,
        "data": data, "iterations": int(iterations),
    }


def _machine_info(run: Run) -> dict[str, Any]:
    """pytest-benchmark's ``machine_info`` keys, filled from the run's provenance (not this
    machine's: the file describes where the run was measured), plus the charz target and device."""
    prov = run.provenance
    os_info = prov.get("os") or {}
    cpu = prov.get("cpu") or {}
    python = prov.get("python") or {}
    return {
        "node": prov.get("host") or "", "processor": cpu.get("machine") or "", "machine": cpu.get("machine") or "",
        "python_compiler": python.get("compiler") or "",
        "python_implementation": python.get("implementation") or "",
        "python_implementation_version": python.get("version") or "",
        "python_version": python.get("version") or "", "python_build": list(python.get("build") or []),
        "release": os_info.get("release") or "", "system": os_info.get("system") or "",
        "cpu": {"brand_raw": cpu.get("model") or "", "arch": cpu.get("machine") or "",
                "count": cpu.get("logical_cpus")},
        "charz_target": {"id": run.target.id, "name": run.target.name, "kind": run.target.kind},
        "charz_device": {k: run.device.get(k) for k in ("backend", "index", "name") if k in run.device},
    }


def _commit_info(run: Run) -> dict[str, Any]:
    """pytest-benchmark's ``commit_info`` from the run's ``suite_git`` ("unversioned" outside git)."""
    git = run.provenance.get("suite_git") or {}
    return {"id": git.get("commit") or "unversioned", "time": None, "author_time": None,
            "dirty": bool(git.get("dirty")), "project": git.get("project") or "pytest-charz",
            "branch": git.get("branch") or "(unknown)"}


def _param(case: CaseRecord) -> str | None:
    """The parametrization id pytest-benchmark calls ``param`` (``test_x[4000]`` -> ``4000``)."""
    test_part = case.nodeid.split("::")[-1]
    if "[" in test_part and test_part.endswith("]"):
        return test_part[test_part.index("[") + 1:-1]
    return None


def _work_summary(case: CaseRecord) -> dict[str, Any]:
    work = case.work
    return {"op": work.op, "flops": dict(work.flops), "bytes": dict(work.bytes), "launches": work.launches,
            "transfers": dict(work.transfers), "shape": dict(work.shape)}


def _extra_info(case: CaseRecord) -> dict[str, Any]:
    """What pytest-benchmark has no field for: the case's work, median CI, verdict and model."""
    m = case.measurement
    prediction, verdict = case.prediction, case.verdict
    return {
        "label": case.label, "mode": m.mode, "work": _work_summary(case),
        "median_s": case.median_s,
        "median_ci_s": [_finite(m.ci_s[0]), _finite(m.ci_s[1])] if m.ci_s else None,
        "noise_met": m.noise_met, "discarded": dict(m.discarded),
        "predicted_s": _finite(prediction.time_s) if prediction is not None else None,
        "bound": prediction.bound if prediction is not None else None,
        "verdict": verdict.outcome if verdict is not None else None,
        "ratio": _finite(verdict.ratio) if verdict is not None else None,
        "model_error": _finite(verdict.model_error) if verdict is not None else None,
        "flags": list(case.flags),
    }


def _options(case: CaseRecord) -> dict[str, Any]:
    """The sampler settings under pytest-benchmark's option names (its table's legend reads them)."""
    s = case.settings
    return {"disable_gc": False, "timer": "pytest_charz.measure.clock", "min_rounds": s.min_samples,
            "max_time": s.max_time_s, "min_time": s.min_batch_s, "warmup": s.warmup_s > 0}


def exportable_cases(run: Run) -> tuple[list[CaseRecord], list[str]]:
    """The cases with kept samples, and the ids of those without (every sample discarded):
    pytest-benchmark has no way to say "measured, but nothing kept", as it drops errored ones."""
    kept = [case for case in run.cases if case.measurement.samples_s]
    return kept, [case.id for case in run.cases if not case.measurement.samples_s]


def pytest_benchmark_document(run: Run) -> dict[str, Any]:
    """The run as a pytest-benchmark JSON document (as ``pytest --benchmark-json`` writes it).

    One benchmark per case with kept samples: ``group`` the suite module, ``fullname`` the case
    id, ``name`` the id without its module, ``params`` the case's parameters, ``stats`` from the
    kept per-call samples (seconds), ``extra_info`` the charz figures (see :func:`_extra_info`).
    """
    benchmarks = []
    for case in exportable_cases(run)[0]:
        name = case.id.removeprefix(case.suite + "::")
        benchmarks.append({
            "group": case.suite, "name": name, "fullname": case.id, "params": dict(case.params) or None,
            "param": _param(case), "extra_info": _extra_info(case), "options": _options(case),
            "stats": benchmark_stats(case.measurement.samples_s, case.measurement.inner_loops),
        })
    return {"machine_info": _machine_info(run), "commit_info": _commit_info(run), "benchmarks": benchmarks,
            "datetime": run.created, "version": PYTEST_BENCHMARK_LAYOUT}


def pytest_benchmark_text(document: Mapping[str, Any]) -> str:
    """The document as JSON text; a non-finite number is a FormatError naming its key rather than
    a NaN token (:func:`pytest_charz.formats.dumps_json`)."""
    from ..formats import dumps_json

    return dumps_json(document, "the pytest-benchmark document", indent=4) + "\n"


# -- rows (CSV, Parquet) --------------------------------------------------------------------------

def _keys(run: Run, attribute: str) -> list[str]:
    return sorted({key for case in run.cases for key in getattr(case.work, attribute)})


def row_columns(run: Run) -> list[str]:
    """The columns of :func:`case_rows`: fixed ones, and one per dtype, memory level and transfer
    kind that occurs in the run (``flops:fp64``, ``bytes:dram``, ``transfers:h2d``)."""
    return ["id", "suite", "test", "label", "params", "op",
            *(f"flops:{k}" for k in _keys(run, "flops")), *(f"bytes:{k}" for k in _keys(run, "bytes")),
            "launches", *(f"transfers:{k}" for k in _keys(run, "transfers")),
            "median_s", "ci_low_s", "ci_high_s", "noise_met", "samples_kept", "samples_discarded", "flags",
            "predicted_s", "bound", "regime", "outcome", "ratio", "model_error"]


def case_rows(run: Run) -> list[dict[str, Any]]:
    """One row per case (every column of :func:`row_columns`; None where a figure is unknown).

    ``params`` is JSON text (parameters differ between suites, so they cannot be columns);
    ``flags`` the case's condition and sampler flags joined by ``;``; times in seconds.
    """
    columns = row_columns(run)
    rows = []
    for case in run.cases:
        m, work, prediction, verdict = case.measurement, case.work, case.prediction, case.verdict
        row: dict[str, Any] = dict.fromkeys(columns)
        row.update({
            "id": case.id, "suite": case.suite, "test": case.test, "label": case.label,
            "params": json.dumps(dict(case.params), sort_keys=True), "op": work.op, "launches": work.launches,
            "median_s": case.median_s,
            "ci_low_s": _finite(m.ci_s[0]) if m.ci_s else None, "ci_high_s": _finite(m.ci_s[1]) if m.ci_s else None,
            "noise_met": m.noise_met, "samples_kept": len(m.samples_s), "samples_discarded": m.discarded_total,
            "flags": ";".join(case.flags),
        })
        for prefix, amounts in (("flops", work.flops), ("bytes", work.bytes), ("transfers", work.transfers)):
            row.update({f"{prefix}:{k}": float(v) for k, v in amounts.items()})
        if prediction is not None:
            row.update(predicted_s=_finite(prediction.time_s), bound=prediction.bound or None,
                       regime=prediction.regime or None)
        if verdict is not None:
            row.update(outcome=verdict.outcome, ratio=_finite(verdict.ratio), model_error=_finite(verdict.model_error))
        rows.append(row)
    return rows


def rows_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """The rows as CSV text with a header line; an unknown figure is an empty field."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)
    return out.getvalue()
