"""Movement: copies over sizes, for the alpha-beta fit (latency + size / bandwidth) per kind.

CPU-only host: the C library's ``memcpy`` on one thread, as a program's own copies run, from
4 KiB to twice the last-level cache or 1 GiB (capped by available memory), kind ``host``: small copies give the per-call cost,
large ones one core's copy bandwidth (the all-core copy bandwidth is STREAM copy's, in
``test_memory``). One thread also keeps the fit clean: a team of threads would add its wake-up,
and on a loaded machine a preempted worker, to every small copy.
Transfers count each byte once (``Work.transfers``); the memory traffic is twice that (read and
write), three times where stores allocate lines.

Across NUMA nodes (hosts with more than one node with memory): ``memcpy`` on one thread pinned
to the destination node's CPUs, from a buffer bound to another node (``mbind``; the case checks
with ``move_pages`` that the sampled pages sit where it asked), kind ``numa``: the bandwidth and
per-call cost of pulling memory across the socket or die interconnect. Pairs: every ordered pair
of up to four nodes, else each node to and from node 0. A host with one node skips them.

GPU (cuda, rocm): host-to-device and device-to-host copies from pageable and from pinned host
memory, and device-to-device copies, through ``Tensor.copy_`` on the device's stream (pinned
copies are asynchronous, the events bracket them). Pageable copies go through the driver's
staging buffers and are synchronous to the host. The profile fits pinned transfers per kind.

Between two GPUs (cuda, rocm; more than one device visible): peer copies from the bound GPU to
its peer (the next visible index, wrapping around), back, and both directions at once on two
pairs of streams, timed together (``gpu_common.PeerCopy``: PyTorch's cross-device copy, device
events on the destination's stream). Kind ``peer``; ``shape.direction`` says which; a
bidirectional case moves ``bytes_per_direction`` each way and counts both (``shape.bytes``, the
Work's ``peer`` bytes), so the profile reads its bandwidth as the two directions' sum.
``shape.peer_access`` and ``shape.path`` (``direct``, or ``through-host`` where the driver stages
the copy because the GPUs cannot reach each other) say which path ran. One GPU: the cases skip.

Every case checks that the destination holds the source, on random data from the case's seed
(a random block of a little over 1 MiB repeated: the odd period shows shifted copies).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from _sizes import GIB, KIB, QUICK_MAX_BYTES, format_bytes_id, not_this_backend, plan_for
from pytest_charz import Work

MAX_COPY_BYTES = 1 * GIB
PATTERN_BYTES = (1 << 20) + 7
NUMA_SIZES = (1 << 20, 16 << 20, 256 << 20)
NUMA_ALL_PAIRS_MAX = 4
GPU_KINDS = (("h2d", False), ("h2d", True), ("d2h", False), ("d2h", True), ("d2d", False))


#: A host copy this many times the LLC reads and writes main memory only: the sweep ends there.
COPY_LLC_MULTIPLE = 2
#: Host copies from this size up take a tenth of a second or more a call: a budget that fits a CI's samples.
LARGE_COPY_BYTES = 256 << 20
LARGE_COPY_MAX_TIME_S = 1.0


def copy_sizes(cap_bytes: int, llc_bytes: int | None = None) -> list[int]:
    """4 KiB, 16 KiB, ... (x4) up to 1 GiB or ``cap_bytes``; with ``llc_bytes``, ending at the
    first size of at least ``COPY_LLC_MULTIPLE`` x the LLC (larger copies only cost time to set up:
    a 1 GiB copy took 10 s of allocation and checks on a 2-vCPU guest with a 32 MiB LLC)."""
    sizes, size = [], 4 * KIB
    while size <= min(MAX_COPY_BYTES, cap_bytes):
        sizes.append(size)
        if llc_bytes and size >= COPY_LLC_MULTIPLE * llc_bytes:
            break
        size *= 4
    return sizes


def in_quick_copies(size_bytes: int) -> bool:
    """Quick runs keep every 16x step from 4 KiB (4 KiB, 64 KiB, 1 MiB, ...) up to 64 MiB on the
    host; the GPU's quick set goes one step further, to 256 MiB, where bandwidth dominates."""
    return size_bytes <= QUICK_MAX_BYTES and round(math.log2(size_bytes / (4 * KIB))) % 4 == 0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    plan = plan_for(metafunc.config)
    if "host_copy_bytes" in metafunc.fixturenames:
        if plan.backend == "cpu":
            cases = [pytest.param(size, id=format_bytes_id(size),
                                  marks=([] if in_quick_copies(size) else [pytest.mark.charz_slow])
                                  + ([pytest.mark.charz(max_time=LARGE_COPY_MAX_TIME_S)] if size >= LARGE_COPY_BYTES else []))
                     for size in copy_sizes(plan.cap_bytes, plan.llc_bytes)]
        else:
            cases = not_this_backend(f"a host memcpy case; the bound device is {plan.backend}, see test_transfer_gpu")
        metafunc.parametrize("host_copy_bytes", cases)
    if "numa_copy" in metafunc.fixturenames:
        from pytest_charz.devices.numa import numa_nodes

        nodes = numa_nodes()
        pairs = numa_pairs(nodes) if plan.backend == "cpu" else []
        if pairs:
            cases = [pytest.param((s, d, size), id=f"node{s}-to-node{d}-{format_bytes_id(size)}",
                                  marks=[] if size == NUMA_SIZES[1] else [pytest.mark.charz_slow])
                     for s, d in pairs for size in NUMA_SIZES if size <= plan.cap_bytes]
        elif plan.backend != "cpu":
            cases = not_this_backend(f"a host NUMA copy; the bound device is {plan.backend}")
        else:
            with_memory = [f"node{n}" for n, node in sorted(nodes.items()) if node.has_memory]
            cases = [pytest.param(None, id="n/a", marks=pytest.mark.skip(
                reason=f"one NUMA node with memory ({', '.join(with_memory) or 'no NUMA information'}): "
                       "no cross-node copies"))]
        metafunc.parametrize("numa_copy", cases)
    if "peer_transfer" in metafunc.fixturenames:
        bound, peers = _visible_peers(metafunc.config, plan.backend)
        metafunc.parametrize("peer_transfer", peer_transfer_params(plan.backend, bound, peers, plan.cap_bytes))
    if "gpu_transfer" in metafunc.fixturenames:
        if plan.backend in ("cuda", "rocm"):
            cases = []
            for kind, pinned in GPU_KINDS:
                for size in copy_sizes(plan.cap_bytes):
                    quick = in_quick_copies(size) or size == 4 * QUICK_MAX_BYTES
                    memory = "pinned" if pinned else ("pageable" if kind != "d2d" else "device")
                    cases.append(pytest.param((kind, pinned, size), id=f"{kind}-{memory}-{format_bytes_id(size)}",
                                              marks=[] if quick else [pytest.mark.charz_slow]))
        else:
            cases = not_this_backend(f"a GPU transfer case; the bound device is {plan.backend}")
        metafunc.parametrize("gpu_transfer", cases)


