"""``alpha-beta``: transfers and collectives as latency (alpha) plus bytes over bandwidth (beta).

Transfers (``work.transfers``, bytes per kind): ``alpha_kind + bytes / beta_kind`` with the link
figures of that kind (``h2d``, ``d2h``, ``d2d``, ``peer``, ``host``).

Collectives (``work.collectives``) run over the ``peer`` link, with ``n`` the buffer size in bytes
as nccl-tests counts it (the full buffer each rank holds for all-reduce, the gathered output for
all-gather, the input for reduce-scatter) and ``p`` ranks, bandwidth-optimal ring algorithms:

=================  ============================================
all-reduce         2 (p-1)/p * n / beta + 2 (p-1) alpha
all-gather         (p-1)/p * n / beta + (p-1) alpha
reduce-scatter     (p-1)/p * n / beta + (p-1) alpha
all-to-all         (p-1)/p * n / beta + (p-1) alpha
broadcast          n / beta + (p-1) alpha   (pipelined ring, many chunks)
p2p                n / beta + alpha          (send/recv; ranks ignored)
=================  ============================================

Where the ceilings hold a collective's own measured line (``Ceilings.collective``: latency
``a0`` and algorithm bandwidth ``b0`` at ``p0`` ranks, from a profile's ``collective:<op>``), that
op is predicted from it instead: the bus bandwidth ``b0 * f(p0)`` is taken to hold at any rank
count and the latency to grow with the ring's steps, ``t = a0 * s(p) / s(p0) + n * f(p) / (b0 * f(p0))``
with ``f`` the nccl-tests bus factor (:func:`bus_factor`) and ``s`` the alpha count of the table
(at ``p == p0`` the measured line itself).

**As NCCL/RCCL run them.** On a catalogue target whose peer link the library table knows
(:data:`COLLECTIVE_LIBRARIES`, by the spec's peer link name), a collective without a measured
line is priced the way NCCL's tuner picks an algorithm: the cheapest of ring and tree, each with
the LL protocol (low latency, half the bandwidth: every 8-byte store carries 4 bytes and a flag) and the Simple
protocol, and NVLink SHARP (NVLS) for all-reduce where the topology has it (H100/H200 NVSwitch
systems). Each is ``latency + n * bus_factor / busbw`` with ``busbw`` the per-direction peer link
rate times the achievable fraction of the algorithm (fitted on published nccl-tests busbw figures,
cited in the table) and the latency of NCCL's cost model (:func:`nccl_algorithms`). Links the
table does not know keep the ring formulas above with the ceilings' alpha and beta.

A collective over one rank moves nothing and takes no time. Transfers and collectives are taken
to run one after another (one copy queue); as a standalone model the result is the larger of that
sum and the roofline bound, since computing and moving can overlap at best completely.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Mapping

from ..work import COLLECTIVE_OPS, Collective, Work
from .base import Prediction, Uncovered, guarded
from .ceilings import Ceilings
from .roofline import predict_overlapped, roofline_terms, target_label

_ALIASES = {
    "allreduce": "all-reduce", "allgather": "all-gather", "reducescatter": "reduce-scatter",
    "alltoall": "all-to-all", "bcast": "broadcast", "send": "p2p", "recv": "p2p", "sendrecv": "p2p",
}


def collective_name(op: str) -> str:
    """Canonical collective name (``all_reduce``, ``allreduce`` -> ``all-reduce``)."""
    name = op.strip().lower().replace("_", "-")
    name = _ALIASES.get(name.replace("-", ""), name)
    if name not in COLLECTIVE_OPS:
        raise Uncovered(f"collective {op!r} is not one of {', '.join(COLLECTIVE_OPS)}")
    return name


def _link(ceilings: Ceilings, kind: str) -> tuple[float, float]:
    """(alpha_s, beta_bytes_per_s) of a link kind."""
    beta = ceilings.link_bandwidth(kind)
    alpha = ceilings.link_latency(kind)
    if beta is None or alpha is None:
        missing = "bandwidth" if beta is None else "latency"
        raise Uncovered(f"no {kind} link {missing} on {target_label(ceilings)}: alpha-beta needs both")
    return alpha, beta


def collective_time_s(op: str, n_bytes: float, ranks: int, alpha_s: float, beta_bytes_per_s: float) -> float:
    """Seconds for one collective by the formulas in the module docstring."""
    name = collective_name(op)
    if not n_bytes >= 0:
        raise Uncovered(f"collective {op!r} of {n_bytes!r} bytes")
    if name == "p2p":
        return alpha_s + n_bytes / beta_bytes_per_s
    p = ranks
    if p < 1:
        raise Uncovered(f"collective {op!r} over {ranks!r} ranks")
    if name == "all-reduce":
        return 2 * (p - 1) / p * n_bytes / beta_bytes_per_s + 2 * (p - 1) * alpha_s
    if name == "broadcast":
        return (n_bytes / beta_bytes_per_s if p > 1 else 0.0) + (p - 1) * alpha_s
    return (p - 1) / p * n_bytes / beta_bytes_per_s + (p - 1) * alpha_s


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests' bus bandwidth over algorithm bandwidth: 2(p-1)/p for all-reduce, (p-1)/p for
    all-gather, reduce-scatter and all-to-all, 1 for broadcast and send/recv (p2p)."""
    name = collective_name(op)
    if name in ("broadcast", "p2p"):
        return 1.0
    if ranks < 1:
        raise Uncovered(f"collective {op!r} over {ranks!r} ranks")
    return (2.0 if name == "all-reduce" else 1.0) * (ranks - 1) / ranks


