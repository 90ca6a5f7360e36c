"""CPU microbenchmark kernels over numpy arrays: FMA peak, STREAM, read bandwidth by working set,
pointer chase, memcpy, and OpenMP fork/join. The background memory traffic that contention cases
run beside a measured kernel is in :mod:`.traffic`.

The kernels are C (``cpu_kernels.c``) compiled at first use (see :mod:`.build`) and called through
ctypes, which releases the GIL: a kernel running in a background Python thread does not stop a
foreground one. Every kernel takes ``threads``, the OpenMP team size, defaulting to every core
this process may run on (:func:`available_threads`; one when the compiler could not build with
OpenMP, where asking for more is an error). Each function's docstring says the FLOPs
and bytes it does, and the ``*_flops`` / ``*_bytes`` helpers compute them, so a suite can turn a
call into a :class:`~pytest_charz.work.Work`.

Byte counts follow STREAM's convention: bytes the program reads plus bytes it writes. A plain
store to a line that is not in cache first reads the line (write-allocate), so DRAM actually
moves one more read per written byte; ``write_allocate=True`` counts that traffic too. These
kernels never force non-temporal stores.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CharzError, UsageError, check_choice
from .build import BuiltArtifact, load

SOURCE = Path(__file__).with_name("cpu_kernels.c")
STREAM_OPS = ("copy", "scale", "add", "triad")

# Arrays read and arrays written per element of each STREAM loop.
_STREAM_ARRAYS = {"copy": (1, 1), "scale": (1, 1), "add": (2, 1), "triad": (2, 1)}
_STREAM_FLOPS_PER_ELEMENT = {"copy": 0, "scale": 1, "add": 1, "triad": 2}

_f64p = ctypes.POINTER(ctypes.c_double)
_f32p = ctypes.POINTER(ctypes.c_float)
_i64p = ctypes.POINTER(ctypes.c_int64)
_i32p = ctypes.POINTER(ctypes.c_int32)
_intp = ctypes.POINTER(ctypes.c_int)
_i64, _u64, _int, _dbl = ctypes.c_int64, ctypes.c_uint64, ctypes.c_int, ctypes.c_double

_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "charz_vector_bytes": (_int, []),
    "charz_fma_chains": (_int, []),
    "charz_openmp": (_int, []),
    "charz_max_threads": (_int, []),
    "charz_spin_chunk_bytes": (_i64, []),
    "charz_fma_f64": (_dbl, [_f64p, _dbl, _dbl, _i64, _int, _intp]),
    "charz_fma_f32": (_dbl, [_f32p, ctypes.c_float, ctypes.c_float, _i64, _int, _intp]),
    "charz_fill_random": (None, [_f64p, _i64, _u64, _int, _intp]),
    "charz_stream_init": (None, [_f64p, _f64p, _f64p, _i64, _u64, _int, _intp]),
    "charz_stream_copy": (None, [_f64p, _f64p, _i64, _i64, _int, _intp]),
    "charz_stream_scale": (None, [_f64p, _f64p, _dbl, _i64, _i64, _int, _intp]),
    "charz_stream_add": (None, [_f64p, _f64p, _f64p, _i64, _i64, _int, _intp]),
    "charz_stream_triad": (None, [_f64p, _f64p, _f64p, _dbl, _i64, _i64, _int, _intp]),
    "charz_read_sum": (_dbl, [_f64p, _i64, _i64, _int, _intp]),
    "charz_read_init": (None, [_f64p, _i64, _u64, _int, _intp]),
    "charz_chase_build": (_i64, [_i64p, _i64, _i64, _u64, _i64p]),
    "charz_chase_build_local": (_i64, [_i64p, _i64, _i64, _i64, _u64, _i64p, _i64p]),
    "charz_chase": (_i64, [_i64p, _i64, _i64]),
    "charz_chase_cycle_length": (_i64, [_i64p, _i64, _i64]),
    "charz_madvise_hugepage": (_int, [ctypes.c_void_p, ctypes.c_size_t]),
    "charz_memcpy": (None, [ctypes.c_void_p, ctypes.c_void_p, _i64, _int, _intp]),
    "charz_spin": (_dbl, [_f64p, _i64, _int, _dbl, _i32p, _int, _i64p, _f64p, _intp]),
    "charz_fork_join": (_i64, [_i64, _int, _intp]),
}


@dataclass(frozen=True)
class KernelBuild:
    """Facts about the loaded kernel library: how it was built, SIMD width, FMA chains per
    thread, OpenMP."""

    artifact: BuiltArtifact
    vector_bytes: int
    fma_chains: int
    openmp_version: int

    @property
    def openmp(self) -> bool:
        return self.openmp_version > 0


@lru_cache(maxsize=1)
def _loaded() -> tuple[ctypes.CDLL, BuiltArtifact]:
    library, artifact = load(SOURCE)
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(library, name)
        function.restype = restype
        function.argtypes = argtypes
    return library, artifact


def _lib() -> ctypes.CDLL:
    return _loaded()[0]


@lru_cache(maxsize=1)
def kernel_build() -> KernelBuild:
    """Build (at first use) and describe the kernel library."""
    library, artifact = _loaded()
    return KernelBuild(
        artifact=artifact,
        vector_bytes=int(library.charz_vector_bytes()),
        fma_chains=int(library.charz_fma_chains()),
        openmp_version=int(library.charz_openmp()),
    )


def available_threads() -> int:
    """The number of CPUs this process may run on (the default ``threads`` of every kernel)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------- argument checks and plumbing


