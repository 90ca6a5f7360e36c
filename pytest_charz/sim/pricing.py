"""What an op costs in the simulator: the prediction core's price, split among the machine's
shared resources.

The simulator does not price ops itself (docs/DESIGN "One prediction core"). A machine carries
the core that prices it (:attr:`.machine.Machine.predictor`, from
:func:`pytest_charz.prediction.load_predictor`: target, model, profile and calibration) and the
figures that core's ceilings describe (:attr:`.machine.Machine.priced_at`). Then:

* **Time.** :func:`machine_predictor` is that core on the machine as the simulator sees it: every
  what-if figure that differs from ``priced_at`` overrides the core's ceilings
  (:meth:`~pytest_charz.models.ceilings.Ceilings.with_overrides`): DRAM and cache bandwidths and
  capacities, compute units (the GEMM waves), the compute scale of units and clock (every peak,
  and a model's measured GEMM, transcendental and reduction rates), link bandwidths and latencies (a peer
  link's change drops the profile's measured collective lines, so the link's alpha-beta applies),
  and the launch overhead. The default machine gives the core's price exactly.
* **Split.** :func:`split` keeps the simulator's own demand vector (:func:`.hardware.op_cost`:
  seconds of compute, each memory level, each link) only to share that time among concurrent ops:
  the demands are rescaled so that the op alone takes the core's time. Where the core is slower
  than the machine's raw figures, the binding demand (the largest, or the fixed latency when it
  dominates) takes the difference, so the other resources keep the seconds their bytes need;
  where it is faster, every demand shrinks in proportion. Energy stays the simulator's.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..targets.spec import Figure
from .hardware import OpCost

if TYPE_CHECKING:
    from ..calibration.predictor import Predictor
    from .machine import Machine

#: The what-if parameters that change what the core charges (the others are the schedule's, or power).
PRICED_PARAMETERS = ("memory_bandwidth", "dram_bytes", "l1_bytes", "l2_bytes", "l3_bytes", "l2_bandwidth",
                     "l3_bandwidth", "compute_units", "clock_mhz", "link_bandwidth", "link_count", "link_latency",
                     "host_link_bandwidth", "host_link_latency", "launch_overhead")
_BANDWIDTH_LEVEL = {"memory_bandwidth": "dram", "l2_bandwidth": "l2", "l3_bandwidth": "l3"}
_CAPACITY_LEVEL = {"dram_bytes": "dram", "l1_bytes": "l1", "l2_bytes": "l2", "l3_bytes": "l3"}
WHAT_IF = "what-if parameter"


class SimNotPriced(UsageError):
    """The prediction core cannot price a case's work (the model's reason is in the message)."""


def _differs(now: float, then: float | None) -> bool:
    if then is None:
        return False
    if math.isnan(now) or math.isnan(then):
        return math.isnan(now) != math.isnan(then)
    return now != then


def _scaled(figures: Any, scale: float, why: str) -> dict[str, Figure]:
    return {key: Figure(figure.value * scale, f"{figure.source}; x{scale:.6g} ({why})")
            for key, figure in figures.items()}


def _scaled_model(model: Any, scale: float, why: str) -> Any:
    """``model`` with its measured compute rates (an op-class model's GEMM, transcendental,
    reduction and layer norm figures) scaled by ``scale``, and a layer norm's seconds per row by
    its inverse; the model itself when it has none."""
    costs = getattr(model, "costs", None)
    if costs is None or not dataclasses.is_dataclass(model) or not dataclasses.is_dataclass(costs):
        return model
    rates = {name: _scaled(getattr(costs, name), scale, why)
             for name in ("gemm_flops_per_s", "transcendental_per_s", "function_per_s", "reduction_per_s",
                          "layernorm_per_s")
             if getattr(costs, name, None)}
    if getattr(costs, "layernorm_row_s", None):   # seconds, not a rate: they scale the other way
        rates["layernorm_row_s"] = _scaled(costs.layernorm_row_s, 1.0 / scale, why)
    return dataclasses.replace(model, costs=dataclasses.replace(costs, **rates)) if rates else model


def machine_predictor(machine: "Machine") -> "Predictor":
    """The core that prices ``machine``'s ops (module docstring)."""
    from ..calibration.predictor import Predictor
    from ..models.registry import DEFAULT_MODEL, get_model

    predictor = machine.predictor
    if predictor is None:   # a machine built by hand: the core on the machine's own figures
        return Predictor.of(get_model(DEFAULT_MODEL), machine.ceilings, target=machine.id)
    base = machine.priced_at
    changed = [name for name in PRICED_PARAMETERS if _differs(machine.param(name), base.get(name))]
    if not changed:
        return predictor
    ceilings, model = predictor.ceilings, predictor.model
    overrides: dict[str, Any] = {}
    for name in changed:
        value = machine.param(name)
        if name in _BANDWIDTH_LEVEL:
            overrides.setdefault("bandwidth_bytes_per_s", {})[_BANDWIDTH_LEVEL[name]] = Figure(value, WHAT_IF)
        elif name in _CAPACITY_LEVEL:
            overrides.setdefault("capacity_bytes", {})[_CAPACITY_LEVEL[name]] = Figure(value, WHAT_IF)
        elif name == "launch_overhead":
            overrides["launch_overhead_s"] = Figure(value, WHAT_IF)
    if "compute_units" in changed:
        overrides["compute_units"] = Figure(float(machine.units), WHAT_IF)
    if "compute_units" in changed or "clock_mhz" in changed:
        scale = (machine.units / base["compute_units"]) * (machine.clock_mhz / base["clock_mhz"])
        why = f"compute units {machine.units:g}, clock {machine.clock_mhz:.6g} MHz"
        overrides["peak_flops"] = _scaled(ceilings.peak_flops, scale, why)
        overrides["vector_peak_flops"] = _scaled(ceilings.vector_peak_flops, scale, why)
        model = _scaled_model(model, scale, why)
    if machine.peer_link is not None and {"link_bandwidth", "link_count", "link_latency"} & set(changed):
        overrides["link_bandwidth_bytes_per_s"] = {"peer": Figure(machine.peer_link.total_bytes_per_s, WHAT_IF)}
        overrides["link_latency_s"] = {"peer": Figure(machine.peer_link.latency_s, WHAT_IF)}
        for name in ("collective_bandwidth_bytes_per_s", "collective_latency_s", "collective_ranks"):
            overrides[name] = {op: None for op in getattr(ceilings, name)}
    if machine.host_link is not None and {"host_link_bandwidth", "host_link_latency"} & set(changed):
        host = machine.host_link
        overrides.setdefault("link_bandwidth_bytes_per_s", {}).update(
            {kind: Figure(host.total_bytes_per_s, WHAT_IF) for kind in ("h2d", "d2h")})
        overrides.setdefault("link_latency_s", {}).update(
            {kind: Figure(host.latency_s, WHAT_IF) for kind in ("h2d", "d2h")})
    return dataclasses.replace(predictor, model=model, ceilings=ceilings.with_overrides(**overrides))


def split(cost: OpCost, kernel_s: float) -> OpCost:
    """``cost`` with its demands rescaled so that the op alone takes ``kernel_s`` (module
    docstring); its bound, energy and bytes stay as they are."""
    alone = cost.alone_s
    if not kernel_s > 0:
        return dataclasses.replace(cost, demands=(), fixed_s=0.0)
    if not alone > 0:           # nothing to share: the time holds no shared resource
        return dataclasses.replace(cost, fixed_s=kernel_s)
    if kernel_s < alone:
        factor = kernel_s / alone
        return dataclasses.replace(cost, demands=tuple((slot, seconds * factor) for slot, seconds in cost.demands),
                                   fixed_s=cost.fixed_s * factor)
    extra = kernel_s - alone
    largest = max(cost.demands, key=lambda item: (item[1], -item[0]), default=None)
    if largest is None or cost.fixed_s > largest[1]:
        return dataclasses.replace(cost, fixed_s=cost.fixed_s + extra)
    return dataclasses.replace(cost, demands=tuple((slot, seconds + extra if slot == largest[0] else seconds)
                                                   for slot, seconds in cost.demands))
