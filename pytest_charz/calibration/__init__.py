"""Calibration and validation of models on measured runs.

* :mod:`.observations`: runs -> observations (work, measured median), the calibration/held-out
  split, the ceilings a run's target gives and the figures measured on calibration cases.
* :mod:`.efficiency`: :class:`~.efficiency.Calibration`, :class:`~.efficiency.EfficiencyTable`,
  :func:`~.efficiency.fit_efficiency`, :func:`~.efficiency.conformal_interval`.
* :mod:`.fit`: :func:`~.fit.fit` a model to observations, calibrated predictions, band coverage.
* :mod:`.file`: the calibration file and :func:`~.file.calibrate` (``charz calibrate``).
* :mod:`.validate`: :func:`~.validate.validate` and the validation report (``charz validate``).

Nothing here prints or parses arguments: the commands live in :mod:`pytest_charz.report`. The
submodules are not imported here, so the plugin's judge loads only the calibration file reader.
"""
from __future__ import annotations
