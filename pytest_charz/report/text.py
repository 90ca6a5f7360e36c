"""Text a person reads on a terminal: durations at a glance, the width of the terminal written
to, and aligned tables narrowed to that width (one line per row, long cells cut, not wrapped)."""
from __future__ import annotations

from typing import Sequence, TextIO


def duration_words(seconds: float) -> str:
    """``45 s``, ``3m05s``, ``1h02m``: a duration a person reads at a glance."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def terminal_width(stream: "TextIO | None" = None, fallback: int = 120) -> int:
    """The columns of the terminal ``stream`` (stdout) writes to; ``fallback`` when it writes to a
    pipe or a file (a log stays readable), or ``COLUMNS`` when set."""
    import os
    import shutil
    import sys

    stream = stream if stream is not None else sys.stdout
    if os.environ.get("COLUMNS", "").isdigit():
        return max(40, int(os.environ["COLUMNS"]))
    try:
        if stream.isatty():
            return max(40, shutil.get_terminal_size((fallback, 24)).columns)
    except (AttributeError, ValueError):
        pass
    return fallback


def fitted_table(headers: "Sequence[str]", rows: "Sequence[Sequence[object]]", width: int,
                 shrink: "Sequence[int] | None" = None, keep_end: "Sequence[int]" = ()) -> str:
    """An aligned text table no wider than ``width``, one line per row: the columns in ``shrink``
    (indexes, first shrunk first; default the widest first) narrow to at least 12 characters,
    and a cell longer than its column is cut with an ellipsis: at its end, or at its start for
    the columns in ``keep_end`` (a case id keeps its test name and parameters). The full text
    is in the Markdown and JSON forms."""
    cells = [[" ".join(str(c).split()) for c in row] for row in rows]
    heads = [str(h) for h in headers]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(heads)]
    gap = 2 * (len(heads) - 1)
    order = list(shrink) if shrink is not None else sorted(range(len(heads)), key=lambda i: -widths[i])
    for index in order:
        excess = sum(widths) + gap - width
        if excess <= 0:
            break
        widths[index] = max(12, len(heads[index]), widths[index] - excess)

    def cut(text: str, size: int, index: int) -> str:
        if len(text) <= size:
            return text
        return "\u2026" + text[len(text) - size + 1:] if index in keep_end else text[: size - 1] + "\u2026"

    lines = ["  ".join(cut(h, w, -1).ljust(w) for h, w in zip(heads, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines.extend("  ".join(cut(c, w, i).ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
                 for row in cells)
    return "\n".join(lines)


__all__ = ["duration_words", "fitted_table", "terminal_width"]
