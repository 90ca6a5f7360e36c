"""Runtime overheads: what it costs to start work, as opposed to doing it.

CPU. ``dispatch``: one framework op on a one-element operand (``numpy.add`` and, when PyTorch is
installed, ``torch.add``), the fixed cost below which no op of that framework goes. ``wakeup``:
an empty OpenMP parallel region on every core (``kernels.cpu.fork_join``), the cost of waking a
team and joining it, paid by every parallel kernel call; with OMP_WAIT_POLICY unset the workers
spin a while between regions, so back-to-back regions measure a warm team.

GPU. ``launch``: the empty kernel (cuda: a raw CuPy kernel) launched back to back, in batches of
``LAUNCHES_PER_CALL`` (the time per launch is the launch throughput: whichever of the host's
submission and the device's execution is slower), and launched then waited for (launch plus
completion round trip). Graph replay: ``GRAPH_KERNELS`` kernels captured once in a
``torch.cuda.CUDAGraph`` and replayed, the per-kernel cost graphs leave; on cuda the captured
kernels are the empty kernel, and on cuda and rocm a second graph holds one-element PyTorch adds
(the same op as the GPU ``dispatch`` case, so the two compare). GPU times come from events on
the device's stream.
"""
from __future__ import annotations

from typing import Any

import math

import numpy as np
import pytest

from _sizes import not_this_backend, plan_for, simulated_call
from pytest_charz import Work

FORK_JOIN_REGIONS = 1000
LAUNCHES_PER_CALL = 100
GRAPH_KERNELS = 100
#: ``torch-scalar-add`` adds a Python scalar to an fp32 tensor (``x + 1.0`` in model code):
#: PyTorch wraps the scalar into a tensor and casts it on every call, which costs more than the
#: op's own dispatch (2.7 against 1.0 us on the Zen 4 guest).
#: ``torch-scalar-uncast-add`` adds a Python int to an int64 tensor (``position + 1`` in model
#: code): the number is wrapped as an int64, the op's own dtype, and not cast (1.03 us against 1.67
#: for an fp32 tensor plus a float, 0.66 for two tensors, on a Xeon core).
#: ``torch-broadcast-add`` adds two tensors of different shapes (``x * rsqrt(var)`` of a norm in
#: model code): the iterator computes the broadcast shape and strides on every call.
DISPATCH_KINDS = ("numpy-add", "torch-add", "torch-scalar-add", "torch-scalar-uncast-add", "torch-broadcast-add")
GPU_LAUNCH_KINDS = ("empty-kernel", "empty-kernel-sync", "graph-empty-kernel", "graph-torch-add", "torch-add")
#: The GPU launch cases whose Work a simulated device can time (a graph replay's Work is that
#: of its kernels launched one by one, which the simulator does not tell apart).
SIM_LAUNCH_KINDS = ("empty-kernel", "empty-kernel-sync", "torch-add")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    plan = plan_for(metafunc.config)
    if "dispatch_kind" in metafunc.fixturenames:
        cases = ([pytest.param(kind, id=kind) for kind in DISPATCH_KINDS] if plan.backend == "cpu"
                 else not_this_backend(f"host framework dispatch; the bound device is {plan.backend}, see test_launch_gpu"))
        metafunc.parametrize("dispatch_kind", cases)
    if "launch_kind" in metafunc.fixturenames:
        cases = ([pytest.param(kind, id=kind) for kind in GPU_LAUNCH_KINDS] if plan.backend in ("cuda", "rocm")
                 else not_this_backend(f"GPU kernel launches; the bound device is {plan.backend}"))
        metafunc.parametrize("launch_kind", cases)
    if "sim_launch_kind" in metafunc.fixturenames:
        cases = ([pytest.param(kind, id=kind) for kind in SIM_LAUNCH_KINDS] if plan.backend == "sim"
                 else not_this_backend(f"the launch cases of a simulated device; the bound device is {plan.backend}"))
        metafunc.parametrize("sim_launch_kind", cases)


# ---------------------------------------------------------------- CPU


