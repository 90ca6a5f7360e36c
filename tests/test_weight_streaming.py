"""Weights stream from DRAM in an inference graph: between two reads of one layer's weight every
other layer's weight goes through the caches, so a decode step's GEMM is charged its weight
bytes at DRAM bandwidth even where one layer's weight alone would fit the last-level cache."""
from __future__ import annotations

from pytest_charz.models.ceilings import Ceilings
from pytest_charz.targets.catalogue import resolve
from pytest_charz.workloads.builders import build, streamed_weights, weight_bytes
from pytest_charz.workloads.predict import predict_graph


def test_a_decode_gemm_reads_its_weight_from_dram_even_when_it_fits_l2() -> None:
    graph = build("llama-2-70b", "decode", batch=64, context=3072, dtype="fp8", tp=2, kv_dtype="fp8",
                  kernels="serving")
    ceilings = Ceilings.from_spec(resolve("h100-sxm"))
    l2, dram = ceilings.capacity("l2"), ceilings.bandwidth("dram")
    assert l2 is not None and dram is not None
    qkv = next(op for op in graph.ops if op.name.endswith("layers.0.self_attn.qkv_proj"))
    assert float(qkv.attrs["weight_bytes"]) < l2 < weight_bytes(graph)   # one layer fits, the model does not
    assert qkv.work.shape["working_set_bytes"] == weight_bytes(graph)
    prediction = predict_graph(graph, "h100-sxm")
    op = next(o for o in prediction.ops if o.name == qkv.name)
    assert op.bound == "memory:dram"
    assert op.kernel_s >= float(qkv.attrs["weight_bytes"]) / dram


def test_ops_without_weights_keep_their_own_working_set() -> None:
    graph = build("llama-2-7b", "decode", batch=8, context=512, dtype="bf16")
    for op in graph.ops:
        if float(op.attrs.get("weight_bytes", 0.0)) == 0.0:
            assert "working_set_bytes" not in op.work.shape, op.name
    # idempotent, and eager graphs (the decomposed ops a capture compares with) are left alone
    assert streamed_weights(list(graph.ops)) == list(graph.ops)
    eager = build("llama-2-7b", "decode", batch=1, context=16, dtype="bf16", kernels="eager", num_layers=1)
    assert all("working_set_bytes" not in op.work.shape for op in eager.ops)
