"""Validation of models on measured runs: calibrate on one part, score on the rest.

For each model and each target, the model is calibrated (:func:`pytest_charz.calibration.fit.fit`)
on the calibration split of the target's cases and predicts the held-out split
(:func:`~pytest_charz.calibration.observations.split_cases`: a glob of case ids, or every other
size per op class). Errors are ``measured / predicted - 1``, the verdict's model error: positive
when the case ran slower than predicted. Per model and regime (of the predicted bound) the report
gives n, MAPE (mean absolute error), median and P90 absolute error, bias (median signed error) and
the coverage of the prediction intervals (the regime's conformal band), listing cases outside them.

Transfer: with runs of two or more targets (else two or more runs of one), the model is
calibrated on all cases of one and predicts every case of each other. A case "stops
transferring" when its absolute error exceeds twice the P90 absolute error of the calibrated model
on its own calibration cases of that regime (each predicted without itself, as for the bands), or
lies outside its interval.

Workloads (:mod:`.workloads`): workload cases never calibrate the split above; with runs that
hold both microbenchmarks and workload cases of a target, each model is calibrated on the
microbenchmarks alone and scored on every workload op and every workload end to end (the
``workloads`` list of the report, absent without workload cases).

Validation JSON (``formats.VALIDATION``, version 1, kind ``charz-validation``) carries every
scored case, so reports (:mod:`pytest_charz.report.validation`) draw from it alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import UsageError
from ..formats import VALIDATION
from ..measure.clock import utc_now_iso
from ..models.base import REGIMES
from ..models.ceilings import Ceilings
from ..models.opclass_costs import is_workload
from ..models.registry import MODELS, get_model
from ..records import Run
from ..calibration.fit import Fitted, fit
from ..calibration.observations import (Observation, RunArg, ceilings_from_run, load_runs,
                                        measured_ceilings, model_ceilings, observations, split_cases)
from .workloads import priced_work, validate_workloads

SPLIT_RULE = ("every other case per op class sorted by size, starting with the smallest; the largest always "
              "calibrates (held-out cases lie between calibrated sizes)")


def _quantile(values: Sequence[float], q: float) -> float:
    import numpy as np

    return float(np.quantile(np.asarray(values, dtype=float), q))


def error_summary(errors: Sequence[float], inside: Sequence[bool | None]) -> dict[str, Any]:
    """n, MAPE, median and P90 absolute error, bias (median signed error) and interval coverage.

    ``errors`` are relative errors (measured / predicted - 1); ``inside`` whether each measured
    value lay in its interval (None: no interval). Empty input gives n = 0 and None elsewhere.
    """
    if not errors:
        return {"n": 0, "mape": None, "median_abs": None, "p90_abs": None, "bias": None, "coverage": None}
    absolute = [abs(e) for e in errors]
    judged = [flag for flag in inside if flag is not None]
    return {"n": len(errors), "mape": sum(absolute) / len(absolute), "median_abs": _quantile(absolute, 0.5),
            "p90_abs": _quantile(absolute, 0.9), "bias": _quantile(errors, 0.5),
            "coverage": sum(judged) / len(judged) if judged else None}


@dataclass(frozen=True)
class CaseResult:
    """One case predicted by a calibrated model it was not calibrated on."""

    model: str
    case_id: str
    target: str
    calibrated_on: str
    kind: str                      # "held-out" (same target) or "transfer"
    op_class: str
    regime: str
    measured_s: float
    predicted_s: float
    interval_s: tuple[float, float]
    limit: float | None = None     # 2 x the calibrated P90 |error| of the regime

    @property
    def error(self) -> float:
        return self.measured_s / self.predicted_s - 1.0

    @property
    def inside(self) -> bool | None:
        low, high = self.interval_s
        if low == high == self.predicted_s:
            return None
        return low <= self.measured_s <= high

    @property
    def stops_transferring(self) -> bool:
        return self.inside is False or (self.limit is not None and abs(self.error) > self.limit)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "case": self.case_id, "target": self.target, "calibrated_on": self.calibrated_on,
                "kind": self.kind, "op_class": self.op_class, "regime": self.regime, "measured_s": self.measured_s,
                "predicted_s": self.predicted_s, "interval_s": list(self.interval_s), "error": self.error,
                "inside": self.inside, "limit": self.limit}


@dataclass(frozen=True)
class ValidationReport:
    """What :func:`validate` found; :meth:`to_json` is the validation file."""

    created: str
    level: float
    split: str
    runs: tuple[Mapping[str, Any], ...]
    models: tuple[str, ...]
    skipped: Mapping[str, str]
    results: tuple[CaseResult, ...]
    not_covered: Mapping[str, tuple[Mapping[str, str], ...]]
    calibrations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    workloads: tuple[Mapping[str, Any], ...] = ()

    def held_out(self, model: str) -> list[CaseResult]:
        return [r for r in self.results if r.model == model and r.kind == "held-out"]

    def table(self, model: str) -> dict[str, dict[str, Any]]:
        """Per regime (and ``all``) :func:`error_summary` of the model's held-out cases."""
        rows = self.held_out(model)
        out = {"all": error_summary([r.error for r in rows], [r.inside for r in rows])}
        for regime in REGIMES:
            mine = [r for r in rows if r.regime == regime]
            if mine:
                out[regime] = error_summary([r.error for r in mine], [r.inside for r in mine])
        return out

    def transfer_table(self) -> list[dict[str, Any]]:
        rows = [r for r in self.results if r.kind == "transfer"]
        keys = sorted({(r.model, r.calibrated_on, r.target, r.regime) for r in rows})
        table = []
        for model, source, target, regime in keys:
            mine = [r for r in rows if (r.model, r.calibrated_on, r.target, r.regime) == (model, source, target, regime)]
            table.append({"model": model, "calibrated_on": source, "tested_on": target, "regime": regime,
                          **error_summary([r.error for r in mine], [r.inside for r in mine])})
        return table

    def stops_transferring(self, model: str) -> list[CaseResult]:
        found = [r for r in self.results if r.model == model and r.stops_transferring]
        return sorted(found, key=lambda r: (-abs(r.error), r.case_id))

    def to_json(self) -> dict[str, Any]:
        return {
            # version before kind: the key order of the reports already written (and of the golden files)
            "version": VALIDATION.version, "kind": VALIDATION.kind, "created": self.created, "level": self.level,
            "error": "measured / predicted - 1", "split": self.split, "runs": [dict(r) for r in self.runs],
            "models": list(self.models), "skipped": dict(self.skipped),
            "tables": {m: self.table(m) for m in self.models},
            "outside_interval": {m: [r.to_json() for r in self.held_out(m) if r.inside is False] for m in self.models},
            "not_covered": {m: [dict(x) for x in self.not_covered.get(m, ())] for m in self.models},
            "transfer": self.transfer_table(),
            "stops_transferring": {m: [r.to_json() for r in self.stops_transferring(m)] for m in self.models},
            "calibrations": {m: dict(c) for m, c in self.calibrations.items()},
            "cases": [r.to_json() for r in self.results],
            # only for runs with workload cases: the reports of microbenchmark runs stay as they were
            **({"workloads": [dict(w) for w in self.workloads]} if self.workloads else {}),
        }