def peer_transfer_params(backend: str, bound_index: int, peer_indices: list[int], cap_bytes: int) -> list[Any]:
    """The peer copy cases of the bound GPU: each direction over the copy sizes to the peer
    :func:`~pytest_charz.devices.gpu_common.peer_of` picks (quick runs keep the GPU transfers'
    quick sizes); one skipping parameter saying why when there is no peer."""
    from pytest_charz.devices.gpu_common import PEER_DIRECTIONS, peer_of

    if backend not in ("cuda", "rocm"):
        return not_this_backend(f"a GPU peer transfer case; the bound device is {backend}")
    peer = peer_of(bound_index, peer_indices)
    if peer is None:
        return [pytest.param(None, id="n/a", marks=pytest.mark.skip(
            reason=f"one {backend} device visible ({backend} {bound_index}): peer transfers need a second"))]
    cases = []
    for direction in PEER_DIRECTIONS:
        for size in copy_sizes(cap_bytes):
            quick = in_quick_copies(size) or size == 4 * QUICK_MAX_BYTES
            cases.append(pytest.param((direction, peer, size),
                                      id=f"{direction}-gpu{bound_index}-gpu{peer}-{format_bytes_id(size)}",
                                      marks=[] if quick else [pytest.mark.charz_slow]))
    return cases


def _visible_peers(config: pytest.Config, backend: str) -> tuple[int, list[int]]:
    """The bound GPU's index and the other GPUs of its backend (none off a GPU)."""
    if backend not in ("cuda", "rocm"):
        return 0, []
    from pytest_charz.session import session_for

    device = session_for(config).bind().device
    return int(getattr(device, "index", 0)), list(device.peer_indices())


def numa_pairs(nodes: Any) -> list[tuple[int, int]]:
    """Ordered (source, destination) node pairs for cross-node copies: every pair of up to
    ``NUMA_ALL_PAIRS_MAX`` nodes with memory, else each node to and from the first. The
    destination must have CPUs: the copying thread runs there."""
    memory = sorted(n for n, node in nodes.items() if node.has_memory)
    runnable = {n for n, node in nodes.items() if node.cpus}
    if len(memory) <= NUMA_ALL_PAIRS_MAX:
        pairs = [(s, d) for s in memory for d in memory if s != d]
    else:
        first = memory[0]
        pairs = [(first, n) for n in memory[1:]] + [(n, first) for n in memory[1:]]
    return [(s, d) for s, d in pairs if d in runnable]


