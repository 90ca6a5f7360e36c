"""Workloads: real AI models (transformers classes with random weights) run end to end and op by op.

Each case builds a model from a packaged configuration (``pytest_charz.workloads.model_configs``)
at a size that fits the bound target: on the CPU two layers with the hidden sizes scaled down
(``SMALL``), on a GPU the published hidden sizes with two layers (all layers for the
``charz_slow`` cases). Weights are random (``torch.manual_seed`` from ``charz.rng``) and so are
the inputs (token ids, pixels), never zeros. Before anything is timed the forward is checked:

* prefill and encoders: against the same module in float64 (on a GPU in bf16: against float32);
* decode: the step's logits against the last-position logits of one forward over the context
  plus the new token (the KV cache must give what recomputing gives).

Then the case is captured as an aten-level graph (``pytest_charz.workloads.capture``), measured
end to end with the graph's FLOPs, bytes and launches as its Work (``name="end-to-end"``), and
its ops timed one by one: on the CPU each aten op replayed alone where it runs
(:func:`pytest_charz.workloads.optimer.time_ops`, ``shape["op_timer"] = "replay"``), on a GPU
under ``torch.profiler`` (device times, ``"profiler"``). Every timed aten op is matched to its
captured op by aten name and order, and the per-op table is recorded with the end-to-end case as
its ``ops`` (:class:`pytest_charz.records.OpTiming`: each captured op's name, class, aten source,
Work and time).
A decode step appends to the KV cache; each timed call crops the cache back to the context so
every step decodes at the same position (the crop is a few slicing ops, inside the timing).
"""
from __future__ import annotations

import contextlib
import copy
from typing import Any, Callable

import pytest

from pytest_charz import Work
from pytest_charz.records import OpTiming
from pytest_charz.workloads.optimer import match_ops

#: Profiled passes whose per-op median is recorded (after one dropped pass).
PROFILE_PASSES = 5
#: (model, phase, slow): the models in the quick run are small decoders and an encoder.
CASES = [("llama-2-7b", "prefill", False), ("llama-2-7b", "decode", False), ("bert-base", "forward", False),
         ("gpt2", "decode", True), ("mistral-7b", "decode", True), ("vit-b-16", "forward", True),
         ("mixtral-8x7b", "decode", True)]
#: Per family, config-class fields that shrink a model for a CPU run (its own field names).
SMALL: dict[str, dict[str, Any]] = {
    "llama": {"hidden_size": 128, "intermediate_size": 344, "num_attention_heads": 4, "num_key_value_heads": 4,
              "vocab_size": 512},
    "mistral": {"hidden_size": 128, "intermediate_size": 344, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 512},
    "mixtral": {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2},
    "gpt2": {"n_embd": 128, "n_inner": 512, "n_head": 4, "vocab_size": 512},
    "bert": {"hidden_size": 128, "intermediate_size": 512, "num_attention_heads": 4, "vocab_size": 512},
    "vit": {"hidden_size": 128, "intermediate_size": 512, "num_attention_heads": 4, "image_size": 64},
}
SMALL_LAYERS = 2
#: Tokens of a prefill (and of an encoder's input) and of a decode step's context.
CPU_SEQ, GPU_SEQ = 32, 512
#: Worst |difference| of the checked outputs, as a fraction of their largest magnitude.
TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    cases = [pytest.param((name, phase), id=f"{name}-{phase}", marks=[pytest.mark.charz_slow] if slow else [])
             for name, phase, slow in CASES]
    if "workload" in metafunc.fixturenames:
        metafunc.parametrize("workload", cases)
    if "sim_workload" in metafunc.fixturenames:
        from _sizes import not_this_backend, plan_for

        backend = plan_for(metafunc.config).backend
        metafunc.parametrize("sim_workload", cases if backend == "sim" else not_this_backend(
            f"the workload cases of a simulated device; the bound device is {backend} (see test_workload)"))


@pytest.fixture(scope="module")
def transformers_torch() -> Any:
    torch = pytest.importorskip("torch", reason="the workload suite runs models with PyTorch")
    pytest.importorskip("transformers", reason="the workload suite builds models with transformers "
                                               "(pip install 'pytest-charz[workloads]')")
    return torch


def _torch_device(device: Any) -> str:
    return "cpu" if device.backend == "cpu" else f"cuda:{getattr(device, 'index', 0)}"


def _model_dtype(torch: Any, device: Any) -> str:
    """fp32 on the CPU; bf16 on a GPU that supports it."""
    if device.backend != "cpu" and torch.cuda.is_bf16_supported():
        return "bf16"
    return "fp32"


