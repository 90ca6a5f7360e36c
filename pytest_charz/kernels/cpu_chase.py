"""The pointer-chase kernels: building one-cycle chains over a buffer (random or page-local
order, optionally on transparent huge pages) and following them, for load latency by level.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import CharzError, UsageError
from .cpu_library import I64P, aligned_empty, check_array, check_count, lib, ptr


def hugepage_hint(array: np.ndarray) -> bool:
    """Ask the kernel to back ``array`` with transparent huge pages (``madvise(MADV_HUGEPAGE)``).

    Only whole 2 MiB-aligned regions can become huge pages, and only pages not yet touched, so
    call it on a fresh :func:`aligned_empty` array with ``alignment=2 << 20``. With 4 KiB pages a
    random chase over more memory than the TLBs cover (a few MiB) adds a page walk to most
    steps; huge pages remove most of that, separating cache/DRAM latency from TLB misses.
    Returns whether the kernel accepted the hint (it stays a hint: THP may be off).
    """
    return int(lib().charz_madvise_hugepage(ctypes.c_void_p(array.ctypes.data), array.nbytes)) == 0


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
    n_lines = check_count("n_lines", n_lines, 2)
    line_bytes = check_count("line_bytes", line_bytes, 8)
    if line_bytes % 8:
        raise UsageError(f"line_bytes must be a multiple of 8, got {line_bytes}")
    if pattern not in CHASE_PATTERNS:
        raise UsageError(f"pattern must be one of {', '.join(CHASE_PATTERNS)}; got {pattern!r}")
    window_lines = check_count("window_bytes", window_bytes, 2 * line_bytes) // line_bytes
    window_lines -= window_lines % 2
    words = line_bytes // 8
    buffer = aligned_empty(n_lines * words, np.int64, alignment=(2 << 20) if hugepages else 4096)
    if hugepages and not hugepage_hint(buffer):
        raise CharzError("madvise(MADV_HUGEPAGE) was refused; is transparent huge page support built in?")
    order = np.empty(n_lines, dtype=np.int64)
    if pattern == "random":
        lib().charz_chase_build(ptr(buffer, I64P), n_lines, words, seed, ptr(order, I64P))
    else:
        windows = np.empty(-(-n_lines // window_lines), dtype=np.int64)
        lib().charz_chase_build_local(ptr(buffer, I64P), n_lines, words, window_lines, seed,
                                      ptr(order, I64P), ptr(windows, I64P))
    return buffer


def chase(buffer: np.ndarray, steps: int, start: int = 0) -> int:
    """Follow the chain ``steps`` times from word index ``start``; returns the word index reached.

    Work: ``steps`` dependent loads (``Work.accesses``); the time per step is the load latency
    of the level the buffer fits in.
    """
    check_array("buffer", buffer, np.int64)
    steps = check_count("steps", steps)
    if not 0 <= start < len(buffer) or buffer[start] < 0:
        raise UsageError(f"start must be the word index of a line in the buffer, got {start!r}")
    return int(lib().charz_chase(ptr(buffer, I64P), start, steps))


def chase_cycle_length(buffer: np.ndarray, line_bytes: int = 64) -> int:
    """Length of the cycle through line 0, or -1 when a link is out of range or the chain does
    not return; equal to the line count exactly when the chase is one cycle over every line."""
    check_array("buffer", buffer, np.int64)
    words = check_count("line_bytes", line_bytes, 8) // 8
    if len(buffer) % words:
        raise UsageError(f"buffer of {len(buffer)} words is not whole lines of {line_bytes} bytes")
    return int(lib().charz_chase_cycle_length(ptr(buffer, I64P), len(buffer) // words, words))
