"""The referee of an interleaved round: two processes measure the same cases and take turns,
one slice of samples each, so that no two measure at once and both see the same machine.

The processes are pytest runs of the two sides; their end of the protocol is
:mod:`pytest_charz.measure.turns` (``wait <label>`` up, ``go <pids>`` down). :class:`Referee` is the
rule, pure and tested without processes; :func:`run_interleaved` starts the processes and carries
the messages.

The rule:

- nobody measures before both processes have reached their first case (or exited): while one
  still imports and collects, the other waits;
- exactly one process holds the turn from then on; it holds it until it waits again or exits;
- a waiting process is granted the turn in the order the cases were first announced, so a side
  that is behind (still on a case the other has finished) catches up before the other goes on,
  and a case run by both is run by both at nearly the same time; between two processes on the
  same case the one that did not hold the turn last goes next: strict alternation, slice by slice.
"""
from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
from dataclasses import dataclass, field
from typing import IO, Mapping, Sequence

from ..measure.turns import ENV


@dataclass
class Referee:
    """Who holds the turn among ``sides`` processes (indices 0..sides-1)."""

    sides: int = 2
    holder: int | None = None
    waiting: dict[int, str] = field(default_factory=dict)
    alive: set[int] = field(default_factory=set)
    started: bool = False
    last: int | None = None
    order: dict[str, int] = field(default_factory=dict)
    grants: int = 0

    def __post_init__(self) -> None:
        if not self.alive:
            self.alive = set(range(self.sides))

    def wait(self, side: int, label: str) -> int | None:
        """``side`` gives the turn back (or asks for its first), ``label`` next; whom to grant now."""
        if side not in self.alive:
            raise ValueError(f"process {side} has exited; it cannot wait")
        if self.holder is not None and self.holder != side:
            raise ValueError(f"process {side} waited while process {self.holder} holds the turn")
        if self.holder == side:
            self.holder = None
        self.order.setdefault(label, len(self.order))
        self.waiting[side] = label
        return self._grant()

    def exit(self, side: int) -> int | None:
        """``side`` exited (its pipe closed); whom to grant now."""
        self.alive.discard(side)
        self.waiting.pop(side, None)
        if self.holder == side:
            self.holder = None
        return self._grant()

    def _grant(self) -> int | None:
        if self.holder is not None or not self.waiting:
            return None
        if not self.started:
            if set(self.waiting) != self.alive:
                return None                      # the other is still starting up: nobody measures yet
            self.started = True
        side = min(self.waiting, key=lambda s: (self.order[self.waiting[s]], s == self.last, s))
        del self.waiting[side]
        self.holder = self.last = side
        self.grants += 1
        return side


@dataclass(frozen=True)
class Finished:
    """A process of an interleaved round: its exit status and how many turns it was granted."""

    returncode: int
    turns: int


def run_interleaved(commands: Sequence[Sequence[str]], envs: Sequence[Mapping[str, str]],
                    cwds: Sequence[str | None], outputs: Sequence[IO[bytes]],
                    pin_cpus: set[int] | None = None) -> list[Finished]:
    """Start one process per command, each with its end of a turn pipe in its environment
    (:data:`~pytest_charz.measure.turns.ENV`) and its output into ``outputs[i]``, and referee
    their turns until all have exited. ``pin_cpus`` restricts every process to those CPUs."""
    referee = Referee(len(commands))
    processes: list[subprocess.Popen[bytes]] = []
    to_child: list[IO[str]] = []
    from_child: list[IO[str]] = []
    turns = [0] * len(commands)
    try:
        for command, env, cwd, output in zip(commands, envs, cwds, outputs):
            down_r, down_w = os.pipe()
            up_r, up_w = os.pipe()
            preexec = (lambda: os.sched_setaffinity(0, pin_cpus)) if pin_cpus else None
            try:
                process = subprocess.Popen(list(command), env={**env, ENV: f"{down_r},{up_w}"}, cwd=cwd or None,
                                           stdout=output, stderr=subprocess.STDOUT, pass_fds=(down_r, up_w),
                                           preexec_fn=preexec)
            finally:
                os.close(down_r)
                os.close(up_w)
            processes.append(process)
            to_child.append(os.fdopen(down_w, "w", buffering=1, encoding="ascii"))
            from_child.append(os.fdopen(up_r, "r", buffering=1, encoding="ascii"))
        selector = selectors.DefaultSelector()
        for index, pipe in enumerate(from_child):
            selector.register(pipe, selectors.EVENT_READ, index)

        def grant(side: int | None) -> None:
            if side is None:
                return
            others = [str(p.pid) for i, p in enumerate(processes) if i != side and i in referee.alive]
            turns[side] += 1
            try:
                to_child[side].write(f"go {','.join(others) or '-'}\n")
                to_child[side].flush()
            except BrokenPipeError:              # it died between its wait and this answer
                selector.unregister(from_child[side])
                grant(referee.exit(side))

        while referee.alive:
            for key, _ in selector.select():
                side = key.data
                if side not in referee.alive:
                    continue
                line = from_child[side].readline()
                if line.startswith("wait "):
                    grant(referee.wait(side, line[5:].strip()))
                else:                             # EOF (exited) or garbage: the process is out of the protocol
                    selector.unregister(from_child[side])
                    with contextlib.suppress(OSError):
                        to_child[side].close()           # a process still reading is told so (EOF)
                    grant(referee.exit(side))
        selector.close()
        return [Finished(process.wait(), count) for process, count in zip(processes, turns)]
    finally:
        for pipe in (*to_child, *from_child):
            with contextlib.suppress(OSError):
                pipe.close()
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


__all__ = ["Finished", "Referee", "run_interleaved"]
