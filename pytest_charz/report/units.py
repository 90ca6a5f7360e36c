"""Human units for times, rates, sizes and the reports' other quantities: the one formatter module
of the report layer, for table cells and plot axes alike.

Times, FLOP rates, byte rates and sizes are :mod:`pytest_charz.units`'s (the verdict prints with
them too); this module adds the quantities only reports show (energy, power, ratios), one entry
point by unit (:func:`format_quantity`), and the tick formatters that put those units on a
matplotlib axis (:func:`humanize_axis`), so no axis shows a raw ``3e11`` or ``10^5``.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from ..units import UNIT_FORMATTERS, format_bandwidth, format_bytes, format_flops, format_time

_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "u"), (1e-9, "n"))


def format_si(value: float | None, unit: str, digits: int = 4) -> str:
    """``value`` with an SI prefix and ``unit`` (``88.74 mJ``, ``700 W``); ``-`` for None or a
    non-finite value."""
    if value is None or not math.isfinite(value):
        return "-"
    if value == 0:
        return f"0 {unit}".strip()
    for scale, prefix in _SI:
        text = f"{value / scale:.{digits}g}"
        if abs(float(text)) >= 1.0:
            return f"{text} {prefix}{unit}".strip()
    return f"{value / 1e-9:.{digits}g} n{unit}".strip()


def format_ratio(value: float | None) -> str:
    """A ratio as ``1.23x`` (3 significant digits); ``-`` when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.3g}x"


def format_percent(fraction: float | None, digits: int = 1) -> str:
    """A fraction as a percentage (``0.123`` -> ``12.3%``); ``-`` when unknown."""
    if fraction is None or not math.isfinite(fraction):
        return "-"
    return f"{100 * fraction:.{digits}f}%"


def format_number(value: float | None) -> str:
    """A plain number with 3 significant digits and no exponent below 10^6 (``0.25``, ``120``,
    ``4.5k``, ``2.1M``); ``-`` when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) >= 1e6:
        return format_si(value, "", 3)
    if abs(value) >= 1e4:
        return f"{value / 1e3:.3g}k"
    if value == 0 or abs(value) >= 1e-3:
        return f"{value:.3g}" if abs(value) < 1e3 else f"{value:.0f}"
    return format_si(value, "", 3)


_BY_UNIT: dict[str, Callable[[float], str]] = {
    **UNIT_FORMATTERS,
    "x": format_ratio,
    "%": lambda value: format_percent(value / 100.0),
    "fraction": format_percent,
    "J": lambda value: format_si(value, "J"),
    "W": lambda value: format_si(value, "W"),
    "s/s": lambda value: f"{value:.3g} s/s",      # seconds per second (no prefix: 0.651 s/s, not 651 ms/s)
    "": format_number,
}


def format_quantity(value: float | None, unit: str) -> str:
    """``value`` in human units for ``unit`` (``FLOP/s``, ``B/s``, ``B``, ``s``, ``x``, ``J``,
    ``W``, ``fraction``, ``%`` or ``""``); any other unit gets an SI prefix; ``-`` when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    formatter = _BY_UNIT.get(unit)
    return formatter(value) if formatter is not None else format_si(value, unit)


def _tick_text(value: float, unit: str) -> str:
    if unit == "B":
        return format_bytes(value)
    if unit == "s":
        return format_time(value, 3)
    if unit in ("%", "fraction"):
        percent = value * (100.0 if unit == "fraction" else 1.0)
        return (f"{percent:.3g}" if abs(percent) < 1000 else f"{percent:.0f}") + "%"
    return format_quantity(value, unit)


def binary_ticks(low: float, high: float, most: int = 8) -> list[float]:
    """Powers of two from ``low`` to ``high``, every 2nd, 4th, ... so that at most ``most`` remain
    (each one prints as a whole KiB, MiB or GiB)."""
    if not (low > 0 and high > low):
        return []
    first, last = math.ceil(math.log2(low)), math.floor(math.log2(high))
    powers = list(range(first, last + 1))
    step = 1
    while len(powers[::step]) > most:
        step *= 2
    # start on a multiple of the step, so the ticks are 1 KiB, 1 MiB ... where they can be
    start = next((p for p in powers if p % step == 0), first)
    return [2.0 ** p for p in range(start, last + 1, step)]


def humanize_axis(axes: Any, which: str, unit: str) -> None:
    """Put human units on the ``which`` ("x" or "y") axis of ``axes``: ticks in ``unit`` (``B``
    ticks at powers of two, 16 KiB .. 1 GiB), no exponent offset, no minor tick labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    axis = axes.xaxis if which == "x" else axes.yaxis
    low, high = sorted(axes.get_xlim() if which == "x" else axes.get_ylim())
    logarithmic = (axes.get_xscale() if which == "x" else axes.get_yscale()) == "log"
    if unit == "B" and logarithmic:
        ticks = binary_ticks(low, high)
        if len(ticks) >= 2:
            axis.set_major_locator(FixedLocator(ticks))
    elif logarithmic and low > 0 and high / low < 1000:
        # over fewer than three decades a log axis has too few labelled ticks: label 1, 2 and 5 too
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _pos: _tick_text(value, unit)))
    axis.set_minor_formatter(NullFormatter())


__all__ = ["binary_ticks", "format_bandwidth", "format_bytes", "format_flops", "format_number", "format_percent",
           "format_quantity", "format_ratio", "format_si", "format_time", "humanize_axis"]
