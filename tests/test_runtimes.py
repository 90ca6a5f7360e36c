"""Runtime profiles (``--runtime eager|graphs|serving``): host dispatch per op, graph replay, a
serving engine's fused kernels, and the bound a step reports; ``predict_graph`` and the simulator
give one answer under each."""
from __future__ import annotations

import pytest

from pytest_charz import cli
from pytest_charz.errors import UsageError
from pytest_charz.sim import Machine, SimOptions, simulate_graph
from pytest_charz.sim.runtime import with_runtime_profile
from pytest_charz.targets.catalogue import resolve
from pytest_charz.workloads.builders import build
from pytest_charz.workloads.predict import predict_graph
from pytest_charz.workloads.engines import engine_step_s
from pytest_charz.workloads.runtime import DEFAULT_HOST_DISPATCH_S, ENGINE_DISPATCH_S, RUNTIME_PROFILES


def test_graph_replay_removes_the_per_op_host_dispatch() -> None:
    graph = build("llama-2-7b", "decode", batch=1, context=128, dtype="bf16")
    eager = predict_graph(graph, "h100-sxm", runtime="eager")
    replayed = predict_graph(graph, "h100-sxm", runtime="graphs")
    assert eager.host_s == pytest.approx(len(graph.ops) * DEFAULT_HOST_DISPATCH_S)
    assert replayed.host_s == pytest.approx(DEFAULT_HOST_DISPATCH_S)        # one dispatch for the graph
    assert replayed.latency_s < eager.latency_s and replayed.bound == "device"
    assert replayed.launch_overhead_s < eager.launch_overhead_s            # a graph node's gap, not a launch
    assert replayed.params["runtime"] == "graphs"


def test_a_serving_engine_prefill_is_not_host_bound_where_eager_pytorch_is() -> None:
    # Llama-2-7B, one 64-token prompt in fp8 on an H100: eager PyTorch spends 10 us of host work on
    # each of 483 ops, longer than the device takes; a serving engine's fused kernels, launched
    # from compiled code, keep the host ahead of the device.
    eager = predict_graph(build("llama-2-7b", "prefill", seq=64, dtype="fp8"), "h100-sxm", runtime="eager")
    serving = predict_graph(build("llama-2-7b", "prefill", seq=64, dtype="fp8", kernels="serving"), "h100-sxm",
                            runtime="serving")
    assert eager.bound == "host"
    assert serving.bound == "device" and serving.host_s < serving.device_s
    assert serving.host_dispatch_s == pytest.approx(ENGINE_DISPATCH_S) and serving.latency_s < eager.latency_s


def test_serving_kernels_fuse_qkv_gate_up_and_residual_norm_with_the_same_work() -> None:
    fused = build("llama-2-7b", "prefill", seq=128, num_layers=2)
    serving = build("llama-2-7b", "prefill", seq=128, num_layers=2, kernels="serving")
    names = {op.name for op in serving.ops}
    assert {"model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj",
            "model.layers.0.self_attn.rotary_kv_cache_write"} <= names
    assert "model.layers.0.self_attn.q_proj" not in names and "model.layers.0.attn_residual" not in names
    fused_norms = [op for op in serving.ops if op.attrs.get("fused_residual")]
    assert len(fused_norms) == 2 * 2 - 1 + 1   # every norm but the first one, the final norm included
    assert serving.launches < fused.launches
    # the same work, but the head: the engine's covers each sequence's last position only
    body = [sum(op.work.total_flops for op in graph.ops if op.name != "lm_head") for graph in (serving, fused)]
    assert body[0] == pytest.approx(body[1], rel=1e-3)
    assert serving.total_bytes < fused.total_bytes       # intermediates that no longer go through DRAM
    from pytest_charz.workloads.builders import graph_parameters

    assert graph_parameters(serving) == graph_parameters(fused)


@pytest.mark.parametrize("runtime", sorted(RUNTIME_PROFILES))
def test_predict_graph_and_the_simulator_give_one_answer_under_each_runtime(runtime: str) -> None:
    kernels = RUNTIME_PROFILES[runtime].kernels or "fused"
    graph = build("llama-2-7b", "decode", batch=4, context=256, dtype="fp8", kv_dtype="fp8", kernels=kernels)
    prefill = build("llama-2-7b", "prefill", batch=4, seq=64, dtype="fp8", kv_dtype="fp8", kernels=kernels,
                    num_layers=4)
    for one in (graph, prefill):
        predicted = predict_graph(one, "h100-sxm", runtime=runtime)
        simulated = simulate_graph(one, Machine.from_spec(resolve("h100-sxm")),
                                   with_runtime_profile(SimOptions(), runtime, one))
        assert simulated.latency_s == pytest.approx(predicted.latency_s, rel=1e-6)
        assert simulated.bound == predicted.bound


