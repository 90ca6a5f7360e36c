"""Validation of models on measured runs: analysis above the models, calibration and workloads.

* :mod:`.models`: :func:`~.models.validate` calibrates each model on part of each target's
  microbenchmark cases and scores it on the rest and across runs (``charz validate``).
* :mod:`.workloads`: :func:`~.workloads.validate_workloads` scores a model calibrated on
  microbenchmarks on every workload op and workload end to end.
"""
from __future__ import annotations
