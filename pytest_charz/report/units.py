"""Human units for times and rates."""
from __future__ import annotations

import math


def _scaled(value: float, steps: list[tuple[float, str]], fmt: str = "{:.3g} {}") -> str:
    if value is None or not math.isfinite(value):
        return "-"
    for scale, unit in steps:
        if abs(value) >= scale:
            return fmt.format(value / scale, unit)
    scale, unit = steps[-1]
    return fmt.format(value / scale, unit)


def format_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return _scaled(seconds, [(1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")])


def format_flops(rate: float) -> str:
    return _scaled(rate, [(1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"), (1.0, "FLOP/s")])


def format_bandwidth(rate: float) -> str:
    return _scaled(rate, [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1.0, "B/s")])


def format_bytes(size: float) -> str:
    return _scaled(size, [(2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1.0, "B")], "{:.4g} {}")
