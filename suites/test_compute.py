"""Compute: FMA-chain peak per dtype, and the vendor GEMM over sizes and dtypes.

FMA. Independent chains of ``acc = acc * a + b`` keep every FMA pipe busy with no memory
traffic; an FMA counts two FLOPs. On the CPU, the C kernels of ``kernels/cpu.py`` (every SIMD
lane of every chain, on all threads and on one); on a CUDA GPU, the raw kernels of
``kernels/gpu_kernels.cu`` over a grid that fills every SM (fp16 as packed ``__hfma2`` pairs).
The profile compares the best rate per dtype with the target's vector (non-matrix) peak.

GEMM. NumPy's BLAS on the CPU (fp64, fp32) and PyTorch's bf16 matmul when PyTorch is
installed; ``torch.matmul`` on a GPU for fp64, fp32 (TF32 off), tf32 (TF32 on), bf16, fp16, and
fp8 through ``torch._scaled_mm`` (e4m3 inputs, bf16 output) on CUDA devices of compute
capability 8.9 or newer. FLOPs: ``2 m n k``. Bytes: the compulsory traffic, A and B read once
and C written once; real traffic is higher when the operands exceed the caches.

Every case first checks its kernel against a reference on fresh random inputs: sampled GEMM
rows against a float64 product of the same (already rounded) inputs, within a bound
proportional to ``|A| |B|``; FMA checksums against the closed form of the recurrence.

Host GEMM sizes follow what the CPU does. Without native bf16 (the host spec derives no bf16
peak: no avx512_bf16 or AMX), PyTorch's bf16 matmul converts every product and runs orders of
magnitude below the fp32 GEMM (a 2048-cubed call took 48 s on a Zen 3 guest): the bf16 sizes are
then chosen at collection from the bf16 rate measured here on one small GEMM, so that one call
stays within ``GEMM_CALL_FRACTION`` of the case's budget; larger sizes are collected as skipped,
saying why. Any case whose one call still runs over its budget is skipped by the sampler, with
the cause added when the host spec tells it.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from _sizes import count_for_duration, not_this_backend, plan_for, simulated_call
from pytest_charz import Work

#: FMA calls last about this long: OpenMP fork/join and launch costs stay far below 1%.
FMA_CALL_S = 2e-3
GEMM_CHECK_ROWS = 8
#: Error bound of a GEMM entry, as a fraction of sum_k |a_ik| |b_kj|: about twice the unit
#: roundoff of the format that rounds (tf32 inputs; bf16, fp16 outputs and reduced-precision
#: split-K partial sums; fp8's bf16 output), far tighter than a wrong, zero or transposed result.
GEMM_TOLERANCE = {"fp64": 1e-12, "fp32": 1e-5, "tf32": 4e-3, "bf16": 8e-3, "fp16": 2e-3, "fp8": 8e-3}

#: (library, dtype, n, slow); n >= GEMM_LARGE_N get GEMM_LARGE_MAX_TIME_S, the rest GEMM_MAX_TIME_S.
CPU_GEMM = [("numpy", "fp64", 64, True), ("numpy", "fp64", 256, False), ("numpy", "fp64", 1024, False),
            ("numpy", "fp64", 2048, True), ("numpy", "fp32", 64, True), ("numpy", "fp32", 256, False),
            ("numpy", "fp32", 1024, False), ("numpy", "fp32", 2048, True),
            ("torch", "bf16", 256, True), ("torch", "bf16", 1024, False), ("torch", "bf16", 2048, True)]
GEMM_MAX_TIME_S = 1.0
GEMM_LARGE_N = 2048
GEMM_LARGE_MAX_TIME_S = 2.0
#: Without native bf16 a host bf16 size is collected when one call, at the rate measured here,
#: takes at most this fraction of its budget (warm-up, sizing and a CI's samples fit).
GEMM_CALL_FRACTION = 1 / 20
#: The size of the bf16 GEMM timed at collection on a CPU without native bf16 (a few ms there).
BF16_PROBE_N = 256
GPU_GEMM_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
GPU_GEMM_SIZES = ((512, True), (1024, False), (2048, True), (4096, False), (8192, True))
GPU_FMA_DTYPES = ("fp64", "fp32", "fp16")
#: Iterations of one GPU FMA launch: about a millisecond on a large GPU.
GPU_FMA_ITERS = 16384


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    plan = plan_for(metafunc.config)
    names = metafunc.fixturenames
    if "cpu_fma" in names:
        if plan.backend == "cpu":
            cases = [pytest.param((dtype, threads), id=f"{dtype}-threads{threads}")
                     for dtype in ("fp64", "fp32") for threads in sorted({plan.threads, 1}, reverse=True)]
        else:
            cases = not_this_backend("the CPU FMA kernels run on the host; test_fma_gpu covers GPUs")
        metafunc.parametrize("cpu_fma", cases)
    if "cpu_gemm" in names:
        if plan.backend == "cpu":
            from pytest_charz.session import session_for

            binding = session_for(metafunc.config).bind()
            cases = cpu_gemm_params(host_gemm_limits(binding.spec, binding.device))
        else:
            cases = not_this_backend("the host GEMM (NumPy, PyTorch CPU); test_gemm_gpu covers GPUs")
        metafunc.parametrize("cpu_gemm", cases)
    if "gpu_fma_dtype" in names:
        if plan.backend == "cuda":
            cases = [pytest.param(dtype, id=dtype) for dtype in GPU_FMA_DTYPES]
        else:
            cases = not_this_backend(f"the GPU FMA kernels are CuPy raw kernels of the cuda backend; "
                                     f"the bound device is {plan.backend}")
        metafunc.parametrize("gpu_fma_dtype", cases)
    if "gpu_gemm" in names:
        if plan.backend in ("cuda", "rocm"):
            cases = [pytest.param((dtype, n), id=f"{dtype}-{n}", marks=[pytest.mark.charz_slow] if slow else [])
                     for dtype in GPU_GEMM_DTYPES for n, slow in GPU_GEMM_SIZES]
        else:
            cases = not_this_backend(f"a GPU GEMM; the bound device is {plan.backend}")
        metafunc.parametrize("gpu_gemm", cases)
    if "sim_gemm" in names:
        if plan.backend == "sim":
            cases = [pytest.param((dtype, n), id=f"{dtype}-{n}", marks=[pytest.mark.charz_slow] if slow else [])
                     for dtype in GPU_GEMM_DTYPES for n, slow in GPU_GEMM_SIZES]
        else:
            cases = not_this_backend(f"the GEMM cases of a simulated device; the bound device is {plan.backend}")
        metafunc.parametrize("sim_gemm", cases)


def gemm_budget_s(n: int) -> float:
    """The budget of a host GEMM case of size ``n``, in seconds."""
    return GEMM_LARGE_MAX_TIME_S if n >= GEMM_LARGE_N else GEMM_MAX_TIME_S


def no_native_bf16(spec: Any) -> str | None:
    """Why bf16 runs emulated on this target, or None when its spec states a bf16 peak."""
    if spec.peak("bf16") is not None:
        return None
    return "no native bf16 on this CPU (its flags give no avx512_bf16 or AMX bf16)"


def predicted_bf16_call_s(n: int, probe_rate_flop_per_s: float) -> float:
    """Seconds of one emulated bf16 GEMM of size ``n`` from the rate of the ``BF16_PROBE_N``
    probe: the emulated rate falls as the operands leave the caches (on a Zen 3 guest 1.3
    GFLOP/s at 256, 0.9 at 1024, 0.36 at 2048), so larger sizes get a sqrt(n / 256) penalty."""
    return 2.0 * n**3 / probe_rate_flop_per_s * max(1.0, (n / BF16_PROBE_N) ** 0.5)


def cpu_gemm_params(skips: dict[tuple[str, int], str]) -> list[Any]:
    """The host GEMM cases; ``skips`` maps (dtype, n) to why that size is not run here. When a
    sweep loses every size a quick run keeps, its largest remaining size joins quick runs."""
    kept = [(library, dtype, n, slow) for library, dtype, n, slow in CPU_GEMM if (dtype, n) not in skips]
    quick_dtypes = {dtype for _, dtype, _, slow in kept if not slow}
    largest = {dtype: max(n for _, d, n, _ in kept if d == dtype) for _, dtype, _, _ in kept}
    params = []
    for library, dtype, n, slow in CPU_GEMM:
        reason = skips.get((dtype, n))
        slow = slow and not (dtype not in quick_dtypes and largest.get(dtype) == n)
        marks: list[Any] = [pytest.mark.charz(max_time=gemm_budget_s(n))]
        if slow:
            marks.append(pytest.mark.charz_slow)
        if reason:
            marks.append(pytest.mark.skip(reason=reason))
        params.append(pytest.param((library, dtype, n), id=f"{library}-{dtype}-{n}", marks=marks))
    return params


def host_gemm_limits(spec: Any, device: Any) -> dict[tuple[str, int], str]:
    """(dtype, n) -> why that host GEMM size is not collected to run on ``device`` (of target
    ``spec``): on a CPU without native bf16, the bf16 sizes whose one call, at the bf16 rate
    measured here, exceeds ``GEMM_CALL_FRACTION`` of their budget. Empty with native bf16 or
    without PyTorch."""
    cause = no_native_bf16(spec)
    if cause is None:
        return {}
    rate = bf16_probe_rate(device)
    if rate is None:
        return {}
    skips = {}
    for _, dtype, n, _ in CPU_GEMM:
        if dtype != "bf16":
            continue
        call_s = predicted_bf16_call_s(n, rate)
        budget_s = gemm_budget_s(n)
        if call_s > GEMM_CALL_FRACTION * budget_s:
            skips[(dtype, n)] = (f"one call about {call_s:.2g} s (bf16 GEMM rate measured here {rate / 1e9:.3g} GFLOP/s"
                                 f" at {BF16_PROBE_N}-cubed): over 1/{round(1 / GEMM_CALL_FRACTION)} of the"
                                 f" {budget_s:g} s budget; {cause}")
    return skips


def bf16_probe_rate(device: Any) -> float | None:
    """FLOP/s of one ``BF16_PROBE_N``-cubed bf16 ``torch.matmul`` on the host (best of two
    after a first call), timed by the bound device; None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    from _sizes import set_torch_threads

    set_torch_threads(torch)
    n = BF16_PROBE_N
    a = torch.full((n, n), 1.0, dtype=torch.bfloat16)
    b = torch.full((n, n), 0.5, dtype=torch.bfloat16)
    c = torch.empty((n, n), dtype=torch.bfloat16)
    work = Work(flops=2.0 * n**3, dtype="bf16", op="gemm")
    device.time_batch(lambda: torch.matmul(a, b, out=c), 1, work)
    best_s = min(device.time_batch(lambda: torch.matmul(a, b, out=c), 1, work) for _ in range(2))
    return 2.0 * n**3 / best_s if best_s > 0 else None


