"""What one op asks of the machine's resources: the hardware half of the simulator.

:func:`op_cost` turns a ``Work`` into an :class:`OpCost`: seconds of each shared resource at its
full rate (compute, a memory level's bandwidth, a link), a fixed latency that uses no shared
bandwidth (dependent loads, the hops of a collective), and the dynamic energy. The demands say
how an op's time divides among the resources it shares with concurrent ops, not what the op
costs: the prediction core prices it, and :func:`.pricing.split` rescales the demands to that
price (the energy stays this module's).

* **Compute**: FLOPs at the machine's peak per dtype (the vector peak for non-matrix ops); a
  ``gemm`` is tiled and quantized into waves over the compute units by the GEMM model
  (:func:`pytest_charz.models.gemm.gemm_compute_terms`), at the machine's unit count and clock.
* **Memory**: bytes per level over that level's bandwidth. A level without a bandwidth figure is
  timed at the next outer level's (its energy stays its own). Bytes an op reads from its
  dependencies' outputs (``reused_bytes``) come from the innermost device-scope cache level that
  holds them instead of DRAM (on-chip reuse).
* **Links and collectives**: transfers over the host or peer link (alpha + bytes over the link);
  collectives as ring, tree or direct algorithms over the peer topology (:func:`collective_plan`),
  the fastest of those the topology allows, as NCCL/RCCL pick per message size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UsageError
from ..models.base import Uncovered
from ..models.comm import bus_factor, collective_name, library_of_target, nccl_plan
from ..models.gemm import GemmParams, gemm_compute_terms
from ..models.roofline import latency_terms
from ..work import MEMORY_LEVELS, Work
from .machine import Machine

_GEMM_PARAMS = GemmParams()
#: Transfer kinds that run on a copy engine over a link, and the link each uses.
_LINK_OF_TRANSFER = {"h2d": "host", "d2h": "host", "peer": "peer"}


@dataclass(frozen=True)
class OpCost:
    """One op's demands: ``demands`` are ``(resource index, seconds at the full resource)``;
    ``fixed_s`` latency that holds no shared resource; ``bound`` the resource with the largest
    demand (``latency`` when the fixed part dominates, ``none`` for empty work); ``energy_j`` the
    dynamic energy of one execution; ``copy`` whether it needs a copy engine; ``moved`` bytes per
    resource (for the bandwidth counters)."""

    demands: tuple[tuple[int, float], ...]
    fixed_s: float
    bound: str
    energy_j: float
    copy: bool
    moved: tuple[tuple[int, float], ...]
    algorithm: str = ""
    compute_energy_j: float = 0.0

    @property
    def alone_s(self) -> float:
        """Seconds when the op has every resource to itself."""
        return self.fixed_s + max((seconds for _, seconds in self.demands), default=0.0)


def resources(machine: Machine) -> tuple[str, ...]:
    """The shared resources of ``machine``, in a fixed order: compute, memory levels with a
    bandwidth (innermost first), the host link, the peer link."""
    names = ["compute"]
    names.extend(f"memory:{lv.name}" for lv in machine.levels if lv.bandwidth_bytes_per_s)
    if machine.host_link is not None:
        names.append(f"link:{machine.host_link.name}")
    if machine.peer_link is not None:
        names.append(f"link:{machine.peer_link.name}")
    return tuple(names)


def _timing_level(machine: Machine, level: str) -> str:
    """The level whose bandwidth times ``level``'s bytes: itself, else the next outer one with a figure."""
    start = MEMORY_LEVELS.index(level)
    for name in MEMORY_LEVELS[start:]:
        found = machine.level(name)
        if found is not None and found.bandwidth_bytes_per_s:
            return name
    raise UsageError(f"{machine.id} has no bandwidth figure for {level} or any level outside it")


def reuse_level(machine: Machine, size_bytes: float) -> str | None:
    """The innermost device-scope cache level (not DRAM) whose capacity holds ``size_bytes``."""
    for level in machine.levels:
        if level.name != "dram" and level.scope != "unit" and level.capacity_bytes and size_bytes <= level.capacity_bytes:
            return level.name
    return None


