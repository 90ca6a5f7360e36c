"""The per-tile fixed cost of fp8 GEMMs (models/gemm.py ``GEMM_TILE_FIXED_K``): an fp8 GEMM's
efficiency falls with k as the published fp8 sweep shows, the cost is the fit of the rows it
cites, and the catalogue's Hopper fp8 fraction is the rate the sweep's shapes share at large k,
not the best shape of a search."""
from __future__ import annotations

import pytest

from pytest_charz import predict
from pytest_charz.models.ceilings import Ceilings
from pytest_charz.models.gemm import GEMM_TILE_FIXED_K, GemmParams, gemm_schedule
from pytest_charz.published import GemmCase, load_measurements
from pytest_charz.published.score import (fitted_fractions, fitted_gemm_sweeps, fitted_gemm_tile_fixed_k, gemm_work,
                                          shape_fraction)
from pytest_charz.targets.catalogue import resolve
from pytest_charz.targets.spec import Figure

SWEEP = "prior-gemm-hopper:gemm_fp8"


def sweep_rows() -> list:
    return [row for row in load_measurements() if row.fits == SWEEP]


def test_the_tile_cost_is_the_fit_of_the_rows_it_cites() -> None:
    rows = sweep_rows()
    assert len(rows) >= 5 and all(row.target not in ("h100-sxm", "h200", "h100-pcie") for row in rows)
    assert {row.case.dtype for row in rows} == {"fp8"}
    assert fitted_gemm_tile_fixed_k() == {"gemm-model:tile_fixed_gpu_fp8": GEMM_TILE_FIXED_K["gpu:fp8"]}


def test_the_fp8_sweep_is_reproduced_across_k() -> None:
    # With the cost, one rate explains every row of the sweep (K from 512 to 16384) within 10%;
    # without it the K = 512 row runs at half the rate of the K = 16384 one and cannot be.
    rows = sweep_rows()
    for params, tolerance in ((GemmParams(), 0.10), (GemmParams(tile_fixed_k={}), None)):
        rates = []
        for row in rows:
            ceilings = Ceilings(target_id=row.target, kind="gpu", peak_flops={"fp8": Figure(row.peak * 1e12, "t")},
                                compute_units=Figure(float(row.units), "t"))
            schedule = gemm_schedule(gemm_work(row.case), ceilings, params)
            rates.append(schedule.executed_flops / (row.measured_time_s() - schedule.ramp_s))
        spread = max(rates) / min(rates) - 1.0
        if tolerance is None:
            assert spread > 0.5
        else:
            assert spread <= 2 * tolerance


def test_an_fp8_gemm_is_slower_at_small_k_and_16_bit_gemms_are_not_charged() -> None:
    # A prefill GEMM of Llama-2-7B (k = 4096) runs below the rate of the same M, N at k = 16384
    # by about (k + fixed) / k; a bf16 GEMM keeps the size-independent rate (no per-tile cost).
    ceilings = Ceilings.from_spec(resolve("h100-sxm"))
    fixed = GEMM_TILE_FIXED_K["gpu:fp8"]

    def rate(k: int, dtype: str) -> float:
        work = gemm_work(GemmCase(4096, 12288, k, dtype))
        return work.total_flops / predict(work, target="h100-sxm", model="gemm").time_s

    slow = rate(16384, "fp8") / rate(4096, "fp8")
    assert slow == pytest.approx((4096 + fixed) / 4096 * 16384 / (16384 + fixed), rel=0.03)
    assert rate(16384, "bf16") / rate(4096, "bf16") == pytest.approx(1.0, abs=0.03)
    assert ceilings.peak("fp8", "gemm") is not None


def test_the_hopper_fp8_fraction_is_the_rate_the_sweep_shares_not_a_best_shape() -> None:
    fit = fitted_gemm_sweeps()[SWEEP]
    assert fit.dtype == "fp8" and fit.tile_fixed_k == GEMM_TILE_FIXED_K["gpu:fp8"]
    assert len(fit.rates) == len(sweep_rows()) and min(fit.rates) < fit.fraction < max(fit.rates)
    assert fitted_fractions()[SWEEP] == pytest.approx(fit.fraction)
    for target in ("h100-sxm", "h200", "h100-pcie"):
        figure = resolve(target).priors.efficiency["gemm_fp8"]  # type: ignore[union-attr]
        assert figure.value == pytest.approx(fit.fraction, abs=6e-4), target
    # the sweep's shared rate sits below the best shape a search finds (mamf, H100 SXM: 1402.6
    # of 1979 at k = 8192, 0.76 at large k): a best shape is the top of the distribution
    best = next(row for row in load_measurements() if row.id == "h100-sxm-mamf-fp8-2025")
    assert isinstance(best.case, GemmCase)
    assert fit.fraction < best.value / 1979.0 * shape_fraction(best.case)
    # 16-bit rows need no shape adjustment
    bf16 = next(row for row in load_measurements() if row.fits == "prior-gemm-hopper:gemm_bf16")
    assert shape_fraction(bf16.case) == 1.0


def test_a_sweep_rule_is_fitted_as_one_rate_and_mixed_or_short_sweeps_are_refused() -> None:
    from dataclasses import replace

    from pytest_charz.errors import UsageError

    rows = sweep_rows()
    # every row 10% slower: the same fixed cost, a rate 10% lower (to the ramp, 0.8 us a GEMM)
    slower = [replace(row, value=row.value / 1.1) for row in rows]
    fit, moved = fitted_gemm_sweeps(rows)[SWEEP], fitted_gemm_sweeps(slower)[SWEEP]
    assert moved.tile_fixed_k == fit.tile_fixed_k and moved.fraction == pytest.approx(fit.fraction / 1.1, rel=2e-3)
    with pytest.raises(UsageError, match="needs 3 or more rows"):
        fitted_gemm_sweeps(rows[:2])
    mixed = [*rows[:3], replace(rows[3], case=GemmCase(rows[3].case.m, rows[3].case.n, rows[3].case.k, "bf16"))]
    with pytest.raises(UsageError, match="mixes dtypes"):
        fitted_gemm_sweeps(mixed)