def profile_aten_ops(torch: Any, fn: Callable[[], Any], on_gpu: bool,
                     passes: int = PROFILE_PASSES) -> list[tuple[str, float]]:
    """``fn`` under torch.profiler: (aten op name, seconds) in start order, outermost occurrences
    of each name only (``aten::to`` inside ``aten::to`` counts once); device time on a GPU, CPU
    time on the CPU. The first profiled pass pays the profiler's own start-up (on this CPU it
    made a 3.6 ms prefill's ops add up to 210 ms), so it is dropped, and each op's time is the
    median over the ``passes`` that follow (every pass issues the same ops in the same order)."""
    import statistics

    one_pass(torch, fn, on_gpu)
    runs = [one_pass(torch, fn, on_gpu) for _ in range(passes)]
    names = [name for name, _ in runs[0]]
    assert all([name for name, _ in run] == names for run in runs), "the profiled passes issued different ops"
    return [(name, statistics.median(run[i][1] for run in runs)) for i, name in enumerate(names)]


def one_pass(torch: Any, fn: Callable[[], Any], on_gpu: bool) -> list[tuple[str, float]]:
    """One call of ``fn`` under torch.profiler (see :func:`profile_aten_ops`)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        fn()
        if on_gpu:
            torch.cuda.synchronize()
    out = []
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        if not event.name.startswith("aten::"):
            continue
        parent, nested = event.cpu_parent, False
        while parent is not None:
            if parent.name == event.name:
                nested = True
                break
            parent = parent.cpu_parent
        if nested:
            continue
        micros = getattr(event, "device_time_total", 0.0) if on_gpu else event.cpu_time_total
        out.append((event.name, float(micros) * 1e-6))
    return out


def _check_close(actual: Any, reference: Any, dtype: str, what: str) -> None:
    actual, reference = actual.double().cpu(), reference.double().cpu()
    assert actual.shape == reference.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(reference.shape)}"
    scale = float(reference.abs().max())
    assert scale > 0, f"{what}: the reference output is all zeros"
    error = float((actual - reference).abs().max()) / scale
    assert error <= TOLERANCE[dtype], f"{what}: max error {error:.3g} of the largest output > {TOLERANCE[dtype]}"


def _cache_keyword(model: Any) -> str:
    """The forward's name for the KV cache: ``cache`` in newer transformers, ``past_key_values`` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _crop(cache: Any, tokens: int) -> None:
    """Drop what a decode step appended, so the cache holds ``tokens`` tokens again."""
    extra = int(cache.get_seq_length()) - tokens
    if extra > 0:
        cache.crop(-extra)
    assert int(cache.get_seq_length()) == tokens


def _restorer(torch: Any, cache: Any, tokens: int) -> Callable[[], None]:
    """What puts ``cache`` back as it is now, holding ``tokens`` tokens, after a decode step.

    Each layer's state is kept with its tensors contiguous, as a decoding loop's cache is (each
    step's ``cat`` writes a new contiguous tensor), and put back by reference. A crop instead
    leaves every layer a view of what the step appended, and the next step's ``cat`` of a view
    costs about twice that of a contiguous past: 3.2-3.5 against 1.6-1.8 us for a small model's
    KV append on a Zen 5 core. A cache without layers is cropped."""
    layers = getattr(cache, "layers", None)
    if not layers:
        return lambda: _crop(cache, tokens)
    states = [(layer, {name: value.contiguous() if torch.is_tensor(value) else value
                       for name, value in vars(layer).items()}) for layer in layers]

    def restore() -> None:
        for layer, state in states:
            layer.__dict__.update(state)

    restore()
    assert int(cache.get_seq_length()) == tokens
    return restore


def _graph_work(graph: Any, shape: dict[str, Any]) -> Work:
    levels: dict[str, float] = {}
    for op in graph.ops:
        for level, moved in op.work.bytes.items():
            levels[level] = levels.get(level, 0.0) + moved
    return Work(graph.flops_by_dtype(), levels, launches=graph.launches, op="workload", shape=shape)


