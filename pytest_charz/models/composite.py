"""``composite``: every term the other models know, combined the way the hardware overlaps them.

Kernel time overlaps compute with every memory level and with dependent-load latency (the
slowest wins; FLOPs of different dtypes add). Compute is the ``gemm`` model's quantized time for
``op == "gemm"`` and FLOPs at peak otherwise. Launches and transfers (and collectives) then:

* ``overlap=False`` (default): they add, ``kernel + launches * overhead + transfers``. This is
  the case for synchronous launches and copies, where the host waits for each.
* ``overlap=True``: launches are asynchronous on a stream, so the host dispatches the next kernel
  while the current one runs; a launch costs its overhead only when its kernel is shorter than
  that overhead. Per launch that is ``max(kernel / launches, overhead)``, i.e.
  ``max(kernel, launches * overhead)`` in all for kernels of equal length. Transfers run on a copy
  engine beside the kernels, so the total is the larger of that and the transfer time.

``work.shape["overlap"]`` (1 or 0), when present, says which case the work is and takes
precedence over the constructor's ``overlap``. The breakdown lists every term; the bound is the
term that dominates the total.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..work import Work
from .base import Prediction, Uncovered, guarded, overlapped
from .ceilings import Ceilings
from .comm import collective_terms, transfer_terms
from .gemm import GemmParams, gemm_compute_terms
from .launch import launch_terms
from .roofline import compute_terms, latency_terms, memory_terms


@dataclass(frozen=True)
class Composite:
    name: str = "composite"
    overlap: bool = False
    gemm_params: GemmParams = field(default_factory=GemmParams)

    def overlaps(self, work: Work) -> bool:
        """Whether launches and transfers overlap kernels for this work (see module docstring)."""
        if "overlap" in work.shape:
            return bool(work.shape["overlap"])
        return self.overlap

    def predict(self, work: Work, ceilings: Ceilings) -> Prediction:
        return guarded(self.name, lambda: self._predict(work, ceilings))

    def _predict(self, work: Work, ceilings: Ceilings) -> Prediction:
        if work.op == "gemm":
            compute = gemm_compute_terms(work, ceilings, self.gemm_params)
        else:
            compute = compute_terms(work, ceilings)
        kernel_terms = {**compute, **memory_terms(work, ceilings), **latency_terms(work, ceilings)}
        launch = launch_terms(work, ceilings)
        moves = {**transfer_terms(work, ceilings), **collective_terms(work.collectives, ceilings)}
        breakdown = {**kernel_terms, **launch, **moves}
        if not breakdown:
            raise Uncovered("the work has no FLOPs, bytes, accesses, launches, transfers or collectives")

        kernel_s, kernel_bound = overlapped(kernel_terms)
        launch_s = launch.get("launch", 0.0)
        moves_s, moves_bound = overlapped(moves)
        if self.overlaps(work):
            busy = max((kernel_s, kernel_bound), (launch_s, "launch" if launch else ""))
            time_s, bound = max(busy, (moves_s, moves_bound))
        else:
            time_s = kernel_s + launch_s + moves_s
            addends = {**({kernel_bound: kernel_s} if kernel_bound else {}), **launch, **moves}
            bound = max(addends, key=lambda name: addends[name])
        return Prediction.of_terms(self.name, time_s, bound, breakdown)
