"""Performance models: ``predict(work, ceilings) -> Prediction``, data in and data out."""
from __future__ import annotations

from .api import MODELS, ceilings_for, get_model, predict
from .base import Model, Prediction, regime_of
from .calibrate import Calibration, EfficiencyTable, GemmParams, conformal_interval, fit_efficiency
from .ceilings import Ceilings
from .comm import AlphaBeta, collective_time_s
from .composite import Composite
from .gemm import Gemm, gemm_tiling
from .launch import Launch
from .roofline import HierarchicalRoofline, Roofline, roofline_floor_s

__all__ = [
    "MODELS", "AlphaBeta", "Calibration", "Ceilings", "Composite", "EfficiencyTable", "Gemm",
    "GemmParams", "HierarchicalRoofline", "Launch", "Model", "Prediction", "Roofline",
    "ceilings_for", "collective_time_s", "conformal_interval", "fit_efficiency", "gemm_tiling",
    "get_model", "predict", "regime_of", "roofline_floor_s",
]
