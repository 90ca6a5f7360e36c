"""The GEMM's fixed time per output tile (a spec prior, ``[priors.gemm_tile_us]``, read by
models/gemm.py): a GEMM's efficiency falls with k as the published sweeps show; the time is the
fit of the rows it cites and every catalogue figure of it is that fit; it carries to the held-out
A100 SXM sweep; Hopper 16-bit targets carry none, because their fitted-on rows leave no room for
one. The catalogue's Hopper fp8 fraction is the rate the sweep's shapes share, not a best shape."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_charz import predict
from pytest_charz.errors import UsageError
from pytest_charz.models.ceilings import Ceilings
from pytest_charz.models.gemm import Gemm
from pytest_charz.published import GemmCase, load_measurements
from pytest_charz.published.score import (TILE_SOURCE, fitted_fractions, fitted_gemm_ramp_s, fitted_gemm_sweeps,
                                          fitted_gemm_tile_fixed_s, gemm_row_fraction, gemm_work, rule_architecture,
                                          rule_tile_s)
from pytest_charz.targets.catalogue import catalogue, resolve

SWEEP = "prior-gemm-hopper:gemm_fp8"
HOPPER = ("h100-sxm", "h200", "h100-pcie")


def sweep_rows() -> list:
    return [row for row in load_measurements() if row.fits == SWEEP]


def rows_by_id() -> dict:
    return {row.id: row for row in load_measurements()}


def fitted_tile_s() -> float:
    return fitted_gemm_tile_fixed_s()[TILE_SOURCE]


def test_the_tile_time_is_the_fit_of_the_rows_it_cites() -> None:
    rows = sweep_rows()
    assert len(rows) >= 5 and all(row.target not in HOPPER for row in rows)
    assert {row.case.dtype for row in rows} == {"fp8"}
    fitted = fitted_tile_s()
    assert 1e-6 < fitted < 10e-6
    carried = {(spec.id, dtype): figure.value * 1e-6 for spec in catalogue().values() if spec.priors
               for dtype, figure in spec.priors.gemm_tile_us.items()}
    assert carried and all(figure == pytest.approx(fitted, rel=1e-9) for figure in carried.values())
    assert all(figure.source == TILE_SOURCE for spec in catalogue().values() if spec.priors
               for figure in spec.priors.gemm_tile_us.values())
    # the Hopper targets carry it for fp8, the rule it was fitted under; the A100 for 16-bit
    assert {key for key in carried if key[0] in HOPPER} == {(target, "fp8") for target in HOPPER}
    assert {dtype for target, dtype in carried if target == "a100-sxm-80gb"} == {"bf16", "fp16"}


def test_the_fp8_sweep_is_reproduced_across_k() -> None:
    # With the tile time, one rate explains every row of the sweep (K from 512 to 16384) within
    # 10%; without it the K = 512 row runs at half the rate of the K = 16384 one and cannot be.
    rows = sweep_rows()
    for tile_s, tolerance in ((fitted_tile_s(), 0.10), (0.0, None)):
        rates = [gemm_row_fraction(row, tile_s=tile_s) for row in rows]
        spread = max(rates) / min(rates) - 1.0
        if tolerance is None:
            assert spread > 0.5
        else:
            assert spread <= 2 * tolerance


def test_an_fp8_gemm_on_hopper_is_slower_at_small_k_and_16_bit_ones_are_not_charged() -> None:
    # A prefill GEMM of Llama-2-7B (k = 4096) runs below the rate of the same M, N at k = 16384;
    # a Hopper bf16 GEMM keeps the size-independent rate (no per-tile time on Hopper 16-bit).
    def rate(k: int, dtype: str) -> float:
        work = gemm_work(GemmCase(4096, 12288, k, dtype))
        return work.total_flops / predict(work, target="h100-sxm", model="gemm").time_s

    assert rate(16384, "fp8") / rate(4096, "fp8") > 1.08
    assert rate(16384, "bf16") / rate(4096, "bf16") == pytest.approx(1.0, abs=0.03)
    # the prior is named among those a prediction consults, with its source
    used = Ceilings.from_spec(resolve("h100-sxm")).priors_used(gemm_work(GemmCase(4096, 12288, 4096, "fp8")))
    assert TILE_SOURCE in used["gemm_tile:fp8"]
    assert "gemm_tile:bf16" not in Ceilings.from_spec(resolve("h100-sxm")).priors_used(
        gemm_work(GemmCase(4096, 12288, 4096, "bf16")))


def test_the_tile_time_carries_to_the_held_out_a100_sweep() -> None:
    # The A100 SXM cuBLASLt fp16 sweep is held out (no constant was fitted on it). Its one- and
    # two-wave shapes read 14-44% too fast without a per-tile time; with the Hopper fp8 sweep's
    # time they read within 15%.
    rows = rows_by_id()
    spec = resolve("a100-sxm-80gb")
    with_tile = Ceilings.from_spec(spec)
    without = with_tile.with_overrides(gemm_tile_s={"fp16": None, "bf16": None})
    assert with_tile.gemm_tile("fp16") == pytest.approx(fitted_tile_s()) and without.gemm_tile("fp16") == 0.0
    for shape in ("1024x1024x1024", "2048x2048x2048", "1024x2145x1024"):
        row = rows[f"a100-sxm-cublaslt-fp16-{shape}"]
        assert row.held_out
        work, measured = gemm_work(row.case), row.measured_time_s()
        assert Gemm().predict(work, without).time_s / measured - 1.0 < -0.14, shape
        assert Gemm().predict(work, with_tile).time_s / measured - 1.0 == pytest.approx(0.0, abs=0.15), shape
    # the catalogue target is those ceilings: predict() prices the same
    work = gemm_work(rows["a100-sxm-cublaslt-fp16-1024x1024x1024"].case)
    assert predict(work, target="a100-sxm-80gb", model="gemm").time_s == Gemm().predict(work, with_tile).time_s


def test_hopper_16_bit_targets_carry_no_tile_time_because_their_fitted_rows_refuse_one() -> None:
    for target in HOPPER:
        priors = resolve(target).priors
        assert priors is not None and not {"bf16", "fp16"} & set(priors.gemm_tile_us)
    rows = rows_by_id()
    gh200 = rows["gh200-mamf-bf16-2025"]
    assert rule_tile_s(gh200) == 0.0 and rule_tile_s(rows["a800-sxm-square-bf16-max"]) == pytest.approx(fitted_tile_s())
    assert rule_architecture(gh200) == "Hopper" and rule_architecture(rows["a800-sxm-square-bf16-max"]) == "Ampere"
    # fitted under the tile time, the GH200 best shape would ask 97% of the dense peak (every
    # other 16-bit rule: 60-87%) ...
    assert gemm_row_fraction(gh200, tile_s=fitted_tile_s()) > 0.95 > 0.90 > gemm_row_fraction(gh200)
    # ... and the ramp fitted on the H800 PCIe bf16 sweep turns negative
    assert fitted_gemm_ramp_s()["gemm-model:ramp_gpu"] > 0
    assert fitted_gemm_ramp_s(tile_s=fitted_tile_s())["gemm-model:ramp_gpu"] < 0


def test_the_hopper_fp8_fraction_is_the_rate_the_sweep_shares_not_a_best_shape() -> None:
    fit = fitted_gemm_sweeps()[SWEEP]
    assert fit.dtype == "fp8" and fit.tile_fixed_s == fitted_tile_s()
    assert len(fit.rates) == len(sweep_rows()) and min(fit.rates) < fit.fraction < max(fit.rates)
    assert fitted_fractions()[SWEEP] == pytest.approx(fit.fraction)
    for target in HOPPER:
        figure = resolve(target).priors.efficiency["gemm_fp8"]  # type: ignore[union-attr]
        assert figure.value == pytest.approx(fit.fraction, abs=6e-4), target
    # the sweep's shared rate sits below the best shape a search finds (mamf, H100 SXM: 1402.6
    # of 1979 at k = 14336): a best shape is the top of the distribution
    best = rows_by_id()["h100-sxm-mamf-fp8-2025"]
    assert fit.fraction < gemm_row_fraction(replace(best, peak=1979.0, units=132), tile_s=fit.tile_fixed_s)


def test_a_sweep_rule_is_fitted_as_one_rate_and_short_or_mixed_sweeps_are_not() -> None:
    rows = sweep_rows()
    # every row 10% slower: a rate 10% lower and a tile time 10% longer (to the grid's 0.05 us)
    slower = [replace(row, value=row.value / 1.1) for row in rows]
    fit, moved = fitted_gemm_sweeps(rows)[SWEEP], fitted_gemm_sweeps(slower)[SWEEP]
    assert moved.tile_fixed_s == pytest.approx(fit.tile_fixed_s * 1.1, abs=0.06e-6)
    assert moved.fraction == pytest.approx(fit.fraction / 1.1, rel=0.01)
    assert fitted_gemm_sweeps(rows[:2]) == {}   # two rows fit the rule row by row
    mixed = [*rows[:3], replace(rows[3], case=GemmCase(rows[3].case.m, rows[3].case.n, rows[3].case.k, "bf16"))]
    with pytest.raises(UsageError, match="mixes dtypes"):
        fitted_gemm_sweeps(mixed)
