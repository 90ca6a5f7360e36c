"""CPU microbenchmark kernels over numpy arrays: FMA peak, STREAM, read bandwidth by working set,
pointer chase, memcpy, and OpenMP fork/join. The background memory traffic that contention cases
run beside a measured kernel is in :mod:`.traffic`.

The kernels are C (``cpu_kernels.c``) compiled at first use (see :mod:`.build`) and called through
ctypes, which releases the GIL: a kernel running in a background Python thread does not stop a
foreground one. Loading the library and the argument plumbing are in :mod:`.cpu_library`, the
pointer chase in :mod:`.cpu_chase`; this module re-exports both, so ``kernels.cpu`` stays the
one API of the CPU kernels. Every kernel takes ``threads``, the OpenMP team size, defaulting to
every core this process may run on (:func:`available_threads`; one when the compiler could not
build with OpenMP, where asking for more is an error). Each function's docstring says the FLOPs
and bytes it does, and the ``*_flops`` / ``*_bytes`` helpers compute them, so a suite can turn a
call into a :class:`~pytest_charz.work.Work`.

Byte counts follow STREAM's convention: bytes the program reads plus bytes it writes. A plain
store to a line that is not in cache first reads the line (write-allocate), so DRAM actually
moves one more read per written byte; ``write_allocate=True`` counts that traffic too. These
kernels never force non-temporal stores.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..errors import UsageError, check_choice
from .cpu_chase import CHASE_PATTERNS, CHASE_WINDOW_BYTES, chase, chase_build, chase_cycle_length, hugepage_hint
from .cpu_library import (
    F32P,
    F64P,
    SOURCE,
    KernelBuild,
    Team,
    aligned_empty,
    available_threads,
    check_array,
    check_count,
    check_same_length,
    describe,
    kernel_build,
    lib,
    ptr,
    resolve_threads,
)

STREAM_OPS = ("copy", "scale", "add", "triad")

# Arrays read and arrays written per element of each STREAM loop.
_STREAM_ARRAYS = {"copy": (1, 1), "scale": (1, 1), "add": (2, 1), "triad": (2, 1)}
_STREAM_FLOPS_PER_ELEMENT = {"copy": 0, "scale": 1, "add": 1, "triad": 2}


# ---------------------------------------------------------------- 1. FMA peak


def fma_accumulators(dtype: str = "fp64") -> int:
    """Accumulators per thread (chains x SIMD lanes): the length ``init`` must have."""
    check_choice("dtype", dtype, ("fp64", "fp32"))
    build = kernel_build()
    return build.fma_chains * build.vector_bytes // (8 if dtype == "fp64" else 4)


def fma_inputs(dtype: str = "fp64", seed: int | None = None) -> tuple[np.ndarray, float, float]:
    """Fresh random ``(init, a, b)`` for :func:`fma_chains`: ``init`` in [0.5, 1.5), ``a`` in
    [0.99, 0.999), ``b`` in [0.001, 0.01), so every chain stays finite and far from denormals for
    any number of iterations (it converges to ``b / (1 - a)``)."""
    rng = np.random.default_rng(seed)
    numpy_dtype = np.float64 if dtype == "fp64" else np.float32
    init = rng.uniform(0.5, 1.5, fma_accumulators(dtype)).astype(numpy_dtype)
    a = float(numpy_dtype(rng.uniform(0.99, 0.999)))
    b = float(numpy_dtype(rng.uniform(0.001, 0.01)))
    return init, a, b


def fma_chains(init: np.ndarray, a: float, b: float, iters: int, threads: int | None = None) -> float:
    """Run ``acc = acc * a + b`` ``iters`` times on every accumulator, on every thread.

    ``init`` (float64 or float32, length :func:`fma_accumulators`) seeds each thread's chains.
    Returns the sum of all final accumulators over all threads (checked by
    :func:`fma_reference`). FLOPs: ``2 * iters * len(init) * threads`` of ``init``'s dtype
    (:func:`fma_flops`); no memory traffic.
    """
    threads = resolve_threads(threads)
    iters = check_count("iters", iters)
    single = isinstance(init, np.ndarray) and init.dtype == np.float32
    dtype = "fp32" if single else "fp64"
    function = lib().charz_fma_f32 if single else lib().charz_fma_f64
    pointer: Any = F32P if single else F64P
    check_array("init", init, np.float32 if single else np.float64)
    if len(init) != fma_accumulators(dtype):
        raise UsageError(f"init must have fma_accumulators({dtype!r}) = {fma_accumulators(dtype)} items, got {len(init)}")
    team = Team(threads)
    checksum = float(function(ptr(init, pointer), a, b, iters, threads, team.ref))
    team.check()
    return checksum


def fma_reference(init: np.ndarray, a: float, b: float, iters: int, threads: int) -> float:
    """The checksum :func:`fma_chains` should return, from the closed form of the recurrence:
    ``x_n = a**n * (x_0 - f) + f`` with ``f = b / (1 - a)`` (``x_0 + n * b`` when ``a == 1``)."""
    x0 = np.asarray(init, dtype=np.float64)
    if a == 1.0:
        final = x0 + iters * b
    else:
        fixed = b / (1.0 - a)
        final = a**iters * (x0 - fixed) + fixed
    return float(final.sum()) * threads


def fma_flops(dtype: str, iters: int, threads: int) -> float:
    """FLOPs one :func:`fma_chains` call does (an FMA counts as two)."""
    return 2.0 * iters * fma_accumulators(dtype) * threads


# ---------------------------------------------------------------- 2. STREAM


def stream_bytes(op: str, n: int, write_allocate: bool = False) -> float:
    """Bytes one pass of STREAM ``op`` over ``n`` doubles moves.

    STREAM counts copy and scale as 16 B per element, add and triad as 24 B; counting the
    write-allocate read of each destination line they are 24 B and 32 B.
    """
    check_choice("op", op, STREAM_OPS)
    reads, writes = _STREAM_ARRAYS[op]
    return 8.0 * n * (reads + writes * (2 if write_allocate else 1))


def stream_flops(op: str, n: int) -> float:
    """fp64 FLOPs one pass of STREAM ``op`` over ``n`` doubles does (copy 0, scale and add 1, triad 2 per element)."""
    check_choice("op", op, STREAM_OPS)
    return float(_STREAM_FLOPS_PER_ELEMENT[op] * n)


def stream_init(a: np.ndarray, b: np.ndarray, c: np.ndarray, seed: int = 0, threads: int | None = None) -> None:
    """Fill ``a``, ``b``, ``c`` with pseudo-random values in [1, 2) in one OpenMP loop with the
    static schedule the STREAM kernels use, so each page is first touched by the thread that
    will read and write it (use the same ``threads`` as the measurement). Writes ``24 * n`` bytes."""
    threads = resolve_threads(threads)
    for name, array in (("a", a), ("b", b), ("c", c)):
        check_array(name, array, np.float64, writeable=True)
    n = check_same_length(a=a, b=b, c=c)
    team = Team(threads)
    lib().charz_stream_init(ptr(a, F64P), ptr(b, F64P), ptr(c, F64P), n, seed, threads, team.ref)
    team.check()


def stream_arrays(n: int, seed: int = 0, threads: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three page-aligned arrays of ``n`` doubles, first touched and filled by :func:`stream_init`."""
    a, b, c = (aligned_empty(check_count("n", n, 1)) for _ in range(3))
    stream_init(a, b, c, seed=seed, threads=threads)
    return a, b, c


