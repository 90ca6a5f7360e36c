"""pytest-charz: hardware performance characterization as pytest suites.

The public API is what ``__all__`` lists. The pytest plugin imports this package in every
session, so the prediction, workload and simulator entry points load on first use: the module's
``__getattr__`` imports the real object and returns it, so ``help(pytest_charz.predict)`` and
``inspect.signature`` show its own parameters and documentation.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import CharzError, FormatError, MissingExtraError, SpecError, UsageError
from .work import Collective, Work

if TYPE_CHECKING:
    from .calibration.file import Calibration, load_calibration
    from .calibration.predictor import Predictor
    from .models.base import Prediction
    from .prediction import load_predictor, predict
    from .sim.simulate import simulate_graph
    from .targets.catalogue import resolve as load_target
    from .targets.spec import TargetSpec
    from .workloads.builders import build
    from .workloads.capture import capture
    from .workloads.graph import Graph
    from .workloads.predict import GraphPrediction, predict_graph

__version__ = "0.1.0"

#: Public names loaded on first use: name -> (module, attribute).
_LAZY: dict[str, tuple[str, str]] = {
    "Calibration": ("pytest_charz.calibration.file", "Calibration"),
    "Graph": ("pytest_charz.workloads.graph", "Graph"),
    "GraphPrediction": ("pytest_charz.workloads.predict", "GraphPrediction"),
    "Prediction": ("pytest_charz.models.base", "Prediction"),
    "Predictor": ("pytest_charz.calibration.predictor", "Predictor"),
    "TargetSpec": ("pytest_charz.targets.spec", "TargetSpec"),
    "build": ("pytest_charz.workloads.builders", "build"),
    "capture": ("pytest_charz.workloads.capture", "capture"),
    "load_calibration": ("pytest_charz.calibration.file", "load_calibration"),
    "load_predictor": ("pytest_charz.prediction", "load_predictor"),
    "load_target": ("pytest_charz.targets.catalogue", "resolve"),
    "predict": ("pytest_charz.prediction", "predict"),
    "predict_graph": ("pytest_charz.workloads.predict", "predict_graph"),
    "simulate_graph": ("pytest_charz.sim.simulate", "simulate_graph"),
}

__all__ = [
    "CharzError",
    "Collective",
    "FormatError",
    "MissingExtraError",
    "SpecError",
    "UsageError",
    "Work",
    *sorted(_LAZY),
    "__version__",
]


def __getattr__(name: str) -> Any:
    """The public object ``name`` (imported on first use, then cached in the module)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'pytest_charz' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    found = getattr(importlib.import_module(module), attribute)
    globals()[name] = found
    return found


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
