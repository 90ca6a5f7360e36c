"""A peer rank: ``python -m pytest_charz.distributed.peer --rank R --world N --port P ...``.

Started by :class:`~pytest_charz.distributed.ranks.Ranks` (rank 0). It joins the process groups
through rank 0's store, then follows rank 0's commands (the control protocol of ``ranks.py``):
prepare a case's buffers, run and check one call, run N calls back to back, stop. It exits when
rank 0 does (``PR_SET_PDEATHSIG`` where Linux offers it, and a thread watching the parent's pid
everywhere), so no peer outlives the session.
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
                    STOP)

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

    from ..models.ceilings import COLLECTIVE_OPS
    from .buffers import CollectiveBuffers

    device = torch.device("cpu")
    if args.backend != "gloo" and args.device_index is not None:
        torch.cuda.set_device(args.device_index)
        device = torch.device("cuda", args.device_index)
    store = dist.TCPStore("127.0.0.1", args.port, args.world, False, timedelta(seconds=START_TIMEOUT_S))
    store.set(READY_KEY.format(rank=args.rank), "1")
    dist.init_process_group(args.backend, store=store, rank=args.rank, world_size=args.world,
                            timeout=timedelta(seconds=args.timeout))
    control_group = dist.new_group(backend="gloo", timeout=timedelta(seconds=args.idle_timeout))

    def report(status: int, message: str) -> int:
        store.set(MESSAGE_KEY.format(rank=args.rank), message)
        return status

    buffers: Any = None
    status = OK
    while True:
        control = torch.zeros(FIELDS + args.world, dtype=torch.int64)
        control[FIELDS + args.rank] = status
        dist.all_reduce(control, group=control_group)
        command, op_index, nbytes, seed, calls = (int(v) for v in control[:FIELDS].tolist())
        status = OK
        try:
            if command == PREPARE:
                buffers = None             # the previous case's memory first
                buffers = CollectiveBuffers(COLLECTIVE_OPS[op_index - 1], nbytes, args.world, args.rank, seed,
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
            status = report(ERROR, f"rank {args.rank}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
