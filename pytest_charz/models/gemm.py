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
from typing import Any, Mapping

from ..errors import FormatError, UsageError, check_non_negative, check_positive
from ..work import Work
from .base import Prediction, Uncovered, guarded
from .ceilings import Ceilings
from .roofline import memory_terms, predict_overlapped, target_label

__all__ = ["DEFAULT_GEMM_TILES", "Gemm", "GemmParams", "gemm_compute_terms", "gemm_tiling"]

GEMM_PARAMS_VERSION = 1

# GEMM tiles (rows x columns of C per tile) a library may pick, per target kind.
# GPU: CUTLASS/cuBLAS threadblock tiles on Ampere/Hopper/CDNA are typically 128x128, 128x256 and
# 256x128. ASIC: 128x128, the systolic array of a TPU v4/v5 MXU. CPU: 32x32, a choice of the order
# of the register/L1 blocking of AVX2/AVX-512 BLAS micro-kernels (BLIS uses 6x16 to 32x12), so that
# quantization matters on CPUs only for small matrices; calibration may replace any table.
DEFAULT_GEMM_TILES: Mapping[str, tuple[tuple[int, int], ...]] = {
    "gpu": ((128, 128), (128, 256), (256, 128)),
    "asic": ((128, 128),),
    "cpu": ((32, 32),),
}
# A dimension of C smaller than the tile is not padded to the whole tile: libraries switch to
# skinny kernels (GEMV-like for one row, as in the decode step of an LLM), padded only to the
# granule of the hardware's smallest matrix instruction. GPU: 16 rows or columns, the smallest
# tensor-core MMA shape (PTX ISA, mma.sync m16n8k16 / m16n8k8). CPU: 1, vector GEMV kernels
# stream one row at a time (OpenBLAS/BLIS ?gemv). ASIC: no entry, a systolic array pads to its
# full tile. Without this a batch-1 decode GEMM (m = 1) counted 128x its FLOPs and came out
# compute-bound where reading its weights takes several times longer.
SKINNY_GRANULE: Mapping[str, int] = {"gpu": 16, "cpu": 1}


@dataclass(frozen=True)
class GemmParams:
    """Parameters of the ``gemm`` model.

    Efficiency at ``flops`` executed (tile-padded) FLOPs: ``eff_max * flops / (flops + half_flops)``,
    so time = ``(flops + half_flops) / (peak * eff_max)``: a fixed cost ``half_flops`` worth of
    work plus a sustained fraction ``eff_max`` of peak. The defaults are uncalibrated: no derating
    (``eff_max=1``, ``half_flops=0``), which leaves tile and wave quantization alone.
    """

    eff_max: float = 1.0
    half_flops: float = 0.0
    tiles: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=lambda: dict(DEFAULT_GEMM_TILES))

    def __post_init__(self) -> None:
        check_positive("GemmParams.eff_max", self.eff_max)
        check_non_negative("GemmParams.half_flops", self.half_flops)
        tiles = {str(kind): tuple((int(tm), int(tn)) for tm, tn in table) for kind, table in self.tiles.items()}
        for kind, table in tiles.items():
            if not table or any(tm < 1 or tn < 1 for tm, tn in table):
                raise UsageError(f"GemmParams.tiles[{kind!r}] must list positive (rows, cols) tiles, got {table!r}")
        object.__setattr__(self, "tiles", tiles)

    def efficiency(self, flops: float) -> float:
        """Fraction of peak sustained on ``flops`` executed FLOPs (0 < eff <= eff_max)."""
        return self.eff_max * flops / (flops + self.half_flops) if flops > 0 else self.eff_max

    def to_json(self) -> dict[str, Any]:
        return {"version": GEMM_PARAMS_VERSION, "eff_max": self.eff_max, "half_flops": self.half_flops,
                "tiles": {kind: [list(t) for t in table] for kind, table in self.tiles.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "GemmParams":
        if data.get("version") != GEMM_PARAMS_VERSION:
            raise FormatError(f"GemmParams JSON version {data.get('version')!r} is not {GEMM_PARAMS_VERSION}")
        try:
            return cls(float(data["eff_max"]), float(data["half_flops"]),
                       {k: tuple(tuple(t) for t in v) for k, v in data["tiles"].items()})
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"GemmParams JSON is malformed: {exc}") from exc



def _shape_dim(work: Work, name: str, default: float | None = None) -> int:
    value = work.shape.get(name, default)
    if value is None:
        raise Uncovered(f"gemm work needs shape[{name!r}]; shape is {dict(work.shape)!r}")
    if not value >= 1:
        raise Uncovered(f"gemm shape[{name!r}] must be >= 1, got {value!r}")
    return int(math.ceil(value))


def _round_up(value: int, granule: int) -> int:
    return -(-value // granule) * granule


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
    granule = SKINNY_GRANULE.get(ceilings.kind)
    best: tuple[tuple[int, int], int, float] | None = None
    for tile_m, tile_n in table:
        if granule is not None:
            tile_m, tile_n = min(tile_m, _round_up(m, granule)), min(tile_n, _round_up(n, granule))
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
