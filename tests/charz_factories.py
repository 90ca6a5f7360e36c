"""Builders of run-file records for tests: complete JSON that ``Run.from_json`` and
``CaseRecord.from_json`` accept, with only what a test cares about to fill in; and the suites'
modules loaded under names of their own."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping, Sequence

from pytest_charz.records import CaseRecord, Run


def measurement_json(median_s: float | None, kept: int = 10, *, discarded: Mapping[str, int] | None = None,
                     noise_met: bool = True, samples_s: Sequence[float] | None = None, mode: str = "hot",
                     rel_ci_halfwidth: float | None = None, **overrides: Any) -> dict[str, Any]:
    """A Measurement's JSON with ``kept`` samples at ``median_s`` (or the given ``samples_s``)."""
    samples = list(samples_s) if samples_s is not None else ([median_s] * kept if median_s is not None else [])
    rel = rel_ci_halfwidth if rel_ci_halfwidth is not None else (0.01 if noise_met else 0.08)
    data: dict[str, Any] = {
        "samples_s": samples, "inner_loops": 1, "mode": mode, "taken": len(samples) + sum((discarded or {}).values()),
        "kept": len(samples), "discarded": dict(discarded or {}), "warmup_calls": 1,
        "stop_reason": "noise-target" if noise_met else "time-budget", "elapsed_s": 1.0, "noise_target": 0.01,
        "noise_met": noise_met, "ci_level": 0.95, "median_s": median_s,
        "ci_s": [median_s * (1 - rel), median_s * (1 + rel)] if median_s is not None else None,
        "iqr_s": [median_s, median_s] if median_s is not None else None,
        "rel_ci_halfwidth": rel if median_s is not None else None, "outliers": 0, "timer_resolution_s": 1e-9,
        "notes": [],
    }
    data.update(overrides)
    return data


def case_json(case_id: str, work: Mapping[str, Any], median_s: float | None, *, suite: str = "suites/test_synth.py",
              measurement: Mapping[str, Any] | None = None, conditions: Mapping[str, Any] | None = None,
              flags: Sequence[str] = (), **extra: Any) -> dict[str, Any]:
    """A case record's JSON; ``case_id`` without a ``::`` is placed in ``suite``."""
    full = case_id if "::" in case_id else f"{suite}::{case_id}"
    module, _, test = full.partition("::")
    data: dict[str, Any] = {
        "id": full, "nodeid": full, "suite": module, "test": test.split("[")[0], "label": "", "params": {},
        "work": dict(work), "settings": {},
        "measurement": dict(measurement) if measurement is not None else measurement_json(median_s),
        "conditions": dict(conditions) if conditions is not None else
        {"before": {"device": None}, "after": {"device": None}, "interval": {"flags": []}},
        "achieved": {}, "peak_fraction": {}, "flags": list(flags),
    }
    data.update(extra)
    return data


def run_json(cases: Sequence[Mapping[str, Any]], *, target_id: str = "cpu", name: str = "host",
             kind: str = "cpu", spec: Mapping[str, Any] | None = None, status: str = "complete",
             created: str = "2026-01-01T00:00:00+00:00", version: int = 2, **extra: Any) -> dict[str, Any]:
    """A run file's JSON (current version by default) holding ``cases``."""
    data: dict[str, Any] = {
        "kind": "charz-run", "version": version, "created": created, "status": status,
        "target": {"id": target_id, "name": name, "kind": kind, "origin": "test", "spec": dict(spec) if spec else None},
        "device": {"backend": "cpu"}, "provenance": {}, "settings": {}, "cases": [dict(c) for c in cases],
    }
    data.update(extra)
    return data


def make_run(cases: Sequence[Mapping[str, Any]], **kwargs: Any) -> Run:
    """A typed Run of the given case JSONs (see :func:`run_json`)."""
    return Run.from_json(run_json(cases, **kwargs), "test run")


def make_case(case_id: str, work: Mapping[str, Any], median_s: float | None, **kwargs: Any) -> CaseRecord:
    """A typed CaseRecord (see :func:`case_json`)."""
    return CaseRecord.from_json(case_json(case_id, work, median_s, **kwargs), "test")


SUITES = Path(__file__).resolve().parent.parent / "suites"


def load_suite_module(name: str) -> ModuleType:
    """``suites/<name>.py`` under a name of its own, left out of ``sys.modules`` (``tests/`` has a
    test_collectives too, and a suite copied elsewhere by another test imports as its own name)."""
    sys.path.insert(0, str(SUITES))
    try:
        spec = importlib.util.spec_from_file_location(f"charz_suite_{name}", SUITES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SUITES))
