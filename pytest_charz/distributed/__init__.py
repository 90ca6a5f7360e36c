"""Collectives across ranks: local ones that the characterizing process starts itself, or a launcher's.

- :mod:`.ranks`: rank 0 (this process) starts the peers, commands them and watches them
  (:class:`Ranks`, :class:`RankFailure`); under a launcher such as ``torchrun``
  (:func:`launched_rank`) it joins the launcher's ranks instead.
- :mod:`.peer`: a peer rank's loop (``python -m pytest_charz.distributed.peer``; a launcher's
  rank other than 0: :func:`follow_launched`).
- :mod:`.buffers`: one case's buffers, call and reference check on one rank.
- :mod:`.lockstep`: the peers follow the sampler's batches (:func:`following`).

Imports of torch happen inside functions: importing this package costs nothing without it.
"""
from __future__ import annotations

from .buffers import CHUNKED_OPS, CollectiveBuffers, message_elements, reference
from .lockstep import LockStepDevice, following
from .peer import follow_launched
from .ranks import LaunchedRank, RankFailure, Ranks, launched_rank

__all__ = ["CHUNKED_OPS", "CollectiveBuffers", "LaunchedRank", "LockStepDevice", "RankFailure", "Ranks",
           "follow_launched", "following", "launched_rank", "message_elements", "reference"]
