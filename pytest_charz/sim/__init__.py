"""The simulator: a discrete-event model of an SoC running a case's Work or a workload graph.

``Machine`` (hardware from a TargetSpec or a capability profile, what-if ``PARAMETERS``),
``simulate_work`` / ``simulate_graph`` -> ``SimResult`` (latency, energy, utilization,
bottleneck, Chrome trace). Modules: ``core`` (the event heap), ``machine`` and ``parameters``
(hardware), ``hardware`` (what an op asks of each resource), ``runtime`` (host, streams, queues,
graphs), ``capacity``, ``result``, ``trace``, ``simulate``.
"""
from __future__ import annotations

from .capacity import SimCapacityError
from .machine import Machine
from .parameters import PARAMETERS, Parameter
from .result import SimOptions, SimResult
from .simulate import simulate_graph, simulate_work

__all__ = ["Machine", "PARAMETERS", "Parameter", "SimCapacityError", "SimOptions", "SimResult", "simulate_graph",
           "simulate_work"]
