"""Precision recipes: fp8 weights and activations with an fp8 or bf16 KV cache, int8 and int4
weight-only, and what they change: the bytes a step moves, the memory it needs, its time."""
from __future__ import annotations

import pytest

from pytest_charz.errors import UsageError
from pytest_charz.sim import Machine, simulate_graph
from pytest_charz.targets.catalogue import resolve
from pytest_charz.workloads.builders import build, weight_bytes
from pytest_charz.workloads.builders_ops import DEQUANT_MATMUL_TOKENS
from pytest_charz.workloads.capacity import CapacityError, memory_need
from pytest_charz.workloads.predict import predict_graph


def _cache_bytes_moved(graph) -> float:
    return sum(op.work.total_bytes for op in graph.ops if op.op_class == "attention")


def test_an_fp8_kv_cache_halves_the_cache_bytes_held_read_and_written() -> None:
    bf16 = build("llama-2-7b", "decode", batch=16, context=1024, dtype="fp8", num_layers=2)
    fp8 = build("llama-2-7b", "decode", batch=16, context=1024, dtype="fp8", kv_dtype="fp8", num_layers=2)
    assert bf16.params["kv_dtype"] == "bf16" and fp8.params["kv_dtype"] == "fp8"
    assert memory_need(fp8).kv_cache_bytes == pytest.approx(memory_need(bf16).kv_cache_bytes / 2)
    # the decode attention reads the cache (and a few query bytes): about half
    assert _cache_bytes_moved(fp8) == pytest.approx(_cache_bytes_moved(bf16) / 2, rel=0.01)
    writes = [op for op in fp8.ops if op.attrs.get("kv_cache")]
    assert writes and all(op.outputs[0].dtype == "fp8" for op in writes)
    assert memory_need(fp8).weights_bytes == pytest.approx(memory_need(bf16).weights_bytes)


def test_a_batch_that_fits_only_with_an_fp8_cache_passes_the_memory_check_of_predict_and_sim() -> None:
    # Llama-2-7B at batch 768 after 192 tokens: a bf16 cache needs ~72 GiB beside the weights
    # (over an H100's 80 GiB), an fp8 one half of it (TensorRT-LLM runs this batch with an fp8 cache).
    args = dict(batch=768, context=192, dtype="fp8", kernels="serving")
    with pytest.raises(CapacityError, match="needs .* per device"):
        predict_graph(build("llama-2-7b", "decode", **args), "h100-sxm")
    fitting = build("llama-2-7b", "decode", kv_dtype="fp8", **args)
    machine = Machine.from_spec(resolve("h100-sxm"))
    predicted = predict_graph(fitting, "h100-sxm", runtime="serving")
    simulated = simulate_graph(fitting, machine)
    assert predicted.latency_s > 0 and simulated.latency_s > 0
    with pytest.raises(CapacityError):
        simulate_graph(build("llama-2-7b", "decode", **args), machine)


def test_int4_weight_only_reads_a_quarter_of_the_bf16_weight_bytes_and_int8_a_half() -> None:
    def gemm_weights(dtype: str) -> float:
        graph = build("llama-2-7b", "decode", batch=1, context=128, dtype=dtype, num_layers=2)
        return sum(float(op.attrs["weight_bytes"]) for op in graph.ops
                   if op.op_class == "gemm" and op.name != "lm_head")

    bf16 = gemm_weights("bf16")
    assert gemm_weights("int4-wo") == pytest.approx(bf16 / 4)
    assert gemm_weights("int8-wo") == pytest.approx(bf16 / 2)
    need = memory_need(build("llama-2-7b", "decode", batch=1, context=128, dtype="int4-wo"))
    full = memory_need(build("llama-2-7b", "decode", batch=1, context=128, dtype="bf16"))
    # the LM head and the embedding stay in bf16: a little over a quarter in all
    assert 0.25 < need.weights_bytes / full.weights_bytes < 0.32


