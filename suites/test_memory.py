"""Memory: STREAM bandwidth beyond the last-level cache, read bandwidth and load latency over
working-set sizes.

STREAM (copy, scale, add, triad; McCalpin's kernels) runs on all threads over arrays whose
working set exceeds ``LLC_MULTIPLE`` (4) times the last-level cache, the profile's main-memory
figure. On this kind of host the LLC can be hundreds of MiB, so the arrays are capped by
available memory (a sixth of it per array, at most 2 GiB); the case's shape records
``llc_multiple``, the working set over the LLC, so a capped run says how far past the cache it
got. Quick runs use 64 MiB arrays, which may sit in a large LLC: their ``llc_multiple`` says so.
Bytes follow STREAM's convention: read plus written, without write-allocate traffic. Bandwidth
cases declare no FLOPs: the adds and multiplies are incidental to the traffic.

Read bandwidth by working set: each thread sums its share of one buffer, over and over
(``kernels.cpu.read_sum``), from 16 KiB to past 4x the LLC, two points per octave; on all
threads (the profile's level curve) and on one thread up to 16 times the per-core cache (the
per-core L1 and L2 rates). Each point's bytes are booked to the level its working set fits in:
a per-core cache holds one thread's share, a shared cache the whole buffer.

Latency: a pointer chase through one cycle over every 64-byte line of the buffer, each load's
address being the previous load's value. A call follows enough steps to last a few milliseconds
and continues where the previous call stopped, so in a measurement no line is visited twice
before the whole cycle has been walked: the working set is the buffer, not the lines one call
touches. Two orders (``kernels.cpu.chase_build``):

- ``page-local`` (the latency staircase, two points per octave): the lap walks windows of
  64 KiB in random order and, inside each, the lines in random order, even lines in the first
  half-lap and odd ones in the second, so no stride or adjacent-line prefetcher helps while a
  page's TLB miss is shared by the 32 loads of its half-lap: the latency of the level, with a
  TLB miss on about 3% of loads.
- ``random`` (from 4 MiB up, one point per octave): one uniformly random cycle (Sattolo's
  algorithm). Past the reach of the TLBs nearly every load is also a TLB miss and a page walk,
  two-dimensional under virtualisation; the difference to the page-local curve is what TLB
  misses cost a program that touches memory at random.

Both ask for transparent huge pages (2 MiB, ``madvise(MADV_HUGEPAGE)``) on buffers of 4 MiB and
more; the case's shape says whether the hint was taken (``hugepages``), though not whether the
hypervisor backs the guest's huge pages with huge pages of its own. ``--charz-chase-pages=base``
keeps 4 KiB pages. With THP set to ``never`` the kernel refuses the hint and the case falls back
to base pages, recording so.

GPU (cuda): STREAM over arrays past 4x the L2 with a grid filling every SM; a copy sweep over
working sets (one pass per launch: below the L2 size it measures the L2, above it HBM, and for
the smallest sizes launch overhead); and the pointer chase of one thread over 128-byte lines.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from _sizes import (MIB, QUICK_MAX_BYTES, beyond_llc_bytes, count_for_duration, format_bytes_id, geometric_sizes, in_quick_sweep,
                    memory_level, not_this_backend, plan_for, simulated_call, size_params, stream_array_bytes,
                    sweep_sizes)
from pytest_charz import Work

STREAM_KERNELS = ("copy", "scale", "add", "triad")
#: Arrays each STREAM kernel touches (read + written).
STREAM_ARRAYS = {"copy": 2, "scale": 2, "add": 3, "triad": 3}
STREAM_SCALAR = 3.0
QUICK_STREAM_ARRAY_BYTES = 64 * MIB
#: A read call re-reads its buffer until it has read at least this much (per-call costs vanish).
READ_CALL_BYTES = 64 * MIB
CHASE_LINE_BYTES = 64
GPU_CHASE_LINE_BYTES = 128
#: A GPU copy-sweep launch repeats its pass until it moves this many bytes (launch cost hidden).
GPU_COPY_LAUNCH_BYTES = 512 * MIB
#: A chase call lasts about this long.
CHASE_CALL_S = 2e-3
HUGEPAGE_MIN_BYTES = 4 * MIB
#: The fully random chase (TLB misses included) runs from here up, one point per octave.
RANDOM_CHASE_FROM_BYTES = 4 * MIB
#: Budgets of a read case: one call of a large working set takes a good part of a second.
READ_MAX_TIME_S = 0.35
READ_LARGE_MAX_TIME_S = 1.5
#: Entries checked against the reference after one pass of a kernel.
CHECKED_ENTRIES = 4096


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    plan = plan_for(metafunc.config)
    names = metafunc.fixturenames
    cpu = plan.backend == "cpu"
    cpu_only = not_this_backend(f"a host-memory case; the bound device is {plan.backend} (its cases are the *_gpu ones)")
    cuda_only = not_this_backend(f"raw GPU kernels (CuPy, cuda backend); the bound device is {plan.backend}")
    if "stream_case" in names:
        if cpu:
            big = stream_array_bytes(plan)
            arrays = [(QUICK_STREAM_ARRAY_BYTES, False)] + ([(big, True)] if big > QUICK_STREAM_ARRAY_BYTES else [])
            cases = [pytest.param((kernel, size), id=f"{kernel}-{format_bytes_id(size)}-arrays",
                                  marks=[pytest.mark.charz_slow, pytest.mark.charz(max_time=2.5)] if slow
                                  else [pytest.mark.charz(max_time=1.0)])
                     for size, slow in arrays for kernel in STREAM_KERNELS]
        else:
            cases = cpu_only
        metafunc.parametrize("stream_case", cases)
    if "read_case" in names:
        if cpu:
            cases = [pytest.param((plan.threads, p.values[0]), id=f"threads{plan.threads}-{p.id}", marks=p.marks)
                     for p in size_params(sweep_sizes(plan), 2, max_time_s=READ_MAX_TIME_S,
                                          large_max_time_s=READ_LARGE_MAX_TIME_S)]
            if plan.threads > 1:
                stop = max(16 * (plan.unit_cache_bytes or 0), 4 * MIB)
                cases += [pytest.param((1, p.values[0]), id=f"threads1-{p.id}", marks=p.marks)
                          for p in size_params(sweep_sizes(plan, stop_bytes=stop), 2, max_time_s=READ_MAX_TIME_S,
                                               large_max_time_s=READ_LARGE_MAX_TIME_S)]
        else:
            cases = cpu_only
        metafunc.parametrize("read_case", cases)
    if "chase_case" in names:
        if cpu:
            local = [pytest.param(("page-local", p.values[0]), id=f"page-local-{p.id}", marks=p.marks)
                     for p in size_params(sweep_sizes(plan), 2)]
            tlb_sizes = [size for size in sweep_sizes(plan, 1) if size >= RANDOM_CHASE_FROM_BYTES]
            walk = [pytest.param(("random", p.values[0]), id=f"random-{p.id}", marks=p.marks)
                    for p in size_params(tlb_sizes, 1,
                                         quick=lambda size: size in (RANDOM_CHASE_FROM_BYTES, QUICK_MAX_BYTES))]
            cases = local + walk
        else:
            cases = cpu_only
        metafunc.parametrize("chase_case", cases)
    if "gpu_stream_kernel" in names:
        cases = [pytest.param(k, id=k) for k in STREAM_KERNELS] if plan.backend == "cuda" else cuda_only
        metafunc.parametrize("gpu_stream_kernel", cases)
    if "sim_stream_kernel" in names:
        cases = ([pytest.param(k, id=k) for k in STREAM_KERNELS] if plan.backend == "sim" else
                 not_this_backend(f"the STREAM cases of a simulated device; the bound device is {plan.backend}"))
        metafunc.parametrize("sim_stream_kernel", cases)
    if "gpu_copy_bytes" in names:
        if plan.backend == "cuda":
            sizes = geometric_sizes(1 * MIB, beyond_llc_bytes(plan), 1)
            cases = size_params(sizes, 1, quick=lambda size: True)
        else:
            cases = cuda_only
        metafunc.parametrize("gpu_copy_bytes", cases)
    if "gpu_chase_bytes" in names:
        if plan.backend == "cuda":
            stop = beyond_llc_bytes(plan)
            cases = size_params(sweep_sizes(plan), 2,
                                quick=lambda size: in_quick_sweep(size, 2) or (size >= stop and size & (size - 1) == 0))
        else:
            cases = cuda_only
        metafunc.parametrize("gpu_chase_bytes", cases)


def _seed(charz: Any) -> int:
    return int(charz.rng.integers(2**63))


# ---------------------------------------------------------------- DRAM probe, CPU
#: Working set of the DRAM probe: past LLC_MULTIPLE x the LLC, at most this much (a short case).
PROBE_MAX_BYTES = 512 * MIB


def _probe_read(charz: Any, buffer: Any, threads: int, where: str) -> None:
    """The probe's read of ``buffer`` (freed when this returns, before the chase allocates)."""
    from pytest_charz.kernels import cpu

    assert cpu.read_sum(buffer, 1, threads=threads) == pytest.approx(float(np.sum(buffer)), rel=1e-9)
    charz.measure(lambda: cpu.read_sum(buffer, 1, threads=threads),
                  work=Work(bytes={"dram": cpu.read_bytes(buffer)}, op="probe",
                            shape={"probe": "dram-read", "where": where, "threads": threads,
                                   "working_set_bytes": buffer.nbytes}), name="read")


