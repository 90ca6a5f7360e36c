"""The simulator's runtime: a machine's runtime figures and the run's options as the one schedule
reads them.

The schedule itself (host thread, launch queue, streams and events, sync points, graph replay,
copy engines, shared resources) is :mod:`pytest_charz.workloads.schedule`, the same one
``predict_graph`` runs; the simulator runs it with contention on. Here only the figures are the
simulator's: the machine's ``dispatch_overhead`` (or ``SimOptions.host_dispatch_s``),
``launch_overhead``, ``graph_launch_overhead`` and ``copy_engines`` (what-if parameters, which
start from :func:`pytest_charz.workloads.runtime.runtime_of`'s figures) and the options' launch
queue depth and graph replay. A CPU target's host waits for each op, as in ``predict_graph``.
"""
from __future__ import annotations

from ..workloads.runtime import ASYNCHRONOUS_KINDS, Runtime
from ..workloads.schedule import HOST, Schedule, run_schedule, schedule_graph, share_rates
from .machine import Machine
from .result import SimOptions

__all__ = ["HOST", "Schedule", "run_schedule", "schedule_graph", "share_rates", "sim_runtime"]


def sim_runtime(machine: Machine, options: SimOptions) -> Runtime:
    """The runtime figures of ``machine`` under ``options``."""
    dispatch = options.host_dispatch_s if options.host_dispatch_s is not None else machine.dispatch_overhead_s
    return Runtime(dispatch, machine.launch_overhead_s, machine.kind in ASYNCHRONOUS_KINDS,
                   machine.sources.get("dispatch_overhead", "") if options.host_dispatch_s is None else "given",
                   machine.sources.get("launch_overhead", ""), options.launch_queue_depth, machine.copy_engines,
                   options.graph_replay, machine.graph_launch_overhead_s)