def test_weight_only_math_is_bf16_and_a_long_prompt_dequantizes_the_weight_first() -> None:
    decode = build("llama-2-7b", "decode", batch=1, context=128, dtype="int4-wo", num_layers=1)
    gemms = [op for op in decode.ops if op.op_class == "gemm" and op.name != "lm_head"]
    assert gemms and all(set(op.work.flops) == {"bf16"} for op in gemms)
    assert not any(op.name.endswith(".dequantize") for op in decode.ops)
    prefill = build("llama-2-7b", "prefill", seq=DEQUANT_MATMUL_TOKENS, dtype="int4-wo", num_layers=1)
    up = prefill.op("model.layers.0.mlp.up_proj")
    dequant = prefill.op("model.layers.0.mlp.up_proj.dequantize")
    assert dequant.name in up.deps and up.attrs["dequantized"]
    # the dequantizer reads the packed weight and writes the bf16 one the gemm then reads
    packed = 11008 * 4096 / 2
    assert dequant.work.total_bytes == pytest.approx(packed + 2 * 11008 * 4096)
    assert memory_need(prefill).weights_bytes == pytest.approx(
        memory_need(build("llama-2-7b", "prefill", seq=16, dtype="int4-wo", num_layers=1)).weights_bytes)


def test_a_memory_bound_decode_step_follows_the_weight_bytes() -> None:
    def step_s(dtype: str) -> float:
        return predict_graph(build("llama-2-7b", "decode", batch=1, context=512, dtype=dtype, kernels="serving"),
                             "h100-sxm", runtime="serving").latency_s

    bf16, int8, int4 = step_s("bf16"), step_s("int8-wo"), step_s("int4-wo")
    assert int4 < int8 < bf16
    # never faster than its bytes allow: int4 reads a quarter of the gemm weights, not less
    assert bf16 / int4 < 4.0


def test_an_fp8_step_is_no_faster_than_the_published_fp8_to_bf16_ratio_allows() -> None:
    # A compute-bound prefill gains at most what an fp8 GEMM gains over a bf16 one at its best
    # shape on the same GPU (the published table's H100 SXM rows: 1402.6 against 794.5 TFLOP/s),
    # never the 2x of the dense peaks: norms, attention, the LM head and the activations stay in
    # bf16. A memory-bound decode step gains at most the bytes it saves (weights and cache halve).
    from pytest_charz.published import load_measurements

    rows = {row.id: row for row in load_measurements()}
    published = rows["h100-sxm-mamf-fp8-2025"].value / rows["h100-sxm-mamf-bf16-2025"].value

    def time_s(phase: str, dtype: str, kv: str | None, **shape: int) -> float:
        graph = build("llama-2-7b", phase, dtype=dtype, kv_dtype=kv, kernels="serving", **shape)
        return predict_graph(graph, "h100-sxm", runtime="serving").latency_s

    prefill = time_s("prefill", "bf16", None, batch=8, seq=1024) / time_s("prefill", "fp8", "fp8", batch=8, seq=1024)
    assert 1.0 < prefill <= published
    decode = time_s("decode", "bf16", None, batch=64, context=1024) / time_s("decode", "fp8", "fp8", batch=64,
                                                                             context=1024)
    assert 1.0 < decode <= 2.0


def test_unknown_recipes_and_cache_dtypes_are_usage_errors_naming_the_valid_ones() -> None:
    with pytest.raises(UsageError, match="kv_dtype must be one of fp8, bf16, fp16, fp32; got 'int4'"):
        build("llama-2-7b", "decode", context=8, kv_dtype="int4")
    with pytest.raises(UsageError, match="int4-wo"):
        build("llama-2-7b", "decode", context=8, dtype="int3-wo")
    with pytest.raises(UsageError, match="kernels='eager' runs transformers' modules in one dtype"):
        build("llama-2-7b", "decode", context=8, dtype="int4-wo", kernels="eager")
    with pytest.raises(UsageError, match="weight-only recipes and kv_dtype are for inference"):
        build("llama-2-7b", "train", seq=8, dtype="int4-wo")


def test_weight_bytes_of_a_graph_follow_the_recipe() -> None:
    bf16 = weight_bytes(build("llama-2-7b", "decode", context=8, dtype="bf16", num_layers=1))
    fp8 = weight_bytes(build("llama-2-7b", "decode", context=8, dtype="fp8", num_layers=1))
    assert fp8 < bf16