def _latency_steps(name: str, ranks: int) -> float:
    """The alpha count of the module docstring's table (ring steps; 1 for p2p)."""
    return 1.0 if name == "p2p" else (2.0 if name == "all-reduce" else 1.0) * (ranks - 1)


def measured_collective_s(message: Collective, latency_s: float, bandwidth_bytes_per_s: float,
                          measured_ranks: int) -> float:
    """Seconds for ``message`` from its op's measured line (latency, algorithm bandwidth, ranks)."""
    name = collective_name(message.op)
    if name != "p2p" and message.ranks <= 1:
        return 0.0                      # one rank moves nothing
    steps, bus = _latency_steps(name, measured_ranks), bus_factor(name, measured_ranks) * bandwidth_bytes_per_s
    latency = latency_s * _latency_steps(name, message.ranks) / steps if steps else latency_s
    return latency + message.bytes * bus_factor(name, message.ranks) / bus


@dataclass(frozen=True)
class CollectiveLibrary:
    """How NCCL/RCCL run collectives over one kind of peer link.

    ``ring_fraction``: bus bandwidth of ring (and tree) algorithms over the per-direction link rate,
    the protocol overhead of the Simple protocol. ``nvls_fraction``: all-reduce bus bandwidth with
    NVLink SHARP over the same rate (None: the topology has no NVLS). ``source``: the citation."""

    ring_fraction: float
    nvls_fraction: float | None
    source: str


#: NCCL's cost-model latencies in seconds (NVIDIA/nccl ``src/graph/tuning.cc``, ``baseLat`` and
#: the NVLink row of ``hwLat``): per algorithm and protocol a base latency and a latency per step.
NCCL_LATENCY_S: Mapping[str, tuple[float, float]] = {
    "ring/LL": (3.6e-6, 0.47e-6), "ring/Simple": (8.4e-6, 3.4e-6),
    "tree/LL": (4.4e-6, 0.52e-6), "tree/Simple": (8.4e-6, 28e-6),
    # NVLS: a reduction in the switch and a multicast back, two Simple steps
    "nvls/Simple": (8.4e-6, 3.4e-6),
}
#: Bandwidth of the LL protocol relative to Simple: half of every 8-byte store is a flag.
LL_BANDWIDTH_FRACTION = 0.5

