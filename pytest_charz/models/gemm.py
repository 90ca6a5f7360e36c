"""``gemm``: GEMM time with tile and wave quantization and a size-dependent efficiency.

For ``work.op == "gemm"`` with ``work.shape`` ``m``, ``n``, ``k`` (and optional ``batch``), C is
cut into tiles of a size from the target kind's tile table (:class:`GemmParams`). Tiles run in
waves over the compute units: ``waves = ceil(tiles / units)``, and every wave costs as much as a
full one, so the executed FLOPs are ``waves * units * 2 * tile_m * tile_n * k``. The chosen tile
is the one with the fewest executed FLOPs (what a library's heuristic aims for). Time is those
FLOPs at ``peak * eff(executed FLOPs)`` (see :class:`GemmParams`), never below the roofline bound
of the same ceilings (DRAM bytes included). Split-K and stream-K schedules are not modelled.

The work's FLOPs must be of one dtype (mixed-dtype FLOP counts have no single peak to use).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..work import Work
from .base import Prediction, Uncovered, guarded
from .calibrate import GemmParams
from .ceilings import Ceilings
from .roofline import memory_terms, predict_overlapped, target_label

__all__ = ["Gemm", "GemmParams", "gemm_compute_terms", "gemm_tiling"]


def _shape_dim(work: Work, name: str, default: float | None = None) -> int:
    value = work.shape.get(name, default)
    if value is None:
        raise Uncovered(f"gemm work needs shape[{name!r}]; shape is {dict(work.shape)!r}")
    if not value >= 1:
        raise Uncovered(f"gemm shape[{name!r}] must be >= 1, got {value!r}")
    return int(math.ceil(value))


def gemm_tiling(work: Work, ceilings: Ceilings, params: GemmParams) -> tuple[tuple[int, int], int, float]:
    """The chosen ``(tile_m, tile_n)``, the wave count and the executed (padded) FLOPs."""
    if work.op != "gemm":
        raise Uncovered(f"the gemm model predicts op 'gemm' only; work.op is {work.op!r}")
    m, n, k = (_shape_dim(work, d) for d in ("m", "n", "k"))
    batch = _shape_dim(work, "batch", 1)
    units = ceilings.units()
    if units is None:
        raise Uncovered(f"no compute unit count on {target_label(ceilings)} for wave quantization")
    table = params.tiles.get(ceilings.kind)
    if not table:
        raise Uncovered(f"no GEMM tile table for target kind {ceilings.kind!r}; known: {', '.join(params.tiles)}")
    best: tuple[tuple[int, int], int, float] | None = None
    for tile_m, tile_n in table:
        tiles = batch * math.ceil(m / tile_m) * math.ceil(n / tile_n)
        waves = math.ceil(tiles / units)
        executed = waves * units * 2.0 * tile_m * tile_n * k
        if best is None or executed < best[2]:
            best = ((tile_m, tile_n), waves, executed)
    assert best is not None
    return best


def gemm_compute_terms(work: Work, ceilings: Ceilings, params: GemmParams) -> dict[str, float]:
    """``{"compute:<dtype>": seconds}`` of the quantized, efficiency-derated GEMM."""
    if len(work.flops) != 1:
        raise Uncovered(f"gemm work needs FLOPs of exactly one dtype, got {sorted(work.flops) or 'none'}")
    (dtype, flops), = work.flops.items()
    peak = ceilings.peak(dtype, work.op)
    if peak is None:
        raise Uncovered(f"no peak FLOP/s for {dtype} on {target_label(ceilings)}")
    _, _, executed = gemm_tiling(work, ceilings, params)
    quantized_s = (executed + params.half_flops) / (peak * params.eff_max)
    # The work's own FLOP count may exceed 2mnk (e.g. an epilogue): never below it at peak.
    return {f"compute:{dtype}": max(quantized_s, flops / peak)}


@dataclass(frozen=True)
class Gemm:
    name: str = "gemm"
    params: GemmParams = field(default_factory=GemmParams)

    def predict(self, work: Work, ceilings: Ceilings) -> Prediction:
        def build() -> Prediction:
            terms = {**gemm_compute_terms(work, ceilings, self.params),
                     **memory_terms(work, ceilings, ("dram",))}
            return predict_overlapped(self.name, terms, "FLOPs")

        return guarded(self.name, build)
