"""The project's own errors, the small argument checks that raise them, and the one mapping of
what a user may cause to a command's exit status (:func:`run_command`)."""
from __future__ import annotations

import math
import os
import sys
from typing import Any, Callable, Iterable

#: Exit statuses of ``charz`` and the ``python -m pytest_charz...`` tools. A usage or file-format
#: error (a :class:`CharzError`) exits 2, as argparse does for a bad option; the operating system
#: refusing something the command needed (an :class:`OSError` not turned into a CharzError) exits
#: 1; Ctrl-C exits 130 (128 + SIGINT) and a reader that closed the pipe 141 (128 + SIGPIPE), as a
#: shell reports a tool those signals stopped.
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 1
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class CharzError(Exception):
    """Base of every error pytest-charz raises on purpose."""


class UsageError(CharzError):
    """The user asked for something that cannot be done as asked (bad option, unknown target)."""


class SpecError(CharzError):
    """A target description file is malformed; the message names the file, field and value."""


class FormatError(CharzError):
    """A versioned JSON file (run, profile, baseline) is truncated, corrupt or of an unknown
    version, or a document holds what no JSON file may (NaN, infinity) and is not written."""


class MissingExtraError(CharzError, ImportError):
    """An optional dependency is missing; the message names the extra that installs it."""


def require_extra(module: str, extra: str) -> Any:
    """Import ``module`` or raise :class:`MissingExtraError` naming ``pip install pytest-charz[extra]``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module!r} is needed here but is not installed; "
            f"install it with: pip install 'pytest-charz[{extra}]'"
        ) from exc


def check_positive(name: str, value: float) -> float:
    """``value`` as a float if it is a finite number > 0; UsageError naming ``name`` otherwise."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise UsageError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise UsageError(f"{name} must be a finite positive number, got {value!r}")
    return float(value)


def check_non_negative(name: str, value: float) -> float:
    """``value`` as a float if it is a finite number >= 0; UsageError naming ``name`` otherwise."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        raise UsageError(f"{name} must be a non-negative number, got {value!r}")
    if not math.isfinite(value):
        raise UsageError(f"{name} must be a finite non-negative number, got {value!r}")
    return float(value)


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    options = list(choices)
    if value not in options:
        raise UsageError(f"{name} must be one of {', '.join(map(repr, options))}; got {value!r}")
    return value


def _silence_stdout() -> None:
    """Point the process's stdout at the null device, so the interpreter's last flush of what a
    closed pipe did not take fails no more (Python's documented answer to SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass        # stdout is no file (captured in a test): nothing is left to flush


def run_command(prog: str, body: Callable[[], "int | None"]) -> int:
    """Run a command's ``body`` and return its exit status, turning what a user may cause into one
    line on stderr instead of a traceback (the statuses are the ``EXIT_*`` constants above).

    A :class:`CharzError` prints ``PROG: error: MESSAGE`` (2); an :class:`OSError` the command did
    not turn into one prints the system's reason and the file (1); Ctrl-C prints
    ``PROG: interrupted`` (130); stdout closed by its reader (``charz sim ... | head``) ends the
    command quietly (141). stdout is flushed before returning, so a closed pipe is seen here.
    """
    try:
        status = int(body() or 0)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except CharzError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        print(f"{prog}: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return EXIT_ENVIRONMENT
