"""The peers follow the sampler: every batch the sampler times on rank 0 is preceded, outside
the timed region, by a command that has every peer run the same number of calls.

The sampler (``measure/sampler.py``) calls ``device.time_batch(fn, inner, work)`` for each warm-up
call, each calibration step and each sample, with an ``inner`` it chooses as it goes; that call
is the one place where a batch's size is known before it runs. :class:`LockStepDevice` wraps the
bound device for one measurement and, in ``time_batch``, first sends the peers ``run inner +
lead-in`` (one control all-reduce, which also lines the ranks up), then runs the lead-in call
untimed and hands the batch to the real device to time. The lead-in call leaves every rank the
way it leaves any call of the loop, so the first timed call does not carry the skew of the
control message; it is skipped once a call takes longer than ``LEAD_IN_MAX_S``, where that skew
is negligible and a second call would halve the samples.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from .buffers import CollectiveBuffers
from .ranks import Ranks

LEAD_IN_MAX_S = 2e-3


class LockStepDevice:
    """The bound device, whose batches the peers join (every other attribute is the device's)."""

    def __init__(self, device: Any, ranks: Ranks, buffers: CollectiveBuffers) -> None:
        self._device, self._ranks, self._buffers = device, ranks, buffers
        self._call_s: float | None = None       # the last batch's time per call
        self.batches = 0
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device, name)

    def time_batch(self, fn: Callable[[], Any], inner: int, work: Any = None) -> float:
        """Seconds of ``inner`` calls of ``fn`` on rank 0, the peers running theirs alongside."""
        lead_in = 1 if self._call_s is None or self._call_s < LEAD_IN_MAX_S else 0
        buffers = self._buffers
        with self._ranks.step(f"{buffers.op} of {buffers.nbytes} B: a batch of {inner} call(s)"):
            self._ranks.start_batch(inner + lead_in)
            on_stream = getattr(self._device, "on_stream", None)
            with on_stream() if on_stream is not None else contextlib.nullcontext():
                for _ in range(lead_in):
                    fn()
            batch_s = float(self._device.time_batch(fn, inner, work))
        self._call_s = batch_s / inner
        self.batches += 1
        self.calls += inner + lead_in
        return batch_s


@contextlib.contextmanager
def following(charz: Any, ranks: Ranks, buffers: CollectiveBuffers, deadline_s: float) -> Iterator[LockStepDevice]:
    """The lock-step device for ``charz.measure(..., device=...)``: its batches are the ones the
    peers join, and the whole block must end within ``deadline_s`` (else the watchdog ends it
    with RankFailure). At the end the peers' status of their last batch is collected."""
    lockstep = LockStepDevice(charz.device, ranks, buffers)
    with ranks.deadline(deadline_s):
        yield lockstep
        ranks.finish(buffers)
