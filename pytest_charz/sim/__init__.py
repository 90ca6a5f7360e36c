"""The simulator: a discrete-event model of an SoC running a case's Work or a workload graph.

``Machine`` (hardware from a TargetSpec or a capability profile, what-if ``PARAMETERS``, and the
prediction core that prices its ops), ``simulate_work`` / ``simulate_graph`` -> ``SimResult``
(latency, bound, energy, utilization, bottleneck, Chrome trace). Modules: ``machine`` and
``parameters`` (hardware), ``pricing`` (each op's time from the prediction core, split among the
resources), ``hardware`` (what an op asks of each resource), ``runtime`` (the machine's figures
for the one schedule, :mod:`pytest_charz.workloads.schedule`, with its event core), ``capacity``,
``result``, ``trace``, ``simulate``.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .capacity import SimCapacityError
    from .machine import Machine
    from .parameters import PARAMETERS, Parameter
    from .result import SimOptions, SimResult
    from .simulate import simulate_graph, simulate_work

#: Each public name and the module that defines it: imported on first use, so that the plugin,
#: which registers the ``sim`` backend in every session, loads the simulator only when a
#: ``sim:`` target is bound.
_EXPORTS = {"SimCapacityError": "capacity", "Machine": "machine", "PARAMETERS": "parameters",
            "Parameter": "parameters", "SimOptions": "result", "SimResult": "result",
            "simulate_graph": "simulate", "simulate_work": "simulate"}

__all__ = ["Machine", "PARAMETERS", "Parameter", "SimCapacityError", "SimOptions", "SimResult", "simulate_graph",
           "simulate_work"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value
