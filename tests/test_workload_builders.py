"""Published model configurations and the analytical graphs built from them: acceptance figures
checked against hand counts, sharding, MoE routing, attention variants, argument errors, and the
parameter counts of the real transformers modules."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_charz.errors import SpecError, UsageError
from pytest_charz.workloads.builders import (
    build,
    graph_parameters,
    layer_prefix,
    phases,
    weight_bytes,
)
from pytest_charz.workloads.builders_layers import experts_active
from pytest_charz.workloads.model_configs import (
    CONFIG_DIR,
    ModelConfig,
    known_models,
    load_config,
    load_config_file,
)

GB = 1e9
ALL_MODELS = ["bert-base", "bert-large", "gpt2", "llama-2-13b", "llama-2-70b", "llama-2-7b", "llama-3-70b",
              "llama-3-8b", "mistral-7b", "mixtral-8x7b", "vit-b-16"]


def sizes(config: ModelConfig, phase: str) -> dict[str, int]:
    if config.family == "vit":
        return {}
    return {"context": 64} if phase == "decode" else {"seq": 64}


# -- the catalogue ------------------------------------------------------------------------------
def test_the_catalogue_holds_the_published_models() -> None:
    assert known_models() == ALL_MODELS


@pytest.mark.parametrize("name", ALL_MODELS)
def test_every_config_loads_cites_its_figures_and_builds_in_all_its_phases(name: str) -> None:
    config = load_config(name)
    assert set(config.field_sources) == set(config.fields)
    assert all(config.source_of(field).strip() for field in config.fields)
    for phase in phases(config):
        graph = build(config, phase, batch=2, **sizes(config, phase))
        assert graph.phase == phase and graph.total_flops > 0 and graph.total_bytes > 0


@pytest.mark.parametrize("alias, expected", [("llama2-7b", "llama-2-7b"), ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
                                             ("MISTRALAI/Mistral-7B-v0.1", "mistral-7b"),
                                             ("bert-base-uncased", "bert-base"), ("openai-community/gpt2", "gpt2")])
def test_names_resolve_by_alias_in_any_case(alias: str, expected: str) -> None:
    assert load_config(alias).id == expected


@pytest.mark.parametrize("name, billions", [("llama-2-7b", 6.74), ("llama-2-13b", 13.0), ("llama-2-70b", 69.0),
                                            ("llama-3-8b", 8.03), ("llama-3-70b", 70.6), ("mistral-7b", 7.24),
                                            ("mixtral-8x7b", 46.7), ("gpt2", 0.124), ("bert-base", 0.110),
                                            ("bert-large", 0.335), ("vit-b-16", 0.0864)])
def test_the_built_graphs_hold_the_published_parameter_counts(name: str, billions: float) -> None:
    graph = build(name, phases(name)[0], **sizes(load_config(name), phases(name)[0]))
    assert graph_parameters(graph) / 1e9 == pytest.approx(billions, rel=0.01)


# -- acceptance figures -------------------------------------------------------------------------
def test_llama2_7b_prefill_2048_tokens_counts_the_full_attention_matrix() -> None:
    # 2 * 6.61e9 parameters * 2048 tokens (all logits) = 2.71e13, plus the FULL causal score
    # matrix: 32 layers * 4 * 32 heads * 2048^2 * 128 = 2.2e12 (half of it when masked).
    graph = build("llama-2-7b", "prefill", batch=1, seq=2048)
    assert 2.7e13 <= graph.total_flops <= 3.1e13
    assert graph.total_flops == pytest.approx(2.929e13, rel=0.005)
    attention = [op for op in graph.ops if op.op_class == "attention"]
    assert len(attention) == 32 and all(op.attrs["causal"] for op in attention)
    full = sum(op.work.total_flops for op in attention)
    half = sum(op.attrs["flops_causal_half"] for op in attention)
    assert half == pytest.approx(full * 2049 / 4096)


def test_llama2_7b_decode_reads_the_weights_and_the_kv_cache() -> None:
    graph = build("llama-2-7b", "decode", batch=1, context=2048, dtype="bf16")
    kv_cache = 2 * 32 * 2048 * 4096 * 2  # K and V, 32 layers, 2048 tokens, 4096 wide, bf16
    assert kv_cache / GB == pytest.approx(1.07, rel=0.01)
    assert graph.total_bytes == pytest.approx(13.5 * GB + kv_cache, rel=0.10)
    # The weights read are all of them except the embedding table, of which one row is read.
    assert weight_bytes(graph) == pytest.approx((6.738e9 - 32000 * 4096) * 2, rel=0.001)


def test_fp8_halves_the_gemm_weights_but_keeps_the_kv_cache_in_bf16() -> None:
    bf16 = build("llama-2-7b", "decode", context=2048, dtype="bf16")
    fp8 = build("llama-2-7b", "decode", context=2048, dtype="fp8")
    q_bf16, q_fp8 = bf16.op("model.layers.0.self_attn.q_proj"), fp8.op("model.layers.0.self_attn.q_proj")
    assert q_fp8.attrs["weight_bytes"] == pytest.approx(q_bf16.attrs["weight_bytes"] / 2)
    assert set(q_fp8.work.flops) == {"fp8"}
    attn = "model.layers.0.self_attn.attention"
    assert fp8.op(attn).work.total_bytes == pytest.approx(bf16.op(attn).work.total_bytes)
    assert set(bf16.op("model.layers.0.input_layernorm").work.flops) == {"fp32"}


def test_llama2_70b_decode_with_tp8_holds_an_eighth_of_the_weights_per_rank() -> None:
    whole = build("llama-2-70b", "decode", context=2048)
    rank = build("llama-2-70b", "decode", context=2048, tp=8)
    assert weight_bytes(rank) == pytest.approx(weight_bytes(whole) / 8, rel=0.001)
    all_reduces = [op for op in rank.ops if op.work.collectives and op.work.collectives[0].op == "all-reduce"]
    # Two per layer (after o_proj and after down_proj): 160; plus one all-gather of the
    # vocabulary-parallel logits: 161 collective ops in all.
    assert len(all_reduces) == 160
    assert sum(op.op_class == "collective" for op in rank.ops) == 161
    assert [op.name for op in all_reduces[:2]] == ["model.layers.0.self_attn.o_proj.all_reduce",
                                                   "model.layers.0.mlp.down_proj.all_reduce"]
    message = all_reduces[0].work.collectives[0]
    assert (message.bytes, message.ranks) == (8192 * 2, 8)
    assert rank.op("model.layers.0.self_attn.k_proj").work.shape["n"] == 128  # one K/V head per rank
    assert rank.total_flops == pytest.approx(whole.total_flops / 8, rel=0.01)


def test_mixtral_decode_at_batch_1_reads_two_experts_per_layer() -> None:
    graph = build("mixtral-8x7b", "decode", batch=1, context=1024)
    expert = 3 * 4096 * 14336 * 2  # gate, up and down of one expert, bf16
    for i in range(32):
        ops = [graph.op(f"model.layers.{i}.mlp.experts.gate_up_proj"), graph.op(f"model.layers.{i}.mlp.experts.down_proj")]
        assert all(op.attrs["experts_active"] == pytest.approx(2.0) for op in ops)
        assert sum(op.attrs["weight_bytes"] for op in ops) == pytest.approx(2 * expert)
    # Many tokens reach every expert.
    assert build("mixtral-8x7b", "prefill", seq=512).op("model.layers.0.mlp.experts.down_proj").attrs[
        "experts_active"] == pytest.approx(8.0)
    assert experts_active(1, 8, 2) == pytest.approx(2.0) and 2 < experts_active(4, 8, 2) < 8


def test_grouped_query_attention_shrinks_kv_bytes_by_heads_over_kv_heads() -> None:
    mha = load_config("mistral-7b").replace_fields(num_key_value_heads=32)
    gqa, full = build("mistral-7b", "decode", context=4000), build(mha, "decode", context=4000)
    name = "model.layers.0.self_attn.attention"
    assert full.op(name).attrs["kv_cache_read_bytes"] == pytest.approx(4 * gqa.op(name).attrs["kv_cache_read_bytes"])
    assert gqa.op("model.layers.0.self_attn.k_proj").work.shape["n"] == 8 * 128


def test_a_per_head_decode_kernel_reads_the_cache_from_dram_once_and_its_group_rereads_it_from_l2() -> None:
    # Llama-2-70B: 64 query heads on 8 K/V heads. The per-head kernel's blocks (the head is the
    # grid's x) of one group run together: the cache crosses DRAM once, as the grouped kernel's
    # does, and the group's 7 other heads read it again from L2
    from pytest_charz.prediction import load_predictor

    args = dict(batch=64, context=2048, dtype="fp8", kv_dtype="fp8", kernels="serving", num_layers=2)
    name = "model.layers.0.self_attn.attention"
    grouped = build("llama-2-70b", "decode", decode_kernel="grouped", **args).op(name)
    per_head = build("llama-2-70b", "decode", decode_kernel="per-head", **args).op(name)
    cache = grouped.attrs["kv_cache_read_bytes"]
    assert per_head.attrs["kv_cache_read_bytes"] == cache
    assert per_head.work.bytes["dram"] == pytest.approx(grouped.work.bytes["dram"])
    assert "l2" not in grouped.work.bytes and per_head.work.bytes["l2"] == pytest.approx(7 * cache)
    # on an H100 the per-head kernel is bound by its L2 traffic: dearer than the grouped kernel,
    # cheaper than eight reads of the cache from DRAM (what a per-head read once cost here)
    predictor = load_predictor("h100-sxm")
    fast, slow = predictor.predict(grouped.work), predictor.predict(per_head.work)
    assert fast.bound == "memory:dram" and slow.bound == "memory:l2"
    assert fast.time_s * 2 < slow.time_s < 0.9 * 8 * fast.time_s


def test_the_sliding_window_caps_the_kv_cache_mistral_reads() -> None:
    long = build("mistral-7b", "decode", context=16000).op("model.layers.0.self_attn.attention")
    assert long.attrs["s_kv"] == 4096


@pytest.mark.parametrize("phase, size", [("prefill", {"seq": 512}), ("decode", {"context": 512})])
def test_unfused_attention_has_the_fused_flops_but_more_bytes_and_launches(phase: str, size: dict[str, int]) -> None:
    fused = build("llama-3-8b", phase, **size)
    unfused = build("llama-3-8b", phase, fused_attention=False, **size)
    assert unfused.total_flops == pytest.approx(fused.total_flops)
    assert unfused.total_bytes > fused.total_bytes
    assert unfused.launches == fused.launches + 2 * 32
    parts = [op for op in unfused.ops if op.attrs.get("layer") == 0 and "part" in op.attrs]
    assert [(op.op_class, op.attrs["fused"]) for op in parts] == [("bmm", False), ("softmax", False), ("bmm", False)]


def test_training_costs_about_six_flops_per_parameter_and_token() -> None:
    graph = build("llama-2-7b", "train", batch=1, seq=512)
    forward = build("llama-2-7b", "prefill", batch=1, seq=512)
    assert graph.total_flops == pytest.approx(3 * forward.total_flops, rel=0.02)
    assert any(op.name == "optimizer.layers.31" for op in graph.ops)
    rank = build("llama-2-7b", "train", seq=512, tp=2)
    assert sum(op.op_class == "collective" for op in rank.ops) == 4 * 32 + 1  # fwd + bwd, + the loss


def test_ops_are_named_by_module_path_in_issue_order_with_dependencies() -> None:
    graph = build("llama-2-7b", "decode", context=16, num_layers=1)
    names = [op.name for op in graph.ops]
    assert names[:8] == ["model.embed_tokens", "model.layers.0.input_layernorm", "model.layers.0.self_attn.q_proj",
                         "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj",
                         "model.layers.0.self_attn.rotary", "model.layers.0.self_attn.kv_cache_write",
                         "model.layers.0.self_attn.attention"]
    assert names[-2:] == ["model.norm", "lm_head"]
    assert graph.op("model.layers.0.mlp.act_fn").deps == ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj")
    assert all(op.name.startswith(layer_prefix("llama-2-7b", 0)) for op in graph.ops if op.attrs.get("layer") == 0)


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    ({"phase": "decoding", "context": 8}, ["'decoding'", "prefill, decode, train"]),
    ({"phase": "prefill", "seq": 8, "dtype": "int4"}, ["'int4'", "fp32, bf16, fp16, fp8"]),
    ({"phase": "prefill", "seq": 8, "batch": -1}, ["batch", "-1"]),
    ({"phase": "prefill"}, ["seq"]),
    ({"phase": "decode"}, ["context"]),
    ({"phase": "decode", "context": 0}, ["context", "0"]),
    ({"phase": "prefill", "seq": 8, "tp": 3}, ["tp=3", "valid: 1, 2, 4, 8, 16, 32"]),
])
def test_bad_arguments_are_usage_errors_naming_the_value(kwargs: dict, words: list[str]) -> None:
    with pytest.raises(UsageError) as caught:
        build("llama-2-7b", **kwargs)
    assert all(word in str(caught.value) for word in words), str(caught.value)


def test_an_unknown_model_names_the_nearest_one() -> None:
    with pytest.raises(UsageError, match="unknown model 'llama-2-7B-chatt'.*did you mean 'llama-2-7b'"):
        load_config("llama-2-7B-chatt")
    with pytest.raises(UsageError, match="'mixtrel'.*'mixtral-8x7b'"):
        build("mixtrel", "decode", context=8)


def test_an_encoder_has_only_a_forward_phase() -> None:
    with pytest.raises(UsageError, match="must be one of forward"):
        build("bert-base", "decode", context=8)
    with pytest.raises(UsageError, match="learned positions"):
        build("bert-base", "forward", seq=1024)


def _write(tmp_path: Path, source: str, old: str, new: str) -> Path:
    text = (CONFIG_DIR / source).read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "mine.toml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


@pytest.mark.parametrize("old, new, words", [
    ("hidden_size = {", "hiden_size = {", ["config.hiden_size", "not a known field", "did you mean 'hidden_size'"]),
    ("value = 32000,", "value = -32000,", ["config.vocab_size.value", "positive", "-32000"]),
    ("value = 11008,", "value = 11008.5,", ["config.intermediate_size.value", "integer"]),
    ('source = "paper" }', 'source = "papr" }', ["source", "papr"]),
    ('family = "llama"', 'family = "lama"', ["identity.family", "did you mean 'llama'"]),
])
def test_a_malformed_config_file_names_the_file_field_and_value(tmp_path: Path, old: str, new: str,
                                                                words: list[str]) -> None:
    path = _write(tmp_path, "llama-2-7b.toml", old, new)
    with pytest.raises(SpecError) as caught:
        load_config_file(path)
    assert str(path) in str(caught.value)
    assert all(word in str(caught.value) for word in words), str(caught.value)


def test_a_users_own_file_builds(tmp_path: Path) -> None:
    path = _write(tmp_path, "llama-2-7b.toml", 'id = "llama-2-7b"', 'id = "my-llama"')
    config = load_config_file(path)
    assert config.id == "my-llama" and build(config, "decode", context=4).name == "my-llama"


# -- the real modules ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["llama-2-7b", "llama-3-8b", "mistral-7b", "mixtral-8x7b", "gpt2", "bert-base",
                                  "vit-b-16"])
def test_instantiate_on_meta_has_the_parameters_the_builder_assumes(name: str) -> None:
    pytest.importorskip("transformers")
    from pytest_charz.workloads.model_configs import instantiate

    config = load_config(name)
    model = instantiate(config, dtype="bf16", device="meta", num_layers=1)
    assert next(model.parameters()).is_meta
    graph = build(config, phases(config)[0], num_layers=1, **sizes(config, phases(config)[0]))
    assert graph_parameters(graph) == sum(p.numel() for p in model.parameters())
    prefix = layer_prefix(config, 0) + "."
    in_layer = sum(p.numel() for n, p in model.named_parameters() if n.startswith(prefix))
    assert in_layer > 0
    assert sum(op.attrs["params"] for op in graph.ops if op.attrs.get("layer") == 0) == in_layer


def test_instantiate_refuses_fp8() -> None:
    from pytest_charz.workloads.model_configs import instantiate

    with pytest.raises(UsageError, match="fp8"):
        instantiate("gpt2", dtype="fp8")


def test_a_built_graph_survives_its_json_form() -> None:
    import json

    from pytest_charz.workloads.graph import Graph

    graph = build("mixtral-8x7b", "train", seq=16, tp=2, num_layers=2, fused_attention=False)
    again = Graph.from_json(json.loads(json.dumps(graph.to_json())))
    assert again.total_flops == pytest.approx(graph.total_flops) and len(again) == len(graph)


def test_kernels_picks_fused_or_eager_ops() -> None:
    fused = build("llama-2-7b", "prefill", seq=64, num_layers=1)
    eager = build("llama-2-7b", "prefill", seq=64, num_layers=1, kernels="eager")
    assert fused.params["kernels"] == "fused" and eager.params["kernels"] == "eager"
    assert build("llama-2-7b", "prefill", seq=64, num_layers=1, kernels="fused").launches == fused.launches
    assert eager.total_flops == pytest.approx(fused.total_flops, rel=0.01)
    assert eager.total_bytes > fused.total_bytes and eager.launches > fused.launches
    norm = [op for op in eager.ops if op.name.startswith("model.layers.0.input_layernorm.")]
    assert [op.attrs["aten"] for op in norm] == ["_to_copy", "pow", "mean", "add", "rsqrt", "mul", "_to_copy", "mul"]
    assert norm[0].outputs[0].dtype == "fp32" and [op.op_class for op in norm[:3]] == ["copy", "elementwise",
                                                                                       "reduction"]
    with pytest.raises(UsageError, match="kernels must be one of fused, eager, serving; got 'triton'"):
        build("llama-2-7b", "prefill", seq=64, kernels="triton")