@pytest.mark.charz(noise=0.02, max_time=0.5, quick={"max_time": 0.08})
def test_dispatch_cpu(charz: Any, device: Any, dispatch_kind: str) -> None:
    x, y = charz.rng.uniform(1.0, 2.0, 1), charz.rng.uniform(1.0, 2.0, 1)
    if dispatch_kind == "numpy-add":
        out = np.empty(1)

        def run() -> None:
            np.add(x, y, out=out)

        run()
        assert float(out[0]) == pytest.approx(float(x[0] + y[0]), rel=1e-15)
        charz.measure(run, work=Work(launches=1, op="dispatch", shape={"kind": dispatch_kind, "elements": 1}))
        return
    torch = pytest.importorskip("torch", reason="the torch-add dispatch case needs PyTorch")
    # Under inference mode, as the op-class, held-out and workload cases run their ops and as a
    # model serves: in grad mode every op also passes the autograd dispatch, which cost a bare add
    # 0.13 us and a scalar add 0.29 us more on a Xeon core (0.91 and 2.25 against 0.78 and 1.96),
    # and the held-out chain's 24 tiny ops (inference mode) read 6-20% under their prediction
    # As model code writes the op, `x + y`, its one-element output allocated per call (from the
    # allocator's cache): `torch.add(x, y, out=out)` passes the out= variant's checks, which model
    # code does not, and read 0.658 us on a Xeon core where the held-out chain's 64-float relus
    # took 0.65-0.68 us whole; its scalar form read 1.84 us where the chain's `x + 1.0` took 1.66-1.80
    with torch.inference_mode():
        tx, ty = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
        scalar = float(y[0])
        results: list[Any] = [None]
        if dispatch_kind == "torch-scalar-add":
            # on an fp32 tensor, as model code has them: the Python float is a double, so the
            # wrapped scalar is also cast (2.7 us here, against 1.7 us on an fp64 tensor)
            tx = tx.float()

            def run() -> None:
                results[0] = tx + scalar
        elif dispatch_kind == "torch-scalar-uncast-add":
            # integers drawn from the case's floats, so that the sum is exact
            tx, count = torch.tensor([int(x[0] * 1000)]), int(y[0] * 1000)
            expected = float(int(x[0] * 1000) + count)

            def run() -> None:
                results[0] = tx + count
        elif dispatch_kind == "torch-broadcast-add":
            # eight elements against one, as a norm scales its row by its moment
            tx = tx.expand(8).reshape(1, 1, 8).clone()
            ty = ty.reshape(1, 1, 1)

            def run() -> None:
                results[0] = tx + ty
        else:
            def run() -> None:
                results[0] = tx + ty

        run()
        exact = 1e-15 if dispatch_kind != "torch-scalar-add" else 1e-6
        if dispatch_kind != "torch-scalar-uncast-add":
            expected = float(x[0] + y[0])
        assert results[0].dtype == tx.dtype
        assert float(results[0].reshape(-1)[0]) == pytest.approx(expected, rel=exact)
        charz.measure(run, work=Work(launches=1, op="dispatch", shape={"kind": dispatch_kind, "elements": 1}))