_NCCL_RING = ("Ring fraction 0.822: 370 GB/s of the 450 GB/s per-direction NVLink4 line rate, NCCL's "
              "effective NVLink bandwidth with the Simple protocol's ~20% overhead (S. Jeaugey, NVIDIA, "
              "https://github.com/NVIDIA/nccl-tests/issues/212, 2024-05-06; table row "
              "h100-nccl-ring-allgather, role fitted-on)")
_NCCL_NVLS = ("NVLS fraction 1.075: 8-GPU all-reduce busbw 215 GB/s on an H800 (NVLink4, 200 GB/s per "
              "direction) with NVLink SHARP (https://github.com/NVIDIA/nccl/issues/1374, 2024-07-24; "
              "table row h800-nccl-nvls-allreduce, role fitted-on)")
#: Collective library figures by the spec's peer link name (module docstring). NVLink3 carries
#: NVLink4's ring fraction (no published NVLink3 busbw is fitted on; the held-out row
#: a100-sxm-azure-nccl-allreduce, 231.58 GB/s at 8 GiB on eight A100 SXM, 0.772 of NVLink3's 300
#: GB/s, reads it 6% fast); RCCL over Infinity Fabric has no entry until a published rccl-tests
#: busbw is in the table.
COLLECTIVE_LIBRARIES: Mapping[str, CollectiveLibrary] = {
    "nvlink4": CollectiveLibrary(0.822, 1.075, f"{_NCCL_RING}; {_NCCL_NVLS}"),
    "nvlink3": CollectiveLibrary(0.822, None, f"{_NCCL_RING}, carried to NVLink3"),
}


@functools.lru_cache(maxsize=64)
def _peer_link_name(target_id: str) -> str:
    from ..errors import UsageError
    from ..targets.catalogue import resolve

    try:
        spec = resolve(target_id)
    except UsageError:
        return ""
    return spec.peer_links[0].name if spec.peer_links else ""


def library_of_target(target_id: str) -> CollectiveLibrary | None:
    """The library figures of a catalogue target's peer link (None when the target or link is unknown)."""
    return COLLECTIVE_LIBRARIES.get(_peer_link_name(target_id)) if target_id else None


def collective_library(ceilings: Ceilings) -> CollectiveLibrary | None:
    """The library figures of the ceilings' peer link (None when the target or link is unknown)."""
    return library_of_target(ceilings.target_id)


def nccl_plans(op: str, ranks: int, link_bytes_per_s: float,
               library: CollectiveLibrary) -> dict[str, tuple[float, float]]:
    """``{algorithm/protocol: (latency_s, bus_bytes_per_s)}`` NCCL may choose for collective ``op``
    over ``ranks`` ranks and a peer link of ``link_bytes_per_s`` per direction: ``ring/LL``,
    ``ring/Simple``, ``tree/*`` (all-reduce), ``nvls/Simple`` (all-reduce on an NVLS topology).
    Steps: ring 2(p-1) for all-reduce and p-1 otherwise, tree 2 ceil(log2 p), NVLS 2."""
    name = collective_name(op)
    busbw = link_bytes_per_s * library.ring_fraction
    plans: dict[str, tuple[float, float]] = {}
    for protocol, fraction in (("LL", LL_BANDWIDTH_FRACTION), ("Simple", 1.0)):
        base, hop = NCCL_LATENCY_S[f"ring/{protocol}"]
        plans[f"ring/{protocol}"] = (base + _latency_steps(name, ranks) * hop, busbw * fraction)
        if name == "all-reduce":
            base, hop = NCCL_LATENCY_S[f"tree/{protocol}"]
            plans[f"tree/{protocol}"] = (base + 2 * math.ceil(math.log2(ranks)) * hop, busbw * fraction)
    if name == "all-reduce" and library.nvls_fraction is not None:
        base, hop = NCCL_LATENCY_S["nvls/Simple"]
        plans["nvls/Simple"] = (base + 2 * hop, link_bytes_per_s * library.nvls_fraction)
    return plans