def compute_seconds(work: Work, machine: Machine) -> float:
    """Seconds of compute at the machine's peaks (GEMMs tiled and quantized into waves)."""
    if not work.flops:
        return 0.0
    if work.op == "gemm" and len(work.flops) == 1:
        try:
            return sum(gemm_compute_terms(work, machine.ceilings, _GEMM_PARAMS).values())
        except Uncovered:
            pass                          # no shape: FLOPs at peak below
    seconds = 0.0
    for dtype, flops in work.flops.items():
        peak = machine.peak(dtype, work.op)
        if peak is None:
            known = ", ".join(sorted(machine.peak_flops))
            raise UsageError(f"{machine.id} has no {dtype} peak to simulate {work.op or 'this work'}; it has {known}")
        seconds += flops / peak
    return seconds


def op_cost(work: Work, machine: Machine, index: dict[str, int], reused_bytes: float = 0.0) -> OpCost:
    """The demands of one execution of ``work`` (module docstring); ``index`` maps resource names
    (:func:`resources`) to their positions."""
    demand: dict[int, float] = {}
    moved: dict[int, float] = {}
    energy = machine.energy
    energy_j = 0.0
    # Dynamic energy per FLOP goes with the square of the clock (voltage follows frequency).
    clock_energy = (machine.clock_mhz / machine.reference_clock_mhz) ** 2
    compute_s = compute_seconds(work, machine)
    if compute_s:
        demand[index["compute"]] = compute_s
    if energy is not None:
        for dtype, flops in work.flops.items():
            table = energy.joules_per_vector_flop if work.op not in ("gemm", "bmm", "conv", "attention") \
                and dtype in energy.joules_per_vector_flop else energy.joules_per_flop
            coefficient = table.get(dtype)
            energy_j += flops * coefficient.value * clock_energy if coefficient is not None else 0.0
    compute_energy_j = energy_j
    levels = dict(work.bytes)
    if reused_bytes and levels.get("dram"):
        target = reuse_level(machine, reused_bytes)
        if target is not None:
            shifted = min(reused_bytes, levels["dram"])
            levels["dram"] -= shifted
            levels[target] = levels.get(target, 0.0) + shifted
    for level, moved_bytes in levels.items():
        if not moved_bytes:
            continue
        timed = _timing_level(machine, level)
        found = machine.level(timed)
        assert found is not None and found.bandwidth_bytes_per_s
        slot = index[f"memory:{timed}"]
        demand[slot] = demand.get(slot, 0.0) + moved_bytes / found.bandwidth_bytes_per_s
        moved[slot] = moved.get(slot, 0.0) + moved_bytes
        if energy is not None:
            coefficient = energy.joules_per_byte.get(level) or energy.joules_per_byte.get(timed)
            energy_j += moved_bytes * coefficient.value if coefficient is not None else 0.0
    fixed_s = 0.0
    if work.accesses:
        try:
            fixed_s += sum(latency_terms(work, machine.ceilings).values())
        except Uncovered as exc:
            raise UsageError(f"cannot simulate the dependent loads on {machine.id}: {exc}") from None
    copy = False
    for kind, moved_bytes in work.transfers.items():
        link_kind = _LINK_OF_TRANSFER.get(kind)
        if link_kind is None:             # d2d, host, numa: a copy within one memory, read and written
            slot = index[f"memory:{_timing_level(machine, 'dram')}"]
            dram = machine.level("dram")
            assert dram is not None and dram.bandwidth_bytes_per_s
            demand[slot] = demand.get(slot, 0.0) + 2 * moved_bytes / dram.bandwidth_bytes_per_s
            moved[slot] = moved.get(slot, 0.0) + 2 * moved_bytes
            continue
        link = machine.host_link if link_kind == "host" else machine.peer_link
        if link is None:
            raise UsageError(f"{machine.id} has no {link_kind} link for a {kind} transfer")
        copy = True
        slot = index[f"link:{link.name}"]
        demand[slot] = demand.get(slot, 0.0) + moved_bytes / link.total_bytes_per_s
        moved[slot] = moved.get(slot, 0.0) + moved_bytes
        fixed_s += link.latency_s
        if energy is not None and energy.joules_per_link_byte.get(link_kind) is not None:
            energy_j += moved_bytes * energy.joules_per_link_byte[link_kind].value
    algorithms = []
    for message in work.collectives:
        plan = collective_plan(message.op, message.bytes, message.ranks, machine)
        if plan.wire_bytes == 0 and plan.latency_s == 0:
            continue
        assert machine.peer_link is not None
        slot = index[f"link:{machine.peer_link.name}"]
        demand[slot] = demand.get(slot, 0.0) + plan.wire_bytes / plan.bandwidth_bytes_per_s
        moved[slot] = moved.get(slot, 0.0) + plan.wire_bytes
        fixed_s += plan.latency_s
        algorithms.append(plan.algorithm)
        if energy is not None and energy.joules_per_link_byte.get("peer") is not None:
            energy_j += plan.wire_bytes * energy.joules_per_link_byte["peer"].value
    names = {slot: name for name, slot in index.items()}
    largest = max(demand.items(), key=lambda item: (item[1], -item[0]), default=None)
    if largest is None or fixed_s > largest[1]:
        bound = "latency" if fixed_s else "none"
    else:
        bound = names[largest[0]]
    return OpCost(tuple(sorted(demand.items())), fixed_s, bound, energy_j, copy, tuple(sorted(moved.items())),
                  "+".join(algorithms), compute_energy_j)