#: Model code, as real models write it: small transformers models (random weights, built from
#: their config classes) of families the workload suite does not run, so that its models stay
#: held out, at the size the workload suite runs its models on a CPU (2 layers of width 128, FFN
#: 512, 4 heads, 32 tokens, a 512-token vocabulary: ``suites/test_workloads.py``'s ``SMALL``).
#: Each forward's time beyond its captured ops replayed alone (``replayed_s``, the views' replays
#: left out, as a workload's are) is what the forward costs beyond its ops' own times: the model
#: code (the views and Python between ops, and per
#: ``nn.Module`` call), and what its ops lose in the forward against their back-to-back replays.
#: The profile fits it per op and per call over the families (``dispatch:torch-module``,
#: ``dispatch:torch-module-call``). Per call because it follows the calls: on a Xeon guest, 11
#: families' forwards left 4.8-12.7 us per op beyond their replayed ops (a BERT of 33 ops and 45
#: calls the most) but 8.9-19.1 us per call. At the suite's size, not a tiny one: the same BERT of
#: 33 ops and 45 calls left 445 us at width 64 on 8 tokens and 679 us at width 128 on 32 (its
#: weights, 2.1 MiB, no longer in the L2 that holds a replayed op's). What the ops lose grows with
#: their work, so each family runs at two sizes (``MODULE_TOKENS``: a decode step's one token and
#: a prefill's 32), and the profile fits it as seconds per second of the ops' own time
#: (``dispatch:torch-module-cold``, :mod:`pytest_charz.models.model_code`). The capture counts the
#: forward's Python calls too (``python_calls``), fitted per call (``dispatch:torch-module-python``)
#: where every case counted them: the families differ in how much Python they run per op.
MODULE_FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "opt": ("OPTConfig", "OPTForCausalLM", {"hidden_size": 128, "ffn_dim": 512, "num_attention_heads": 4,
                                             "num_hidden_layers": 2, "word_embed_proj_dim": 128}),
    "gpt-neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {"hidden_size": 128, "intermediate_size": 512,
                                                         "num_attention_heads": 4, "num_hidden_layers": 2}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"hidden_size": 128, "intermediate_size": 512,
                                                   "num_attention_heads": 4, "num_key_value_heads": 2,
                                                   "num_hidden_layers": 2}),
    "phi": ("PhiConfig", "PhiForCausalLM", {"hidden_size": 128, "intermediate_size": 512, "num_attention_heads": 4,
                                             "num_hidden_layers": 2}),
    "falcon": ("FalconConfig", "FalconForCausalLM", {"hidden_size": 128, "num_attention_heads": 4,
                                                      "num_hidden_layers": 2}),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", {"n_embd": 128, "n_inner": 512, "n_head": 4, "n_layer": 2,
                                               "rotary_dim": 16}),
    "roberta": ("RobertaConfig", "RobertaModel", {"hidden_size": 128, "intermediate_size": 512,
                                                  "num_attention_heads": 4, "num_hidden_layers": 2}),
    "distilbert": ("DistilBertConfig", "DistilBertModel", {"dim": 128, "hidden_dim": 512, "n_heads": 4,
                                                           "n_layers": 2}),
}
MODULE_TOKENS, MODULE_VOCAB = (1, 32), 512
#: Replays of each op of the forward (:func:`pytest_charz.workloads.optimer.time_ops`).
MODULE_REPLAY_PASSES = 5


def _small_model(torch: Any, family: str) -> Any:
    transformers = pytest.importorskip("transformers", reason="the model-code dispatch cases need transformers")
    config_class, model_class, fields = MODULE_FAMILIES[family]
    config = getattr(transformers, config_class)(**fields, vocab_size=MODULE_VOCAB, bos_token_id=1, eos_token_id=2,
                                                  pad_token_id=0, attn_implementation="sdpa")
    return getattr(transformers, model_class)(config).eval()


@pytest.mark.parametrize("tokens", [pytest.param(t, id=f"{t}tok") for t in MODULE_TOKENS])
@pytest.mark.parametrize("family", list(MODULE_FAMILIES))
@pytest.mark.charz(noise=0.02, max_time=0.5, quick={"max_time": 0.08})
def test_module_dispatch_cpu(charz: Any, device: Any, family: str, tokens: int) -> None:
    """Host time of eager model code beyond its ops: a small model's forward timed whole, its ops
    (as a capture records them, views folded away) replayed alone (module comment above)."""
    if device.backend != "cpu":
        pytest.skip(f"eager module code on the host; the bound device is {device.backend}")
    torch = pytest.importorskip("torch", reason="the module dispatch case needs PyTorch")
    import copy

    from pytest_charz.models.model_code import module_calls, python_calls_of
    from pytest_charz.workloads.capture import capture
    from pytest_charz.workloads.optimer import match_ops, time_ops

    torch.manual_seed(int(charz.rng.integers(1 << 31)))
    model = _small_model(torch, family)
    generator = torch.Generator().manual_seed(int(charz.rng.integers(1 << 31)))
    inputs: dict[str, Any] = {"input_ids": torch.randint(3, MODULE_VOCAB, (1, tokens), generator=generator)}
    causal = type(model).__name__.endswith("ForCausalLM")
    if causal:
        inputs["use_cache"] = False
    result = "logits" if causal else "last_hidden_state"
    reference = copy.deepcopy(model).double()
    with torch.inference_mode():
        np.testing.assert_allclose(getattr(model(**inputs), result).numpy(),
                                   getattr(reference(**inputs), result).numpy(), rtol=1e-3, atol=1e-4)
        del reference
        graph = capture(model, **inputs)
        calls = sum(module_calls(op.work) or 0.0 for op in graph.ops)
        python_calls = sum(python_calls_of(op.work) or 0.0 for op in graph.ops)

        def run() -> None:
            model(**inputs)

        run()
        replayed = time_ops(run, passes=MODULE_REPLAY_PASSES)
        # the captured ops' replays only, as a workload's ops are matched: a view (no op of a
        # graph) is model code, which a graph's host pays per op
        matched, unmatched = match_ops(graph, replayed)
        assert not unmatched and matched, f"{family}: {unmatched} of {len(graph.ops)} captured ops not replayed"
        replayed_s = sum(matched.values())
        charz.measure(run, work=Work(launches=len(graph.ops), op="dispatch",
                                     shape={"kind": f"torch-module-{family}", "framework": "torch-module",
                                            "family": family, "tokens": tokens, "ops": len(graph.ops),
                                            "module_calls": calls, "python_calls": python_calls,
                                            "replayed_ops": len(replayed), "replayed_s": replayed_s}))


