"""Progress a person sees on long work: the time left of a pytest session, said as each suite
file ends (:class:`SessionPace`), and the stages of a ``charz`` command on a terminal
(:class:`Progress`): a tqdm bar on stderr that names the stage under way, shown only when
stderr is a terminal (a pipe, a file or a CI log stays quiet, so what a command prints to stdout
is unchanged), and gone when the command ends.

    with Progress("charz profile", total=len(paths) + 2) as progress:
        for path in paths:
            progress.step(f"reading {os.path.basename(path)}")
            ...
"""
from __future__ import annotations

import sys
from typing import IO, Any, Callable, Sequence

from .text import duration_words


def on_terminal(stream: IO[str]) -> bool:
    """True when ``stream`` is an interactive terminal."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:             # a closed stream
        return False


class Progress:
    """Stages of one command. ``step(what)`` closes the stage before (the bar advances by one)
    and names the next; ``total`` the number of stages when known (None: a counter without an
    estimate). ``enabled`` None means: only when ``stream`` (stderr) is a terminal. Without tqdm
    installed it stays quiet."""

    def __init__(self, desc: str, total: int | None = None, stream: IO[str] | None = None,
                 enabled: bool | None = None, unit: str = "step") -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = on_terminal(self.stream) if enabled is None else enabled
        self._bar: Any = None
        self._started = False
        if self.enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                self.enabled = False
            else:
                self._bar = tqdm(total=total, desc=desc, file=self.stream, leave=False, unit=unit,
                                 dynamic_ncols=True)

    def step(self, what: str) -> None:
        """The stage before is done; ``what`` is under way."""
        if self._bar is None:
            return
        if self._started:
            self._bar.update(1)
        self._started = True
        self._bar.set_postfix_str(what, refresh=True)

    def close(self) -> None:
        if self._bar is not None:
            if self._started:
                self._bar.update(1)
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SessionPace:
    """The time left of a long session, said once per suite file as it ends: tests done, the
    time so far and the time left at the pace so far (tests of the files still to come cost
    what the ones done cost on average). Quiet for the first ``quiet_s`` seconds, so a short
    session prints nothing. ``now`` is the wall clock (a test passes a fake one)."""

    QUIET_S = 30.0

    def __init__(self, nodeids: Sequence[str], files: Sequence[str], now: Callable[[], float],
                 quiet_s: float | None = None) -> None:
        self.files = list(files)
        self.position = {nodeid: index for index, nodeid in enumerate(nodeids)}
        self.now = now
        self.start = now()
        self.quiet_s = self.QUIET_S if quiet_s is None else quiet_s
        self.done = 0

    def finished(self, nodeid: str) -> str | None:
        """The line to print after ``nodeid`` ended, or None (not the last test of its file,
        the session still short, or nothing left)."""
        index = self.position.get(nodeid)
        if index is None:
            return None
        self.done += 1
        total = len(self.files)
        last_of_file = index + 1 >= total or self.files[index + 1] != self.files[index]
        elapsed = self.now() - self.start
        left = total - self.done
        if not last_of_file or left <= 0 or elapsed < self.quiet_s:
            return None
        return (f"charz: {self.done} of {total} tests done in {duration_words(elapsed)}; "
                f"about {duration_words(elapsed / self.done * left)} left at this pace")


__all__ = ["Progress", "SessionPace", "on_terminal"]
