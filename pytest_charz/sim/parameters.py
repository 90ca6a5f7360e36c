"""The what-if parameters of a :class:`~.machine.Machine`: names, units and meaning.

``machine.with_params({"memory_bandwidth": 4.8e12})`` returns a machine with that figure changed;
``machine.param("memory_bandwidth")`` reads the current value. Names are stable: sweeps and
reports use them as column names.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..errors import UsageError
from ..units import format_bandwidth, format_bytes, format_time


@dataclass(frozen=True)
class Parameter:
    """A machine figure a what-if question may change; ``minimum`` is ``"positive"``,
    ``"non-negative"`` or ``"count"`` (a positive integer)."""

    name: str
    unit: str
    description: str
    minimum: str = "positive"


_ALL = (
    Parameter("memory_bandwidth", "B/s", "DRAM (HBM, GDDR, DDR) bandwidth of one device"),
    Parameter("dram_bytes", "B", "DRAM capacity of one device"),
    Parameter("l1_bytes", "B", "L1 capacity per compute unit"),
    Parameter("l2_bytes", "B", "L2 capacity of one device: what an op re-reads of its inputs from there"),
    Parameter("l3_bytes", "B", "L3 (last-level, Infinity Cache) capacity of one device"),
    Parameter("l2_bandwidth", "B/s", "L2 bandwidth (where unset, L2 traffic is timed at the next level's)"),
    Parameter("l3_bandwidth", "B/s", "L3 bandwidth (where unset, L3 traffic is timed at DRAM's)"),
    Parameter("compute_units", "units", "compute units (SMs, CUs, cores): peak FLOP/s and GEMM waves scale",
              "count"),
    Parameter("clock_mhz", "MHz", "compute clock: peak FLOP/s scales with it"),
    Parameter("link_bandwidth", "B/s", "bandwidth of one peer link, per direction"),
    Parameter("link_count", "links", "peer links per device", "count"),
    Parameter("link_latency", "s", "latency of one peer-link hop", "non-negative"),
    Parameter("host_link_bandwidth", "B/s", "host link (PCIe) bandwidth, per direction"),
    Parameter("host_link_latency", "s", "host link latency", "non-negative"),
    Parameter("devices", "devices", "devices in the system (tensor-parallel ranks are devices)", "count"),
    Parameter("copy_engines", "engines", "copy engines: asynchronous copies that run at once", "count"),
    Parameter("dispatch_overhead", "s", "host time to dispatch one op (framework and driver)", "non-negative"),
    Parameter("launch_overhead", "s", "device-side gap of one stream launch", "non-negative"),
    Parameter("graph_launch_overhead", "s", "device-side gap of one kernel of a replayed graph", "non-negative"),
    Parameter("power_cap_w", "W", "power cap of one device: above it the clock is lowered"),
    Parameter("idle_power_w", "W", "static power of one device", "non-negative"),
)
PARAMETERS: Mapping[str, Parameter] = {parameter.name: parameter for parameter in _ALL}


def check_parameter_value(name: str, value: object) -> float:
    """``value`` as a float if it is valid for parameter ``name``: a finite number (never NaN or
    infinity) within the parameter's ``minimum``; UsageError naming the parameter otherwise."""
    if name not in PARAMETERS:
        raise UsageError(f"unknown machine parameter {name!r}; known: {', '.join(PARAMETERS)}")
    parameter = PARAMETERS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise UsageError(f"parameter {name} must be a number ({parameter.unit}), got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise UsageError(f"parameter {name} must be finite, got {value!r}")
    if parameter.minimum == "non-negative" and number < 0:
        raise UsageError(f"parameter {name} must be >= 0 {parameter.unit}, got {value!r}")
    if parameter.minimum == "positive" and not number > 0:
        raise UsageError(f"parameter {name} must be > 0 {parameter.unit}, got {value!r}")
    if parameter.minimum == "count" and (number < 1 or number != int(number)):
        raise UsageError(f"parameter {name} must be a positive whole number of {parameter.unit}, got {value!r}")
    return number


def is_count(name: str) -> bool:
    """Whether parameter ``name`` takes whole numbers only (compute units, links, devices)."""
    parameter = PARAMETERS.get(name)
    return parameter is not None and parameter.minimum == "count"


def format_parameter(name: str, value: float) -> str:
    """``value`` of parameter ``name`` in human units: ``4.8 TB/s``, ``50 MiB``, ``2 us``,
    ``132 units``; the plain number for a parameter not known."""
    parameter = PARAMETERS.get(name)
    if parameter is None:
        return f"{value:g}"
    if parameter.unit == "B/s":
        return format_bandwidth(value)
    if parameter.unit == "B":
        return format_bytes(value)
    if parameter.unit == "s":
        return format_time(value)
    return f"{value:g} {parameter.unit}"


def whole_values(values: Sequence[float], what: str) -> tuple[float, ...]:
    """The steps of an axis of a whole-number parameter (compute units, links, devices), each
    rounded to the nearest whole number; UsageError when the ends are not whole numbers or the
    rounding would list a value twice (more steps than whole numbers between the ends)."""
    low, high = values[0], values[-1]
    if low != round(low) or high != round(high):
        raise UsageError(f"{what}: this parameter takes whole numbers; LO and HI must be whole, "
                         f"got {low:g} and {high:g}")
    rounded = tuple(float(math.floor(value + 0.5)) for value in values)
    if len(set(rounded)) != len(rounded):
        raise UsageError(f"{what}: {len(values)} whole-number steps from {low:g} to {high:g} would repeat "
                         f"a value; use at most {int(high - low) + 1}")
    return rounded