@dataclass(frozen=True)
class CollectivePlan:
    """A collective on the peer topology: ``algorithm``, hop latency (s), bytes each rank sends and
    the bandwidth those bytes move at (B/s)."""

    algorithm: str
    latency_s: float
    wire_bytes: float
    bandwidth_bytes_per_s: float

    @property
    def time_s(self) -> float:
        return self.latency_s + (self.wire_bytes / self.bandwidth_bytes_per_s if self.wire_bytes else 0.0)


def collective_plan(op: str, n_bytes: float, ranks: int, machine: Machine) -> CollectivePlan:
    """The fastest algorithm for collective ``op`` of ``n_bytes`` (nccl-tests buffer size) over
    ``ranks`` ranks on ``machine``'s peer topology.

    Ring (switch, torus, mesh): all-reduce ``2(p-1)`` hops and ``2(p-1)/p n`` bytes sent;
    all-gather, reduce-scatter and all-to-all half of that. Tree (switch): all-reduce
    ``2 ceil(log2 p)`` hops and ``2n`` bytes. Direct (mesh, pair: a link to every peer):
    all-reduce 2 hops, ``2(p-1)/p n`` bytes spread over the ``p-1`` links at once. Broadcast:
    pipelined ring ``n`` bytes and ``p-1`` hops (tree ``log2 p``); p2p one hop and ``n`` bytes.
    """
    try:
        name = collective_name(op)
    except Uncovered as exc:
        raise UsageError(str(exc)) from None
    if ranks <= 1 and name != "p2p":
        return CollectivePlan("none", 0.0, 0.0, 1.0)
    link = machine.peer_link
    if link is None or machine.topology == "none":
        raise UsageError(f"{machine.id} has no peer links for a {name} over {ranks} ranks")
    if ranks > machine.devices:
        raise UsageError(f"a {name} over {ranks} ranks needs {ranks} devices; the {machine.id} system has "
                         f"{machine.devices} (parameter devices)")
    if machine.topology == "switch":
        # as the collective library runs it where the models know the link (models.comm.nccl_plan)
        chosen = nccl_plan(name, n_bytes, ranks, link.total_bytes_per_s, library_of_target(machine.id))
        if chosen is not None:
            return CollectivePlan(chosen[0], chosen[1], n_bytes * bus_factor(name, ranks), chosen[2])
    p, alpha, n = ranks, link.latency_s, n_bytes
    factor = 2.0 if name == "all-reduce" else 1.0
    plans: list[CollectivePlan] = []
    if name == "p2p":
        return CollectivePlan("p2p", alpha, n, link.total_bytes_per_s)
    ring_bandwidth = link.total_bytes_per_s if machine.topology == "switch" else \
        link.bandwidth_bytes_per_s * max(1, link.count // 2)
    if name == "broadcast":
        plans.append(CollectivePlan("ring", (p - 1) * alpha, n, ring_bandwidth))
        if machine.topology == "switch":
            plans.append(CollectivePlan("tree", math.ceil(math.log2(p)) * alpha, n, link.total_bytes_per_s))
    else:
        if machine.topology in ("switch", "torus", "mesh"):
            plans.append(CollectivePlan("ring", factor * (p - 1) * alpha, factor * (p - 1) / p * n, ring_bandwidth))
        if machine.topology == "switch" and name == "all-reduce":
            plans.append(CollectivePlan("tree", 2 * math.ceil(math.log2(p)) * alpha, 2 * n, link.total_bytes_per_s))
        if machine.topology in ("mesh", "pair"):
            per_peer = link.bandwidth_bytes_per_s * max(1, link.count // (p - 1))
            plans.append(CollectivePlan("direct", factor * alpha, factor * (p - 1) / p * n, per_peer * (p - 1)))
    return min(plans, key=lambda plan: (plan.time_s, plan.algorithm))
