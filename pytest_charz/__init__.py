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
    "load_target",
    "predict",
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
