"""Workloads: real AI models as op graphs (:mod:`.graph`), built from published configurations
or captured from PyTorch modules, run for real by the workload suite and predicted op by op."""
from __future__ import annotations

from .graph import OP_CLASSES, PHASES, Graph, Op, TensorSpec

__all__ = ["Graph", "OP_CLASSES", "Op", "PHASES", "TensorSpec"]
