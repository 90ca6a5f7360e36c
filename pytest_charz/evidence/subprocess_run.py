"""The one way the evidence package runs a profiler: an argument list, never a shell, a timeout.

A case name is data (a pytest node id may hold quotes, ``;``, ``$(...)``, spaces or a newline):
it is passed as one element of ``argv`` and reaches the program as one argument, because no
shell parses the command. :func:`run_tool` refuses a string command outright.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..errors import UsageError

DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ToolResult:
    """What a profiler run gave: its argv, exit status, output, and whether it timed out."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def check_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """``argv`` as a tuple of strings; UsageError for a string (a shell command) or a non-string item."""
    if isinstance(argv, (str, bytes)):
        raise UsageError("a profiler command is an argument list, never one string for a shell: "
                         f"got {argv!r}")
    items = tuple(argv)
    if not items:
        raise UsageError("a profiler command needs at least the program to run")
    bad = [item for item in items if not isinstance(item, str)]
    if bad:
        raise UsageError(f"every argument of a profiler command must be a str; got {bad[0]!r}")
    if any("\0" in item for item in items):
        raise UsageError("an argument of a profiler command holds a NUL byte, which no program can receive")
    return items


def find_tool(name: str, hint: str) -> str:
    """The full path of the executable ``name``; UsageError naming ``hint`` (how to get it)."""
    path = shutil.which(name)
    if path is None:
        raise UsageError(f"{name!r} is not on PATH: {hint}")
    return path


def run_tool(argv: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S, cwd: str | None = None,
             env: Mapping[str, str] | None = None) -> ToolResult:
    """Run ``argv`` (no shell) to completion or ``timeout_s``; output captured as text."""
    items = check_argv(argv)
    try:
        done = subprocess.run(list(items), shell=False, capture_output=True, text=True, timeout=timeout_s,
                              cwd=cwd, env=dict(env) if env is not None else None, check=False)
    except subprocess.TimeoutExpired as exc:
        def text(value: object) -> str:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")
        return ToolResult(items, -1, text(exc.stdout), text(exc.stderr), timed_out=True)
    except FileNotFoundError:
        raise UsageError(f"{items[0]!r} cannot be run: no such program") from None
    return ToolResult(items, done.returncode, done.stdout, done.stderr)
