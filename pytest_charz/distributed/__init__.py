"""Collectives across local ranks that the characterizing process starts itself.

- :mod:`.ranks`: rank 0 (this process) starts the peers, commands them and watches them
  (:class:`Ranks`, :class:`RankFailure`).
- :mod:`.peer`: a peer rank's loop (``python -m pytest_charz.distributed.peer``).
- :mod:`.buffers`: one case's buffers, call and reference check on one rank.
- :mod:`.lockstep`: the peers follow the sampler's batches (:func:`following`).

Imports of torch happen inside functions: importing this package costs nothing without it.
"""
from __future__ import annotations

from .buffers import CHUNKED_OPS, CollectiveBuffers, message_elements, reference
from .lockstep import LockStepDevice, following
from .ranks import RankFailure, Ranks

__all__ = ["CHUNKED_OPS", "CollectiveBuffers", "LockStepDevice", "RankFailure", "Ranks", "following",
           "message_elements", "reference"]