# ---------------------------------------------------------------- FMA peak, CPU


@pytest.mark.charz(noise=0.01, max_time=1.0, quick={"max_time": 0.08})
def test_fma_cpu(charz: Any, device: Any, cpu_fma: tuple[str, int]) -> None:
    from pytest_charz.kernels import cpu

    dtype, threads = cpu_fma
    init, a, b = cpu.fma_inputs(dtype, seed=int(charz.rng.integers(2**63)))
    tolerance = 1e-9 if dtype == "fp64" else 1e-3
    check_iters = 1000
    assert cpu.fma_chains(init, a, b, check_iters, threads=threads) == pytest.approx(
        cpu.fma_reference(init, a, b, check_iters, threads), rel=tolerance)

    iters = count_for_duration(
        lambda count: device.time_batch(lambda: cpu.fma_chains(init, a, b, count, threads=threads), 1,
                                        Work(flops=cpu.fma_flops(dtype, count, threads), dtype=dtype, op="fma")),
        start_count=10_000, target_s=FMA_CALL_S, max_count=2**40)
    checksum = [0.0]

    def run() -> None:
        checksum[0] = cpu.fma_chains(init, a, b, iters, threads=threads)

    work = Work(flops=cpu.fma_flops(dtype, iters, threads), dtype=dtype, op="fma",
                shape={"threads": threads, "chains": cpu.kernel_build().fma_chains,
                       "accumulators": cpu.fma_accumulators(dtype), "iters": iters})
    charz.measure(run, work=work)
    # The measured calls did the whole recurrence: their checksum is the closed form's.
    assert checksum[0] == pytest.approx(cpu.fma_reference(init, a, b, iters, threads), rel=tolerance)