def dram_probe(charz: Any, size_plan: Any, where: str) -> None:
    """A short read of a buffer past the LLC on every thread, and a page-local chase over it:
    measured at several points of the run (``op="probe"``) so the profile can tell a DRAM
    ceiling that moved with the neighbours (``pytest_charz.profile.probe``) from a steady one."""
    from pytest_charz.kernels import cpu

    threads = size_plan.threads
    size = min(beyond_llc_bytes(size_plan), PROBE_MAX_BYTES)
    _probe_read(charz, cpu.read_buffer(size, seed=_seed(charz), threads=threads), threads, where)
    chain = cpu.chase_build(size // CHASE_LINE_BYTES, CHASE_LINE_BYTES, seed=_seed(charz), pattern="page-local")
    steps = 200_000
    position = [0]

    def walk() -> None:
        position[0] = cpu.chase(chain, steps, position[0])

    charz.measure(walk, work=Work(accesses=steps, op="probe",
                                  shape={"probe": "dram-latency", "where": where, "working_set_bytes": chain.nbytes,
                                         "line_bytes": CHASE_LINE_BYTES, "steps": steps}), name="latency")


@pytest.mark.charz(noise=0.025, max_time=0.5, quick={"max_time": 0.08})
def test_probe_start_cpu(charz: Any, device: Any, size_plan: Any) -> None:
    if size_plan.backend != "cpu":
        pytest.skip("the DRAM probe reads host memory")
    dram_probe(charz, size_plan, "start")


# ---------------------------------------------------------------- STREAM, CPU


def _stream_call(kernel: str, a: np.ndarray, b: np.ndarray, c: np.ndarray, threads: int) -> Callable[[], None]:
    from pytest_charz.kernels import cpu

    return {
        "copy": lambda: cpu.stream_copy(c, a, 1, threads),
        "scale": lambda: cpu.stream_scale(b, c, STREAM_SCALAR, 1, threads),
        "add": lambda: cpu.stream_add(c, a, b, 1, threads),
        "triad": lambda: cpu.stream_triad(a, b, c, STREAM_SCALAR, 1, threads),
    }[kernel]


def stream_expected(kernel: str, a: Any, b: Any, c: Any) -> tuple[str, Any]:
    """The array a STREAM kernel writes and what it must hold, from the inputs (numpy or cupy):
    copy ``c = a``, scale ``b = s c``, add ``c = a + b``, triad ``a = b + s c``."""
    return {
        "copy": ("c", a),
        "scale": ("b", STREAM_SCALAR * c),
        "add": ("c", a + b),
        "triad": ("a", b + STREAM_SCALAR * c),
    }[kernel]


@pytest.mark.charz(noise=0.02, quick={"max_time": 0.08})      # budgets per parameter
def test_stream_cpu(charz: Any, device: Any, size_plan: Any, stream_case: tuple[str, int]) -> None:
    from pytest_charz.kernels import cpu

    kernel, array_bytes = stream_case
    threads = size_plan.threads
    n = array_bytes // 8
    # First touch by the threads that will stream each part (same static schedule).
    a, b, c = cpu.stream_arrays(n, seed=_seed(charz), threads=threads)
    entries = charz.rng.integers(0, n, CHECKED_ENTRIES)
    written, expected = stream_expected(kernel, a[entries], b[entries], c[entries])
    run = _stream_call(kernel, a, b, c, threads)
    run()
    np.testing.assert_allclose({"a": a, "b": b, "c": c}[written][entries], expected, rtol=1e-14)

    working_set = STREAM_ARRAYS[kernel] * array_bytes
    llc = size_plan.llc_bytes
    work = Work(bytes={memory_level(size_plan, working_set, threads): cpu.stream_bytes(kernel, n)}, op="stream",
                shape={"kernel": kernel, "threads": threads, "working_set_bytes": working_set,
                       "array_bytes": array_bytes, "llc_multiple": round(working_set / llc, 3) if llc else 0.0})
    charz.measure(run, work=work)


# ---------------------------------------------------------------- read bandwidth by working set, CPU


@pytest.mark.charz(noise=0.02, quick={"max_time": 0.08})      # budgets per parameter
def test_read_cpu(charz: Any, device: Any, size_plan: Any, read_case: tuple[int, int]) -> None:
    from pytest_charz.kernels import cpu

    threads, working_set = read_case
    buffer = cpu.read_buffer(working_set, seed=_seed(charz), threads=threads)
    assert cpu.read_sum(buffer, 1, threads=threads) == pytest.approx(float(np.sum(buffer)), rel=1e-9)
    reps = max(1, READ_CALL_BYTES // buffer.nbytes)
    total = [0.0]

    def run() -> None:
        total[0] = cpu.read_sum(buffer, reps, threads=threads)

    work = Work(bytes={memory_level(size_plan, buffer.nbytes, threads): cpu.read_bytes(buffer, reps)}, op="read",
                shape={"working_set_bytes": buffer.nbytes, "threads": threads, "reps": reps,
                       "bytes_per_thread": buffer.nbytes // threads})
    charz.measure(run, work=work)
    assert total[0] == pytest.approx(reps * float(np.sum(buffer)), rel=1e-9)


@pytest.mark.charz_slow        # quick runs probe once, at the start
@pytest.mark.charz(noise=0.025, max_time=0.5, quick={"max_time": 0.08})
def test_probe_middle_cpu(charz: Any, device: Any, size_plan: Any) -> None:
    if size_plan.backend != "cpu":
        pytest.skip("the DRAM probe reads host memory")
    dram_probe(charz, size_plan, "middle")


# ---------------------------------------------------------------- load latency, CPU


def chase_reference(buffer: np.ndarray, steps: int, start: int = 0) -> int:
    """Follow the chain in Python: the word index reached after ``steps`` links."""
    index = start
    for _ in range(steps):
        index = int(buffer[index])
    return index


def check_chase_buffer(buffer: np.ndarray, line_bytes: int) -> None:
    """Every line links to the start of a line, and every line is linked to exactly once."""
    words = line_bytes // 8
    links = buffer[::words]
    assert np.all(links % words == 0) and np.all((links >= 0) & (links < len(buffer)))
    assert np.all(np.bincount(links // words, minlength=len(links)) == 1)


@pytest.mark.charz(noise=0.02, max_time=0.35, quick={"max_time": 0.08})
def test_chase_cpu(charz: Any, device: Any, pytestconfig: pytest.Config, chase_case: tuple[str, int]) -> None:
    from pytest_charz.errors import CharzError
    from pytest_charz.kernels import cpu

    pattern, chase_bytes = chase_case
    lines = chase_bytes // CHASE_LINE_BYTES
    seed = _seed(charz)
    hugepages = pytestconfig.getoption("charz_chase_pages") == "huge" and chase_bytes >= HUGEPAGE_MIN_BYTES
    try:
        buffer = cpu.chase_build(lines, CHASE_LINE_BYTES, seed=seed, hugepages=hugepages, pattern=pattern)
    except CharzError:          # the kernel refused the hint: base pages, and the shape says so
        hugepages = False
        buffer = cpu.chase_build(lines, CHASE_LINE_BYTES, seed=seed, pattern=pattern)
    check_chase_buffer(buffer, CHASE_LINE_BYTES)
    if lines <= 1 << 20:        # walking the whole cycle is cheap up to 64 MiB
        assert cpu.chase_cycle_length(buffer, CHASE_LINE_BYTES) == lines
    assert cpu.chase(buffer, 1000) == chase_reference(buffer, 1000)

    position = [0]

    def advance(count: int) -> None:
        # From where the walk stands: calibration and samples meet lines not yet visited.
        position[0] = cpu.chase(buffer, count, position[0])

    # The trial calls carry their Work too, so a device that simulates can time them.
    steps = count_for_duration(
        lambda count: device.time_batch(lambda: advance(count), 1, Work(accesses=count, op="chase", shape={
            "working_set_bytes": buffer.nbytes, "line_bytes": CHASE_LINE_BYTES, "steps": count})),
        start_count=10_000, target_s=CHASE_CALL_S)

    def run() -> None:
        advance(steps)

    work = Work(accesses=steps, op="chase",
                shape={"working_set_bytes": buffer.nbytes, "line_bytes": CHASE_LINE_BYTES, "steps": steps,
                       "hugepages": hugepages, "pattern": pattern,
                       **({"window_bytes": cpu.CHASE_WINDOW_BYTES} if pattern == "page-local" else {})})
    charz.measure(run, work=work)
    assert 0 <= position[0] < len(buffer) and position[0] % (CHASE_LINE_BYTES // 8) == 0


@pytest.mark.charz_slow        # quick runs probe once, at the start
@pytest.mark.charz(noise=0.025, max_time=0.5, quick={"max_time": 0.08})
def test_probe_end_cpu(charz: Any, device: Any, size_plan: Any) -> None:
    if size_plan.backend != "cpu":
        pytest.skip("the DRAM probe reads host memory")
    dram_probe(charz, size_plan, "end")


# ---------------------------------------------------------------- GPU (cuda)


def _gpu_arrays(cp: Any, rng: np.random.Generator, n: int, count: int) -> list[Any]:
    """``count`` device arrays of ``n`` random doubles in [1, 2)."""
    return [cp.asarray(1.0 + rng.random(n)) for _ in range(count)]


def _check_gpu_stream(cp: Any, kernels: Any, kernel: str, a: Any, b: Any, c: Any, blocks: int,
                      rng: np.random.Generator) -> None:
    n = int(a.size)
    entries = cp.asarray(rng.integers(0, n, CHECKED_ENTRIES))
    written, expected = stream_expected(kernel, a[entries], b[entries], c[entries])
    kernels.stream(kernel, a, b, c, scalar=STREAM_SCALAR, blocks=blocks)
    got = {"a": a, "b": b, "c": c}[written][entries]
    np.testing.assert_allclose(cp.asnumpy(got), cp.asnumpy(expected), rtol=1e-14)


@pytest.mark.charz(noise=0.01, max_time=1.0, quick={"max_time": 0.08})
def test_stream_gpu(charz: Any, device: Any, size_plan: Any, gpu_kernels: Any, gpu_stream_kernel: str) -> None:
    import cupy as cp

    from pytest_charz.kernels.gpu import DEFAULT_THREADS_PER_BLOCK, stream_bytes, stream_grid

    kernel = gpu_stream_kernel
    array_bytes = stream_array_bytes(size_plan)
    n = array_bytes // 8
    blocks = stream_grid(n)     # one double2 per thread, as BabelStream launches it
    with device.on_stream():
        a, b, c = _gpu_arrays(cp, charz.rng, n, 3)
        _check_gpu_stream(cp, gpu_kernels, kernel, a, b, c, blocks, charz.rng)
    device.synchronize()
    working_set = STREAM_ARRAYS[kernel] * array_bytes
    llc = size_plan.llc_bytes
    work = Work(bytes={memory_level(size_plan, working_set): float(stream_bytes(kernel, n))}, launches=1,
                op="stream", shape={"kernel": kernel, "threads": blocks * DEFAULT_THREADS_PER_BLOCK, "blocks": blocks,
                                    "working_set_bytes": working_set, "array_bytes": array_bytes,
                                    "llc_multiple": round(working_set / llc, 3) if llc else 0.0})
    charz.measure(lambda: gpu_kernels.stream(kernel, a, b, c, scalar=STREAM_SCALAR, blocks=blocks), work=work)


@pytest.mark.charz(noise=0.01, max_time=1.0, quick={"max_time": 0.08})
def test_stream_sim(charz: Any, size_plan: Any, sim_stream_kernel: str) -> None:
    """The device STREAM cases on a simulated device: the Work of ``test_stream_gpu`` (arrays past
    4x the LLC), timed by the simulator; no array is allocated."""
    from pytest_charz.kernels.gpu import stream_bytes

    kernel = sim_stream_kernel
    array_bytes = stream_array_bytes(size_plan)
    n = array_bytes // 8
    working_set = STREAM_ARRAYS[kernel] * array_bytes
    llc = size_plan.llc_bytes
    work = Work(bytes={memory_level(size_plan, working_set): float(stream_bytes(kernel, n))}, launches=1,
                op="stream", shape={"kernel": kernel, "working_set_bytes": working_set, "array_bytes": array_bytes,
                                    "llc_multiple": round(working_set / llc, 3) if llc else 0.0})
    charz.measure(simulated_call, work=work)


@pytest.mark.charz(noise=0.02, max_time=0.5, quick={"max_time": 0.08})
def test_copy_gpu(charz: Any, device: Any, size_plan: Any, gpu_kernels: Any, gpu_copy_bytes: int) -> None:
    import cupy as cp

    from pytest_charz.kernels.gpu import stream_bytes

    n = gpu_copy_bytes // 16            # two arrays make the working set
    blocks = gpu_kernels.grid("copy_passes", device.sm_count)
    # One pass over an L2-sized working set takes a few microseconds, less than a launch from
    # Python: repeat the pass inside the launch until one launch moves GPU_COPY_LAUNCH_BYTES.
    passes = max(1, -(-GPU_COPY_LAUNCH_BYTES // stream_bytes("copy", n)))
    with device.on_stream():
        a, c = _gpu_arrays(cp, charz.rng, n, 2)         # the timed kernel writes c = a, passes times
        gpu_kernels.check_copy(a, c)
        gpu_kernels.copy_passes(a, c, passes, blocks=blocks)
        assert bool(cp.array_equal(c, a)), "copy_passes left c different from a"
    device.synchronize()
    working_set = 2 * n * 8
    work = Work(bytes={memory_level(size_plan, working_set): float(stream_bytes("copy", n) * passes)}, launches=1,
                op="copy", shape={"working_set_bytes": working_set, "blocks": blocks, "passes": passes})
    charz.measure(lambda: gpu_kernels.copy_passes(a, c, passes, blocks=blocks), work=work)


def gpu_chase_table(slots: int, stride_elements: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A uint32 chase table whose slots form one random cycle, and the cycle's order: slot
    ``order[i]`` links to ``order[i + 1]``, so the index reached after ``s`` steps from
    ``order[i]`` is ``order[(i + s) % slots]`` (the host tracks positions without reading back)."""
    order = rng.permutation(slots).astype(np.int64) * stride_elements
    table = np.zeros(slots * stride_elements, dtype=np.uint32)
    table[order] = np.roll(order, -1).astype(np.uint32)
    return table, order


@pytest.mark.charz(noise=0.02, max_time=0.35, quick={"max_time": 0.08})
def test_chase_gpu(charz: Any, device: Any, gpu_kernels: Any, gpu_chase_bytes: int) -> None:
    import cupy as cp

    stride = GPU_CHASE_LINE_BYTES // 4
    slots = max(2, gpu_chase_bytes // GPU_CHASE_LINE_BYTES)
    table_host, order = gpu_chase_table(slots, stride, charz.rng)
    with device.on_stream():
        table = cp.asarray(table_host)
        out = cp.zeros(1, dtype=cp.uint32)
        check_steps = 1000
        gpu_kernels.chase(table, check_steps, out, start=int(order[0]))
        reached = int(cp.asnumpy(out)[0])
    assert reached == int(order[check_steps % slots])

    position = [0]

    def advance(count: int) -> None:
        # Start where the previous call stopped (the host knows it from the cycle's order).
        gpu_kernels.chase(table, count, out, start=int(order[position[0]]))
        position[0] = (position[0] + count) % slots

    steps = count_for_duration(
        lambda count: device.time_batch(lambda: advance(count), 1, Work(accesses=count, launches=1, op="chase", shape={
            "working_set_bytes": slots * GPU_CHASE_LINE_BYTES, "line_bytes": GPU_CHASE_LINE_BYTES, "steps": count})),
        start_count=4096, target_s=CHASE_CALL_S, max_count=1 << 40)

    def run() -> None:
        advance(steps)

    work = Work(accesses=steps, launches=1, op="chase",
                shape={"working_set_bytes": slots * GPU_CHASE_LINE_BYTES, "line_bytes": GPU_CHASE_LINE_BYTES,
                       "steps": steps})
    charz.measure(run, work=work)