def nccl_algorithms(op: str, n_bytes: float, ranks: int, link_bytes_per_s: float,
                    library: CollectiveLibrary) -> dict[str, float]:
    """Seconds of collective ``op`` of ``n_bytes`` (as nccl-tests counts them) by each algorithm of
    :func:`nccl_plans`: ``latency + n_bytes * bus_factor / busbw``."""
    payload = n_bytes * bus_factor(op, ranks)
    return {key: latency + payload / busbw
            for key, (latency, busbw) in nccl_plans(op, ranks, link_bytes_per_s, library).items()}


def nccl_plan(op: str, n_bytes: float, ranks: int, link_bytes_per_s: float,
              library: CollectiveLibrary | None) -> tuple[str, float, float] | None:
    """``(algorithm, latency_s, bus_bytes_per_s)`` of the cheapest plan of :func:`nccl_plans`, as
    NCCL's tuner picks; None without a library or for ops it does not price (all-to-all,
    broadcast, p2p keep the alpha-beta formulas) or over one rank."""
    name = collective_name(op)
    if library is None or name not in ("all-reduce", "all-gather", "reduce-scatter") or ranks <= 1:
        return None
    times = nccl_algorithms(name, n_bytes, ranks, link_bytes_per_s, library)
    algorithm = min(times, key=lambda key: (times[key], key))
    return (algorithm, *nccl_plans(name, ranks, link_bytes_per_s, library)[algorithm])


def library_collective_s(message: Collective, ceilings: Ceilings) -> tuple[str, float] | None:
    """``(algorithm, seconds)`` of ``message`` as NCCL/RCCL would run it on the ceilings' peer
    link (:func:`nccl_plan`; ``("none", 0.0)`` over one rank), or None where the library table does
    not know the link or the op."""
    library = collective_library(ceilings)
    name = collective_name(message.op)
    if library is None or name not in ("all-reduce", "all-gather", "reduce-scatter"):
        return None
    if message.ranks <= 1:
        return "none", 0.0
    link = ceilings.link_bandwidth("peer")
    if link is None:
        raise Uncovered(f"no peer link bandwidth on {target_label(ceilings)} for {name}")
    plan = nccl_plan(name, message.bytes, message.ranks, link, library)
    assert plan is not None
    algorithm, latency, busbw = plan
    return algorithm, latency + message.bytes * bus_factor(name, message.ranks) / busbw


def transfer_terms(work: Work, ceilings: Ceilings) -> dict[str, float]:
    """``{"link:<kind>": alpha + bytes / beta}`` for each transfer kind in the work."""
    terms: dict[str, float] = {}
    for kind, n_bytes in work.transfers.items():
        alpha, beta = _link(ceilings, kind)
        terms[f"link:{kind}"] = alpha + n_bytes / beta
    return terms


def collective_terms(collectives: tuple[Collective, ...], ceilings: Ceilings) -> dict[str, float]:
    """``{"collective:<op>": seconds}``, collectives of one op summed: from the op's measured line
    where the ceilings have one, else as the collective library runs it on the ``peer`` link
    (:func:`library_collective_s`), else by the ring formulas over the ``peer`` link."""
    terms: dict[str, float] = {}
    for message in collectives:
        key = f"collective:{collective_name(message.op)}"
        measured = ceilings.collective(collective_name(message.op))
        chosen = None if measured is not None and measured[2] >= 2 else library_collective_s(message, ceilings)
        if measured is not None and measured[2] >= 2:
            seconds = measured_collective_s(message, *measured)
        elif chosen is not None:
            seconds = chosen[1]
        else:
            alpha, beta = _link(ceilings, "peer")
            seconds = collective_time_s(message.op, message.bytes, message.ranks, alpha, beta)
        terms[key] = terms.get(key, 0.0) + seconds
    return terms


@dataclass(frozen=True)
class AlphaBeta:
    name: str = "alpha-beta"

    def predict(self, work: Work, ceilings: Ceilings) -> Prediction:
        def build() -> Prediction:
            terms = {**roofline_terms(work, ceilings), **transfer_terms(work, ceilings),
                     **collective_terms(work.collectives, ceilings)}
            return predict_overlapped(self.name, terms, "transfers, collectives, FLOPs or DRAM bytes")

        return guarded(self.name, build)