# ---------------------------------------------------------------- FMA peak, GPU


def gpu_fma_reference(dtype: str, threads: int, iters: int, mul: float, add: float) -> np.ndarray:
    """What each thread of the GPU FMA kernel stores: its chains, seeded with
    ``((tid + c) & 1023) * 1e-3``, iterated ``acc = fma(acc, mul, add)`` and summed in order.

    fp64 and fp32 use the closed form in float64; fp16 replays the packed half-precision
    arithmetic step by step (products of halves are exact in float64, so one rounding per
    FMA as ``__hfma2`` does). Returns one value per thread (fp16: the value of both halves).
    """
    from pytest_charz.kernels.gpu import fma_chains

    chains = fma_chains()
    tid = np.arange(threads, dtype=np.int64)[:, None]
    seeds = ((tid + np.arange(chains)[None, :]) & 1023).astype(np.float64)
    if dtype == "fp16":
        # The kernel takes mul and add as float and rounds them to half once.
        m, a = np.float64(np.float16(np.float32(mul))), np.float64(np.float16(np.float32(add)))
        acc = (seeds.astype(np.float32) * np.float32(1e-3)).astype(np.float16)
        for _ in range(iters):
            acc = (acc.astype(np.float64) * m + a).astype(np.float16)
        total = acc[:, 0]
        for c in range(1, chains):
            total = (total.astype(np.float64) + acc[:, c].astype(np.float64)).astype(np.float16)
        return total.astype(np.float64)
    m_x: float
    a_x: float
    if dtype == "fp32":
        x0 = (seeds.astype(np.float32) * np.float32(1e-3)).astype(np.float64)
        m_x, a_x = float(np.float32(mul)), float(np.float32(add))
    else:
        x0, m_x, a_x = seeds * 1e-3, float(mul), float(add)
    fixed = a_x / (1.0 - m_x)
    final = m_x**iters * (x0 - fixed) + fixed
    return final.sum(axis=1)  # type: ignore[no-any-return]


