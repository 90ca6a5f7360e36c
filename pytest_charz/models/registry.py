"""The model registry: names to model factories, the default model, and registration.

The built-in models are listed here; a conftest or another package adds its own through the
plugin's ``pytest_charz_models`` hook (see :mod:`pytest_charz.hookspec`), which calls
:func:`register_model`.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

from ..errors import UsageError
from .base import Model
from .comm import AlphaBeta
from .composite import Composite
from .gemm import Gemm
from .launch import Launch
from .opclass import OpClassModel
from .roofline import HierarchicalRoofline, Roofline

DEFAULT_MODEL = "opclass"

MODELS: dict[str, Callable[[], Model]] = {
    "spec-roofline": partial(Roofline, "spec-roofline"),
    "empirical-roofline": partial(Roofline, "empirical-roofline"),
    "hierarchical-roofline": HierarchicalRoofline,
    "gemm": Gemm,
    "alpha-beta": AlphaBeta,
    "launch": Launch,
    "composite": Composite,
    "opclass": OpClassModel,
}


def get_model(name: str) -> Model:
    """A fresh model by registry name; an unknown name is a UsageError listing the known ones."""
    if name not in MODELS:
        raise UsageError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
    return MODELS[name]()


def register_model(name: str, factory: Callable[[], Model]) -> None:
    """Add a model under ``name``; the name of a built-in model or of one already registered by
    another factory is a UsageError (a model is never replaced silently)."""
    if not isinstance(name, str) or not name or ":" in name:
        raise UsageError(f"a model name is a non-empty string without ':', got {name!r}")
    if not callable(factory):
        raise UsageError(f"model {name!r}: the factory must be callable, got {factory!r}")
    if name in MODELS and MODELS[name] is not factory:
        raise UsageError(f"a model named {name!r} is already registered")
    MODELS[name] = factory
