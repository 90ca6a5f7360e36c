"""Contention: a kernel alone, then the same kernel while something else loads a shared resource.

Each test measures the cases of one pair (``shape.pair``): ``role="alone"``, right after on the
same inputs ``role="contended"`` with the aggressor running, and ``role="alone"`` once more
(``alone-after``); the profile reports the slowdown, contended median over the median
of the alone cases, so that a drift of the machine during the pair is not read as interference.

CPU. The cores are split in two: the victim runs on half of them (one on a two-core machine),
``kernels.traffic.BackgroundTraffic`` streams reads over a buffer twice the last-level cache (so its
traffic reaches DRAM) on the other half. Pairs: STREAM triad and the read kernel (the shared
memory bandwidth and the shared LLC), and FMA chains (compute that touches no memory: a
slowdown there is shared power or clock budget, or a sibling hyperthread). Victims use the
64 MiB STREAM arrays in quick runs and the main-memory size of ``test_memory`` otherwise.

GPU (cuda). STREAM triad over arrays past 4x the L2 on half the resident blocks of every SM,
alone and while a second CUDA stream copies another pair of arrays with the other half: both
kernels stay resident at once, so they share HBM bandwidth instead of taking turns on the SMs.
The aggressor's copies are queued ahead of each victim launch and outlast it, so the copy
stream is busy for the whole measured interval; its backlog drains before the next sample.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from _sizes import format_bytes_id, memory_level, not_this_backend, plan_for, stream_array_bytes
from pytest_charz import Work

QUICK_ARRAY_BYTES = 64 * 1024 * 1024
QUICK_AGGRESSOR_BYTES = 256 * 1024 * 1024
SCALAR = 3.0
FMA_CALL_ITERS_START = 10_000
#: Aggressor copies queued per victim launch on the GPU (each over arrays as large as the victim's).
GPU_AGGRESSOR_COPIES = 2
#: Budgets of one CPU case (each test measures three): small victims, and main-memory ones (a
#: call of a few tenths of a second: the sampler stretches the budget to the six samples a CI needs).
MAX_TIME_S = 0.6
LARGE_MAX_TIME_S = 1.2


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    plan = plan_for(metafunc.config)
    if "cpu_pair" in metafunc.fixturenames:
        if plan.backend != "cpu":
            cases = not_this_backend(f"host contention; the bound device is {plan.backend}, see test_contention_gpu")
        elif plan.threads < 2:
            cases = not_this_backend("this process may run on one CPU only: no core is left for an aggressor")
        else:
            big = stream_array_bytes(plan)
            budget = pytest.mark.charz(max_time=MAX_TIME_S)
            cases = [pytest.param(("fma", 0), id="fma", marks=[budget])]
            for kernel in ("triad", "read"):
                cases.append(pytest.param((kernel, QUICK_ARRAY_BYTES), id=f"{kernel}-{format_bytes_id(QUICK_ARRAY_BYTES)}",
                                          marks=[budget]))
                if big > QUICK_ARRAY_BYTES:
                    cases.append(pytest.param((kernel, big), id=f"{kernel}-{format_bytes_id(big)}",
                                              marks=[pytest.mark.charz_slow, pytest.mark.charz(max_time=LARGE_MAX_TIME_S)]))
        metafunc.parametrize("cpu_pair", cases)


def aggressor_bytes(plan: Any, quick: bool) -> int:
    """Buffer of the CPU aggressor: twice the LLC (its reads miss every cache), within the cap."""
    if quick:
        return QUICK_AGGRESSOR_BYTES
    llc = plan.llc_bytes or QUICK_AGGRESSOR_BYTES // 2
    return int(min(max(2 * llc, QUICK_AGGRESSOR_BYTES), plan.cap_bytes))


def split_threads(threads: int) -> tuple[int, int]:
    """(victim, aggressor) threads: half each, the victim's half rounded down, never zero."""
    victim = max(1, threads // 2)
    return victim, max(1, threads - victim)


@pytest.mark.charz(noise=0.02, quick={"max_time": 0.08})      # budgets per parameter
def test_contention_cpu(charz: Any, device: Any, size_plan: Any, cpu_pair: tuple[str, int]) -> None:
    from pytest_charz.kernels import cpu, traffic

    kernel, array_bytes = cpu_pair
    victim_threads, aggressor_threads = split_threads(size_plan.threads)
    seed = int(charz.rng.integers(2**63))
    base: dict[str, Any]                      # the Work of one call, less op and shape
    if kernel == "triad":
        n = array_bytes // 8
        a, b, c = cpu.stream_arrays(n, seed=seed, threads=victim_threads)
        entries = charz.rng.integers(0, n, 4096)
        expected = b[entries] + SCALAR * c[entries]
        cpu.stream_triad(a, b, c, SCALAR, 1, victim_threads)
        np.testing.assert_allclose(a[entries], expected, rtol=1e-14)

        def run() -> None:
            cpu.stream_triad(a, b, c, SCALAR, 1, victim_threads)

        working_set = 3 * array_bytes
        base = {"bytes": {memory_level(size_plan, working_set, victim_threads): cpu.stream_bytes("triad", n)}}
    elif kernel == "read":
        buffer = cpu.read_buffer(2 * array_bytes, seed=seed, threads=victim_threads)
        assert cpu.read_sum(buffer, 1, threads=victim_threads) == pytest.approx(float(np.sum(buffer)), rel=1e-9)

        def run() -> None:
            cpu.read_sum(buffer, 1, threads=victim_threads)

        working_set = buffer.nbytes
        base = {"bytes": {memory_level(size_plan, working_set, victim_threads): cpu.read_bytes(buffer)}}
    else:
        init, mul, add = cpu.fma_inputs("fp64", seed=seed)
        assert cpu.fma_chains(init, mul, add, 1000, threads=victim_threads) == pytest.approx(
            cpu.fma_reference(init, mul, add, 1000, victim_threads), rel=1e-9)
        iters = 20 * FMA_CALL_ITERS_START

        def run() -> None:
            cpu.fma_chains(init, mul, add, iters, threads=victim_threads)

        working_set = 0
        base = {"flops": cpu.fma_flops("fp64", iters, victim_threads), "dtype": "fp64"}

    pair = f"{kernel}-{format_bytes_id(array_bytes)}" if array_bytes else kernel
    traffic_bytes = aggressor_bytes(size_plan, charz.quick)
    aggressor = (f"BackgroundTraffic read x{aggressor_threads} thread(s) over "
                 f"{format_bytes_id(traffic_bytes)}")
    shape = {"pair": pair, "aggressor": aggressor, "kernel": kernel, "threads": victim_threads,
             "working_set_bytes": working_set}
    charz.measure(run, work=Work(op="contention", shape={**shape, "role": "alone"}, **base), name="alone")
    load = traffic.BackgroundTraffic(traffic_bytes, mode="read", threads=aggressor_threads, seed=seed % 2**32)
    with load:
        charz.measure(run, work=Work(op="contention", shape={**shape, "role": "contended"}, **base),
                      name="contended")
    assert load.result.bytes_moved > 0, "the aggressor did not run"
    # Alone again: the slowdown divides by the median of the alone measurements either side of the
    # contended one, so a drift of the machine during the pair does not pass for interference.
    charz.measure(run, work=Work(op="contention", shape={**shape, "role": "alone"}, **base), name="alone-after")


@pytest.mark.charz(noise=0.02, max_time=1.0, quick={"max_time": 0.2})
def test_contention_gpu(charz: Any, device: Any, size_plan: Any, gpu_kernels: Any) -> None:
    import cupy as cp

    from pytest_charz.kernels.gpu import stream_bytes

    array_bytes = stream_array_bytes(size_plan)
    n = array_bytes // 8
    # Victim and aggressor each take half the blocks an SM holds, so both stay resident at once.
    half_grid = min(gpu_kernels.grid("triad", device.sm_count, 0.5), gpu_kernels.grid("copy", device.sm_count, 0.5))
    with device.on_stream():
        a, b, c = (cp.asarray(1.0 + charz.rng.random(n)) for _ in range(3))
        x, y = (cp.asarray(1.0 + charz.rng.random(n)) for _ in range(2))
        expected = b + SCALAR * c
        gpu_kernels.stream("triad", a, b, c, scalar=SCALAR, blocks=half_grid)
        assert bool(cp.allclose(a, expected, rtol=1e-14, atol=0.0))
        del expected
        gpu_kernels.stream("copy", x, x, y, blocks=half_grid)
        assert bool(cp.array_equal(y, x))
    device.synchronize()
    with cp.cuda.Device(device.index):      # the aggressor's stream belongs to the bound GPU
        copy_stream = cp.cuda.Stream(non_blocking=True)

    def alone() -> None:
        gpu_kernels.stream("triad", a, b, c, scalar=SCALAR, blocks=half_grid)

    def contended() -> None:
        with copy_stream:
            for _ in range(GPU_AGGRESSOR_COPIES):
                gpu_kernels.stream("copy", x, x, y, blocks=half_grid)
        gpu_kernels.stream("triad", a, b, c, scalar=SCALAR, blocks=half_grid)

    working_set = 3 * array_bytes
    bytes_moved = {memory_level(size_plan, working_set): float(stream_bytes("triad", n))}
    shape = {"pair": f"triad-{format_bytes_id(array_bytes)}", "kernel": "triad", "blocks": half_grid,
             "working_set_bytes": working_set,
             "aggressor": f"stream copy of {format_bytes_id(array_bytes)} arrays on a second CUDA stream, "
                          f"{half_grid} blocks"}
    charz.measure(alone, work=Work(bytes=bytes_moved, launches=1, op="contention",
                                   shape={**shape, "role": "alone"}), name="alone")
    try:
        charz.measure(contended, work=Work(bytes=bytes_moved, launches=1, op="contention",
                                           shape={**shape, "role": "contended"}), name="contended")
    finally:
        copy_stream.synchronize()
    charz.measure(alone, work=Work(bytes=bytes_moved, launches=1, op="contention",
                                   shape={**shape, "role": "alone"}), name="alone-after")