def _resolve_threads(threads: int | None) -> int:
    if threads is None:
        return available_threads() if kernel_build().openmp else 1
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise UsageError(f"threads must be a positive int, got {threads!r}")
    if threads > 1 and not kernel_build().openmp:
        raise CharzError(
            f"threads={threads} needs OpenMP, but the kernels were built without it "
            "(the compiler rejected -fopenmp); install gcc with libgomp"
        )
    return threads


def _check_count(name: str, value: int, minimum: int = 0) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _check_array(name: str, array: Any, dtype: Any, writeable: bool = False) -> np.ndarray:
    if not isinstance(array, np.ndarray) or array.dtype != np.dtype(dtype) or array.ndim != 1:
        raise UsageError(f"{name} must be a 1-D numpy array of {np.dtype(dtype).name}, got {_describe(array)}")
    if not array.flags.c_contiguous:
        raise UsageError(f"{name} must be contiguous (use np.ascontiguousarray)")
    if writeable and not array.flags.writeable:
        raise UsageError(f"{name} is written by the kernel and must be writeable")
    return array


def _check_same_length(**arrays: np.ndarray) -> int:
    lengths = {name: len(array) for name, array in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise UsageError(f"arrays must have the same length, got {lengths}")
    return next(iter(lengths.values()))


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of {value.dtype.name} with shape {value.shape}"
    return repr(value)


def _ptr(array: np.ndarray, kind: Any) -> Any:
    return array.ctypes.data_as(kind)


class _Team:
    """The team-size out-parameter of a kernel call, checked against the threads asked for."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.size = ctypes.c_int(0)

    @property
    def ref(self) -> Any:
        return ctypes.byref(self.size)

    def check(self) -> None:
        if self.size.value != self.threads:
            raise CharzError(
                f"OpenMP ran {self.size.value} threads where {self.threads} were asked for "
                "(is OMP_THREAD_LIMIT or OMP_DYNAMIC set?)"
            )


def aligned_empty(n: int, dtype: Any = np.float64, alignment: int = 4096) -> np.ndarray:
    """An uninitialised 1-D array of ``n`` items whose data starts at a multiple of ``alignment``.

    Large arrays come from fresh, untouched pages, so the first kernel to write them decides
    which thread's memory node holds each page (first touch).
    """
    _check_count("n", n)
    if alignment < 1 or alignment & (alignment - 1):
        raise UsageError(f"alignment must be a power of two, got {alignment!r}")
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + alignment, dtype=np.uint8)
    offset = (-raw.ctypes.data) % alignment
    return raw[offset : offset + n * itemsize].view(dtype)


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
    threads = _resolve_threads(threads)
    iters = _check_count("iters", iters)
    single = isinstance(init, np.ndarray) and init.dtype == np.float32
    dtype = "fp32" if single else "fp64"
    function = _lib().charz_fma_f32 if single else _lib().charz_fma_f64
    pointer: Any = _f32p if single else _f64p
    _check_array("init", init, np.float32 if single else np.float64)
    if len(init) != fma_accumulators(dtype):
        raise UsageError(f"init must have fma_accumulators({dtype!r}) = {fma_accumulators(dtype)} items, got {len(init)}")
    team = _Team(threads)
    checksum = float(function(_ptr(init, pointer), a, b, iters, threads, team.ref))
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
    threads = _resolve_threads(threads)
    for name, array in (("a", a), ("b", b), ("c", c)):
        _check_array(name, array, np.float64, writeable=True)
    n = _check_same_length(a=a, b=b, c=c)
    team = _Team(threads)
    _lib().charz_stream_init(_ptr(a, _f64p), _ptr(b, _f64p), _ptr(c, _f64p), n, seed, threads, team.ref)
    team.check()


def stream_arrays(n: int, seed: int = 0, threads: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three page-aligned arrays of ``n`` doubles, first touched and filled by :func:`stream_init`."""
    a, b, c = (aligned_empty(_check_count("n", n, 1)) for _ in range(3))
    stream_init(a, b, c, seed=seed, threads=threads)
    return a, b, c


def stream_copy(c: np.ndarray, a: np.ndarray, reps: int = 1, threads: int | None = None) -> None:
    """``c[:] = a``, ``reps`` times. Bytes per pass: :func:`stream_bytes` ``("copy", n)``; no FLOPs."""
    threads, n, team = _stream_args(reps, threads, c=c, a=a)
    _lib().charz_stream_copy(_ptr(c, _f64p), _ptr(a, _f64p), n, reps, threads, team.ref)
    team.check()


def stream_scale(b: np.ndarray, c: np.ndarray, scalar: float, reps: int = 1, threads: int | None = None) -> None:
    """``b[:] = scalar * c``, ``reps`` times. Per pass: 16 B (24 with write-allocate) and 1 FLOP per element."""
    threads, n, team = _stream_args(reps, threads, b=b, c=c)
    _lib().charz_stream_scale(_ptr(b, _f64p), _ptr(c, _f64p), scalar, n, reps, threads, team.ref)
    team.check()


def stream_add(c: np.ndarray, a: np.ndarray, b: np.ndarray, reps: int = 1, threads: int | None = None) -> None:
    """``c[:] = a + b``, ``reps`` times. Per pass: 24 B (32 with write-allocate) and 1 FLOP per element."""
    threads, n, team = _stream_args(reps, threads, c=c, a=a, b=b)
    _lib().charz_stream_add(_ptr(c, _f64p), _ptr(a, _f64p), _ptr(b, _f64p), n, reps, threads, team.ref)
    team.check()


def stream_triad(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, scalar: float, reps: int = 1, threads: int | None = None
) -> None:
    """``a[:] = b + scalar * c``, ``reps`` times. Per pass: 24 B (32 with write-allocate) and 2 FLOPs per element."""
    threads, n, team = _stream_args(reps, threads, a=a, b=b, c=c)
    _lib().charz_stream_triad(_ptr(a, _f64p), _ptr(b, _f64p), _ptr(c, _f64p), scalar, n, reps, threads, team.ref)
    team.check()


def _stream_args(reps: int, threads: int | None, **arrays: np.ndarray) -> tuple[int, int, _Team]:
    resolved = _resolve_threads(threads)
    _check_count("reps", reps, 1)
    for index, (name, array) in enumerate(arrays.items()):
        _check_array(name, array, np.float64, writeable=index == 0)
    n = _check_same_length(**arrays)
    return resolved, n, _Team(resolved)


# ---------------------------------------------------------------- 3. read bandwidth by working set


def read_buffer(nbytes: int, seed: int = 0, threads: int | None = None) -> np.ndarray:
    """A page-aligned float64 buffer of ``nbytes`` (rounded down to whole doubles) filled with
    values in [1, 2), each thread first-touching the share :func:`read_sum` gives it."""
    threads = _resolve_threads(threads)
    n = _check_count("nbytes", nbytes, 8) // 8
    buffer = aligned_empty(n)
    team = _Team(threads)
    _lib().charz_read_init(_ptr(buffer, _f64p), n, seed, threads, team.ref)
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
    threads = _resolve_threads(threads)
    _check_array("buffer", buffer, np.float64)
    reps = _check_count("reps", reps, 1)
    team = _Team(threads)
    total = float(_lib().charz_read_sum(_ptr(buffer, _f64p), len(buffer), reps, threads, team.ref))
    team.check()
    return total


def read_bytes(buffer: np.ndarray, reps: int = 1) -> float:
    """Bytes one :func:`read_sum` call reads."""
    return float(buffer.nbytes) * reps


# ---------------------------------------------------------------- 4. pointer chase


def hugepage_hint(array: np.ndarray) -> bool:
    """Ask the kernel to back ``array`` with transparent huge pages (``madvise(MADV_HUGEPAGE)``).

    Only whole 2 MiB-aligned regions can become huge pages, and only pages not yet touched, so
    call it on a fresh :func:`aligned_empty` array with ``alignment=2 << 20``. With 4 KiB pages a
    random chase over more memory than the TLBs cover (a few MiB) adds a page walk to most
    steps; huge pages remove most of that, separating cache/DRAM latency from TLB misses.
    Returns whether the kernel accepted the hint (it stays a hint: THP may be off).
    """
    return int(_lib().charz_madvise_hugepage(ctypes.c_void_p(array.ctypes.data), array.nbytes)) == 0


#: Chase orders: ``random`` (one uniformly random cycle over the whole buffer) and ``page-local``
#: (random inside a window of a few pages at a time, see :func:`chase_build`).
CHASE_PATTERNS = ("random", "page-local")
#: Window of the page-local order: 16 pages of 4 KiB, well inside the first-level data TLB.
CHASE_WINDOW_BYTES = 64 * 1024


def chase_build(n_lines: int, line_bytes: int = 64, seed: int = 0, hugepages: bool = False,
                pattern: str = "random", window_bytes: int = CHASE_WINDOW_BYTES) -> np.ndarray:
    """A pointer-chase buffer: ``n_lines`` lines of ``line_bytes``, linked in one cycle.

    The result is an int64 array; the first word of each line holds the word index of the next
    line, and the cycle visits every line once per lap. ``pattern`` orders the lap:

    - ``random``: a uniformly random cyclic permutation (Sattolo's algorithm); past the reach
      of the TLBs nearly every load also misses the TLB (a page walk, two-dimensional under
      virtualisation), so the latency of a large buffer is cache miss plus TLB miss.
    - ``page-local``: the lap walks the even lines, then the odd ones; each half visits windows
      of ``window_bytes`` in random order and the window's lines of that parity in random
      order. No stride for a prefetcher to follow; the other line of a 128-byte pair (which
      adjacent-line prefetchers bring in with it) comes half a lap later; and a page's TLB
      miss is shared by the 1/2 x page/line loads of its half-lap (32 with 4 KiB pages and
      64-byte lines), so the latency is that of the memory level, with a TLB miss on about 3%
      of loads instead of nearly all.

    ``hugepages`` asks for transparent huge pages first (see :func:`hugepage_hint`) and raises
    :class:`~pytest_charz.errors.CharzError` when the kernel refuses.
    """
    n_lines = _check_count("n_lines", n_lines, 2)
    line_bytes = _check_count("line_bytes", line_bytes, 8)
    if line_bytes % 8:
        raise UsageError(f"line_bytes must be a multiple of 8, got {line_bytes}")
    if pattern not in CHASE_PATTERNS:
        raise UsageError(f"pattern must be one of {', '.join(CHASE_PATTERNS)}; got {pattern!r}")
    window_lines = _check_count("window_bytes", window_bytes, 2 * line_bytes) // line_bytes
    window_lines -= window_lines % 2
    words = line_bytes // 8
    buffer = aligned_empty(n_lines * words, np.int64, alignment=(2 << 20) if hugepages else 4096)
    if hugepages and not hugepage_hint(buffer):
        raise CharzError("madvise(MADV_HUGEPAGE) was refused; is transparent huge page support built in?")
    order = np.empty(n_lines, dtype=np.int64)
    if pattern == "random":
        _lib().charz_chase_build(_ptr(buffer, _i64p), n_lines, words, seed, _ptr(order, _i64p))
    else:
        windows = np.empty(-(-n_lines // window_lines), dtype=np.int64)
        _lib().charz_chase_build_local(_ptr(buffer, _i64p), n_lines, words, window_lines, seed,
                                       _ptr(order, _i64p), _ptr(windows, _i64p))
    return buffer


def chase(buffer: np.ndarray, steps: int, start: int = 0) -> int:
    """Follow the chain ``steps`` times from word index ``start``; returns the word index reached.

    Work: ``steps`` dependent loads (``Work.accesses``); the time per step is the load latency
    of the level the buffer fits in.
    """
    _check_array("buffer", buffer, np.int64)
    steps = _check_count("steps", steps)
    if not 0 <= start < len(buffer) or buffer[start] < 0:
        raise UsageError(f"start must be the word index of a line in the buffer, got {start!r}")
    return int(_lib().charz_chase(_ptr(buffer, _i64p), start, steps))


def chase_cycle_length(buffer: np.ndarray, line_bytes: int = 64) -> int:
    """Length of the cycle through line 0, or -1 when a link is out of range or the chain does
    not return; equal to the line count exactly when the chase is one cycle over every line."""
    _check_array("buffer", buffer, np.int64)
    words = _check_count("line_bytes", line_bytes, 8) // 8
    if len(buffer) % words:
        raise UsageError(f"buffer of {len(buffer)} words is not whole lines of {line_bytes} bytes")
    return int(_lib().charz_chase_cycle_length(_ptr(buffer, _i64p), len(buffer) // words, words))


# ---------------------------------------------------------------- 5. memcpy


def memcpy(dst: np.ndarray, src: np.ndarray, threads: int | None = None) -> None:
    """Copy ``src`` into ``dst`` (same byte size) with the C library's ``memcpy``, split into one
    contiguous chunk per thread. Bytes: ``2 * nbytes`` (read + write; 3x with write-allocate,
    though large copies may use non-temporal stores that skip it): :func:`memcpy_bytes`."""
    threads = _resolve_threads(threads)
    for name, array in (("dst", dst), ("src", src)):
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            raise UsageError(f"{name} must be a contiguous numpy array, got {_describe(array)}")
    if not dst.flags.writeable:
        raise UsageError("dst must be writeable")
    if dst.nbytes != src.nbytes:
        raise UsageError(f"dst and src must have the same size in bytes, got {dst.nbytes} and {src.nbytes}")
    team = _Team(threads)
    _lib().charz_memcpy(ctypes.c_void_p(dst.ctypes.data), ctypes.c_void_p(src.ctypes.data), src.nbytes, threads, team.ref)
    team.check()


def memcpy_bytes(nbytes: int, write_allocate: bool = False) -> float:
    """Bytes a :func:`memcpy` of ``nbytes`` moves."""
    return float(nbytes) * (3 if write_allocate else 2)


def fill_random(array: np.ndarray, seed: int = 0, threads: int | None = None) -> None:
    """Fill a float64 array with pseudo-random values in [1, 2), first-touched by ``threads``."""
    threads = _resolve_threads(threads)
    _check_array("array", array, np.float64, writeable=True)
    team = _Team(threads)
    _lib().charz_fill_random(_ptr(array, _f64p), len(array), seed, threads, team.ref)
    team.check()


# ---------------------------------------------------------------- 6. fork/join


def fork_join(reps: int, threads: int | None = None) -> int:
    """Open and close ``reps`` OpenMP parallel regions with an empty body; returns ``reps``.

    Time / ``reps`` is the cost of waking a team of ``threads`` and joining it (Work: ``reps``
    launches, no FLOPs or bytes). With OMP_WAIT_POLICY unset, workers spin a while after each
    region, so back-to-back regions measure a warm team.
    """
    threads = _resolve_threads(threads)
    reps = _check_count("reps", reps)
    team = _Team(threads)
    regions = int(_lib().charz_fork_join(reps, threads, team.ref))
    team.check()
    return regions
