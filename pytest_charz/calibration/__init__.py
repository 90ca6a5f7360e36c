"""Calibration of models on measured runs, and the prediction core.

* :mod:`.observations`: runs -> observations (work, measured median), the calibration/held-out
  split, the ceilings a run's target gives and the figures measured on calibration cases.
* :mod:`.efficiency`: :class:`~.efficiency.ModelFit` (what a fit learned, and the one place it
  changes a prediction: :meth:`~.efficiency.ModelFit.apply`), :class:`~.efficiency.EfficiencyTable`,
  :func:`~.efficiency.calibration_key`, :func:`~.efficiency.fit_efficiency`,
  :func:`~.efficiency.conformal_interval`.
* :mod:`.predictor`: :class:`~.predictor.Predictor`, the prediction core every path uses.
* :mod:`.fit`: :func:`~.fit.fit` a model to observations, calibrated predictions, band coverage.
* :mod:`.file`: the calibration file (:class:`~.file.Calibration`) and :func:`~.file.calibrate`
  (``charz calibrate``).

Validation (``charz validate``) scores calibrated models and lives above the workloads, in
:mod:`pytest_charz.validation`.

Nothing here prints or parses arguments: the commands live in :mod:`pytest_charz.report`. The
submodules are not imported here, so the plugin's judge loads only the calibration file reader.
"""
from __future__ import annotations