def _calibrated_p90(fitted: Fitted) -> dict[str, float]:
    """Per regime, the P90 |error| of the calibrated model on its calibration cases, each predicted
    without itself (the leave-one-out residuals the bands come from)."""
    return {regime: _quantile([abs(math.exp(r) - 1.0) for r in values], 0.9)
            for regime, values in fitted.residuals.items() if values}


def _score(fitted: Fitted, cases: Sequence[Observation], p90: Mapping[str, float], *, kind: str, target: str,
           calibrated_on: str, not_covered: list[dict[str, str]]) -> list[CaseResult]:
    results = []
    for case in cases:
        prediction = fitted.predict(case.work)
        if not prediction.covered:
            not_covered.append({"case": case.case_id, "target": target, "reason": prediction.reason})
            continue
        limit = 2.0 * p90[prediction.regime] if prediction.regime in p90 else None
        results.append(CaseResult(fitted.model.name, case.case_id, target, calibrated_on, kind, case.calibration_key,
                                  prediction.regime, case.measured_s, prediction.time_s, prediction.interval_s, limit))
    return results


def _nothing_scored(prepared: Mapping[str, tuple[Any, ...]], loaded: Sequence[Run]) -> str:
    """Why a model scored nothing: the runs' workloads had no kernel microbenchmark to calibrate
    on (:func:`.workloads.priced_work`), or there was no case at all."""
    workloads = sum(is_workload(c.work) for run in loaded for c in run.cases)
    micro = [c for cases, *_ in prepared.values() for c in cases]
    if workloads and not any(priced_work(c.work) for c in micro):
        return (f"no case to score: the runs hold {workloads} workload case(s) and {len(micro)} microbenchmark "
                "case(s) of no work (dispatch, launch), which calibrate no op's kernel")
    return "no case to score"