def random_bytes(rng: np.random.Generator, nbytes: int) -> np.ndarray:
    """``nbytes`` random bytes: a random block of ``PATTERN_BYTES`` repeated."""
    block = rng.integers(0, 256, min(nbytes, PATTERN_BYTES), dtype=np.uint8)
    return np.resize(block, nbytes)


@pytest.mark.charz(noise=0.02, max_time=0.4, quick={"max_time": 0.08})
def test_memcpy_cpu(charz: Any, device: Any, host_copy_bytes: int) -> None:
    from pytest_charz.kernels import cpu

    nbytes = host_copy_bytes
    threads = 1
    src = cpu.aligned_empty(nbytes, np.uint8)
    src[:] = random_bytes(charz.rng, nbytes)
    dst = cpu.aligned_empty(nbytes, np.uint8)
    dst[:] = 0
    cpu.memcpy(dst, src, threads=threads)
    assert np.array_equal(dst, src)
    work = Work(transfers={"host": float(nbytes)}, op="transfer",
                shape={"bytes": nbytes, "kind": "host", "pinned": False, "threads": threads})
    charz.measure(lambda: cpu.memcpy(dst, src, threads=threads), work=work)


@pytest.mark.charz(noise=0.02, max_time=0.4, quick={"max_time": 0.08})
def test_numa_copy_cpu(charz: Any, device: Any, numa_copy: tuple[int, int, int]) -> None:
    from pytest_charz.devices import numa
    from pytest_charz.kernels import cpu

    source, destination, nbytes = numa_copy
    nodes = numa.numa_nodes()
    with numa.pinned(nodes[destination].cpus):
        src, placed = numa.node_array(nbytes, source, nodes)
        src[:] = random_bytes(charz.rng, nbytes)
        dst, _ = numa.node_array(nbytes, destination, nodes)
        for array, node in ((src, source), (dst, destination)):
            where = numa.page_nodes(array)
            assert where is None or set(where) == {node}, f"pages meant for node {node} are on nodes {sorted(set(where))}"
        cpu.memcpy(dst, src, threads=1)
        assert np.array_equal(dst, src)
        work = Work(transfers={"numa": float(nbytes)}, op="transfer",
                    shape={"bytes": nbytes, "kind": "numa", "src_node": source, "dst_node": destination,
                           "thread_node": destination, "placement": placed, "threads": 1})
        charz.measure(lambda: cpu.memcpy(dst, src, threads=1), work=work)


@pytest.mark.charz(noise=0.02, max_time=0.5, quick={"max_time": 0.08})
def test_transfer_gpu(charz: Any, device: Any, gpu_torch: Any, torch_device: Any,
                      gpu_transfer: tuple[str, bool, int]) -> None:
    torch = gpu_torch
    kind, pinned, nbytes = gpu_transfer
    data = torch.from_numpy(random_bytes(charz.rng, nbytes))
    with device.on_stream():
        host_src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        host_src.copy_(data)
        if kind == "h2d":
            src, dst = host_src, torch.empty(nbytes, dtype=torch.uint8, device=torch_device)
        elif kind == "d2h":
            src = host_src.to(torch_device)
            dst = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        else:
            src = host_src.to(torch_device)
            dst = torch.empty(nbytes, dtype=torch.uint8, device=torch_device)

        def run() -> None:
            dst.copy_(src, non_blocking=pinned)

        run()
    device.synchronize()
    assert torch.equal(dst.cpu(), data), f"{kind} copy of {nbytes} bytes does not match its source"
    work = Work(transfers={kind: float(nbytes)}, op="transfer",
                shape={"bytes": nbytes, "kind": kind, "pinned": pinned})
    charz.measure(run, work=work)


@pytest.mark.charz(noise=0.02, max_time=0.5, quick={"max_time": 0.08})
def test_peer_transfer_gpu(charz: Any, device: Any, gpu_torch: Any, peer_transfer: tuple[str, int, int]) -> None:
    direction, peer, nbytes = peer_transfer
    data = gpu_torch.from_numpy(random_bytes(charz.rng, nbytes))
    copy = device.peer_copy(peer, direction, data)
    with copy.on_stream():
        copy.run()
    wrong = copy.check()
    assert not wrong, "\n".join(wrong)
    moved = nbytes * len(copy.routes)
    work = Work(transfers={"peer": float(moved)}, op="transfer",
                shape={"bytes": moved, "bytes_per_direction": nbytes, "kind": "peer", "direction": direction,
                       "device": device.index, "peer_device": peer, "peer_access": copy.peer_access,
                       "path": copy.path, "pinned": False})
    charz.measure(copy.run, work=work, device=copy)
