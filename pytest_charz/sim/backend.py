"""The ``sim`` backend: ``--target=sim:h100-sxm`` binds a simulated device that times each case's
Work with the simulator instead of running the case's callable.

``sim:NAME`` resolves ``NAME`` in the catalogue (``sim:cpu``: the host CPU's spec) and builds a
:class:`~pytest_charz.sim.Machine` from it, or from a measured capability profile
(``--charz-sim-profile PROFILE.json``). ``--charz-sim-param NAME=VALUE`` changes machine
parameters (what-if runs of the suites). The bound spec is the catalogue's with the id
``sim-<target key>``, so references live under ``baselines/sim-h100-sxm/`` and a simulated run
never judges, or is judged by, the physical device.

The simulated device is deterministic: one batch of ``inner`` calls lasts exactly
``inner * simulate_work(work).latency_s``; a callable that carries its op graph
(:class:`GraphCall`) is timed as the whole graph. A call without Work (an empty Work, or a
helper loop that passes none), or with Work the prediction core cannot price (the simulator's
ops are the core's prices: :mod:`.pricing`), is skipped with the reason, never given a made-up
time. A ``--charz-sim-profile`` of another target than the bound one is a usage error.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..devices.base import DeviceInfo, VisibleDevice
from ..errors import UsageError

if TYPE_CHECKING:
    from ..measure.conditions import DeviceTelemetry
    from ..targets.spec import TargetSpec
    from ..work import Work
    from ..workloads.graph import Graph

#: Simulated time is exact; a nanosecond keeps the sampler's batch sizing (200 ticks) sensible.
SIM_TIMER_RESOLUTION_S = 1e-9


class GraphCall:
    """A case's callable together with the op graph one call executes: a real device calls
    ``fn``; the simulated one times ``graph`` (host dispatch, streams and all) instead."""

    def __init__(self, fn: Callable[[], Any], graph: "Graph") -> None:
        self.fn = fn
        self.graph = graph

    def __call__(self) -> Any:
        return self.fn()


class SimNotTimed(UsageError):
    """A call the simulated device cannot time (no Work); the case is skipped with the reason."""


def is_empty(work: "Work") -> bool:
    """Whether ``work`` says nothing a simulator could time."""
    return not (work.flops or work.bytes or work.transfers or work.launches or work.accesses or work.collectives)


def parse_param_settings(settings: Sequence[str]) -> dict[str, float]:
    """``["memory_bandwidth=3.0e12", ...]`` as ``{name: value}``; a bad entry is a UsageError
    (the names and values are checked by the machine itself)."""
    values: dict[str, float] = {}
    for text in settings:
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--charz-sim-param {text!r}: expected NAME=VALUE (e.g. memory_bandwidth=3.0e12)")
        try:
            values[name.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--charz-sim-param {text!r}: {value!r} is not a number") from None
    return values


def sim_spec(spec: "TargetSpec") -> "TargetSpec":
    """``spec`` as the bound target of a simulated run: id ``sim-<store key>``, backend ``sim``."""
    from ..store import store_target_key

    identity = replace(spec.identity, id=f"sim-{store_target_key(spec)}", backend="sim",
                       name=f"{spec.identity.name} (simulated)", aliases=())
    return replace(spec, identity=identity, notes=(*spec.notes, f"simulated by pytest_charz.sim from {spec.id}"))


class SimDevice:
    """A simulated device bound to one :class:`~pytest_charz.sim.Machine`."""

    backend = "sim"

    def __init__(self, machine: Any, spec: "TargetSpec", source: str) -> None:
        self.machine = machine
        self.spec = spec
        self.index = 0
        self._info = DeviceInfo(backend="sim", index=0, name=spec.identity.name,
                                ids={"machine": str(machine.id), "source": source})
        self._work_latency: dict["Work", float] = {}
        # The sampler hands the same Work object to every batch: look it up by identity first
        # (hashing a Work serialises it), holding the object so its id is not reused.
        self._last_work: tuple["Work", float] | None = None
        self._graph_latency: dict[int, tuple["Graph", float]] = {}

    @property
    def info(self) -> DeviceInfo:
        return self._info

    def timer_resolution_s(self) -> float:
        return SIM_TIMER_RESOLUTION_S

    def work_latency_s(self, work: "Work") -> float:
        """Simulated seconds of one execution of ``work`` (cached: the sampler asks many times)."""
        if self._last_work is not None and self._last_work[0] is work:
            return self._last_work[1]
        latency = self._work_latency.get(work)
        if latency is None:
            from . import simulate_work

            latency = float(simulate_work(work, self.machine).latency_s)
            self._work_latency[work] = latency
        self._last_work = (work, latency)
        return latency

    def graph_latency_s(self, graph: "Graph") -> float:
        """Simulated seconds of one execution of ``graph`` end to end."""
        known = self._graph_latency.get(id(graph))
        if known is not None and known[0] is graph:
            return known[1]
        from . import simulate_graph

        latency = float(simulate_graph(graph, self.machine).latency_s)
        self._graph_latency[id(graph)] = (graph, latency)
        return latency

    def time_batch(self, fn: Callable[[], Any], inner: int, work: "Work | None" = None) -> float:
        """``inner`` times the simulated latency of one call; ``fn`` is not executed."""
        from . import SimCapacityError
        from .pricing import SimNotPriced

        try:
            if isinstance(fn, GraphCall):
                return inner * self.graph_latency_s(fn.graph)
            if work is None:
                raise SimNotTimed("the simulated device times a call by its Work, and this call passed none "
                                  "(a helper loop timed directly)")
            if is_empty(work):
                raise SimNotTimed("the case gives no Work (FLOPs, bytes, launches, transfers, accesses): "
                                  "there is nothing for the simulator to time")
            return inner * self.work_latency_s(work)
        except (SimNotTimed, SimNotPriced, SimCapacityError) as exc:
            import pytest

            pytest.skip(f"not simulated on {self.spec.identity.name}: {exc}")

    def synchronize(self) -> None:
        return None

    def flush_caches(self) -> None:
        # Every simulated call starts from the machine's state; there is no cache to evict.
        return None

    def telemetry(self) -> "DeviceTelemetry | None":
        return None

    def check_sample(self) -> str | None:
        return None

    def close(self) -> None:
        self._work_latency.clear()
        self._graph_latency.clear()
        self._last_work = None


class SimBackend:
    """The backend of ``--target=sim:NAME``."""

    name = "sim"

    def __init__(self, profile: Mapping[str, Any] | None = None, profile_source: str = "",
                 params: Mapping[str, float] | None = None) -> None:
        self.profile = profile
        self.profile_source = profile_source
        self.params = dict(params or {})
        self._machines: dict[str, tuple[Any, str]] = {}

    def __repr__(self) -> str:
        return "SimBackend()"

    def machine_for(self, spec: "TargetSpec") -> tuple[Any, str]:
        """The simulated machine of ``spec`` (from the profile when one was given) with the
        parameter changes applied, and where its figures come from."""
        from . import Machine

        if self.profile is not None:
            machine, source = Machine.from_profile(self.profile, spec), f"profile {self.profile_source}".strip()
        else:
            machine, source = Machine.from_spec(spec), f"spec {spec.id}"
        if self.params:
            machine = machine.with_params(self.params)
            source += " with " + ", ".join(f"{k}={v:g}" for k, v in sorted(self.params.items()))
        return machine, source

    def select(self, name: str, worker: int | None) -> tuple["TargetSpec", VisibleDevice]:
        from ..targets.catalogue import catalogue, resolve

        if not name:
            raise UsageError("--target=sim: names no target; use sim:NAME with a catalogue id or alias, "
                             f"e.g. sim:h100-sxm or sim:cpu; known: cpu, {', '.join(sorted(catalogue()))}")
        spec = resolve(name)
        machine, source = self.machine_for(spec)
        bound = sim_spec(spec)
        self._machines[bound.id] = (machine, source)
        return bound, VisibleDevice(backend="sim", index=0, name=bound.identity.name)

    def open(self, visible: VisibleDevice, spec: "TargetSpec") -> SimDevice:
        known = self._machines.get(spec.id)
        if known is None:
            raise UsageError(f"sim backend: {spec.id!r} was not selected by this backend")
        machine, source = known
        return SimDevice(machine, spec, source)


__all__ = ["GraphCall", "SimBackend", "SimDevice", "SimNotTimed", "is_empty", "parse_param_settings", "sim_spec"]
