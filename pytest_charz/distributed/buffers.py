"""One collective case on one rank: fresh random inputs from the case's seed, the call that
runs the collective, and the check of its result against a reference.

Every rank derives every rank's input from ``(seed, rank)``, so each one can compute the
reference of its own output without receiving anything but the case's parameters. Inputs are
random non-zero integers stored as float32 (1..1023): sums over up to 16384 ranks are exact in
any order, so results compare exactly, and a collective that moved nothing (zeros) or the wrong
chunk cannot pass.

Message sizes are nccl-tests' ``bytes`` (what ``models.comm`` predicts): the buffer each rank
holds for all-reduce and broadcast, the gathered output of all-gather, the input of
reduce-scatter, the send buffer of all-to-all and of send/recv (``p2p``: every rank sends to the
next and receives from the previous one, nccl-tests' ``sendrecv``).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import UsageError
from ..work import COLLECTIVE_OPS

ELEMENT_BYTES = 4                   # float32
# Inputs repeat a random block of an odd length: a shifted or misplaced chunk does not match.
PATTERN_ELEMENTS = (1 << 16) + 3
# Ops whose buffers split into one chunk per rank: their element counts are multiples of ranks.
CHUNKED_OPS = ("all-gather", "reduce-scatter", "all-to-all")


def check_op(op: str) -> str:
    """``op`` if it is one of :data:`COLLECTIVE_OPS`, else a UsageError naming them."""
    if op not in COLLECTIVE_OPS:
        raise UsageError(f"collective {op!r} is not one of {', '.join(COLLECTIVE_OPS)}")
    return op


def message_elements(op: str, nbytes: int, ranks: int) -> int:
    """float32 elements of a message of about ``nbytes`` bytes: at least one, and for chunked
    ops rounded up to a multiple of ``ranks`` (every rank's chunk the same size)."""
    unit = ranks if check_op(op) in CHUNKED_OPS else 1
    elements = max(1, -(-int(nbytes) // ELEMENT_BYTES))
    return -(-elements // unit) * unit


def rank_input(seed: int, rank: int, elements: int) -> np.ndarray:
    """Rank ``rank``'s input of a case: ``elements`` random non-zero integers as float32."""
    rng = np.random.default_rng([int(seed), int(rank)])
    block = rng.integers(1, 1024, min(elements, PATTERN_ELEMENTS)).astype(np.float32)
    return np.resize(block, elements)


def _sum_of_inputs(seed: int, ranks: int, elements: int, part: slice) -> np.ndarray:
    """The ranks' inputs summed over ``part``, one input in memory at a time (exact: integers)."""
    total = rank_input(seed, 0, elements)[part].copy()
    for r in range(1, ranks):
        total += rank_input(seed, r, elements)[part]
    return total


def reference(op: str, seed: int, rank: int, ranks: int, elements: int) -> np.ndarray:
    """What rank ``rank``'s output must hold after one call of ``op`` over ``ranks`` ranks."""
    chunk = elements // ranks
    if op == "all-reduce":
        return _sum_of_inputs(seed, ranks, elements, slice(None))
    if op == "all-gather":
        return np.concatenate([rank_input(seed, r, chunk) for r in range(ranks)])
    if op == "reduce-scatter":
        return _sum_of_inputs(seed, ranks, elements, slice(rank * chunk, (rank + 1) * chunk))
    if op == "all-to-all":
        mine = slice(rank * chunk, (rank + 1) * chunk)
        return np.concatenate([rank_input(seed, r, elements)[mine] for r in range(ranks)])
    if op == "broadcast":
        return rank_input(seed, 0, elements)
    return rank_input(seed, (rank - 1) % ranks, elements)     # p2p: from the previous rank


class CollectiveBuffers:
    """The buffers of one case on one rank and the call that runs its collective once.

    ``device`` is a ``torch.device`` (cpu for Gloo, the rank's GPU for NCCL/RCCL); ``group`` the
    process group (None: the default one). In-place collectives (all-reduce, broadcast) keep
    working on their buffer after the check: the timed calls see growing sums, not the check's
    values, which costs the same.
    """

    def __init__(self, op: str, nbytes: int, ranks: int, rank: int, seed: int, device: Any,
                 group: Any = None) -> None:
        import torch

        self.op, self.ranks, self.rank, self.seed = check_op(op), ranks, rank, seed
        self.elements = message_elements(op, nbytes, ranks)
        self.nbytes = self.elements * ELEMENT_BYTES
        chunk = self.elements // ranks
        own = rank_input(seed, rank, chunk if op == "all-gather" else self.elements)
        self._input = torch.from_numpy(own).to(device)
        in_place = op in ("all-reduce", "broadcast")
        out_elements = chunk if op == "reduce-scatter" else self.elements
        self._output = self._input.clone() if in_place else torch.empty(out_elements, dtype=torch.float32,
                                                                         device=device)
        self._in_place = in_place
        self.run: Callable[[], None] = self._call(op, group)

    def _call(self, op: str, group: Any) -> Callable[[], None]:
        import torch.distributed as dist

        inp, out = self._input, self._output
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        if op == "all-reduce":
            return lambda: dist.all_reduce(out, group=group)
        if op == "all-gather":
            return lambda: gather(out, inp, group=group)
        if op == "reduce-scatter":
            return lambda: scatter(out, inp, group=group)
        if op == "all-to-all":
            return lambda: dist.all_to_all_single(out, inp, group=group)
        if op == "broadcast":
            return lambda: dist.broadcast(out, src=0, group=group)
        following, previous = (self.rank + 1) % self.ranks, (self.rank - 1) % self.ranks

        def sendrecv() -> None:
            # Batched, so NCCL posts both in one group (two separate calls can deadlock).
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, inp, following, group),
                                                dist.P2POp(dist.irecv, out, previous, group)]):
                work.wait()

        return sendrecv

    def check(self) -> str | None:
        """Run the collective once from fresh inputs; None when this rank's output is the
        reference, else what differs."""
        if self._in_place:
            self._output.copy_(self._input)
        self.run()
        got = self._output.cpu().numpy()
        want = reference(self.op, self.seed, self.rank, self.ranks, self.elements)
        if got.shape == want.shape and np.array_equal(got, want):
            return None
        if got.shape != want.shape:
            return f"rank {self.rank}: {self.op} output has shape {got.shape}, the reference {want.shape}"
        wrong = np.flatnonzero(got != want)
        return (f"rank {self.rank}: {self.op} of {self.nbytes} B over {self.ranks} ranks: {wrong.size} of "
                f"{got.size} elements differ from the reference (first at {wrong[0]}: {got[wrong[0]]} != "
                f"{want[wrong[0]]})")