@pytest.mark.charz(noise=0.01, max_time=1.0, quick={"max_time": 0.08})
def test_fma_gpu(charz: Any, device: Any, gpu_kernels: Any, gpu_fma_dtype: str) -> None:
    import cupy as cp

    from pytest_charz.kernels.gpu import DEFAULT_THREADS_PER_BLOCK, FMA_ADD, FMA_MUL, fma_chains, fma_flops

    dtype = gpu_fma_dtype
    storage = {"fp64": cp.float64, "fp32": cp.float32, "fp16": cp.float16}[dtype]
    lanes = 2 if dtype == "fp16" else 1
    # The check: a small grid stores every thread's result, compared with the host's replay.
    # Operands are drawn fresh per case, inside the range that keeps every chain bounded.
    mul = float(charz.rng.uniform(0.99, 0.999))
    add = float(charz.rng.uniform(0.001, 0.01))
    check_blocks, check_iters = 2, 1000
    check_threads = check_blocks * DEFAULT_THREADS_PER_BLOCK
    with device.on_stream():
        out = cp.full(check_threads * lanes, np.nan, dtype=storage)
        gpu_kernels.fma(out, dtype, check_iters, check_blocks, store=True, mul=mul, add=add)
        stored = cp.asnumpy(out).astype(np.float64)
    expected = np.repeat(gpu_fma_reference(dtype, check_threads, check_iters, mul, add), lanes)
    tolerance = {"fp64": 1e-9, "fp32": 1e-3, "fp16": 1e-2}[dtype]
    np.testing.assert_allclose(stored, expected, rtol=tolerance)

    blocks = gpu_kernels.grid(dtype, device.sm_count)
    with device.on_stream():
        sink = cp.empty(blocks * DEFAULT_THREADS_PER_BLOCK * lanes, dtype=storage)
    device.synchronize()

    def run() -> None:
        # store=False: the result is not written back, and the runtime flag keeps the work.
        gpu_kernels.fma(sink, dtype, GPU_FMA_ITERS, blocks, mul=FMA_MUL, add=FMA_ADD)

    threads = blocks * DEFAULT_THREADS_PER_BLOCK
    work = Work(flops=fma_flops(dtype, threads, GPU_FMA_ITERS), dtype=dtype, launches=1, op="fma",
                shape={"threads": threads, "chains": fma_chains(), "blocks": blocks,
                       "threads_per_block": DEFAULT_THREADS_PER_BLOCK, "iters": GPU_FMA_ITERS})
    charz.measure(run, work=work)


# ---------------------------------------------------------------- GEMM, CPU


def check_gemm_rows(a: np.ndarray, b: np.ndarray, c: np.ndarray, rows: np.ndarray, tolerance: float) -> None:
    """Rows ``rows`` of ``c`` against a float64 product of the same inputs, entry by entry within
    ``tolerance * (|a| |b|)`` (the standard error bound of a dot product)."""
    a64, b64 = a[rows].astype(np.float64), b.astype(np.float64)
    expected = a64 @ b64
    bound = np.abs(a64) @ np.abs(b64)
    error = np.abs(c[rows].astype(np.float64) - expected)
    worst = int(np.argmax(error - tolerance * bound))
    assert np.all(error <= tolerance * bound + 1e-300), (
        f"GEMM row check failed: |error| {error.flat[worst]:.3g} > {tolerance:g} x {bound.flat[worst]:.3g}")


