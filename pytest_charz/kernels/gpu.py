"""The GPU kernels of ``gpu_kernels.cu``: loading, launching, and what each launch does.

:class:`GpuKernels` compiles the source once with CuPy's ``RawModule`` and launches the kernels
on CuPy's current stream (the device backend makes that the stream it times). The accounting
functions (``*_flops``, ``*_bytes``, ``*_work``) are pure and need no GPU: they say, for the
arguments a launch takes, how many FLOPs and bytes it does, as a :class:`~pytest_charz.work.Work`.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError, check_choice, require_extra
from ..work import Work

SOURCE_PATH = Path(__file__).with_name("gpu_kernels.cu")

FMA_KERNELS = {"fp64": "fma_fp64", "fp32": "fma_fp32", "fp16": "fma_fp16x2"}
STREAM_KERNELS = {"copy": "stream_copy", "scale": "stream_scale", "add": "stream_add",
                  "triad": "stream_triad"}
KERNEL_NAMES: tuple[str, ...] = (*FMA_KERNELS.values(), *STREAM_KERNELS.values(),
                                 "copy_passes", "pointer_chase", "empty_kernel", "hold")

#: Kernel function of each short name a suite uses (``fp64`` FMA, ``triad``, ...).
KERNEL_BY_NAME: dict[str, str] = {**FMA_KERNELS, **STREAM_KERNELS}

#: Arrays each STREAM kernel reads and writes, and FLOPs per element (McCalpin's accounting).
STREAM_ARRAYS_READ = {"copy": 1, "scale": 1, "add": 2, "triad": 2}
STREAM_ARRAYS_WRITTEN = {"copy": 1, "scale": 1, "add": 1, "triad": 1}
STREAM_FLOPS_PER_ELEMENT = {"copy": 0, "scale": 1, "add": 1, "triad": 2}

#: Default FMA operands: 0 < mul < 1 keeps the chains bounded (see the .cu file).
FMA_MUL = 0.999
FMA_ADD = 0.001

#: Threads per block and resident blocks per SM that fill an SM (2048 threads on Hopper and
#: Ampere; an AMD CU holds 2560 work-items, so 8 x 256 is within its limits too).
DEFAULT_THREADS_PER_BLOCK = 256
DEFAULT_BLOCKS_PER_SM = 8


def source() -> str:
    """The CUDA C++ source of the kernels."""
    return SOURCE_PATH.read_text()


@lru_cache(maxsize=1)
def fma_chains() -> int:
    """Independent FMA chains per thread, as ``CHARZ_FMA_CHAINS`` defines them in the source."""
    match = re.search(r"^#define\s+CHARZ_FMA_CHAINS\s+(\d+)", source(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{SOURCE_PATH} does not define CHARZ_FMA_CHAINS")
    return int(match.group(1))


def _check_count(name: str, value: int, minimum: int = 0) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


# ---------------------------------------------------------------- accounting (pure)

def fma_flops(dtype: str, threads: int, iters: int) -> float:
    """FLOPs of one FMA launch of ``threads`` threads with ``iters`` iterations each.

    An FMA is 2 FLOPs; each ``fp16`` thread does packed pairs (``__hfma2``), twice the work of an
    fp32 thread. The chains are combined at the end with ``chains - 1`` (packed) adds, counted.
    """
    check_choice("dtype", dtype, FMA_KERNELS)
    threads = _check_count("threads", threads, 1)
    iters = _check_count("iters", iters)
    lanes = 2 if dtype == "fp16" else 1
    chains = fma_chains()
    return float(threads * lanes * (2 * chains * iters + (chains - 1)))


def fma_work(dtype: str, blocks: int, threads_per_block: int, iters: int) -> Work:
    """What one FMA launch does: its FLOPs (no memory traffic: the result is not stored)."""
    threads = _check_count("blocks", blocks, 1) * _check_count("threads_per_block", threads_per_block, 1)
    return Work({dtype: fma_flops(dtype, threads, iters)}, None, dtype=dtype, launches=1, op="fma",
                shape={"blocks": blocks, "threads_per_block": threads_per_block, "iters": iters,
                       "chains": fma_chains()})


def stream_bytes(op: str, n: int, itemsize: int = 8) -> int:
    """Bytes one STREAM launch moves: (arrays read + arrays written) x n x itemsize."""
    check_choice("op", op, STREAM_KERNELS)
    n = _check_count("n", n)
    return (STREAM_ARRAYS_READ[op] + STREAM_ARRAYS_WRITTEN[op]) * n * _check_count("itemsize", itemsize, 1)


def stream_flops(op: str, n: int) -> float:
    """FP64 FLOPs of one STREAM launch over ``n`` elements."""
    check_choice("op", op, STREAM_KERNELS)
    return float(STREAM_FLOPS_PER_ELEMENT[op] * _check_count("n", n))


def stream_work(op: str, n: int, level: str = "dram") -> Work:
    """What one STREAM launch over fp64 arrays of ``n`` elements does, its bytes at ``level``
    (``dram`` when the arrays are far larger than the last-level cache)."""
    return Work({"fp64": stream_flops(op, n)}, {level: stream_bytes(op, n)}, dtype="fp64",
                launches=1, op="stream", shape={"n": n, "arrays": STREAM_ARRAYS_READ[op] + STREAM_ARRAYS_WRITTEN[op]})


def chase_work(steps: int, footprint_bytes: int, level: str = "dram") -> Work:
    """One pointer-chase launch: ``steps`` dependent 4-byte loads over ``footprint_bytes``."""
    steps = _check_count("steps", steps, 1)
    return Work(None, {level: 4.0 * steps}, launches=1, op="chase", accesses=steps,
                shape={"footprint_bytes": _check_count("footprint_bytes", footprint_bytes, 1)})


def launch_work(launches: int = 1) -> Work:
    """``launches`` launches of the empty kernel: no FLOPs, no bytes."""
    return Work(None, None, launches=_check_count("launches", launches, 1), op="launch")


def fill_grid(sm_count: int, blocks_per_sm: int = DEFAULT_BLOCKS_PER_SM) -> int:
    """Blocks that fill every SM (CU) ``blocks_per_sm`` deep."""
    return _check_count("sm_count", sm_count, 1) * _check_count("blocks_per_sm", blocks_per_sm, 1)


def stream_grid(n: int, threads_per_block: int = DEFAULT_THREADS_PER_BLOCK) -> int:
    """Blocks that give each thread one double2 of a STREAM kernel over ``n`` doubles (at least
    one block): the grid that covers the arrays, as BabelStream launches its kernels."""
    pairs = _check_count("n", n) // 2
    return max(1, -(-pairs // _check_count("threads_per_block", threads_per_block, 1)))


def build_chase_permutation(slots: int, stride_elements: int = 1, seed: int = 0) -> np.ndarray:
    """A ``uint32`` array whose slots (every ``stride_elements``-th element) form one cycle.

    Element ``k * stride_elements`` holds the index of the next slot in a random order that
    visits all ``slots`` slots before returning, so a chase of ``slots`` steps touches each slot
    once and the hardware prefetchers see no pattern. The array has ``slots * stride_elements``
    elements; the ones between slots are never read.
    """
    slots = _check_count("slots", slots, 1)
    stride = _check_count("stride_elements", stride_elements, 1)
    if slots * stride > np.iinfo(np.uint32).max:
        raise UsageError(f"a chase of {slots} slots x {stride} elements does not fit 32-bit indices")
    order = np.random.default_rng(seed).permutation(slots).astype(np.uint64) * stride
    table = np.zeros(slots * stride, dtype=np.uint32)
    table[order] = np.roll(order, -1).astype(np.uint32)
    return table


# ---------------------------------------------------------------- loading and launching

class GpuKernels:
    """The compiled kernels on the current CuPy device; launches go to CuPy's current stream."""

    def __init__(self, cupy: Any = None, options: tuple[str, ...] = ()) -> None:
        self._cp = cupy if cupy is not None else require_extra("cupy", "cuda")
        self.module = self._cp.RawModule(code=source(), options=("-std=c++14", *options))
        self.functions = {name: self.module.get_function(name) for name in KERNEL_NAMES}

    def resident_blocks_per_sm(self, name: str, threads_per_block: int = DEFAULT_THREADS_PER_BLOCK) -> int:
        """Blocks of kernel ``name`` one SM holds at once (the driver's occupancy calculator, for
        this kernel's registers on this device), at most ``DEFAULT_BLOCKS_PER_SM``; that default
        where the driver cannot be asked."""
        try:
            function = self.functions[name]
            # CuPy's RawKernel holds the driver's function as ``kernel``
            pointer = getattr(function, "kernel", function).ptr
            resident = int(self._cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                pointer, threads_per_block, 0))
        except Exception:   # an old CuPy, or a HIP build without the call
            return DEFAULT_BLOCKS_PER_SM
        return max(1, min(resident, DEFAULT_BLOCKS_PER_SM))

    def grid(self, name: str, sm_count: int, share: float = 1.0) -> int:
        """Blocks of kernel ``name`` that fill every SM in one wave (``share`` of the resident
        blocks, at least one per SM: two kernels meant to run side by side take half each). A
        grid one block per SM larger than what fits runs a second, mostly idle wave."""
        if not 0 < share <= 1:
            raise UsageError(f"share must be in (0, 1], got {share!r}")
        per_sm = max(1, int(self.resident_blocks_per_sm(KERNEL_BY_NAME.get(name, name)) * share))
        return fill_grid(sm_count, per_sm)

    def fma(self, out: Any, dtype: str, iters: int, blocks: int,
            threads_per_block: int = DEFAULT_THREADS_PER_BLOCK, *, store: bool = False,
            mul: float = FMA_MUL, add: float = FMA_ADD) -> Work:
        """Launch the FMA kernel of ``dtype``; ``out`` holds one result per thread (two float16
        values per thread for fp16). Returns the launch's :func:`fma_work`."""
        check_choice("dtype", dtype, FMA_KERNELS)
        threads = blocks * threads_per_block
        needed = threads * (2 if dtype == "fp16" else 1)
        if out.size < needed:
            raise UsageError(f"out has {out.size} elements; the launch needs {needed}")
        scalar = np.float64 if dtype == "fp64" else np.float32
        self.functions[FMA_KERNELS[dtype]](
            (blocks,), (threads_per_block,),
            (out, np.int32(iters), np.int32(1 if store else 0), scalar(mul), scalar(add)))
        return fma_work(dtype, blocks, threads_per_block, iters)

    def stream(self, op: str, a: Any, b: Any, c: Any, *, scalar: float = 3.0, blocks: int | None = None,
               threads_per_block: int = DEFAULT_THREADS_PER_BLOCK) -> Work:
        """Launch STREAM ``op`` (copy: c = a; scale: b = s c; add: c = a + b; triad: a = b + s c)
        on fp64 arrays of equal size, each 16-byte aligned, over ``blocks`` blocks (default: the
        grid that covers the arrays, :func:`stream_grid`; fewer blocks loop over them). Returns
        the launch's work."""
        check_choice("op", op, STREAM_KERNELS)
        n = int(a.size)
        for name, array in (("a", a), ("b", b), ("c", c)):
            if array.size != n or array.dtype != np.float64:
                raise UsageError(f"STREAM arrays must all be float64 of {n} elements; {name} is {array.dtype} x {array.size}")
            if array.data.ptr % 16:
                raise UsageError(f"STREAM array {name} is not 16-byte aligned (vector loads need it)")
        count = np.int64(n)
        s = np.float64(scalar)
        args = {"copy": (a, c, count), "scale": (c, b, s, count), "add": (a, b, c, count),
                "triad": (a, b, c, s, count)}[op]
        if blocks is None:
            blocks = stream_grid(n, threads_per_block)
        self.functions[STREAM_KERNELS[op]]((blocks,), (threads_per_block,), args)
        return stream_work(op, n)

    def check_copy(self, a: Any, c: Any) -> None:
        """Check arrays for :meth:`copy_passes` once, outside the timed loop."""
        if a.size != c.size or a.dtype != np.float64 or c.dtype != np.float64:
            raise UsageError(f"copy arrays must be float64 of equal size; got {a.dtype} x {a.size}, {c.dtype} x {c.size}")
        if a.data.ptr % 16 or c.data.ptr % 16:
            raise UsageError("copy arrays must be 16-byte aligned (vector loads need it)")

    def copy_passes(self, a: Any, c: Any, passes: int, *, blocks: int,
                    threads_per_block: int = DEFAULT_THREADS_PER_BLOCK) -> None:
        """Launch ``c = a`` ``passes`` times over in one kernel (16 n bytes a pass). Nothing is
        checked or built here, so a timed loop of launches measures the GPU, not Python: call
        :meth:`check_copy` once first."""
        self.functions["copy_passes"]((blocks,), (threads_per_block,), (a, c, np.int64(a.size), np.int32(passes)))

    def chase(self, table: Any, steps: int, out: Any, start: int = 0) -> Work:
        """Launch one thread chasing ``steps`` loads through ``table`` (a device copy of
        :func:`build_chase_permutation`); the last index lands in ``out[0]``."""
        self.functions["pointer_chase"]((1,), (1,), (table, np.int64(steps), np.uint32(start), out))
        return chase_work(steps, int(table.nbytes))

    def hold(self, cycles: int) -> None:
        """Launch one thread that spins for ``cycles`` SM clock cycles (``hold`` in the source)."""
        self.functions["hold"]((1,), (1,), (np.int64(_check_count("cycles", cycles)),))

    def empty(self) -> None:
        """Launch the empty kernel once (one block of one thread); nothing else, so that a loop
        of launches times the launches (the case declares ``launch_work``)."""
        self.functions["empty_kernel"]((1,), (1,), ())
