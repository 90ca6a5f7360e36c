"""GPU GEMMs as the vendor libraries run them (models/gemm.py): stream-K for skinny and
wave-unfriendly shapes, a fixed ramp per kernel fitted on a published sweep, and the fp8 gain
over bf16 that published kernel sweeps show. Each test guards one cause of a published miss."""
from __future__ import annotations

import math

import pytest

from pytest_charz import predict
from pytest_charz.models.ceilings import Ceilings
from pytest_charz.models.gemm import GEMM_RAMP_S, GemmParams, gemm_schedule
from pytest_charz.published import GemmCase, load_measurements
from pytest_charz.published.score import fitted_gemm_ramp_s, gemm_work
from pytest_charz.targets.catalogue import resolve

DATA_PARALLEL = GemmParams(stream_k=frozenset(), ramp_s={})


def gemm_time_s(m: int, n: int, k: int, dtype: str, target: str, model: str = "gemm") -> float:
    return predict(gemm_work(GemmCase(m, n, k, dtype)), target=target, model=model).time_s


def test_a_skinny_gemm_costs_no_more_than_its_memory_floor_plus_a_wave() -> None:
    # Llama-2-70B at tp=4, prefill of 128 tokens on an A100: k_proj, m=128 n=256 k=8192.
    m, n, k = 128, 256, 8192
    work = gemm_work(GemmCase(m, n, k, "bf16"))
    ceilings = Ceilings.from_spec(resolve("a100-sxm-80gb"))
    dram = ceilings.bandwidth("dram")
    peak = ceilings.peak("bf16", "gemm")
    units = ceilings.units()
    assert dram is not None and peak is not None and units is not None
    floor_s = work.total_bytes / dram
    # one wave: every unit runs one tile (the largest, 128x256) over its share of the inner
    # dimension in whole k-blocks, one more block of partial-sum fix-up, and the tile's fixed time
    blocks = math.ceil(k / 64 / units) + 1
    wave_s = units * 2.0 * 128 * 256 * 64 * blocks / peak + ceilings.gemm_tile("bf16")
    assert ceilings.gemm_tile("bf16") > 0
    for model in ("gemm", "opclass"):
        predicted = gemm_time_s(m, n, k, "bf16", "a100-sxm-80gb", model)
        assert floor_s <= predicted <= floor_s + wave_s, model
    assert gemm_schedule(work, ceilings, GemmParams()).schedule == "stream-k"
    # whole waves of whole-k tiles (the old schedule: 114 us, the published miss) cost over 8x that
    data_parallel = gemm_schedule(work, ceilings, DATA_PARALLEL).executed_flops / peak
    assert data_parallel > 8 * (floor_s + wave_s)


def test_h100_2048_cubed_bf16_runs_below_the_large_shape_rate() -> None:
    def rate(size: int) -> float:
        return 2.0 * size**3 / gemm_time_s(size, size, size, "bf16", "h100-sxm") / 1e12

    large = Ceilings.from_spec(resolve("h100-sxm")).peak("bf16", "gemm")
    assert large is not None
    assert rate(8192) == pytest.approx(large / 1e12, rel=0.01)   # a large square: the plateau
    assert rate(2048) < 0.95 * rate(8192)                         # one wave and the ramp show
    assert rate(1024) < rate(2048) < rate(4096)
    # the published sweep (zzc0721 issue 79): 676.6 TFLOP/s at 2048^3, 797.5 at 8192^3
    assert rate(2048) / rate(8192) == pytest.approx(676.59 / 797.51, abs=0.10)


@pytest.mark.parametrize("m, n, k", [(64, 12288, 5376), (128, 43008, 5376), (1024, 9216, 14336), (8192, 8192, 8192)])
def test_the_fp8_gain_over_bf16_stays_in_the_published_range(m: int, n: int, k: int) -> None:
    # Published kernel sweeps on H100 SXM: 1.65-1.90x (vLLM PR 49363, skinny serving GEMMs,
    # pre-quantized fp8) and 1.77x at the best shapes (mamf 2025); never more than the 2x of the peaks.
    ratio = gemm_time_s(m, n, k, "bf16", "h100-sxm") / gemm_time_s(m, n, k, "fp8", "h100-sxm")
    assert 1.3 <= ratio <= 2.0 + 1e-9   # a memory-bound skinny GEMM gains at most its halved bytes


