"""Taking turns with a sibling process: two processes measuring the same cases, batch slice by
batch slice, never at the same time.

Two processes run one after the other see different machines on a shared or virtual host: the
core clock and the neighbours move over seconds. Two processes that hand a turn back and forth
every few tens of milliseconds see the same machine, so what moves slowly is common to both and
cancels in their ratio (``charz ab``'s interleaved rounds, :mod:`pytest_charz.ab.referee`).

This is the measuring side. A referee process passes two file descriptors in the environment
(:data:`ENV`, ``"<read fd>,<write fd>"``). Whenever the process reaches a point where the other
may run (before a case's warm-up, after each slice of its samples) it writes
``wait <label>`` (the case it measures next) and blocks until the referee answers
``go <pids>`` (the sibling's process ids, comma-separated, ``-`` for none). Between two waits
the process holds the turn: the sibling is blocked on its own pipe, so nothing of the other side
runs while this one measures, or while it does its bookkeeping between cases. A process that
exits gives the turn back by closing its pipe.
"""
from __future__ import annotations

import os
from typing import Callable

ENV = "CHARZ_TURNS_FDS"
#: The sampler hands the turn over after about this much sampling (batches and reference kernel):
#: short next to the seconds over which a shared machine's clock and neighbours move, long next
#: to the hand-over itself (two pipe writes and a context switch, tens of microseconds).
TURN_SLICE_S = 0.02


class TurnsError(RuntimeError):
    """The referee closed the pipe or answered what the protocol does not say."""


class Turns:
    """This process's end of the turn protocol (see the module docstring)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._read = os.fdopen(read_fd, "r", buffering=1, encoding="ascii", newline="\n")
        self._write = os.fdopen(write_fd, "w", buffering=1, encoding="ascii", newline="\n")
        self.sibling_pids: frozenset[int] = frozenset()
        self.turns = 0

    def wait(self, label: str) -> None:
        """Give the turn back, saying ``label`` comes next, and block until it is this process's again."""
        label = "".join(ch if ch.isprintable() and not ch.isspace() else "_" for ch in label) or "-"
        self._write.write(f"wait {label}\n")
        self._write.flush()
        answer = self._read.readline()
        if not answer.startswith("go "):
            raise TurnsError(f"the referee answered {answer!r} where 'go <pids>' was due"
                             if answer else "the referee closed the turn pipe")
        pids = answer[3:].strip()
        self.sibling_pids = frozenset(int(p) for p in pids.split(",") if p and p != "-")
        self.turns += 1

    def taker(self, label: str) -> Callable[[], None]:
        """A no-argument callable that waits for the turn under ``label`` (what the sampler calls)."""
        return lambda: self.wait(label)


_PROCESS_TURNS: list[Turns | None] = []


def process_turns() -> Turns | None:
    """This process's turns when a referee started it (:data:`ENV` set), else None; one per process."""
    if not _PROCESS_TURNS:
        value = os.environ.get(ENV, "")
        turns = None
        if value:
            try:
                read_fd, write_fd = (int(part) for part in value.split(","))
            except ValueError:
                raise TurnsError(f"{ENV} must be '<read fd>,<write fd>'; got {value!r}") from None
            try:
                turns = Turns(read_fd, write_fd)
            except OSError as exc:           # a process the referee did not start (a pytest-xdist worker)
                raise TurnsError(f"{ENV}={value!r} names no open pipe in this process ({exc}): only the process "
                                 "charz ab started can take turns") from None
        _PROCESS_TURNS.append(turns)
    return _PROCESS_TURNS[0]


__all__ = ["ENV", "TURN_SLICE_S", "Turns", "TurnsError", "process_turns"]
