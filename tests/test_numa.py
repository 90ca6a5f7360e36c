"""NUMA topology from sysfs texts, memory placed on a node, and the movement suite's node pairs."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np
import pytest

from pytest_charz.devices import numa
from pytest_charz.errors import UsageError

SUITES = Path(__file__).resolve().parent.parent / "suites"


def fake_nodes(root: Path, nodes: dict[int, str], has_memory: str | None = None,
               meminfo: dict[int, int] | None = None) -> Path:
    """A ``/sys/devices/system/node`` tree: node id -> cpulist text; memory as the kernel lists it."""
    root.mkdir(parents=True, exist_ok=True)
    for node, cpulist in nodes.items():
        (root / f"node{node}").mkdir()
        (root / f"node{node}" / "cpulist").write_text(cpulist + "\n")
        if meminfo is not None:
            (root / f"node{node}" / "meminfo").write_text(
                f"Node {node} MemTotal:       {meminfo.get(node, 0)} kB\nNode {node} MemFree:        0 kB\n")
    if has_memory is not None:
        (root / "has_memory").write_text(has_memory + "\n")
    (root / "possible").write_text("0-7\n")
    return root


@pytest.mark.parametrize("text, cpus", [("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)), ("5", (5,)), ("", ()),
                                        ("\n", ())])
def test_parse_cpulist(text: str, cpus: tuple[int, ...]) -> None:
    assert numa.parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a-b", "3-1", "1,x"])
def test_parse_cpulist_rejects_garbage(text: str) -> None:
    with pytest.raises(UsageError, match="not a CPU list"):
        numa.parse_cpulist(text)


def test_two_sockets_and_a_memory_only_node(tmp_path: Path) -> None:
    root = fake_nodes(tmp_path / "node", {0: "0-15,32-47", 1: "16-31,48-63", 2: ""}, has_memory="0-2")
    nodes = numa.numa_nodes(root)
    assert sorted(nodes) == [0, 1, 2]
    assert nodes[0].cpus == (*range(16), *range(32, 48)) and nodes[0].has_memory
    assert nodes[2] == numa.NumaNode(2, (), True)


def test_memory_from_meminfo_where_has_memory_is_missing(tmp_path: Path) -> None:
    root = fake_nodes(tmp_path / "node", {0: "0-1", 1: "2-3"}, meminfo={0: 1000, 1: 0})
    nodes = numa.numa_nodes(root)
    assert nodes[0].has_memory and not nodes[1].has_memory


def test_no_numa_tree_is_no_nodes(tmp_path: Path) -> None:
    assert numa.numa_nodes(tmp_path / "absent") == {}


def test_this_host_has_a_node_with_its_cpus() -> None:
    nodes = numa.numa_nodes()
    if not nodes:
        pytest.skip("this kernel shows no NUMA nodes")
    assert set().union(*(node.cpus for node in nodes.values())) >= os.sched_getaffinity(0)


def test_array_placed_on_a_node_is_there_and_zeroed() -> None:
    rng = np.random.default_rng()
    nodes = numa.numa_nodes()
    if not nodes:
        pytest.skip("this kernel shows no NUMA nodes")
    node = min(n for n, info in nodes.items() if info.has_memory and info.cpus)
    nbytes = int(rng.integers(3 << 20, 5 << 20))
    array, how = numa.node_array(nbytes, node, nodes)
    assert array.nbytes == nbytes and array.dtype == np.uint8 and not array.any()
    assert array.ctypes.data % os.sysconf("SC_PAGE_SIZE") == 0
    assert how in ("mbind", "first-touch")
    where = numa.page_nodes(array, samples=32)
    assert where is None or set(where) == {node}


def test_untouched_pages_have_no_node_yet() -> None:
    fresh = np.empty(64 << 20, dtype=np.uint8)            # large: fresh pages from mmap
    where = numa.page_nodes(fresh[4 << 20 :], samples=8)
    if where is None:
        pytest.skip("move_pages is not available here")
    assert all(status < 0 for status in where)             # -ENOENT: no page yet


def test_node_array_refuses_an_unknown_node() -> None:
    with pytest.raises(UsageError, match="no NUMA node 7"):
        numa.node_array(4096, 7, {0: numa.NumaNode(0, (0,), True)})


def test_pinned_restores_the_affinity() -> None:
    before = os.sched_getaffinity(0)
    one = min(before)
    with numa.pinned((one,)):
        assert os.sched_getaffinity(0) == {one}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(UsageError):
        with numa.pinned(()):
            pass


def test_suite_pairs_every_node_of_small_hosts_and_node_zero_of_large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(SUITES))
    movement = importlib.import_module("test_movement")

    def host(count: int, memory_only: tuple[int, ...] = ()) -> dict[int, numa.NumaNode]:
        return {n: numa.NumaNode(n, () if n in memory_only else (n,), True) for n in range(count)}

    assert movement.numa_pairs(host(1)) == []
    assert movement.numa_pairs(host(2)) == [(0, 1), (1, 0)]
    assert len(movement.numa_pairs(host(4))) == 12
    eight = movement.numa_pairs(host(8))
    assert len(eight) == 14 and all(0 in pair for pair in eight)
    # A node without CPUs is a source, never the destination (the copying thread runs there).
    assert movement.numa_pairs(host(3, memory_only=(2,))) == [(0, 1), (1, 0), (2, 0), (2, 1)]