@pytest.mark.charz(noise=0.025, max_time=1.0, quick={"max_time": 0.15})
def test_workload(charz: Any, device: Any, transformers_torch: Any, workload: tuple[str, str]) -> None:
    torch = transformers_torch
    from pytest_charz.workloads.capture import capture
    from pytest_charz.workloads.model_configs import instantiate, load_config

    name, phase = workload
    if device.backend == "sim":
        pytest.skip("a simulated device runs test_workload_sim, which times the op graph without a model")
    config = load_config(name)
    on_cpu = device.backend == "cpu"
    slow_gpu_case = not on_cpu and any(slow for n, p, slow in CASES if (n, p) == workload)
    layers = None if slow_gpu_case else SMALL_LAYERS
    overrides = SMALL.get(config.family, {}) if on_cpu else {}
    if on_cpu and config.family not in SMALL:
        pytest.skip(f"no small size for the {config.family} family on the CPU")
    dtype = _model_dtype(torch, device)
    where = _torch_device(device)
    seq = CPU_SEQ if on_cpu else GPU_SEQ
    torch.manual_seed(int(charz.rng.integers(2**31)))
    model = instantiate(config, dtype=dtype, device=where, num_layers=layers, overrides=overrides)
    generator = torch.Generator(device="cpu").manual_seed(int(charz.rng.integers(2**31)))
    vocab = int(model.config.vocab_size) if hasattr(model.config, "vocab_size") else 0
    ref_dtype = torch.float64 if dtype == "fp32" else torch.float32
    stream = device.on_stream() if hasattr(device, "on_stream") else contextlib.nullcontext()
    batch = 1

    with stream, torch.inference_mode():
        if config.family == "vit":
            size = int(model.config.image_size)
            inputs = {"pixel_values": torch.randn((batch, 3, size, size), generator=generator).to(where, model.dtype)}
        else:
            ids = torch.randint(1, vocab, (batch, seq + 1), generator=generator).to(where)
            inputs = {"input_ids": ids[:, :seq]}

        if phase == "decode":
            # The step decodes token `seq` after a context of `seq` tokens held in the KV cache.
            prefilled = model(input_ids=ids[:, :seq], use_cache=True)
            cache = getattr(prefilled, "cache", None) or prefilled.past_key_values
            step = {"input_ids": ids[:, seq:seq + 1], _cache_keyword(model): cache, "use_cache": True}
            logits = model(**step).logits[:, -1]
            _crop(cache, seq)
            full = model(input_ids=ids, use_cache=False).logits[:, -1]
            _check_close(logits, full, dtype, f"{name} decode step vs the full forward's last position")
            restore = _restorer(torch, cache, seq)

            def run() -> Any:
                out = model(**step)
                restore()
                return out
            graph = capture(model, name=name, phase="decode", params={"batch": batch, "context": seq, "seq": 1,
                                                                       "dtype": dtype}, **step)
            restore()
            _check_close(model(**step).logits[:, -1], full, dtype, f"{name} decode step on the restored cache")
            restore()
        else:
            if config.is_decoder:
                inputs["use_cache"] = False
            output = model(**inputs)
            reference = copy.deepcopy(model).to(ref_dtype)
            ref_inputs = {k: (v.to(ref_dtype) if torch.is_tensor(v) and v.is_floating_point() else v)
                          for k, v in inputs.items()}
            result_key = "logits" if config.is_decoder else "last_hidden_state"
            _check_close(getattr(output, result_key), getattr(reference(**ref_inputs), result_key), dtype,
                         f"{name} {phase} vs the same module in {str(ref_dtype).replace('torch.', '')}")
            del reference

            def run() -> Any:
                return model(**inputs)
            graph = capture(model, name=name, phase=phase, params={"batch": batch, "seq": seq, "dtype": dtype},
                            **inputs)

        run()
        if on_cpu:
            # each op replayed alone where it runs: no profiler cost, no module code in an op's time
            from pytest_charz.workloads.optimer import time_ops

            events, timer = time_ops(run, passes=PROFILE_PASSES), "replay"
        else:
            events, timer = profile_aten_ops(torch, run, on_gpu=True), "profiler"
        op_times, unmatched = match_ops(graph, events)
        assert op_times, f"no timed aten op matched the {len(graph)} captured ops of {name}"

        shape = {"model": name, "phase": phase, "batch": batch, "seq": seq, "dtype": dtype,
                 "layers": int(getattr(model.config, "num_hidden_layers", getattr(model.config, "n_layer", 0))),
                 "ops": len(graph), "ops_profiled": len(op_times), "ops_unmatched": unmatched, "op_timer": timer}
        work = _graph_work(graph, shape)
        if not on_cpu:
            torch.cuda.synchronize()
        timed = [OpTiming(op.name, op.op_class, op.source, op_times[op.name], op.work)
                 for op in graph.ops if op.name in op_times]
        charz.measure(run, work=work, name="end-to-end", ops=timed)


@pytest.mark.charz(noise=0.025, max_time=2.0, quick={"max_time": 0.5})
def test_workload_sim(charz: Any, sim_workload: tuple[str, str]) -> None:
    """The workload cases on a simulated device: the analytical graph of the published config at
    the GPU size of ``test_workload`` (two layers, all layers for the slow cases), timed op by op
    by the simulator (host dispatch, streams, memory shared by concurrent work)."""
    from _sizes import simulated_call

    from pytest_charz.sim.backend import GraphCall
    from pytest_charz.workloads.builders import build
    from pytest_charz.workloads.model_configs import load_config

    name, phase = sim_workload
    config = load_config(name)
    slow = any(slow for n, p, slow in CASES if (n, p) == sim_workload)
    layers = None if slow else SMALL_LAYERS
    tokens = {} if config.family == "vit" else ({"context": GPU_SEQ} if phase == "decode" else {"seq": GPU_SEQ})
    graph = build(config, phase, batch=1, num_layers=layers, **tokens)
    shape = {"model": name, "phase": phase, "batch": 1, "seq": GPU_SEQ, "dtype": config.default_dtype,
             "layers": layers or 0, "ops": len(graph), "builder": "fused"}
    charz.measure(GraphCall(simulated_call, graph), work=_graph_work(graph, shape), name="end-to-end")
