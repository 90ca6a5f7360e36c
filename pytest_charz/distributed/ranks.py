"""Rank 0's side of a local process group: start the peers, command them, watch them.

The calling process (pytest) is rank 0. :meth:`Ranks.start` opens a ``TCPStore`` on 127.0.0.1
on a port the OS picks, starts ``world - 1`` peers (``python -m pytest_charz.distributed.peer``),
waits until each has said it is up (failing at once, with its stderr, if one exits) and joins
them in the default process group (the data collectives, with ``timeout_s``) and a Gloo group
for the control messages (with ``idle_timeout_s``: peers wait in it between cases).

Control protocol: every command is one all-reduce of a small int64 vector on the control group,
``[command, op, bytes, seed, calls, status of rank 0, ..., status of rank n-1]``: rank 0 writes
the command, every rank its status of the previous command (0 ok, 1 check failed, 2 error, the
message in the store under ``charz/message/<rank>``). Peers only ever wait in that all-reduce
between commands, so a failed case whose collectives did not start leaves the protocol intact.

Watchdog: a thread polls the peers and the current step's deadline. A peer that exits, or a step
past its deadline, gets every peer killed, which makes rank 0's blocked Gloo call fail at once
(the sockets close); the step then raises :class:`RankFailure` with the cause, and the ranks are
torn down (no process left behind). Peers also exit when rank 0 does (``peer.py``).

Under a launcher (``torchrun``, or anything that sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``; :func:`launched_rank`) every rank is a process the launcher started: rank 0 joins
them through the launcher's rendezvous (``init_method="env://"``) instead of starting peers, the
other ranks follow its commands (``peer.follow_launched``). The launcher owns those processes: it
ends the job when one of them dies, and a hung peer is bounded by the groups' timeouts, not by
the watchdog (which has nothing of its own to kill); torn-down ranks cannot be started afresh.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterator, Mapping, Sequence

from ..errors import CharzError
from ..measure import clock
from ..work import COLLECTIVE_OPS
from .buffers import CollectiveBuffers, check_op

PREPARE, CHECK, RUN, STATUS, STOP = 1, 2, 3, 4, 5
FIELDS = 5
OK, CHECK_FAILED, ERROR = 0, 1, 2
START_TIMEOUT_S = 120.0          # peers import torch: seconds on a cold cache
WATCH_INTERVAL_S = 0.02
#: How long a failed step waits for the watchdog to name the peer that ended it: Gloo sees a
#: killed peer's sockets close before the process is reaped, and on a loaded host the reaping
#: (a large process's memory torn down) and the watchdog's next look can take a while.
SETTLE_S = 3.0
MESSAGE_KEY = "charz/message/{rank}"
READY_KEY = "charz/ready/{rank}"


class RankFailure(CharzError):
    """A rank died, hung past its deadline or could not do its part; the ranks are torn down
    when the lock-step was lost (``broken``)."""


def describe_exit(code: int) -> str:
    """``exited with status 3`` or ``was killed by SIGKILL``."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


#: What a launcher sets for each rank it starts (torchrun does; so do other elastic launchers).
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class LaunchedRank:
    """This process's place in a job a launcher started: global ``rank`` of ``world``, the
    rank on its node (``local_rank``, the GPU it drives) and the rendezvous address."""

    rank: int
    world: int
    local_rank: int
    master_addr: str
    master_port: int


def launched_rank(environ: Mapping[str, str] | None = None) -> LaunchedRank | None:
    """This process's :class:`LaunchedRank` when a launcher started it (every variable of
    ``LAUNCHER_VARIABLES`` set), None otherwise; CharzError for a variable that is not a number
    or a rank outside the world."""
    env = os.environ if environ is None else environ
    if not all(env.get(name) for name in LAUNCHER_VARIABLES):
        return None
    numbers: dict[str, int] = {}
    for name in ("RANK", "WORLD_SIZE", "MASTER_PORT", "LOCAL_RANK"):
        text = env.get(name) or (env["RANK"] if name == "LOCAL_RANK" else "")
        try:
            numbers[name] = int(text)
        except ValueError:
            raise CharzError(f"the launcher set {name}={text!r}, which is not a whole number") from None
    if not 0 <= numbers["RANK"] < numbers["WORLD_SIZE"]:
        raise CharzError(f"the launcher set RANK={numbers['RANK']} outside WORLD_SIZE={numbers['WORLD_SIZE']}")
    return LaunchedRank(numbers["RANK"], numbers["WORLD_SIZE"], numbers["LOCAL_RANK"], env["MASTER_ADDR"],
                        numbers["MASTER_PORT"])


