"""Curve fitting shared by the capability profile and calibration: the plateaus of a curve over
working-set sizes (:mod:`.plateaus`) and alpha-beta links from transfer times (:mod:`.links`).

Pure functions over sequences; nothing here reads runs, profiles or models.
"""
from __future__ import annotations

from .links import AlphaBetaFit, LinkFigures, fit_alpha_beta, link_figures
from .plateaus import LevelBoundary, LevelFit, Plateau, detect_levels

__all__ = ["AlphaBetaFit", "LevelBoundary", "LevelFit", "LinkFigures", "Plateau", "detect_levels",
           "fit_alpha_beta", "link_figures"]