#: Elements of the fresh-page case's tensor: 40 MiB of fp32, above the size from which glibc's
#: malloc always maps fresh pages (``models.opclass.FRESH_OUTPUT_BYTES``, 32 MiB).
FRESH_ELEMENTS = 10 << 20
#: One element written per 4 KiB page of fp32: every page is touched once, and the writes are
#: 16384 cache lines, next to nothing beside the page faults.
FRESH_STRIDE = 1024


@pytest.mark.charz(noise=0.025, max_time=1.0, quick={"max_time": 0.2})
def test_fresh_pages_cpu(charz: Any, device: Any) -> None:
    """What a page a PyTorch tensor gets fresh from the operating system costs: a 40 MiB tensor
    allocated, one element written per page (each write faults the page in, which zeroes it),
    and freed (unmapped). An op whose output is that large pays it on every call;
    ``fresh-page:torch`` in the profile."""
    if device.backend != "cpu":
        pytest.skip(f"host allocations; the bound device is {device.backend}")
    torch = pytest.importorskip("torch", reason="the fresh-page case needs PyTorch")
    value = float(charz.rng.uniform(1.0, 2.0))
    probe = torch.empty(FRESH_ELEMENTS)
    probe[::FRESH_STRIDE].fill_(value)
    assert probe[::FRESH_STRIDE].eq(value).all() and probe[FRESH_STRIDE * 7] == value
    del probe
    pages = FRESH_ELEMENTS * 4 // 4096

    def run() -> None:
        torch.empty(FRESH_ELEMENTS)[::FRESH_STRIDE].fill_(value)

    charz.measure(run, work=Work(op="allocation", shape={"kind": "torch-fresh-pages", "framework": "torch",
                                                         "pages": pages, "bytes_allocated": FRESH_ELEMENTS * 4}))


@pytest.mark.charz(noise=0.02, max_time=0.5, quick={"max_time": 0.08})
def test_fork_join_cpu(charz: Any, device: Any, size_plan: Any) -> None:
    if device.backend != "cpu":
        pytest.skip(f"OpenMP fork/join on the host; the bound device is {device.backend}")
    from pytest_charz.kernels import cpu

    threads = size_plan.threads
    if threads < 2:
        pytest.skip("this process may run on one CPU only: there is no team to wake")
    if not cpu.kernel_build().openmp:
        pytest.skip("the CPU kernels were built without OpenMP (the compiler rejected -fopenmp)")
    assert cpu.fork_join(FORK_JOIN_REGIONS, threads=threads) == FORK_JOIN_REGIONS
    work = Work(launches=FORK_JOIN_REGIONS, op="wakeup",
                shape={"kind": "openmp-fork-join", "threads": threads, "regions": FORK_JOIN_REGIONS})
    charz.measure(lambda: cpu.fork_join(FORK_JOIN_REGIONS, threads=threads), work=work)


