"""Workloads: real AI models as op graphs (:mod:`.graph`), built from published configurations
or captured from PyTorch modules, run for real by the workload suite and predicted op by op.

``build`` (:mod:`.builders`), ``capture`` (:mod:`.capture`) and ``predict_graph``
(:mod:`.predict`) are imported on first use, so importing this package never imports torch.
"""
from __future__ import annotations

import importlib
from typing import Any

from .graph import OP_CLASSES, PHASES, Graph, Op, TensorSpec

# Public name -> the submodule that defines it, imported when the name is first asked for.
_LAZY = {"build": "builders", "capture": "capture", "predict_graph": "predict", "GraphPrediction": "predict"}

__all__ = ["Graph", "GraphPrediction", "OP_CLASSES", "Op", "PHASES", "TensorSpec", "build", "capture",
           "predict_graph"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
