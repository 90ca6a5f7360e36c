"""The CPU kernel library: loading ``cpu_kernels.c`` (compiled at first use by :mod:`.build`),
the ctypes signature of each of its functions, the facts of the build (:class:`KernelBuild`), and
the argument checks and OpenMP team plumbing that every Python wrapper shares (:mod:`.cpu`,
:mod:`.cpu_chase`, :mod:`.traffic`).

ctypes releases the GIL during a call: a kernel running in a background Python thread does not
stop a foreground one. ``threads`` is the OpenMP team size, defaulting to every core this
process may run on (:func:`available_threads`; one when the compiler could not build with
OpenMP, where asking for more is an error).
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CharzError, UsageError
from .build import BuiltArtifact, load

SOURCE = Path(__file__).with_name("cpu_kernels.c")

#: The ctypes pointer types of the kernels' array arguments (float64, float32, int64, int32).
F64P = ctypes.POINTER(ctypes.c_double)
F32P = ctypes.POINTER(ctypes.c_float)
I64P = ctypes.POINTER(ctypes.c_int64)
I32P = ctypes.POINTER(ctypes.c_int32)
_intp = ctypes.POINTER(ctypes.c_int)
_i64, _u64, _int, _dbl = ctypes.c_int64, ctypes.c_uint64, ctypes.c_int, ctypes.c_double

_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "charz_vector_bytes": (_int, []),
    "charz_fma_chains": (_int, []),
    "charz_openmp": (_int, []),
    "charz_max_threads": (_int, []),
    "charz_spin_chunk_bytes": (_i64, []),
    "charz_fma_f64": (_dbl, [F64P, _dbl, _dbl, _i64, _int, _intp]),
    "charz_fma_f32": (_dbl, [F32P, ctypes.c_float, ctypes.c_float, _i64, _int, _intp]),
    "charz_fill_random": (None, [F64P, _i64, _u64, _int, _intp]),
    "charz_stream_init": (None, [F64P, F64P, F64P, _i64, _u64, _int, _intp]),
    "charz_stream_copy": (None, [F64P, F64P, _i64, _i64, _int, _intp]),
    "charz_stream_scale": (None, [F64P, F64P, _dbl, _i64, _i64, _int, _intp]),
    "charz_stream_add": (None, [F64P, F64P, F64P, _i64, _i64, _int, _intp]),
    "charz_stream_triad": (None, [F64P, F64P, F64P, _dbl, _i64, _i64, _int, _intp]),
    "charz_read_sum": (_dbl, [F64P, _i64, _i64, _int, _intp]),
    "charz_read_init": (None, [F64P, _i64, _u64, _int, _intp]),
    "charz_chase_build": (_i64, [I64P, _i64, _i64, _u64, I64P]),
    "charz_chase_build_local": (_i64, [I64P, _i64, _i64, _i64, _u64, I64P, I64P]),
    "charz_chase": (_i64, [I64P, _i64, _i64]),
    "charz_chase_cycle_length": (_i64, [I64P, _i64, _i64]),
    "charz_madvise_hugepage": (_int, [ctypes.c_void_p, ctypes.c_size_t]),
    "charz_memcpy": (None, [ctypes.c_void_p, ctypes.c_void_p, _i64, _int, _intp]),
    "charz_spin": (_dbl, [F64P, _i64, _int, _dbl, I32P, _int, I64P, F64P, _intp]),
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


def lib() -> ctypes.CDLL:
    """The loaded kernel library (built at first use), every function's signature set."""
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


def resolve_threads(threads: int | None) -> int:
    """The OpenMP team size to run: ``threads`` checked (a positive int; above one only when the
    library was built with OpenMP, else CharzError), or by default every available CPU (one
    without OpenMP)."""
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


def check_count(name: str, value: int, minimum: int = 0) -> int:
    """``value`` as an int when it is an integer of at least ``minimum``; UsageError naming ``name``."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def check_array(name: str, array: Any, dtype: Any, writeable: bool = False) -> np.ndarray:
    """``array`` when it is a contiguous 1-D numpy array of ``dtype`` (and writeable when the kernel
    writes it); UsageError naming ``name`` and what it got instead."""
    if not isinstance(array, np.ndarray) or array.dtype != np.dtype(dtype) or array.ndim != 1:
        raise UsageError(f"{name} must be a 1-D numpy array of {np.dtype(dtype).name}, got {describe(array)}")
    if not array.flags.c_contiguous:
        raise UsageError(f"{name} must be contiguous (use np.ascontiguousarray)")
    if writeable and not array.flags.writeable:
        raise UsageError(f"{name} is written by the kernel and must be writeable")
    return array


def check_same_length(**arrays: np.ndarray) -> int:
    """The common length of ``arrays``; UsageError listing each one's length when they differ."""
    lengths = {name: len(array) for name, array in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise UsageError(f"arrays must have the same length, got {lengths}")
    return next(iter(lengths.values()))


def describe(value: Any) -> str:
    """A short description of an argument for an error message (an array's dtype and shape)."""
    if isinstance(value, np.ndarray):
        return f"an array of {value.dtype.name} with shape {value.shape}"
    return repr(value)


def ptr(array: np.ndarray, kind: Any) -> Any:
    """The data pointer of ``array`` as the ctypes pointer type ``kind`` (:data:`F64P`...)."""
    return array.ctypes.data_as(kind)


class Team:
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
    check_count("n", n)
    if alignment < 1 or alignment & (alignment - 1):
        raise UsageError(f"alignment must be a power of two, got {alignment!r}")
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + alignment, dtype=np.uint8)
    offset = (-raw.ctypes.data) % alignment
    return raw[offset : offset + n * itemsize].view(dtype)