def stream_copy(c: np.ndarray, a: np.ndarray, reps: int = 1, threads: int | None = None) -> None:
    """``c[:] = a``, ``reps`` times. Bytes per pass: :func:`stream_bytes` ``("copy", n)``; no FLOPs."""
    threads, n, team = _stream_args(reps, threads, c=c, a=a)
    lib().charz_stream_copy(ptr(c, F64P), ptr(a, F64P), n, reps, threads, team.ref)
    team.check()


def stream_scale(b: np.ndarray, c: np.ndarray, scalar: float, reps: int = 1, threads: int | None = None) -> None:
    """``b[:] = scalar * c``, ``reps`` times. Per pass: 16 B (24 with write-allocate) and 1 FLOP per element."""
    threads, n, team = _stream_args(reps, threads, b=b, c=c)
    lib().charz_stream_scale(ptr(b, F64P), ptr(c, F64P), scalar, n, reps, threads, team.ref)
    team.check()


def stream_add(c: np.ndarray, a: np.ndarray, b: np.ndarray, reps: int = 1, threads: int | None = None) -> None:
    """``c[:] = a + b``, ``reps`` times. Per pass: 24 B (32 with write-allocate) and 1 FLOP per element."""
    threads, n, team = _stream_args(reps, threads, c=c, a=a, b=b)
    lib().charz_stream_add(ptr(c, F64P), ptr(a, F64P), ptr(b, F64P), n, reps, threads, team.ref)
    team.check()


def stream_triad(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, scalar: float, reps: int = 1, threads: int | None = None
) -> None:
    """``a[:] = b + scalar * c``, ``reps`` times. Per pass: 24 B (32 with write-allocate) and 2 FLOPs per element."""
    threads, n, team = _stream_args(reps, threads, a=a, b=b, c=c)
    lib().charz_stream_triad(ptr(a, F64P), ptr(b, F64P), ptr(c, F64P), scalar, n, reps, threads, team.ref)
    team.check()


def _stream_args(reps: int, threads: int | None, **arrays: np.ndarray) -> tuple[int, int, Team]:
    resolved = resolve_threads(threads)
    check_count("reps", reps, 1)
    for index, (name, array) in enumerate(arrays.items()):
        check_array(name, array, np.float64, writeable=index == 0)
    n = check_same_length(**arrays)
    return resolved, n, Team(resolved)


