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

from dataclasses import replace
from typing import TYPE_CHECKING

from ..workloads.runtime import ASYNCHRONOUS_KINDS, Runtime, framework_figures, profile_figures, runtime_profile
from ..workloads.schedule import HOST, Schedule, run_schedule, schedule_graph, share_rates
from .machine import Machine
from .result import SimOptions

if TYPE_CHECKING:
    from ..workloads.graph import Graph

__all__ = ["HOST", "Schedule", "run_schedule", "schedule_graph", "share_rates", "sim_runtime", "with_runtime_profile"]


def with_runtime_profile(options: SimOptions, runtime: str | None, graph: "Graph | None" = None) -> SimOptions:
    """``options`` under the runtime profile ``runtime`` (:data:`pytest_charz.workloads.runtime.RUNTIME_PROFILES`,
    the one ``predict_graph(runtime=...)`` applies) for ``graph``: its graph replay and engine step
    (:func:`pytest_charz.workloads.runtime.profile_figures`, by the graph's phase and parameters),
    and its host dispatch unless ``options`` already give one. None: ``options`` unchanged."""
    named = runtime_profile(runtime)
    if named is None:
        return options
    dispatch = options.host_dispatch_s if options.host_dispatch_s is not None else named.dispatch_s
    replay, step_s, _ = profile_figures(named, graph)
    return replace(options, graph_replay=options.graph_replay or replay, host_dispatch_s=dispatch,
                   engine_step_s=step_s)


def sim_runtime(machine: Machine, options: SimOptions) -> Runtime:
    """The runtime figures of ``machine`` under ``options``."""
    dispatch = options.host_dispatch_s if options.host_dispatch_s is not None else machine.dispatch_overhead_s
    return Runtime(dispatch, machine.launch_overhead_s, machine.kind in ASYNCHRONOUS_KINDS,
                   machine.sources.get("dispatch_overhead", "") if options.host_dispatch_s is None else "given",
                   machine.sources.get("launch_overhead", ""), options.launch_queue_depth, machine.copy_engines,
                   options.graph_replay, machine.graph_launch_overhead_s,
                   framework_dispatch=machine_framework_dispatch(machine) if options.host_dispatch_s is None else (),
                   step_s=options.engine_step_s)


def machine_framework_dispatch(machine: Machine) -> tuple[tuple[str, float], ...]:
    """The measured dispatch per framework of the core that prices ``machine`` (a CPU's op-class
    model: :attr:`pytest_charz.workloads.runtime.Runtime.framework_dispatch`), while the machine's
    ``dispatch_overhead`` is still the one the core was priced at (a what-if dispatch applies to
    every op); empty otherwise."""
    costs = getattr(getattr(machine.predictor, "model", None), "costs", None)
    if costs is None or machine.dispatch_overhead_s != machine.priced_at.get("dispatch_overhead"):
        return ()
    return framework_figures(machine.kind, None, costs)