def test_a_vllm_step_is_its_forward_pass_plus_the_engine_host_work() -> None:
    # vLLM replays decode steps as CUDA graphs, issues a prefill op by op, and each step waits for
    # its engine's host work (Vidur's measured scheduler, sampler and input/output processing)
    decode = build("llama-2-7b", "decode", batch=8, context=256, kernels="serving")
    replayed = predict_graph(decode, "h100-sxm", runtime="graphs")
    vllm = predict_graph(decode, "h100-sxm", runtime="vllm")
    step_s = engine_step_s("vllm", 8, 1)
    assert 1.5e-3 < step_s < 2.5e-3
    assert vllm.latency_s == pytest.approx(replayed.latency_s + step_s, rel=1e-9)
    prefill = build("llama-2-7b", "prefill", batch=8, seq=32, kernels="serving")
    eager = predict_graph(prefill, "h100-sxm", runtime="eager")
    issued = predict_graph(prefill, "h100-sxm", runtime="vllm")
    assert issued.host_dispatch_s == pytest.approx(DEFAULT_HOST_DISPATCH_S)   # no graph: Python per op
    assert issued.latency_s == pytest.approx(eager.latency_s + step_s, rel=1e-9)


def test_the_engine_step_follows_the_measured_batch_and_degree() -> None:
    # Vidur's Llama-2-7B medians on an A100: 2.127 ms at batch 8 and 3.011 at 16 on one GPU, less
    # the 0.129 ms of the head's logits GEMM; below batch 8 the batch-8 figure; tp 8 takes tp 4's
    logits_ms = 32000 * 4096 * 2 / 2.039e12 * 1e3
    assert engine_step_s("vllm", 8, 1) == pytest.approx((2.127 - logits_ms) * 1e-3)
    assert engine_step_s("vllm", 12, 1) == pytest.approx(((2.127 + 3.011) / 2 - logits_ms) * 1e-3)
    assert engine_step_s("vllm", 1, 1) == engine_step_s("vllm", 8, 1)
    assert engine_step_s("vllm", 72, 1) == pytest.approx((8.048 + (8.048 - 7.149) - logits_ms) * 1e-3)
    assert engine_step_s("vllm", 8, 8) == engine_step_s("vllm", 8, 4) > engine_step_s("vllm", 8, 2)
    with pytest.raises(UsageError, match="engine 'sglang'"):
        engine_step_s("sglang", 8, 1)


def test_runtime_options_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(["workload", "predict", "llama-2-7b", "--target", "h100-sxm", "--phase", "prefill",
                       "--seq", "64", "--precision", "fp8", "--kv-dtype", "fp8", "--runtime", "serving"])
    out = capsys.readouterr().out
    assert status == 0 and "device-bound" in out and "qkv_proj" in out
    status = cli.main(["sim", "llama-2-7b", "--target", "h100-sxm", "--phase", "prefill", "--seq", "64",
                       "--precision", "fp8", "--runtime", "serving"])
    out = capsys.readouterr().out
    assert status == 0 and "device-bound" in out
    with pytest.raises(UsageError, match="runtime must be one of eager, graphs, serving, vllm; got 'jit'"):
        predict_graph(build("llama-2-7b", "decode", context=8, num_layers=1), "h100-sxm", runtime="jit")
    assert cli.main(["workload", "predict", "llama-2-7b", "--target", "h100-sxm", "--precision", "int3"]) != 0
    assert "--precision must be one of" in capsys.readouterr().err


def test_a_serving_prefill_computes_logits_for_each_sequence_last_position_only() -> None:
    # TensorRT-LLM and vLLM gather each sequence's last hidden state before the head: 4 prompts of
    # 512 tokens of Llama-2-7B multiply 4 rows by the 32000 x 4096 head, not 2048; transformers'
    # forward (the fused and eager graphs) computes every position's logits.
    serving = build("llama-2-7b", "prefill", batch=4, seq=512, num_layers=1, kernels="serving")
    fused = build("llama-2-7b", "prefill", batch=4, seq=512, num_layers=1)
    engine, forward = (next(op for op in graph.ops if op.name == "lm_head") for graph in (serving, fused))
    assert engine.attrs["logits_tokens"] == 4 and forward.attrs["logits_tokens"] == 4 * 512
    assert engine.work.total_flops == pytest.approx(2.0 * 4 * 32000 * 4096)
    assert forward.work.total_flops == pytest.approx(2.0 * 2048 * 32000 * 4096)
