"""Human units for times, rates and sizes: the one place a figure becomes text.

Low level on purpose: the verdict's messages and the reports print times the same way, and the
verdict must not import the report layer to do so.
"""
from __future__ import annotations

import math

_TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


def _scaled(value: float, steps: list[tuple[float, str]], fmt: str = "{:.3g} {}") -> str:
    if value is None or not math.isfinite(value):
        return "-"
    for scale, unit in steps:
        if abs(value) >= scale:
            return fmt.format(value / scale, unit)
    scale, unit = steps[-1]
    return fmt.format(value / scale, unit)


def format_time(seconds: float | None, digits: int = 3) -> str:
    """A time with ``digits`` significant digits in the largest unit (s, ms, us, ns) that keeps
    it >= 1 once rounded; ``"-"`` for None or a non-finite time.

    The unit is chosen on the rounded text, so 0.99996 s prints as ``1 s``, never ``1e+03 ms``.
    """
    if seconds is None or not math.isfinite(seconds):
        return "-"
    for scale, unit in _TIME_UNITS:
        text = f"{seconds / scale:.{digits}g}"
        if abs(float(text)) >= 1.0 or unit == "ns":
            return f"{text} {unit}"
    raise AssertionError("unreachable: the last unit always returns")


def format_flops(rate: float) -> str:
    """A FLOP rate with 3 significant digits, from FLOP/s to PFLOP/s."""
    return _scaled(rate, [(1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"), (1.0, "FLOP/s")])


def format_bandwidth(rate: float) -> str:
    """A byte rate with 3 significant digits, decimal units from B/s to TB/s."""
    return _scaled(rate, [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1.0, "B/s")])


def format_bytes(size: float) -> str:
    """A size with 4 significant digits, binary units from B to TiB."""
    return _scaled(size, [(2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1.0, "B")], "{:.4g} {}")


#: The formatter of each unit a figure is recorded in; the report layer adds its own quantities.
UNIT_FORMATTERS = {"FLOP/s": format_flops, "B/s": format_bandwidth, "B": format_bytes, "s": format_time}


def format_in(value: float | None, unit: str) -> str:
    """``value`` of ``unit`` in human units where the unit has them (:data:`UNIT_FORMATTERS`:
    ``264 GB/s``, never ``2.636e+11 B/s``), else 4 significant digits and the unit."""
    if value is None or not math.isfinite(value):
        return "-"
    formatter = UNIT_FORMATTERS.get(unit)
    return formatter(value) if formatter is not None else f"{value:.4g} {unit}".strip()


__all__ = ["UNIT_FORMATTERS", "format_bandwidth", "format_bytes", "format_flops", "format_in", "format_time"]
