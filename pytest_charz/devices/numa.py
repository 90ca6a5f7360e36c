"""NUMA nodes of the host: which CPUs and memory each has, and memory placed on a chosen node.

A copy between the memories of two nodes crosses the socket (or die) interconnect; the movement
suite measures it where the host has more than one node with memory. Linux only:

- :func:`numa_nodes` reads ``/sys/devices/system/node`` (a node may have memory and no CPUs,
  as CXL or HBM-only nodes do).
- :func:`node_array` returns an array whose pages sit on one node: ``mbind(MPOL_BIND)`` on the
  fresh, untouched pages before they are first written; where the system call is not there,
  the pages are first written by a thread pinned to the node's CPUs (first touch).
- :func:`page_nodes` asks the kernel (``move_pages`` with no target nodes) where sampled pages
  of an array are, so a case can check the placement it relies on instead of assuming it.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import CharzError, UsageError

NODE_ROOT = Path("/sys/devices/system/node")
# System call numbers (asm-generic for aarch64).
_SYSCALLS = {"x86_64": {"mbind": 237, "move_pages": 279}, "aarch64": {"mbind": 235, "move_pages": 239}}
_MPOL_BIND = 2
_MPOL_MF_STRICT = 1
_MPOL_MF_MOVE = 2


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node: its id, its CPUs (possibly none) and whether it has memory."""

    node: int
    cpus: tuple[int, ...]
    has_memory: bool


def parse_cpulist(text: str) -> tuple[int, ...]:
    """``"0-3,8,10-11"`` -> (0, 1, 2, 3, 8, 10, 11); an empty list is ()."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise UsageError(f"not a CPU list: {text.strip()!r}") from None
        if high < low:
            raise UsageError(f"not a CPU list: {text.strip()!r}")
        cpus.extend(range(low, high + 1))
    return tuple(cpus)


def numa_nodes(root: Path = NODE_ROOT) -> dict[int, NumaNode]:
    """The host's online NUMA nodes by id; empty where the kernel shows none (no NUMA support).

    A node has memory when the kernel lists it in ``has_memory`` (or, where that file is
    missing, when its ``meminfo`` reports a non-zero ``MemTotal``).
    """
    if not root.is_dir():
        return {}
    with_memory: set[int] | None = None
    listed = root / "has_memory"
    if listed.is_file():
        with_memory = set(parse_cpulist(listed.read_text()))
    nodes = {}
    for path in sorted(root.glob("node[0-9]*")):
        node = int(path.name[4:])
        cpulist = path / "cpulist"
        cpus = parse_cpulist(cpulist.read_text()) if cpulist.is_file() else ()
        if with_memory is not None:
            has_memory = node in with_memory
        else:
            meminfo = path / "meminfo"
            has_memory = meminfo.is_file() and any(
                line.split()[-2] != "0" for line in meminfo.read_text().splitlines() if "MemTotal" in line)
        nodes[node] = NumaNode(node, cpus, has_memory)
    return nodes


@contextlib.contextmanager
def pinned(cpus: tuple[int, ...]) -> Iterator[None]:
    """Run the calling thread on ``cpus`` only, and restore its affinity on leaving."""
    if not cpus:
        raise UsageError("pinned: no CPUs to run on")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _syscall(name: str) -> tuple[ctypes.CDLL, int] | None:
    number = _SYSCALLS.get(platform.machine(), {}).get(name)
    if number is None:
        return None
    return ctypes.CDLL(None, use_errno=True), number


def _page_bytes() -> int:
    return int(os.sysconf("SC_PAGE_SIZE"))


def _bind(array: np.ndarray, node: int) -> bool:
    """``mbind(MPOL_BIND)`` of the array's whole pages to ``node``; False where unavailable."""
    found = _syscall("mbind")
    if found is None:
        return False
    libc, number = found
    words = node // 64 + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // 64] = 1 << (node % 64)
    result = libc.syscall(number, ctypes.c_void_p(array.ctypes.data), ctypes.c_ulong(array.nbytes),
                          ctypes.c_int(_MPOL_BIND), mask, ctypes.c_ulong(64 * words + 1),
                          ctypes.c_uint(_MPOL_MF_STRICT | _MPOL_MF_MOVE))
    if result != 0:
        errno = ctypes.get_errno()
        if errno in (38, 1):          # ENOSYS (no NUMA in this kernel), EPERM (seccomp): first touch
            return False
        raise CharzError(f"mbind to NUMA node {node} failed: {os.strerror(errno)}")
    return True


def node_array(nbytes: int, node: int, nodes: dict[int, NumaNode] | None = None) -> tuple[np.ndarray, str]:
    """A zeroed uint8 array of ``nbytes`` whose pages are placed on NUMA ``node``, and how:
    ``"mbind"`` or ``"first-touch"`` (written by this thread pinned to the node's CPUs)."""
    nodes = numa_nodes() if nodes is None else nodes
    if node not in nodes:
        raise UsageError(f"no NUMA node {node}; the host has {sorted(nodes) or 'none'}")
    if nbytes < 1:
        raise UsageError(f"nbytes must be positive, got {nbytes}")
    page = _page_bytes()
    raw = np.empty(nbytes + page, dtype=np.uint8)
    start = (-raw.ctypes.data) % page
    array = raw[start : start + nbytes]
    if _bind(array, node):
        array.fill(0)
        return array, "mbind"
    if not nodes[node].cpus:
        raise CharzError(f"NUMA node {node} has no CPUs and mbind is unavailable: its memory cannot be chosen")
    with pinned(nodes[node].cpus):
        array.fill(0)
    return array, "first-touch"


def page_nodes(array: np.ndarray, samples: int = 64) -> list[int] | None:
    """The node of ``samples`` pages spread over ``array`` (negative: the kernel's -errno for a
    page, e.g. not yet touched); None where ``move_pages`` is unavailable."""
    found = _syscall("move_pages")
    if found is None or array.nbytes == 0:
        return None
    libc, number = found
    page = _page_bytes()
    first = array.ctypes.data - array.ctypes.data % page
    last = array.ctypes.data + array.nbytes - 1
    count_pages = (last - first) // page + 1
    picks = sorted({int(i) for i in np.linspace(0, count_pages - 1, min(samples, count_pages))})
    pages = (ctypes.c_void_p * len(picks))(*[first + i * page for i in picks])
    status = (ctypes.c_int * len(picks))()
    result = libc.syscall(number, 0, ctypes.c_ulong(len(picks)), pages, None, status, 0)
    if result != 0:
        errno = ctypes.get_errno()
        if errno in (38, 1):
            return None
        raise CharzError(f"move_pages failed: {os.strerror(errno)}")
    return list(status)
