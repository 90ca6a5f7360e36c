"""The published end-to-end LLM serving rows (``serving-throughput``, ``serving-latency``,
``serving-ttft``): held-out,
cited, scored under the conditions they were measured in, by ``predict_graph`` and the simulator
alike."""
from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_charz.errors import SpecError
from pytest_charz.published import load_measurements
from pytest_charz.published.score import score_row
from pytest_charz.published.serving import SERVING_KINDS, ServingCase, score_serving_row, serving_time_s

SERVING = [row for row in load_measurements() if row.kind in SERVING_KINDS]


def test_at_least_ten_cited_held_out_serving_rows_on_three_targets() -> None:
    assert len(SERVING) >= 10 and len({row.target for row in SERVING}) >= 3
    for row in SERVING:
        assert row.held_out and not row.fits, row.id
        assert "https://" in row.source and "batch" in row.source, row.id
        assert isinstance(row.case, ServingCase) and row.case.precision in ("fp8", "fp16", "bf16")
    assert {row.kind for row in SERVING} == set(SERVING_KINDS)


def test_the_measured_time_follows_the_metric() -> None:
    throughput = next(row for row in SERVING if row.id == "h100-sxm-trtllm-llama2-70b-fp8-tp2-b64-2048-2048")
    # 64 sequences x 2048 tokens at 547 tokens/s on each of 2 GPUs
    assert throughput.measured_time_s() == pytest.approx(64 * 2048 / (547 * 2))
    ttft = next(row for row in SERVING if row.kind == "serving-ttft")
    assert ttft.measured_time_s() == pytest.approx(ttft.value * 1e-3)


@pytest.fixture(scope="module")
def scored() -> dict[str, float]:
    out = {}
    for row in SERVING:
        result = score_row(row)
        assert result.error is not None, f"{row.id}: {result.reason}"
        out[row.id] = result.error
    return out


def test_every_serving_row_is_predicted_within_a_factor_of_two(scored: dict[str, float]) -> None:
    assert all(-0.5 < error < 1.0 for error in scored.values()), scored


def test_the_16_bit_rows_meet_the_acceptance_but_the_short_first_token_rows(scored: dict[str, float]) -> None:
    # TensorRT-LLM's rows whose GEMMs run in 16 bits (A100 FP16); the fp8 rows also depend on the
    # fp8 GEMM efficiency, a kernel-level fit of its own, and vLLM's latency rows on its engine's
    # per-step host work (below). The first-token rows of a 128-token prompt are a known gap of
    # their own (tests/test_published.py: the engine's fixed cost per call is not priced), held
    # to read fast here rather than within 25%.
    rows = [row for row in SERVING if row.case.precision != "fp8" and row.kind != "serving-latency"]
    short = [row for row in rows if row.kind == "serving-ttft" and row.case.input <= 128]
    errors = [abs(scored[row.id]) for row in rows if row not in short]
    assert errors and statistics.median(errors) <= 0.08 and max(errors) <= 0.25, errors
    assert len(short) == 2 and all(-0.5 < scored[row.id] < -0.25 for row in short)


def test_the_vllm_latency_rows_pay_the_engine_step(scored: dict[str, float]) -> None:
    # vLLM replays its decode steps as CUDA graphs and runs its engine (scheduler, input
    # preparation, sampling, output processing) on the host each step, in series with the forward
    # pass. Priced as graph replay alone, the single-GPU Llama 3 8B rows read 22-37% fast; with
    # the engine's measured step (the vllm profile) every row is within 20%
    rows = [row for row in SERVING if row.kind == "serving-latency"]
    assert len(rows) == 9 and all(row.case.runtime == "vllm" and "engine" in row.note for row in rows)
    assert all(abs(scored[row.id]) < 0.20 for row in rows), {row.id: scored[row.id] for row in rows}
    # the report cites the engine's figure beside the row
    assert any("Vidur" in prior and "cpu_overheads.csv" in prior for prior in score_serving_row(rows[0]).priors)
    for row in (row for row in rows if row.case.tp == 1):
        graphs, _ = serving_time_s(replace(row.case, runtime="graphs"), row.target)
        assert graphs / row.measured_time_s() - 1.0 < -0.20
        assert graphs / row.measured_time_s() - 1.0 < scored[row.id] - 0.05


def test_the_simulator_gives_the_same_time_for_a_serving_run() -> None:
    from pytest_charz.sim import Machine
    from pytest_charz.sim.simulate import simulate_serving_case
    from pytest_charz.targets.catalogue import resolve

    # a first-token latency, and a vLLM run whose prefill is issued op by op and whose decode
    # steps are replayed, each paying the engine's step
    for name in ("a100-sxm-trtllm-llama2-7b-fp16-ttft-2048", "h100-sxm-vllm-llama3-8b-tp1"):
        row = next(row for row in SERVING if row.id == name)
        predicted, missing = serving_time_s(row.case, row.target)
        assert not missing
        assert simulate_serving_case(row.case, Machine.from_spec(resolve(row.target))) == pytest.approx(predicted,
                                                                                                       rel=1e-6)


def test_a_first_token_latency_of_more_than_one_token_is_refused_naming_the_field(tmp_path: Path) -> None:
    table = tmp_path / "table.toml"
    table.write_text('''[sources]
s = "a citation, https://example.org"

[[rows]]
id = "x"
target = "h100-sxm"
kind = "serving-ttft"
role = "held-out"
value = 10.0
unit = "ms"
source = "s"
serving-ttft = { model = "llama-2-7b", batch = 1, input = 128, output = 2, tp = 1, precision = "fp8" }
''')
    with pytest.raises(SpecError, match=r"rows\[0\]\.serving-ttft\.output.*must be 1"):
        load_measurements(table)
    table.write_text(table.read_text().replace('output = 2, tp = 1, precision = "fp8"',
                                               'output = 1, tp = 1, precision = "fp4"'))
    with pytest.raises(SpecError, match=r"serving-ttft\.precision"):
        load_measurements(table)


def test_the_grouped_decode_kernel_is_what_made_the_same_70b_runs_faster(scored: dict[str, float]) -> None:
    # The same Llama-2-70B configurations measured by TensorRT-LLM 0.6.1 (masked multi-head
    # attention: one block per query head) and 0.9.0 (XQA: each K/V head read once): the later
    # runs are faster, and the model, told only which decode kernel ran, predicts both within 25%.
    pairs = [("h100-sxm-trtllm-llama2-70b-fp8-tp2-b1024-128-128", "h100-sxm-trtllm090-llama2-70b-fp8-tp2-b1024-128-128"),
             ("h100-sxm-trtllm-llama2-70b-fp8-tp2-b96-2048-128", "h100-sxm-trtllm090-llama2-70b-fp8-tp2-b96-2048-128"),
             ("h100-sxm-trtllm-llama2-70b-fp8-tp2-b64-2048-2048", "h100-sxm-trtllm090-llama2-70b-fp8-tp2-b64-2048-2048")]
    rows = {row.id: row for row in SERVING}
    for old, new in pairs:
        assert rows[old].case.decode_kernel == "per-head" and rows[new].case.decode_kernel == "grouped"
        assert rows[new].value > rows[old].value
        predicted_old = rows[old].measured_time_s() * (1 + scored[old])
        predicted_new = rows[new].measured_time_s() * (1 + scored[new])
        assert predicted_new < predicted_old
        assert abs(scored[old]) <= 0.25 and abs(scored[new]) <= 0.25
