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

A collective over one rank moves nothing and takes no time. Transfers and collectives are taken
to run one after another (one copy queue); as a standalone model the result is the larger of that
sum and the roofline bound, since computing and moving can overlap at best completely.
"""
from __future__ import annotations

from dataclasses import dataclass

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


def transfer_terms(work: Work, ceilings: Ceilings) -> dict[str, float]:
    """``{"link:<kind>": alpha + bytes / beta}`` for each transfer kind in the work."""
    terms: dict[str, float] = {}
    for kind, n_bytes in work.transfers.items():
        alpha, beta = _link(ceilings, kind)
        terms[f"link:{kind}"] = alpha + n_bytes / beta
    return terms


def collective_terms(collectives: tuple[Collective, ...], ceilings: Ceilings) -> dict[str, float]:
    """``{"collective:<op>": seconds}``, collectives of one op summed: from the op's measured line
    where the ceilings have one, else from the ``peer`` link."""
    terms: dict[str, float] = {}
    for message in collectives:
        key = f"collective:{collective_name(message.op)}"
        measured = ceilings.collective(collective_name(message.op))
        if measured is not None and measured[2] >= 2:
            seconds = measured_collective_s(message, *measured)
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
