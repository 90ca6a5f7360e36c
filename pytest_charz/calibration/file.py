"""The calibration file: a model calibrated on the runs of one target, and :func:`calibrate`.

Calibration file (``formats.CALIBRATION``, version 2)::

    {"version": 2, "kind": "charz-calibration", "target": id, "host": CPU name, "model": name,
     "created": ISO-8601,
     "fit": ModelFit JSON (kind "charz-model-fit": efficiency tables by calibration key, class
            fits, the measured op-class figures, pooled interval),
     "ceilings": Ceilings JSON (the spec, filled from the calibration cases),
     "bands": {regime: {"lo", "hi", "n", "level", "coverage", "method"}},
     "fitted_on": {"runs": [{"path", "created"}], "cases": [ids]}, "held_out": [ids]}

``host`` names the CPU of the runs when the target is a host CPU (the identity name of its
TargetSpec; empty otherwise and in files written before it): a calibration is never used for
another CPU. ``lo`` and ``hi`` are relative errors; ``method`` is described in :mod:`.fit`; ``coverage`` is
the fraction of held-out cases of the regime inside the band (null without held-out cases).
``charz calibrate`` (:mod:`pytest_charz.report.calibration_command`) writes it next to the
baselines, where the plugin's judge reads it. Version 1 nested the fit under ``"calibration"``
and its records had no ``kind``; it migrates on load.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import FormatError, UsageError
from ..formats import CALIBRATION
from ..measure.clock import utc_now_iso
from ..models.base import Prediction
from ..models.ceilings import Ceilings
from ..models.opclass_costs import is_workload
from ..models.registry import DEFAULT_MODEL, get_model
from ..work import Work
from .efficiency import RECORD_KINDS, ModelFit
from .fit import band_coverage, fit
from .predictor import Predictor
from .observations import RunArg, ceilings_from_run, load_runs, observations, split_cases

if TYPE_CHECKING:
    from ..models.opclass_costs import OpCosts


@dataclass(frozen=True)
class Calibration:
    """A model calibrated on some cases of one target: what the calibration file holds."""

    target: str
    model: str
    calibration: ModelFit
    ceilings: Ceilings
    bands: Mapping[str, Mapping[str, Any]]
    fitted_on: Mapping[str, Any]
    held_out: tuple[str, ...]
    created: str
    host: str = ""

    def predictor(self, source: str = "", op_costs: "OpCosts | None" = None) -> Predictor:
        """The prediction core of this calibration: its model on the ceilings it was fitted
        against, the op-class figures it measured (filled from ``op_costs``, a profile's), its
        bands; ``source`` names where it came from in error messages."""
        return Predictor.of(get_model(self.model), self.ceilings, self.calibration, self.bands, op_costs=op_costs,
                            target=self.target, calibration_source=source)

    def predict(self, work: Work) -> Prediction:
        """The calibrated prediction of ``work`` on this file's target."""
        return self.predictor().predict(work)

    def to_json(self) -> dict[str, Any]:
        # version before kind: the key order of the files already written (and of the golden files)
        return {"version": CALIBRATION.version, "kind": CALIBRATION.kind, "target": self.target,
                **({"host": self.host} if self.host else {}), "model": self.model, "created": self.created, "fit": self.calibration.to_json(),
                "ceilings": self.ceilings.to_json(), "bands": {r: dict(b) for r, b in self.bands.items()},
                "fitted_on": dict(self.fitted_on), "held_out": list(self.held_out)}

    @classmethod
    def from_json(cls, data: Any, source: str = "calibration file") -> "Calibration":
        """A calibration file's document, checked; FormatError naming ``source`` otherwise."""
        document = CALIBRATION.check(data, source)
        try:
            bands = {str(r): {**b, "lo": float(b["lo"]), "hi": float(b["hi"])} for r, b in document["bands"].items()}
            return cls(str(document["target"]), str(document["model"]), ModelFit.from_json(document["fit"]),
                       Ceilings.from_json(document["ceilings"]), bands, dict(document["fitted_on"]),
                       tuple(document.get("held_out") or ()), str(document.get("created", "")),
                       str(document.get("host") or ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"{source}: calibration file is malformed: {exc!r}") from exc


@CALIBRATION.migrate_from(1)
def _nest_the_fit_with_kinds(document: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: the fit moves from ``"calibration"`` to ``"fit"``; its records get kinds."""
    migrated = {key: value for key, value in document.items() if key != "calibration"}
    fit = dict(document.get("calibration") or {})
    fit["kind"] = RECORD_KINDS["ModelFit"]
    fit["tables"] = {key: {**table, "kind": RECORD_KINDS["EfficiencyTable"]}
                     for key, table in (fit.get("tables") or {}).items()}
    fit["classes"] = {key: {**found, "kind": RECORD_KINDS["ClassFit"],
                            "table": {**found["table"], "kind": RECORD_KINDS["EfficiencyTable"]}}
                      for key, found in (fit.get("classes") or {}).items()}
    migrated["fit"] = fit
    return migrated


def load_calibration(path: str | os.PathLike[str]) -> Calibration:
    """Read a calibration file; FormatError naming it when it is not one or of an unknown version."""
    return Calibration.from_json(CALIBRATION.load(path), os.fspath(path))


def band_for(calfile: Calibration, regime: str) -> Mapping[str, Any] | None:
    """The verdict band ``{"lo", "hi", ...}`` (relative errors) of ``regime``, or None."""
    return calfile.bands.get(regime)


def _check_holdout(holdout: str | None) -> None:
    if holdout not in ("alternate", None):
        raise UsageError(f"holdout must be 'alternate' or None, got {holdout!r}")


def calibrate(runs: Sequence[RunArg], model: str = DEFAULT_MODEL, target: str | None = None,
              level: float = 0.9, holdout: str | None = "alternate", calibrate_on: str | None = None,
              knots: int = 0) -> Calibration:
    """Calibrate ``model`` on runs (run file paths or typed :class:`~pytest_charz.records.Run`)
    of one target.

    ``target`` picks the runs of that target id when they are of several. ``holdout``:
    ``"alternate"`` holds out every other size per op class (:func:`split_cases`), ``None`` fits on
    every case; ``calibrate_on`` (a glob of case ids) overrides it. Band coverage is measured on
    the held-out cases. ``fitted_on.runs`` records each run's ``path`` (as given) and ``created``.
    """
    _check_holdout(holdout)
    loaded = load_runs(runs)
    ids = sorted({run.target.id for run in loaded})
    if target is None and len(ids) > 1:
        raise UsageError(f"the runs are of several targets ({', '.join(ids)}): choose one with target=")
    chosen = [run for run in loaded if target is None or run.target.id == target]
    if not chosen:
        raise UsageError(f"no run of target {target!r}; the runs are of {', '.join(ids)}")
    # the host CPU by its fingerprinted name ("AMD EPYC [1a2b3c4d]"): one CPU per calibration
    from ..targets.identity import cpu_label

    hosts = sorted({cpu_label(run.target.spec) if run.target.spec is not None else run.target.name
                    for run in chosen if run.target.kind == "cpu"})
    if len(hosts) > 1:
        raise UsageError(f"the runs are of several CPUs ({', '.join(hosts)}): calibrate on the runs of one CPU")
    # workload cases (the held-out and workload suites) are what a calibration is tested on, never fitted on
    cases = [c for c in observations(chosen) if not is_workload(c.work)]
    if not cases:
        raise UsageError("the runs hold no microbenchmark case to calibrate on (only workload cases)")
    if calibrate_on is not None or holdout == "alternate":
        fit_cases, held = split_cases(cases, calibrate_on)
    else:
        fit_cases, held = list(cases), []
    fitted = fit(get_model(model), fit_cases, ceilings_from_run(chosen[0]), level, knots)
    coverage = band_coverage(fitted, held)
    bands = {regime: {**band, "coverage": coverage.get(regime)} for regime, band in fitted.bands.items()}
    return Calibration(
        target=cases[0].target, model=model, calibration=fitted.calibration, ceilings=fitted.ceilings, bands=bands,
        fitted_on={"runs": [{"path": run.path, "created": run.created} for run in chosen],
                   "cases": [c.case_id for c in fit_cases]},
        held_out=tuple(c.case_id for c in held),
        created=utc_now_iso(timespec="seconds"),
        host=hosts[0] if hosts else "")
