"""Published GPU measurements (GEMM, copies, collectives, LLM serving runs), each cited, and their scoring against the
spec-only predictions of the catalogue (datasheet figures plus the targets' priors).

``load_measurements()`` gives the committed table (``measurements.toml``) as typed rows;
``score.score_rows()`` scores them; ``charz validate`` writes the table with the error per row.
"""
from __future__ import annotations

from .table import CollectiveCase, GemmCase, PublishedRow, StreamCase, load_measurements

__all__ = ["CollectiveCase", "GemmCase", "PublishedRow", "StreamCase", "load_measurements"]