def validate(runs: Sequence[RunArg], models: Sequence[str] | None = None,
             calibrate_on: str | None = None, level: float = 0.9) -> ValidationReport:
    """Calibrate each model on part of each target's cases and score it on the rest and across runs.

    ``runs`` are run file paths or typed :class:`~pytest_charz.records.Run`; ``models`` registry names (default: all of
    :data:`MODELS`; one that covers no case is listed in ``skipped`` with the reason);
    ``calibrate_on`` a glob of case ids that calibrate (default: the alternate-size split).
    """
    loaded = load_runs(runs)
    if not loaded:
        raise UsageError("validate needs at least one run")
    names = list(models) if models else list(MODELS)
    for name in names:
        get_model(name)
    by_target: dict[str, list[Run]] = {}
    for run in loaded:
        by_target.setdefault(run.target.id, []).append(run)
    prepared = {}
    for target, members in by_target.items():
        cases = [c for c in observations(members) if not is_workload(c.work)]
        prepared[target] = (cases, *split_cases(cases, calibrate_on), ceilings_from_run(members[0]))
    # transfer groups: targets when there are several, else runs
    if len(by_target) >= 2:
        groups = [(t, prepared[t][0], prepared[t][3]) for t in by_target]
    elif len(loaded) >= 2:
        groups = [(f"{run.path or 'run'}#{i}", [c for c in observations([run]) if not is_workload(c.work)],
                   ceilings_from_run(run)) for i, run in enumerate(loaded)]
    else:
        groups = []

    results: list[CaseResult] = []
    not_covered: dict[str, list[dict[str, str]]] = {}
    skipped: dict[str, str] = {}
    calibrations: dict[str, dict[str, Any]] = {}
    for name in names:
        model = get_model(name)
        reasons: list[str] = []
        missing = not_covered.setdefault(name, [])
        for target, (_, fit_cases, held, spec) in prepared.items():
            try:
                fitted = fit(model, fit_cases, spec, level)
            except UsageError as exc:
                reasons.append(f"{target}: {exc}")
                continue
            calibrations.setdefault(name, {})[target] = {
                "fitted_on": [c.case_id for c in fit_cases], "held_out": [c.case_id for c in held],
                "bands": {r: dict(b) for r, b in fitted.bands.items()},
                "ceilings_filled": _filled(fitted.ceilings)}
            results += _score(fitted, held, _calibrated_p90(fitted), kind="held-out", target=target,
                              calibrated_on=target, not_covered=missing)
        for source, source_cases, source_spec in groups:
            try:
                fitted = fit(model, source_cases, source_spec, level)
            except UsageError:
                continue
            p90 = _calibrated_p90(fitted)
            for other, other_cases, other_spec in groups:
                if other == source:
                    continue
                moved = Fitted(model, model_ceilings(name, other_spec, measured_ceilings(source_cases, other_spec)),
                               fitted.calibration, fitted.bands)
                results += _score(moved, other_cases, p90, kind="transfer", target=other, calibrated_on=source,
                                  not_covered=[])
        if not any(r.model == name for r in results):
            first = missing[0]["reason"] if missing else "; ".join(reasons) or _nothing_scored(prepared, loaded)
            skipped[name] = first
    # a model every microbenchmark calibrated (none held out) is still scored on the workloads
    scored_workloads = {name: [found.to_json() for found in validate_workloads(loaded, name, level)]
                        for name in names}
    for name, found in scored_workloads.items():
        if found:
            skipped.pop(name, None)
    kept = tuple(n for n in names if n not in skipped)
    workloads = tuple(found for name in kept for found in scored_workloads[name])
    several_hosts = len({run.provenance.get("host") for run in loaded}) > 1
    return ValidationReport(
        created=utc_now_iso(timespec="seconds"), level=level,
        split=f"case ids matching {calibrate_on!r} calibrate" if calibrate_on else SPLIT_RULE,
        runs=tuple(_run_entry(run, several_hosts) for run in loaded),
        models=kept, skipped=skipped, results=tuple(results),
        not_covered={n: tuple(not_covered.get(n, ())) for n in kept}, calibrations=calibrations,
        workloads=workloads)


def _run_entry(run: Run, with_host: bool) -> dict[str, Any]:
    """A validated run as the report lists it; with runs of several hosts, each names its host
    (one host adds nothing, and single-host reports keep the layout they always had)."""
    entry: dict[str, Any] = {"path": run.path, "target": run.target.id, "created": run.created,
                             "cases": len(run.cases)}
    if with_host:
        entry["host"] = run.provenance.get("host")
    return entry


def _filled(ceilings: Ceilings) -> list[str]:
    """Names of the figures measured on calibration cases (not from the spec)."""
    data = ceilings.to_json()
    names = []
    for key, value in data.items():
        if isinstance(value, Mapping) and "source" in value and "calibration case" in str(value["source"]):
            names.append(key)
        elif isinstance(value, Mapping):
            names += [f"{key}:{k}" for k, f in value.items()
                      if isinstance(f, Mapping) and "calibration case" in str(f.get("source"))]
    return names