# ---------------------------------------------------------------- GPU


def _capture_graph(torch: Any, torch_device: Any, body: Any) -> Any:
    """A ``torch.cuda.CUDAGraph`` of what ``body(stream)`` launches on a capture stream."""
    stream = torch.cuda.Stream(device=torch_device)
    stream.wait_stream(torch.cuda.current_stream(torch_device))
    with torch.cuda.stream(stream):
        body(stream)                  # warm-up outside capture, as PyTorch asks
    torch.cuda.current_stream(torch_device).wait_stream(stream)
    torch.cuda.synchronize(torch_device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        body(stream)
    torch.cuda.synchronize(torch_device)
    return graph


@pytest.mark.charz(noise=0.02, max_time=0.5, quick={"max_time": 0.08})
def test_launch_gpu(charz: Any, device: Any, gpu_torch: Any, torch_device: Any, launch_kind: str) -> None:
    torch = gpu_torch
    raw = launch_kind in ("empty-kernel", "empty-kernel-sync", "graph-empty-kernel")
    if raw and device.backend != "cuda":
        pytest.skip(f"the empty kernel is a CuPy raw kernel of the cuda backend; the bound device is {device.backend}")
    kernels: Any = device.kernels() if raw else None
    start = float(charz.rng.uniform(1.0, 2.0))
    with device.on_stream():
        counter = torch.full((1,), start, dtype=torch.float64, device=torch_device)
    device.synchronize()

    if launch_kind == "empty-kernel":
        launches, op = LAUNCHES_PER_CALL, "launch"

        def run() -> None:
            for _ in range(LAUNCHES_PER_CALL):
                kernels.empty()
    elif launch_kind == "empty-kernel-sync":
        launches, op = 1, "launch"

        def run() -> None:
            kernels.empty()
            device.stream.synchronize()
    elif launch_kind == "graph-empty-kernel":
        import cupy as cp

        launches, op = GRAPH_KERNELS, "launch"

        def launch_empties(stream: Any) -> None:
            with cp.cuda.ExternalStream(stream.cuda_stream, device.index):
                for _ in range(GRAPH_KERNELS):
                    kernels.empty()

        try:
            graph = _capture_graph(torch, torch_device, launch_empties)
        except Exception as exc:  # capture of another library's launches is not supported here
            pytest.skip(f"capturing CuPy kernel launches in a torch.cuda.CUDAGraph failed: {exc}")
        run = graph.replay
    elif launch_kind == "graph-torch-add":
        launches, op = GRAPH_KERNELS, "launch"

        def add_ones(stream: Any) -> None:
            for _ in range(GRAPH_KERNELS):
                counter.add_(1.0)

        graph = _capture_graph(torch, torch_device, add_ones)
        counter.fill_(start)
        graph.replay()
        torch.cuda.synchronize(torch_device)
        assert float(counter.item()) == pytest.approx(start + GRAPH_KERNELS, rel=1e-15)
        run = graph.replay
    else:  # torch-add: one PyTorch op, dispatched and launched
        launches, op = 1, "dispatch"

        def run() -> None:
            counter.add_(1.0)

        with device.on_stream():
            counter.fill_(start)            # on the device's stream, ordered before the add
            run()
        device.synchronize()
        assert float(counter.item()) == pytest.approx(start + 1.0, rel=1e-15)
    if raw:
        with device.on_stream():
            run()
        device.synchronize()          # the launches complete without error before timing
    work = Work(launches=launches, op=op, shape={"kind": launch_kind, "kernels_per_call": launches})
    charz.measure(run, work=work)


@pytest.mark.charz(noise=0.02, max_time=0.5, quick={"max_time": 0.08})
def test_launch_sim(charz: Any, sim_launch_kind: str) -> None:
    """The GPU launch cases on a simulated device: the Work of ``test_launch_gpu``."""
    launches, op = {"empty-kernel": (LAUNCHES_PER_CALL, "launch"), "empty-kernel-sync": (1, "launch"),
                    "torch-add": (1, "dispatch")}[sim_launch_kind]
    work = Work(launches=launches, op=op, shape={"kind": sim_launch_kind, "kernels_per_call": launches})
    charz.measure(simulated_call, work=work)