def test_the_fp8_gain_at_2048_cubed_over_the_published_bf16_stays_in_the_range() -> None:
    # At 2048^3 the gain is taken over the published bf16 time, not the model's: the model runs
    # bf16 there at the large-shape rate (777 TFLOP/s against the published 676.6, row
    # h100-sxm-square-bf16-2048, 13% fast: a held-out row of the published table), which would
    # read a gain of 1.25x for an fp8 GEMM priced at 974 TFLOP/s.
    rows = {row.id: row for row in load_measurements()}
    published_bf16_s = rows["h100-sxm-square-bf16-2048"].measured_time_s()
    ratio = published_bf16_s / gemm_time_s(2048, 2048, 2048, "fp8", "h100-sxm")
    assert 1.3 <= ratio <= 2.0


def test_the_published_skinny_fp8_ratio_is_reproduced() -> None:
    rows = {row.id: row for row in load_measurements()}
    for m in (64, 128):
        bf16, fp8 = rows[f"h100-sxm-vllm-gemm-bf16-m{m}-n43008"], rows[f"h100-sxm-vllm-gemm-fp8-m{m}-n43008"]
        published = fp8.value / bf16.value
        predicted = gemm_time_s(m, 43008, 5376, "bf16", "h100-sxm") / gemm_time_s(m, 43008, 5376, "fp8", "h100-sxm")
        # within 15%: these shapes are memory-bound and the model streams both dtypes at the same
        # DRAM fraction, where the published fp8 kernels stream some 10% below the bf16 ones
        assert predicted == pytest.approx(published, rel=0.15), m


def test_the_gemm_ramp_is_the_fit_of_the_rows_it_cites() -> None:
    fitted = fitted_gemm_ramp_s()
    assert set(fitted) == {"gemm-model:ramp_gpu"}
    assert GEMM_RAMP_S["gpu"] == pytest.approx(fitted["gemm-model:ramp_gpu"], abs=5e-9)
    rows = [row for row in load_measurements() if row.fits == "gemm-model:ramp_gpu"]
    assert len(rows) >= 3 and all(row.target not in ("h100-sxm", "h200", "h100-pcie") for row in rows)


def test_cpu_gemms_keep_whole_waves_and_no_ramp() -> None:
    # stream-K and the ramp are the GPU libraries': a CPU BLAS prediction does not move
    cpu = Ceilings.from_spec(resolve("h100-sxm")).with_overrides(kind="cpu", compute_units=8)
    work = gemm_work(GemmCase(100, 100, 64, "bf16"))
    assert gemm_schedule(work, cpu, GemmParams()) == gemm_schedule(work, cpu, DATA_PARALLEL)


def test_ampere_tiles_have_power_of_two_sides_and_hopper_tiles_follow_the_granule() -> None:
    # A100 SXM cuBLASLt fp16 802816 x 192 x 768 (held out): 1.50 ms measured. Covered by 192-wide
    # tiles it would take 1.12 ms (-25%); Ampere's kernels have 64-, 128- or 256-wide tiles.
    work = gemm_work(GemmCase(802816, 192, 768, "fp16"))
    a100 = gemm_schedule(work, Ceilings.from_spec(resolve("a100-sxm-80gb")), GemmParams())
    h100 = gemm_schedule(work, Ceilings.from_spec(resolve("h100-sxm")), GemmParams())
    assert 192 not in a100.tile and a100.tile[1] in (128, 256)
    assert h100.tile[1] == 192   # wgmma: N in steps of 8
    # a decode GEMM (m = 8) keeps the skinny granule on both
    decode = gemm_work(GemmCase(8, 4096, 4096, "fp16"))
    for target in ("a100-sxm-80gb", "h100-sxm"):
        assert gemm_schedule(decode, Ceilings.from_spec(resolve(target)), GemmParams()).tile[0] == 16, target
    # a spec without an architecture (a measured profile, a hand-made ceilings) keeps the granule
    bare = Ceilings.from_spec(resolve("a100-sxm-80gb")).with_overrides(architecture="")
    assert gemm_schedule(work, bare, GemmParams()).tile[1] == 192
