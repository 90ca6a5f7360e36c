"""The simulator's memory check: :mod:`pytest_charz.workloads.capacity` (the one ``predict_graph``
makes too) against the machine's DRAM, so that a what-if ``dram_bytes`` changes it."""
from __future__ import annotations

from ..workloads.capacity import CapacityError, MemoryNeed, memory_need
from ..workloads.capacity import check_fits as check_capacity
from ..workloads.graph import Graph
from .machine import Machine

#: The error of a workload that does not fit (the one ``predict_graph`` raises too).
SimCapacityError = CapacityError

__all__ = ["MemoryNeed", "SimCapacityError", "check_fits", "memory_need"]


def check_fits(graph: Graph, machine: Machine, need: MemoryNeed | None = None) -> MemoryNeed:
    """The need of ``graph`` (``need`` when already counted); :class:`SimCapacityError` when it
    exceeds the machine's DRAM."""
    dram = machine.level("dram")
    return check_capacity(graph, dram.capacity_bytes if dram is not None else None, machine.id, need)