def gemm_backend(library: str) -> dict[str, Any]:
    """What runs a host GEMM (``docs/run-format.md``): ``blas`` (library and version), ``blas_core``
    (the kernel core type: OpenBLAS's ``architecture``, PyTorch's CPU capability), ``blas_threads``
    and ``blas_vector_bits`` (the kernels' SIMD width, None when the core type does not say)."""
    if library == "torch":
        import torch

        capability = str(torch.backends.cpu.get_cpu_capability())
        bits = {"AVX512": 512, "AVX2": 256, "DEFAULT": 128}.get(capability.split("_")[0].upper())
        return {"blas": f"torch {torch.__version__} (oneDNN)", "blas_core": capability,
                "blas_threads": torch.get_num_threads(), "blas_vector_bits": bits}
    from pytest_charz.measure.provenance import blas_info

    pools = blas_info()
    if not pools:
        return {"blas": None, "blas_core": None, "blas_threads": None, "blas_vector_bits": None}
    pool = pools[0]          # numpy's (the first BLAS loaded: numpy is imported before anything else)
    return {"blas": f"{pool['internal_api']} {pool['version']}", "blas_core": pool["architecture"],
            "blas_threads": pool["num_threads"], "blas_vector_bits": pool["vector_bits"]}


@pytest.mark.charz(noise=0.02, quick={"max_time": 0.08})      # budgets per parameter
def test_gemm_cpu(charz: Any, device: Any, cpu_gemm: tuple[str, str, int]) -> None:
    library, dtype, n = cpu_gemm
    rows = charz.rng.choice(n, size=min(GEMM_CHECK_ROWS, n), replace=False)
    a64 = charz.rng.standard_normal((n, n))
    b64 = charz.rng.standard_normal((n, n))
    if library == "numpy":
        numpy_dtype = {"fp64": np.float64, "fp32": np.float32}[dtype]
        a, b = a64.astype(numpy_dtype), b64.astype(numpy_dtype)
        c = np.empty((n, n), dtype=numpy_dtype)
        np.matmul(a, b, out=c)
        check_gemm_rows(a, b, c, rows, GEMM_TOLERANCE[dtype])
        itemsize = c.itemsize

        def run() -> None:
            np.matmul(a, b, out=c)
    else:
        torch = pytest.importorskip("torch", reason="the bf16 host GEMM runs through PyTorch")
        ta = torch.from_numpy(a64).to(torch.bfloat16)
        tb = torch.from_numpy(b64).to(torch.bfloat16)
        tc = torch.empty((n, n), dtype=torch.bfloat16)
        torch.matmul(ta, tb, out=tc)
        check_gemm_rows(ta.double().numpy(), tb.double().numpy(), tc.double().numpy(), rows,
                        GEMM_TOLERANCE[dtype])
        itemsize = 2

        def run() -> None:
            torch.matmul(ta, tb, out=tc)

    work = Work(flops=2.0 * n**3, bytes=3.0 * n * n * itemsize, dtype=dtype, op="gemm",
                shape={"m": n, "n": n, "k": n, "library": library, **gemm_backend(library)})
    from pytest_charz.measure.sampler import OverBudget

    try:
        charz.measure(run, work=work)
    except OverBudget as exc:
        cause = no_native_bf16(charz.target) if dtype == "bf16" else None
        pytest.skip(f"{exc}; {cause}" if cause else str(exc))


# ---------------------------------------------------------------- GEMM, GPU