# ---------------------------------------------------------------- 3. read bandwidth by working set


def read_buffer(nbytes: int, seed: int = 0, threads: int | None = None) -> np.ndarray:
    """A page-aligned float64 buffer of ``nbytes`` (rounded down to whole doubles) filled with
    values in [1, 2), each thread first-touching the share :func:`read_sum` gives it."""
    threads = resolve_threads(threads)
    n = check_count("nbytes", nbytes, 8) // 8
    buffer = aligned_empty(n)
    team = Team(threads)
    lib().charz_read_init(ptr(buffer, F64P), n, seed, threads, team.ref)
    team.check()
    return buffer


def read_sum(buffer: np.ndarray, reps: int = 1, threads: int | None = None) -> float:
    """Sum ``buffer`` ``reps`` times with vector loads into several accumulators; returns the
    total (``reps * buffer.sum()`` up to rounding).

    The buffer is split statically over ``threads``; each thread re-reads its own share, so the
    working set per core is ``buffer.nbytes / threads``. Sweeping ``buffer.nbytes`` from 16 KiB
    to several times the last-level cache gives the read bandwidth of each level.
    Bytes read: ``reps * buffer.nbytes`` (:func:`read_bytes`); FLOPs: ``reps * len(buffer)`` fp64 adds.
    """
    threads = resolve_threads(threads)
    check_array("buffer", buffer, np.float64)
    reps = check_count("reps", reps, 1)
    team = Team(threads)
    total = float(lib().charz_read_sum(ptr(buffer, F64P), len(buffer), reps, threads, team.ref))
    team.check()
    return total


def read_bytes(buffer: np.ndarray, reps: int = 1) -> float:
    """Bytes one :func:`read_sum` call reads."""
    return float(buffer.nbytes) * reps


# ---------------------------------------------------------------- 4. memcpy


def memcpy(dst: np.ndarray, src: np.ndarray, threads: int | None = None) -> None:
    """Copy ``src`` into ``dst`` (same byte size) with the C library's ``memcpy``, split into one
    contiguous chunk per thread. Bytes: ``2 * nbytes`` (read + write; 3x with write-allocate,
    though large copies may use non-temporal stores that skip it): :func:`memcpy_bytes`."""
    threads = resolve_threads(threads)
    for name, array in (("dst", dst), ("src", src)):
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            raise UsageError(f"{name} must be a contiguous numpy array, got {describe(array)}")
    if not dst.flags.writeable:
        raise UsageError("dst must be writeable")
    if dst.nbytes != src.nbytes:
        raise UsageError(f"dst and src must have the same size in bytes, got {dst.nbytes} and {src.nbytes}")
    team = Team(threads)
    lib().charz_memcpy(ctypes.c_void_p(dst.ctypes.data), ctypes.c_void_p(src.ctypes.data), src.nbytes, threads, team.ref)
    team.check()


def memcpy_bytes(nbytes: int, write_allocate: bool = False) -> float:
    """Bytes a :func:`memcpy` of ``nbytes`` moves."""
    return float(nbytes) * (3 if write_allocate else 2)


def fill_random(array: np.ndarray, seed: int = 0, threads: int | None = None) -> None:
    """Fill a float64 array with pseudo-random values in [1, 2), first-touched by ``threads``."""
    threads = resolve_threads(threads)
    check_array("array", array, np.float64, writeable=True)
    team = Team(threads)
    lib().charz_fill_random(ptr(array, F64P), len(array), seed, threads, team.ref)
    team.check()


# ---------------------------------------------------------------- 5. fork/join


def fork_join(reps: int, threads: int | None = None) -> int:
    """Open and close ``reps`` OpenMP parallel regions with an empty body; returns ``reps``.

    Time / ``reps`` is the cost of waking a team of ``threads`` and joining it (Work: ``reps``
    launches, no FLOPs or bytes). With OMP_WAIT_POLICY unset, workers spin a while after each
    region, so back-to-back regions measure a warm team.
    """
    threads = resolve_threads(threads)
    reps = check_count("reps", reps)
    team = Team(threads)
    regions = int(lib().charz_fork_join(reps, threads, team.ref))
    team.check()
    return regions


__all__ = [
    "CHASE_PATTERNS", "CHASE_WINDOW_BYTES", "SOURCE", "STREAM_OPS", "KernelBuild", "aligned_empty",
    "available_threads", "chase", "chase_build", "chase_cycle_length", "fill_random", "fma_accumulators",
    "fma_chains", "fma_flops", "fma_inputs", "fma_reference", "fork_join", "hugepage_hint", "kernel_build",
    "memcpy", "memcpy_bytes", "read_buffer", "read_bytes", "read_sum", "stream_add", "stream_arrays",
    "stream_bytes", "stream_copy", "stream_flops", "stream_init", "stream_scale", "stream_triad",
]
