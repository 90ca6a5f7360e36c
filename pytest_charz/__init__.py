"""pytest-charz: hardware performance characterization as pytest suites."""
from __future__ import annotations

from typing import Any

from .errors import CharzError, FormatError, MissingExtraError, SpecError, UsageError
from .work import Collective, Work

__version__ = "0.1.0"

__all__ = [
    "CharzError",
    "Collective",
    "FormatError",
    "MissingExtraError",
    "SpecError",
    "UsageError",
    "Work",
    "build",
    "capture",
    "load_target",
    "predict",
    "predict_graph",
    "__version__",
]


def load_target(name: str) -> Any:
    """The TargetSpec for a catalogue id or alias (or ``cpu`` for this host)."""
    from .targets.catalogue import resolve

    return resolve(name)


def predict(*args: Any, **kwargs: Any) -> Any:
    """Predict a Work (or a list of them) on a target: see :func:`pytest_charz.prediction.predict`."""
    from .prediction import predict as _predict

    return _predict(*args, **kwargs)


def build(*args: Any, **kwargs: Any) -> Any:
    """The op graph of a known model's phase: see :func:`pytest_charz.workloads.builders.build`."""
    from .workloads.builders import build as _build

    return _build(*args, **kwargs)


def capture(*args: Any, **kwargs: Any) -> Any:
    """The op graph of a PyTorch module's forward: see :func:`pytest_charz.workloads.capture.capture`."""
    from .workloads.capture import capture as _capture

    return _capture(*args, **kwargs)


def predict_graph(*args: Any, **kwargs: Any) -> Any:
    """Predict an op graph op by op and schedule it: see :func:`pytest_charz.workloads.predict.predict_graph`."""
    from .workloads.predict import predict_graph as _predict_graph

    return _predict_graph(*args, **kwargs)
