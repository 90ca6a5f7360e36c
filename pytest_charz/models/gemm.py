"""``gemm``: GEMM time as the vendor libraries schedule it (tiles, waves, stream-K, a ramp).

For ``work.op == "gemm"`` with ``work.shape`` ``m``, ``n``, ``k`` (and optional ``batch``), C is
cut into tiles of a size from the target kind's tile table (:class:`GemmParams`); each tile's
main loop walks ``k`` in steps of the kind's ``k_block``. Two schedules are priced, as cuBLAS(Lt)
on Ampere/Hopper and hipBLASLt on CDNA3 choose between them per shape:

* **data-parallel**: one tile per compute unit at a time, in waves ``ceil(tiles / units)``; every
  wave costs as much as a full one, so the executed FLOPs are ``waves * units * 2 * tm * tn * k``.
* **stream-K** (GPU kinds; split-K is its special case of fewer tiles than units): the
  ``tiles * ceil(k / k_block)`` main-loop iterations are dealt evenly to the units, each unit
  running ``ceil(iterations / units)`` of them, plus one ``k_block`` of partial-sum fix-up per
  unit when a tile is shared. A skinny or small-M GEMM (a few tiles, long ``k``) therefore costs
  about its FLOPs spread over every unit, not one whole tile's ``k`` loop on a few of them.

The schedule and tile with the fewest executed FLOPs win (what a library's heuristic aims for).
Time is those FLOPs at ``peak * eff(executed FLOPs)`` (see :class:`GemmParams`; the peak is the
ceilings' GEMM peak, which on a spec target is the datasheet peak times the generation's
achievable fraction fitted on published GEMM rows, ``targets/priors.py``), plus the kernel's
**ramp**: the fill of the first and the drain of the last tiles and the gap between back-to-back
kernels, a fixed time per GEMM fitted on a published square sweep (``GEMM_RAMP_S``). Where the
ceilings have one for the dtype (``Ceilings.gemm_tile_s``, a spec prior), every output tile also
pays a fixed time, its pipeline fill and epilogue, counted as the extra elements of ``k`` its unit
would run in that time: a GEMM's efficiency then falls with ``k`` and with the unit's rate, as the
published sweeps show. The result is never below the roofline bound of the same
ceilings (DRAM bytes included).

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

__all__ = ["DEFAULT_GEMM_TILES", "GEMM_K_BLOCK", "GEMM_RAMP_S", "STREAM_K_KINDS", "Gemm",
           "GemmParams", "GemmSchedule", "gemm_compute_terms", "gemm_schedule", "gemm_tiling", "tile_fixed_k"]

GEMM_PARAMS_VERSION = 4
#: The per-tile cost version 3 wrote (elements of k, fp8 on GPUs), now the targets' prior
_V3_TILE_FIXED_K = {"gpu:fp8": 656.0}

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
#: Architectures whose vendor GEMM has CTA tiles only of power-of-two sides, 64 to 256: cuBLAS
#: and CUTLASS 2.x kernels for Ampere (sm_80, also run on Ada's sm_89) are built for 64, 128 and
#: 256 wide threadblock tiles (CUTLASS's SM80 tensor-op tile list: 256x128, 128x256, 256x64,
#: 64x256, 128x128, 128x64, 64x128, 64x64; cuBLAS kernel names such as
#: ``ampere_h16816gemm_256x128_ldg8_stages_64x3``). A dimension of C smaller than the tile is padded
#: to the next such side, not to the MMA granule; one of at most ``SKINNY_GRANULE`` keeps the
#: skinny (GEMV-like) kernels. Hopper's wgmma takes N in steps of 8 up to 256, so its tiles
#: follow a dimension to the granule.
POWER_OF_TWO_TILE_ARCHITECTURES: frozenset[str] = frozenset({"Ampere", "Ada Lovelace"})
#: The smallest tile side on those architectures.
POWER_OF_TWO_TILE_MIN = 64
#: Depth of one main-loop step (elements of k per iteration), per kind: 64, the k extent of the
#: 16-bit CUTLASS 3.x Hopper and 2.x Ampere tile shapes (e.g. 128x256x64) and of hipBLASLt's
#: MacroTile depth on CDNA3; the granule in which stream-K deals k to the units.
GEMM_K_BLOCK: Mapping[str, int] = {"gpu": 64, "asic": 128, "cpu": 32}
#: Kinds whose vendor library has stream-K / split-K kernels: cuBLAS(Lt) since CUDA 11.8 on
#: Ampere and Hopper (NVIDIA cuBLAS release notes, "stream-K" heuristics for small and
#: wave-unfriendly shapes; CUTLASS ``GemmUniversalMode::kGemmSplitKParallel`` and the stream-K
#: tile scheduler of CUTLASS 3.x) and hipBLASLt on CDNA3 (its "Stream-K" GSU/StreamK kernels).
#: A CPU BLAS splits k only to share a cache block, and an ASIC compiler pads to its array.
STREAM_K_KINDS: frozenset[str] = frozenset({"gpu"})
#: Fixed time of one GEMM kernel (fill of the first tiles, drain of the last, the gap between
#: back-to-back launches), seconds, per kind. GPU: fitted on the published square bf16 sweep of an
#: NVIDIA H800 PCIe (rows ``h800-pcie-square-*`` of ``published/measurements.toml``, role
#: fitted-on, ``fits = "gemm-model:ramp_gpu"``): the 2048^3 time less its executed FLOPs at the
#: sweep's own large-shape rate (``published.score.fitted_gemm_ramp_s``), under no per-tile time
#: (the Hopper targets carry none for 16-bit GEMMs); carried to every GPU.
GEMM_RAMP_S: Mapping[str, float] = {"gpu": 0.755e-6}


def _positive_table(name: str, table: Mapping[str, float], allow_zero: bool) -> dict[str, float]:
    out = {str(kind): float(value) for kind, value in table.items()}
    for kind, value in out.items():
        (check_non_negative if allow_zero else check_positive)(f"GemmParams.{name}[{kind!r}]", value)
    return out


@dataclass(frozen=True)
class GemmParams:
    """Parameters of the ``gemm`` model.

    Efficiency at ``flops`` executed (tile-padded) FLOPs: ``eff_max * flops / (flops + half_flops)``,
    so time = ``(flops + half_flops) / (peak * eff_max)``: a fixed cost ``half_flops`` worth of
    work plus a sustained fraction ``eff_max`` of peak. The defaults leave the ceilings' GEMM peak
    alone (``eff_max=1``, ``half_flops=0``: a spec target's peak already carries its generation's
    fitted fraction). ``stream_k`` lists the kinds priced with the stream-K schedule besides the
    data-parallel one, ``k_block`` the main-loop depth per kind, ``ramp_s`` the fixed time per
    kernel per kind. The fixed time of one output tile is the target's
    (``Ceilings.gemm_tile_s``), not a parameter of the model.
    """

    eff_max: float = 1.0
    half_flops: float = 0.0
    tiles: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=lambda: dict(DEFAULT_GEMM_TILES))
    stream_k: frozenset[str] = STREAM_K_KINDS
    k_block: Mapping[str, int] = field(default_factory=lambda: dict(GEMM_K_BLOCK))
    ramp_s: Mapping[str, float] = field(default_factory=lambda: dict(GEMM_RAMP_S))

    def __post_init__(self) -> None:
        check_positive("GemmParams.eff_max", self.eff_max)
        check_non_negative("GemmParams.half_flops", self.half_flops)
        tiles = {str(kind): tuple((int(tm), int(tn)) for tm, tn in table) for kind, table in self.tiles.items()}
        for kind, table in tiles.items():
            if not table or any(tm < 1 or tn < 1 for tm, tn in table):
                raise UsageError(f"GemmParams.tiles[{kind!r}] must list positive (rows, cols) tiles, got {table!r}")
        object.__setattr__(self, "tiles", tiles)
        object.__setattr__(self, "stream_k", frozenset(str(kind) for kind in self.stream_k))
        blocks = _positive_table("k_block", self.k_block, allow_zero=False)
        object.__setattr__(self, "k_block", {kind: int(value) for kind, value in blocks.items()})
        object.__setattr__(self, "ramp_s", _positive_table("ramp_s", self.ramp_s, allow_zero=True))

    def efficiency(self, flops: float) -> float:
        """Fraction of peak sustained on ``flops`` executed FLOPs (0 < eff <= eff_max)."""
        return self.eff_max * flops / (flops + self.half_flops) if flops > 0 else self.eff_max

    def to_json(self) -> dict[str, Any]:
        return {"version": GEMM_PARAMS_VERSION, "eff_max": self.eff_max, "half_flops": self.half_flops,
                "tiles": {kind: [list(t) for t in table] for kind, table in self.tiles.items()},
                "stream_k": sorted(self.stream_k), "k_block": dict(self.k_block), "ramp_s": dict(self.ramp_s)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "GemmParams":
        version = data.get("version")
        if version not in (1, 2, 3, GEMM_PARAMS_VERSION):
            raise FormatError(f"GemmParams JSON version {version!r} is not {GEMM_PARAMS_VERSION}")
        try:
            tiles = {k: tuple(tuple(t) for t in v) for k, v in data["tiles"].items()}
            if version == 1:   # version 1 had no schedules: the data-parallel schedule, no ramp
                return cls(float(data["eff_max"]), float(data["half_flops"]), tiles, frozenset(), ramp_s={})
            # version 3 carried the per-tile cost, in elements of k per dtype; it is the target's
            # now (Ceilings.gemm_tile_s): the default it always wrote is dropped, another refused
            if version == 3 and dict(data.get("tile_fixed_k") or {}) != _V3_TILE_FIXED_K:
                raise FormatError(f"GemmParams JSON version 3 sets a per-tile cost {data.get('tile_fixed_k')!r}; "
                                  "the per-tile time is now the target's prior (gemm_tile_us): set it there")
            return cls(float(data["eff_max"]), float(data["half_flops"]), tiles, frozenset(data["stream_k"]),
                       dict(data["k_block"]), dict(data["ramp_s"]))
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"GemmParams JSON is malformed: {exc}") from exc


@dataclass(frozen=True)
class GemmSchedule:
    """How a library runs one GEMM: ``schedule`` (``data-parallel`` or ``stream-k``), the tile,
    the waves (fractional under stream-K: iterations per unit over a whole tile's), the executed
    (padded) FLOPs and the fixed ramp in seconds."""

    schedule: str
    tile: tuple[int, int]
    waves: float
    executed_flops: float
    ramp_s: float


def _shape_dim(work: Work, name: str, default: float | None = None) -> int:
    value = work.shape.get(name, default)
    if value is None:
        raise Uncovered(f"gemm work needs shape[{name!r}]; shape is {dict(work.shape)!r}")
    if not value >= 1:
        raise Uncovered(f"gemm shape[{name!r}] must be >= 1, got {value!r}")
    return int(math.ceil(value))


def _round_up(value: int, granule: int) -> int:
    return -(-value // granule) * granule


def _tile_side(dimension: int, granule: int, ceilings: Ceilings) -> int:
    """The tile side a library covers ``dimension`` with when it is smaller than the tile: the
    granule's multiple, or on :data:`POWER_OF_TWO_TILE_ARCHITECTURES` the next power of two from
    :data:`POWER_OF_TWO_TILE_MIN` (a skinny dimension of at most ``granule`` keeps the granule)."""
    if ceilings.architecture in POWER_OF_TWO_TILE_ARCHITECTURES and dimension > granule:
        return max(POWER_OF_TWO_TILE_MIN, 1 << (dimension - 1).bit_length())
    return _round_up(dimension, granule)


def tile_fixed_k(work: Work, ceilings: Ceilings, params: GemmParams, tile: tuple[int, int]) -> float:
    """The per-tile fixed time of ``work``'s dtype on ``ceilings`` (``Ceilings.gemm_tile``) as
    elements of ``k``: the depth a unit runs in that time at its share of the peak
    (``peak * eff_max / units``) on a ``tile``. 0 when there is none or the work's FLOPs are not of
    one dtype."""
    units = ceilings.units()
    if len(work.flops) != 1 or not units:
        return 0.0
    (dtype,) = work.flops
    seconds = ceilings.gemm_tile(dtype)
    peak = ceilings.peak(dtype, work.op)
    if not seconds or peak is None:
        return 0.0
    return seconds * peak * params.eff_max / units / (2.0 * tile[0] * tile[1])


def gemm_schedule(work: Work, ceilings: Ceilings, params: GemmParams) -> GemmSchedule:
    """The library's schedule of ``work`` on ``ceilings``: the cheapest of the data-parallel and
    (on kinds in ``params.stream_k``) stream-K schedules over the kind's tiles. Every tile a unit
    works on pays the dtype's fixed time (:func:`tile_fixed_k`): a data-parallel unit one per
    wave, a stream-K unit one per tile its share of iterations touches."""
    if work.op != "gemm":
        raise Uncovered(f"the gemm model predicts op 'gemm' only; work.op is {work.op!r}")
    m, n, k = (_shape_dim(work, d) for d in ("m", "n", "k"))
    batch = _shape_dim(work, "batch", 1)
    units = ceilings.units()
    if units is None:
        raise Uncovered(f"no compute unit count on {target_label(ceilings)} for wave quantization")
    kind = ceilings.kind
    table = params.tiles.get(kind)
    if not table:
        raise Uncovered(f"no GEMM tile table for target kind {kind!r}; known: {', '.join(params.tiles)}")
    granule = SKINNY_GRANULE.get(kind)
    k_block = params.k_block.get(kind, k)
    ramp = params.ramp_s.get(kind, 0.0)
    best: GemmSchedule | None = None
    for tile_m, tile_n in table:
        if granule is not None:
            tile_m, tile_n = min(tile_m, _tile_side(m, granule, ceilings)), min(tile_n, _tile_side(n, granule, ceilings))
        fixed = tile_fixed_k(work, ceilings, params, (tile_m, tile_n))
        tiles = batch * math.ceil(m / tile_m) * math.ceil(n / tile_n)
        per_k = 2.0 * tile_m * tile_n
        waves = math.ceil(tiles / units)
        candidates = [GemmSchedule("data-parallel", (tile_m, tile_n), float(waves),
                                   waves * units * per_k * (k + fixed), ramp)]
        if kind in params.stream_k and tiles % units:
            per_tile = math.ceil(k / k_block)
            iterations = tiles * per_tile
            per_unit = math.ceil(iterations / units)
            # one k_block of partial-sum fix-up per unit: some tile is shared by two units; a unit's
            # share crosses at most ceil(per_unit / per_tile) tile boundaries, and there are no
            # boundaries to cross in a GEMM of one tile
            touched = min(tiles, math.ceil(per_unit / per_tile) + 1)
            executed = units * per_k * (k_block * (per_unit + 1) + fixed * touched)
            candidates.append(GemmSchedule("stream-k", (tile_m, tile_n), per_unit * k_block / k, executed, ramp))
        for candidate in candidates:
            if best is None or candidate.executed_flops < best.executed_flops:
                best = candidate
    assert best is not None
    return best


def gemm_tiling(work: Work, ceilings: Ceilings, params: GemmParams) -> tuple[tuple[int, int], float, float]:
    """The chosen ``(tile_m, tile_n)``, the wave count and the executed (padded) FLOPs
    (:func:`gemm_schedule` without its name and ramp)."""
    schedule = gemm_schedule(work, ceilings, params)
    return schedule.tile, schedule.waves, schedule.executed_flops


def gemm_compute_terms(work: Work, ceilings: Ceilings, params: GemmParams) -> dict[str, float]:
    """``{"compute:<dtype>": seconds}`` of the scheduled, efficiency-derated GEMM plus its ramp."""
    if len(work.flops) != 1:
        raise Uncovered(f"gemm work needs FLOPs of exactly one dtype, got {sorted(work.flops) or 'none'}")
    (dtype, flops), = work.flops.items()
    peak = ceilings.peak(dtype, work.op)
    if peak is None:
        raise Uncovered(f"no peak FLOP/s for {dtype} on {target_label(ceilings)}")
    schedule = gemm_schedule(work, ceilings, params)
    quantized_s = (schedule.executed_flops + params.half_flops) / (peak * params.eff_max) + schedule.ramp_s
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
