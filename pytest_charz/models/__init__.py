"""Performance models: ``predict(work, ceilings) -> Prediction``, data in and data out.

Models know nothing of run files, profiles on disk, calibration or reports: the prediction
façade with profiles and calibrations is :mod:`pytest_charz.prediction`, calibration and
validation are :mod:`pytest_charz.calibration`.
"""
from __future__ import annotations

from .base import Model, Prediction, regime_of
from .ceilings import Ceilings
from .comm import AlphaBeta, collective_time_s
from .composite import Composite
from .gemm import Gemm, GemmParams, gemm_tiling
from .launch import Launch
from .registry import DEFAULT_MODEL, MODELS, get_model, register_model
from .roofline import HierarchicalRoofline, Roofline, roofline_floor_or_zero_s, roofline_floor_s

__all__ = [
    "DEFAULT_MODEL", "MODELS", "AlphaBeta", "Ceilings", "Composite", "Gemm", "GemmParams",
    "HierarchicalRoofline", "Launch", "Model", "Prediction", "Roofline", "collective_time_s",
    "gemm_tiling", "get_model", "regime_of", "register_model", "roofline_floor_or_zero_s",
    "roofline_floor_s",
]
