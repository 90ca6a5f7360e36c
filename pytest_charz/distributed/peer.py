"""A peer rank: ``python -m pytest_charz.distributed.peer --rank R --world N --port P ...``.

Started by :class:`~pytest_charz.distributed.ranks.Ranks` (rank 0). It joins the process groups
through rank 0's store, then follows rank 0's commands (the control protocol of ``ranks.py``):
prepare a case's buffers, run and check one call, run N calls back to back, stop. It exits when
rank 0 does (``PR_SET_PDEATHSIG`` where Linux offers it, and a thread watching the parent's pid
everywhere), so no peer outlives the session.

Under a launcher (``torchrun``) the peers are the launcher's processes: every rank but 0 runs
pytest too, and the collectives suite hands that process to :func:`follow_launched`, which joins
the launcher's rendezvous and follows rank 0 in the same way until it says stop.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import threading
import traceback
from datetime import timedelta
from typing import Any, Sequence

from .ranks import (CHECK, CHECK_FAILED, ERROR, FIELDS, MESSAGE_KEY, OK, PREPARE, READY_KEY, RUN, START_TIMEOUT_S,
                    STOP, LaunchedRank, launcher_store)

PARENT_POLL_S = 0.5


def _die_with_parent(parent: int) -> None:
    """Exit as soon as rank 0 is gone: a peer left waiting on a collective would never return."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, 9)          # PR_SET_PDEATHSIG, SIGKILL
        except (OSError, AttributeError):
            pass  # no prctl: the parent-pid watch below still ends the peer

    def watch() -> None:
        event = threading.Event()
        while not event.wait(PARENT_POLL_S):
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="charz-peer-parent-watch", daemon=True).start()
    if os.getppid() != parent:      # rank 0 died before the watch started
        os._exit(3)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pytest_charz.distributed.peer")
    for name in ("--rank", "--world", "--port", "--parent"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--idle-timeout", type=float, default=1800.0)
    parser.add_argument("--device-index", type=int, default=None)
    args = parser.parse_args(argv)
    _die_with_parent(args.parent)

    import torch
    import torch.distributed as dist

    device = torch.device("cpu")
    if args.backend != "gloo" and args.device_index is not None:
        torch.cuda.set_device(args.device_index)
        device = torch.device("cuda", args.device_index)
    store = dist.TCPStore("127.0.0.1", args.port, args.world, False, timedelta(seconds=START_TIMEOUT_S))
    store.set(READY_KEY.format(rank=args.rank), "1")
    dist.init_process_group(args.backend, store=store, rank=args.rank, world_size=args.world,
                            timeout=timedelta(seconds=args.timeout))
    control_group = dist.new_group(backend="gloo", timeout=timedelta(seconds=args.idle_timeout))

    follow(args.rank, args.world, store, control_group, device)
    dist.destroy_process_group()
    return 0


def follow(rank: int, world: int, store: Any, control_group: Any, device: Any) -> int:
    """Follow rank 0's commands (the control protocol of ``ranks.py``) until it says stop;
    returns the number of commands served. The process groups are joined already."""
    import torch
    import torch.distributed as dist

    from ..work import COLLECTIVE_OPS
    from .buffers import CollectiveBuffers

    def report(status: int, message: str) -> int:
        store.set(MESSAGE_KEY.format(rank=rank), message)
        return status

    buffers: Any = None
    status = OK
    served = 0
    while True:
        control = torch.zeros(FIELDS + world, dtype=torch.int64)
        control[FIELDS + rank] = status
        dist.all_reduce(control, group=control_group)
        command, op_index, nbytes, seed, calls = (int(v) for v in control[:FIELDS].tolist())
        status = OK
        served += 1
        try:
            if command == PREPARE:
                buffers = None             # the previous case's memory first
                buffers = CollectiveBuffers(COLLECTIVE_OPS[op_index - 1], nbytes, world, rank, seed,
                                            device, None)
            elif command == CHECK:
                mismatch = buffers.check()
                if mismatch:
                    status = report(CHECK_FAILED, mismatch)
            elif command == RUN:
                for _ in range(calls):
                    buffers.run()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)   # as rank 0's end event: no batch runs ahead
            elif command == STOP:
                break
        except Exception as exc:  # reported to rank 0 at the next command; a lost collective ends us anyway
            status = report(ERROR, f"rank {rank}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
    return served


def follow_launched(launched: LaunchedRank, backend: str = "gloo", device_index: int | None = None,
                    timeout_s: float = 60.0, idle_timeout_s: float = 1800.0) -> int:
    """A launcher's rank other than 0: join its rendezvous, follow rank 0 until it says stop,
    leave the groups. Returns the number of commands served."""
    import torch
    import torch.distributed as dist

    if launched.rank == 0:
        raise ValueError("rank 0 leads the ranks (distributed.Ranks); it does not follow")
    device = torch.device("cpu")
    if backend != "gloo" and device_index is not None:
        torch.cuda.set_device(device_index)
        device = torch.device("cuda", device_index)
    dist.init_process_group(backend, init_method="env://", rank=launched.rank, world_size=launched.world,
                            timeout=timedelta(seconds=timeout_s))
    try:
        store = launcher_store(dist, launched)
        control_group = dist.new_group(backend="gloo", timeout=timedelta(seconds=idle_timeout_s))
        return follow(launched.rank, launched.world, store, control_group, device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