class Ranks:
    """A process group of ``world`` local ranks, this process rank 0, peers it started itself.

    ``backend``: ``gloo`` (CPU tensors) or ``nccl`` (RCCL on ROCm builds; one GPU per rank,
    ``device_indices[r]`` for rank r). ``timeout_s`` bounds each data collective and each step
    without a deadline of its own. ``launched``: the ranks are a launcher's (this process is its
    rank 0); they are joined, not started (see the module docstring).
    """

    def __init__(self, world: int, backend: str = "gloo", device_indices: Sequence[int] | None = None,
                 timeout_s: float = 60.0, idle_timeout_s: float = 1800.0, launched: LaunchedRank | None = None) -> None:
        if world < 2:
            raise CharzError(f"a process group of {world} rank(s): collectives need at least 2")
        if launched is not None and (launched.rank != 0 or launched.world != world):
            raise CharzError(f"rank {launched.rank} of a {launched.world}-rank job cannot lead {world} ranks: "
                             "only the launcher's rank 0 does, with the job's world size")
        self.launched = launched
        self.world, self.backend, self.timeout_s, self.idle_timeout_s = world, backend, timeout_s, idle_timeout_s
        self.device_indices = list(device_indices) if device_indices is not None else None
        self.peers: dict[int, subprocess.Popen[bytes]] = {}
        self.broken: str | None = None         # why the ranks were torn down, once they were
        self._logs: dict[int, Any] = {}
        self._store: Any = None
        self._control: Any = None
        self._deadline: float | None = None    # time.monotonic() by which the current step must end
        self._case_deadline: float | None = None
        self._cause: str | None = None         # what the watchdog found
        self._closing = threading.Event()
        self._stopping = False
        self._watchdog: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> "Ranks":
        """Start the peers and join them in the process groups (RankFailure if one does not come)."""
        import torch.distributed as dist

        if dist.is_initialized():
            raise CharzError("a default process group exists already: the ranks need a fresh one")
        if self.launched is not None:
            return self._join_launched(dist)
        # Port 0: the OS picks a free one (no race with another session); workers join later.
        self._store = dist.TCPStore("127.0.0.1", 0, self.world, True, timedelta(seconds=START_TIMEOUT_S),
                                    wait_for_workers=False)
        atexit.register(self.kill_peers)
        for rank in range(1, self.world):
            self._spawn(rank)
        self._watchdog = threading.Thread(target=self._watch, name="charz-ranks-watchdog", daemon=True)
        self._watchdog.start()
        with self.step("starting the peers", START_TIMEOUT_S):
            self._wait_ready()
            self._init_groups(dist)
        return self

    def _join_launched(self, dist: Any) -> "Ranks":
        """Rank 0 of a launcher's job: the default group through its rendezvous, then a client of
        its store for the peers' messages, then the control group."""
        launched = self.launched
        assert launched is not None
        self._watchdog = threading.Thread(target=self._watch, name="charz-ranks-watchdog", daemon=True)
        self._watchdog.start()
        with self.step(f"joining the {self.world} ranks of the launcher at {launched.master_addr}:"
                       f"{launched.master_port}", START_TIMEOUT_S):
            if self.backend == "nccl" and self.device_indices is not None:
                import torch

                torch.cuda.set_device(self.device_indices[0])
            dist.init_process_group(self.backend, init_method="env://", rank=0, world_size=self.world,
                                    timeout=timedelta(seconds=self.timeout_s))
            self._store = launcher_store(dist, launched)
            self._control = dist.new_group(backend="gloo", timeout=timedelta(seconds=self.idle_timeout_s))
        return self

    def _spawn(self, rank: int) -> None:
        argv = [sys.executable, "-m", "pytest_charz.distributed.peer", "--rank", str(rank),
                "--world", str(self.world), "--port", str(self._store.port), "--backend", self.backend,
                "--timeout", str(self.timeout_s), "--idle-timeout", str(self.idle_timeout_s),
                "--parent", str(os.getpid())]
        if self.device_indices is not None:
            argv += ["--device-index", str(self.device_indices[rank])]
        log = tempfile.TemporaryFile(prefix=f"charz-rank{rank}-")
        self._logs[rank] = log
        self.peers[rank] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def _wait_ready(self) -> None:
        keys = [READY_KEY.format(rank=r) for r in range(1, self.world)]
        while not self._store.check(keys):
            if self._cause:
                raise RankFailure(self._cause)
            time.sleep(WATCH_INTERVAL_S)

    def _init_groups(self, dist: Any) -> None:
        if self.backend == "nccl" and self.device_indices is not None:
            import torch

            torch.cuda.set_device(self.device_indices[0])
        dist.init_process_group(self.backend, store=self._store, rank=0, world_size=self.world,
                                timeout=timedelta(seconds=self.timeout_s))
        self._control = dist.new_group(backend="gloo", timeout=timedelta(seconds=self.idle_timeout_s))

    def close(self) -> None:
        """Stop the peers (a STOP command, then a kill for any still there) and leave the groups."""
        if self._store is not None and self.broken is None and all(p.poll() is None for p in self.peers.values()):
            with contextlib.suppress(RankFailure):
                with self.step("stopping the peers", 10.0):
                    self._stopping = True      # peers exiting now is what was asked
                    self._exchange(STOP)
                    for proc in self.peers.values():
                        proc.wait(timeout=10.0)
        self._teardown()

    def _teardown(self) -> None:
        self._closing.set()
        self.kill_peers()
        import torch.distributed as dist

        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        self._control = None
        self._store = None
        for log in self._logs.values():
            log.close()
        self._logs.clear()

    def kill_peers(self) -> None:
        """SIGKILL every peer still running and reap it (idempotent; also run at exit)."""
        for proc in self.peers.values():
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.kill()
        for proc in self.peers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10.0)

    # -- the watchdog and steps ----------------------------------------------------------------
    def _watch(self) -> None:
        while not self._closing.wait(WATCH_INTERVAL_S):
            cause = None
            for rank, proc in self.peers.items():
                code = proc.poll()
                if code is not None and not self._stopping:
                    cause = f"rank {rank} {describe_exit(code)}{self._log_tail(rank)}"
                    break
            deadline = self._deadline
            if cause is None and deadline is not None and time.monotonic() > deadline:
                cause = "did not finish by its deadline: a rank hangs (every peer was killed)"
            if cause is not None and not self._closing.is_set():
                self._cause = cause
                self.kill_peers()     # rank 0's blocked collective now fails instead of waiting
                return

    def _log_tail(self, rank: int, limit: int = 1500) -> str:
        log = self._logs.get(rank)
        if log is None:
            return ""
        with contextlib.suppress(Exception):
            log.seek(0)
            text = log.read().decode(errors="replace").strip()
            if text:
                return f"; its output ends:\n{text[-limit:]}"
        return ""

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Every step inside must end by ``seconds`` from now (a case's budget), else the
        watchdog ends it."""
        self._case_deadline = time.monotonic() + seconds
        try:
            yield
        finally:
            self._case_deadline = None

    @contextlib.contextmanager
    def step(self, name: str, seconds: float | None = None) -> Iterator[None]:
        """A part of a case on rank 0 that the watchdog bounds: by ``seconds``, the case's
        deadline or ``timeout_s``. Any error inside loses the lock-step: the ranks are torn down
        and RankFailure says why (the watchdog's finding first)."""
        if self.broken is not None:
            raise RankFailure(f"{name}: the ranks were torn down earlier ({self.broken})")
        limit = seconds if seconds is not None else self.timeout_s
        self._deadline = min(time.monotonic() + limit, self._case_deadline or float("inf"))
        try:
            yield
        except BaseException as exc:
            # Gloo may notice a dead peer before the watchdog does: give it a moment to say which.
            settle = time.monotonic() + (0.0 if isinstance(exc, KeyboardInterrupt) else SETTLE_S)
            while self._cause is None and time.monotonic() < settle and self._watchdog is not None \
                    and self._watchdog.is_alive():
                time.sleep(WATCH_INTERVAL_S)
            cause = self._cause or next((f"rank {r} {describe_exit(p.returncode)}" for r, p in self.peers.items()
                                         if p.poll() is not None), None)
            self.broken = f"{name}: {cause or type(exc).__name__ + ': ' + str(exc)}"
            self._teardown()
            if isinstance(exc, (KeyboardInterrupt, RankFailure)):
                raise
            raise RankFailure(f"{self.broken}\n(rank 0 saw: {type(exc).__name__}: {exc})".strip()) from exc
        finally:
            self._deadline = None

    # -- the control protocol ------------------------------------------------------------------
    def _exchange(self, command: int, op: str = "", nbytes: int = 0, seed: int = 0, calls: int = 0) -> list[int]:
        import torch
        import torch.distributed as dist

        control = torch.zeros(FIELDS + self.world, dtype=torch.int64)
        control[:FIELDS] = torch.tensor([command, COLLECTIVE_OPS.index(op) + 1 if op else 0, nbytes, seed, calls])
        dist.all_reduce(control, group=self._control)
        return [int(v) for v in control.tolist()]

    def _peer_problems(self, control: Sequence[int]) -> list[str]:
        problems = []
        for rank in range(1, self.world):
            if control[FIELDS + rank] != OK:
                problems.append(self._store.get(MESSAGE_KEY.format(rank=rank)).decode(errors="replace"))
        return problems

    def prepare(self, op: str, nbytes: int, seed: int) -> CollectiveBuffers:
        """Every rank allocates the case's buffers with its inputs from ``seed`` (the previous
        case's are dropped first). RankFailure naming the ranks that could not."""
        check_op(op)
        own: CollectiveBuffers | None = None
        error = ""
        with self.step(f"preparing {op} of {nbytes} B"):
            self._exchange(PREPARE, op, nbytes, seed)
            try:
                own = CollectiveBuffers(op, nbytes, self.world, 0, seed, self._torch_device(), None)
            except Exception as exc:        # reported after the peers answer: the protocol goes on
                error = f"rank 0: {type(exc).__name__}: {exc}"
            problems = ([error] if error else []) + self._peer_problems(self._exchange(STATUS))
        if problems or own is None:
            raise RankFailure(f"preparing {op} of {nbytes} B failed:\n" + "\n".join(problems))
        return own

    def check(self, buffers: CollectiveBuffers) -> list[str]:
        """One call of the case's collective on every rank, from fresh inputs, each checked
        against its reference: what differs, per rank (empty when every rank is right)."""
        with self.step(f"checking {buffers.op} of {buffers.nbytes} B"):
            self._exchange(CHECK)
            mismatch = buffers.check()
            problems = ([mismatch] if mismatch else []) + self._peer_problems(self._exchange(STATUS))
        return problems

    def start_batch(self, calls: int) -> None:
        """Tell the peers to run ``calls`` calls of the case's collective now (rank 0 then runs
        the same number; call inside :meth:`step`)."""
        self._exchange(RUN, calls=calls)

    def finish(self, buffers: CollectiveBuffers) -> None:
        """Collect the peers' status of their last batch (RankFailure when one failed)."""
        with self.step(f"{buffers.op} of {buffers.nbytes} B: the peers' status"):
            problems = self._peer_problems(self._exchange(STATUS))
        if problems:
            raise RankFailure("\n".join(problems))

    def run(self, buffers: CollectiveBuffers, calls: int) -> float:
        """``calls`` calls of the case's collective on every rank; rank 0's seconds for them
        (no sampling: the sampler goes through :mod:`.lockstep`)."""
        with self.step(f"{calls} calls of {buffers.op} of {buffers.nbytes} B"):
            self.start_batch(calls)
            start_ns = clock.now_ns()
            for _ in range(calls):
                buffers.run()
            elapsed = (clock.now_ns() - start_ns) / 1e9
        self.finish(buffers)
        return elapsed

    def _torch_device(self) -> Any:
        import torch

        if self.backend == "gloo" or self.device_indices is None:
            return torch.device("cpu")
        return torch.device("cuda", self.device_indices[0])


def launcher_store(dist: Any, launched: LaunchedRank) -> Any:
    """A client of the launcher's store (torchrun's agent, or rank 0's own under ``env://``),
    which is up once the default group is: the peers' messages go through it."""
    return dist.TCPStore(launched.master_addr, launched.master_port, None, False,
                         timedelta(seconds=START_TIMEOUT_S))