def _gpu_gemm_operands(torch: Any, torch_device: Any, dtype: str, n: int,
                       rng: np.random.Generator) -> tuple[Any, Any, Any, Any]:
    """Random operands on the GPU, a function returning the latest output, and the product
    function of ``dtype`` (the timed call: one GEMM, its output kept)."""
    a32 = torch.from_numpy(rng.standard_normal((n, n), dtype=np.float32)).to(torch_device)
    b32 = torch.from_numpy(rng.standard_normal((n, n), dtype=np.float32)).to(torch_device)
    if dtype == "fp8":
        e4m3 = torch.float8_e4m3fn
        a = a32.to(e4m3)
        b = b32.t().contiguous().to(e4m3).t()   # column-major, as the fp8 kernels want B
        one = torch.ones((), dtype=torch.float32, device=torch_device)
        latest: list[Any] = []

        def scaled_product() -> Any:
            result = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            latest[:] = [result[0] if isinstance(result, tuple) else result]   # older PyTorch: (out, amax)
            return latest[0]
        return a, b, lambda: latest[0], scaled_product
    torch_dtype = {"fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32,
                   "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a, b = a32.to(torch_dtype), b32.to(torch_dtype)
    c = torch.empty((n, n), dtype=torch_dtype, device=torch_device)

    def product() -> Any:
        return torch.matmul(a, b, out=c)
    return a, b, lambda: c, product


def _widen(torch: Any, tensor: Any) -> Any:
    """``tensor`` in float64; fp8 through float32 (fp8 tensors convert, but support few other ops)."""
    if tensor.dtype.itemsize == 1:
        tensor = tensor.float()
    return tensor.double()


def gpu_gemm_excess(torch: Any, a: Any, b: Any, c: Any, rows: np.ndarray, dtype: str) -> float:
    """How far the sampled ``rows`` of ``c`` stray from the float64 product of the (already
    rounded) operands beyond ``GEMM_TOLERANCE[dtype]`` times ``|A| |B|``: <= 0 when they pass."""
    picked = torch.from_numpy(rows).to(a.device)
    a_rows = _widen(torch, a)[picked]
    b64 = _widen(torch, b)
    expected = a_rows @ b64
    bound = a_rows.abs() @ b64.abs()
    error = (_widen(torch, c)[picked] - expected).abs()
    return float((error - GEMM_TOLERANCE[dtype] * bound).max().item())


def _gpu_gemm_skip_reason(torch: Any, device: Any, dtype: str) -> str | None:
    if dtype == "tf32" and device.backend != "cuda":
        return "tf32 is switched through torch.backends.cuda.matmul.allow_tf32, an NVIDIA path"
    if dtype == "fp8":
        if device.backend != "cuda":
            return "the fp8 case uses torch._scaled_mm with e4m3fn inputs, a CUDA path"
        if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            return f"PyTorch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn"
        capability = torch.cuda.get_device_capability(device.index)
        if tuple(capability) < (8, 9):
            return f"fp8 GEMM needs compute capability 8.9 or newer; this GPU is {capability[0]}.{capability[1]}"
    return None


@pytest.mark.charz(noise=0.02, max_time=1.0, quick={"max_time": 0.08})
def test_gemm_gpu(charz: Any, device: Any, gpu_torch: Any, torch_device: Any, gpu_gemm: tuple[str, int]) -> None:
    torch = gpu_torch
    dtype, n = gpu_gemm
    reason = _gpu_gemm_skip_reason(torch, device, dtype)
    if reason:
        pytest.skip(reason)
    matmul_flags = torch.backends.cuda.matmul
    tf32_before = matmul_flags.allow_tf32
    matmul_flags.allow_tf32 = dtype == "tf32"
    try:
        with device.on_stream():
            a, b, output, product = _gpu_gemm_operands(torch, torch_device, dtype, n, charz.rng)
            product()
            rows = charz.rng.choice(n, size=GEMM_CHECK_ROWS, replace=False)
            excess = gpu_gemm_excess(torch, a, b, output(), rows, dtype)
        device.synchronize()
        assert excess <= 0.0, f"{dtype} GEMM row check failed: error exceeds the bound by {excess:.3g}"
        charz.measure(product, work=gpu_gemm_work(dtype, n))
    finally:
        matmul_flags.allow_tf32 = tf32_before


def gpu_gemm_work(dtype: str, n: int) -> Work:
    """One ``n``-cubed GEMM of ``dtype`` on a GPU: A and B read once, C written once (bf16 for fp8)."""
    itemsize = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}[dtype]
    out_itemsize = 2 if dtype == "fp8" else itemsize
    return Work(flops=2.0 * n**3, bytes=2.0 * n * n * itemsize + n * n * out_itemsize, dtype=dtype,
                launches=1, op="gemm", shape={"m": n, "n": n, "k": n, "library": "torch"})


@pytest.mark.charz(noise=0.02, max_time=1.0, quick={"max_time": 0.08})
def test_gemm_sim(charz: Any, target: Any, sim_gemm: tuple[str, int]) -> None:
    """The GPU GEMM cases on a simulated device: the same Work, timed by the simulator."""
    dtype, n = sim_gemm
    if target.peak(dtype) is None:
        pytest.skip(f"{target.identity.name} states no {dtype} peak")
    charz.measure(simulated_call, work=gpu_gemm_work(dtype, n))
