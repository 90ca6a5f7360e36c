"""How a host issues an op graph: the figures of the one schedule (:mod:`.schedule`).

:func:`runtime_of` decides them once, from the prediction core's ceilings and the capability
profile, for both ``predict_graph`` and the simulator (whose machine starts from the same
figures; its what-if parameters ``dispatch_overhead`` and ``launch_overhead`` change them):

* **Launch gap.** The device-side cost of one kernel launch: the ceilings' measured ``launch``
  figure, else :data:`DEFAULT_LAUNCH_OVERHEAD_S` (datasheets have none). Each op's Work counts
  ``launches=1``; the schedule charges that launch as the op's gap, so the core prices the
  kernel's work without it.
* **Host dispatch.** The host time to issue one op: given, else the measured ``launch`` figure,
  else :data:`DEFAULT_HOST_DISPATCH_S`.
* **A CPU with measured PyTorch dispatch.** Where a CPU profile measured the framework's dispatch
  (``dispatch:torch-module`` per op of eager module code, else ``dispatch:torch``), that figure
  is each op's host dispatch, an op of module code adding ``dispatch:torch-module-call`` for each
  ``nn.Module`` call it begins where the profile has it, and there is no launch gap: the op runs
  on the dispatching thread. An op of module code runs longer than its price alone by the
  profile's ``dispatch:torch-module-cold`` share (its operands and weights no longer in the
  caches, :mod:`pytest_charz.models.model_code`).
* **Synchronous host.** On an asynchronous runtime (GPUs, ASICs: :data:`ASYNCHRONOUS_KINDS`)
  the host runs ahead of the device; elsewhere (the host CPU, where the "device" is the host
  itself) it waits for each op to end before dispatching the next.

**Runtime profiles** (:data:`RUNTIME_PROFILES`, ``--runtime``) name how a program issues the graph
on an accelerator, each figure sourced:

* ``eager``: PyTorch eager, the rules above (:data:`DEFAULT_HOST_DISPATCH_S` of host work per op
  unless measured); the graph's kernels as built.
* ``graphs``: the same kernels captured once and replayed as a CUDA graph: one host dispatch
  issues them all, each kernel leaving the device :data:`GRAPH_NODE_LAUNCH_S` instead of a
  stream launch.
* ``serving``: a serving engine with a compiled runtime (TensorRT-LLM's C++ runtime) running its
  fused kernels (``build(kernels="serving")``): the host's cost per kernel is the driver's launch
  call alone (:data:`ENGINE_DISPATCH_S`), no Python per op; each kernel pays the stream launch gap.
  A kernel is never shorter than that gap, so the host keeps ahead of the device and a serving
  engine's step is device-bound.
* ``vllm``: vLLM's Python engine: the same fused kernels, its decode steps replayed as CUDA graphs
  (it captures decode batches only; a prefill is issued op by op from Python at the eager
  dispatch), and every step pays the engine's host work in series with the forward pass
  (:func:`.engines.engine_step_s`: scheduling, input preparation, sampling, output processing,
  measured per batch and tensor-parallel degree).

A profile with an engine adds its host time per step to the first op's dispatch
(:attr:`Runtime.step_s`): the step's forward pass cannot start before it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import check_non_negative
from ..models.model_code import MODULE_COLD, module_code_s
from ..models.opclass_costs import variant_dispatch

if TYPE_CHECKING:
    from ..models.ceilings import Ceilings
    from ..models.opclass_costs import OpCosts
    from .graph import Graph

#: Device-side cost of one kernel launch when the ceilings have no measured ``launch`` figure
#: (datasheets have none): 2.5 us, the middle of the 1-3 us ``cudaLaunchKernel`` enqueue cost on
#: CUDA 12+ drivers quoted in "From PyTorch op to kernel launch" (J. Lin, GPU kernel serving,
#: lesson 18, https://jiahuanglin.xyz/all_lessons/gpu_kernel_serving/18_pytorch_to_kernel.html).
#: The runtime suite's empty-kernel launch case measures the real figure.
DEFAULT_LAUNCH_OVERHEAD_S = 2.5e-6
DEFAULT_LAUNCH_SOURCE = "DEFAULT_LAUNCH_OVERHEAD_S (no launch figure in the ceilings; cudaLaunchKernel 1-3 us)"
#: Host time to dispatch one op of an eager framework when the ceilings have no measured
#: ``launch`` figure: 10 us, inside the 5-25 us of CPU-side work per PyTorch eager op (Python,
#: binding, autograd and ATen dispatch, backend, driver) in the same source. The runtime suite's
#: ``dispatch`` case measures it on a host CPU.
DEFAULT_HOST_DISPATCH_S = 10e-6
DEFAULT_DISPATCH_SOURCE = "DEFAULT_HOST_DISPATCH_S (PyTorch eager: 5-25 us of host work per op)"
#: Launches a stream holds before the host blocks: about 1000, measured in "CUDA stream is blocked
#: when launching many kernels (>1000)" (Stack Overflow question 53970187, 2018,
#: https://stackoverflow.com/questions/53970187): launches stay at 4-5 us for the first ~1000
#: kernels, then wait for the device. 1024 is taken.
LAUNCH_QUEUE_DEPTH = 1024
#: Copy engines: two, so that a host-to-device and a device-to-host copy overlap each other and
#: the kernels ("asyncEngineCount", CUDA C++ Programming Guide, NVIDIA, section "Overlap of Data
#: Transfer and Kernel Execution", https://docs.nvidia.com/cuda/cuda-c-programming-guide/).
COPY_ENGINES = 2
#: Target kinds whose runtime issues work asynchronously (the host runs ahead of the device).
ASYNCHRONOUS_KINDS = frozenset({"gpu", "asic"})
NO_LAUNCH_SOURCE = "none: a CPU op runs on the thread that dispatches it"
#: Device-side gap of one kernel node of a replayed CUDA graph, the one figure predict_graph and
#: the simulator use: 0.5 us. "Getting Started with CUDA Graphs" (A. Gray, NVIDIA Technical Blog,
#: 2019, https://developer.nvidia.com/blog/cuda-graphs/) times a 2.9 us kernel at 3.8 us launched
#: on a stream and 3.4 us inside a graph.
GRAPH_NODE_LAUNCH_S = 0.5e-6
GRAPH_NODE_SOURCE = "0.5 us per graph node (A. Gray, 'Getting Started with CUDA Graphs', NVIDIA, 2019)"
#: Host time per kernel of a serving engine's compiled runtime: the ``cudaLaunchKernel`` call
#: alone, 2.5 us (the 1-3 us enqueue cost of :data:`DEFAULT_LAUNCH_OVERHEAD_S`'s source), with no
#: framework work around it.
ENGINE_DISPATCH_S = DEFAULT_LAUNCH_OVERHEAD_S
ENGINE_DISPATCH_SOURCE = "serving engine: the launch call alone, 2.5 us (cudaLaunchKernel 1-3 us, no Python per op)"


@dataclass(frozen=True)
class RuntimeProfile:
    """A named way of issuing a graph (module docstring): ``dispatch_s`` host time per op (None:
    the measured or default eager figure), whether the graph is replayed (``replay_phases``: only
    graphs of these phases; None: every graph), the kernels
    :func:`pytest_charz.workloads.builders.build` should model (None: as built), and the serving
    engine whose host time per step each step pays (:mod:`.engines`; None: none)."""

    name: str
    dispatch_s: float | None
    dispatch_source: str
    graph_replay: bool
    kernels: str | None
    description: str
    replay_phases: frozenset[str] | None = None
    engine: str | None = None

    def replays(self, phase: str | None) -> bool:
        """Whether a graph of ``phase`` is replayed (None, no known phase: whether the profile
        replays graphs at all)."""
        return self.graph_replay and (self.replay_phases is None or phase is None or phase in self.replay_phases)

    def step_s(self, params: Mapping[str, Any]) -> float:
        """The engine's host time for one step of a graph with ``params`` (its ``batch`` and
        ``tp``, 1 when absent); 0 without an engine."""
        if self.engine is None:
            return 0.0
        from .engines import engine_step_s

        return engine_step_s(self.engine, int(params.get("batch") or 1), int(params.get("tp") or 1))


RUNTIME_PROFILES: dict[str, RuntimeProfile] = {
    "eager": RuntimeProfile("eager", None, "", False, None,
                            "PyTorch eager: host dispatch per op, a stream launch per kernel"),
    "graphs": RuntimeProfile("graphs", None, "", True, None,
                             "CUDA graph replay: one dispatch, a graph node's gap per kernel"),
    "serving": RuntimeProfile("serving", ENGINE_DISPATCH_S, ENGINE_DISPATCH_SOURCE, False, "serving",
                              "serving engine: fused kernels launched from compiled code"),
    "vllm": RuntimeProfile("vllm", None, "", True, "serving",
                           "vLLM: fused kernels, decode steps replayed as CUDA graphs, the engine's host work each step",
                           replay_phases=frozenset({"decode"}), engine="vllm"),
}


def runtime_profile(name: str | None) -> RuntimeProfile | None:
    """The profile ``name`` (None: none); UsageError naming the profiles."""
    if name is None:
        return None
    if name not in RUNTIME_PROFILES:
        from ..errors import UsageError

        raise UsageError(f"runtime must be one of {', '.join(RUNTIME_PROFILES)}; got {name!r}")
    return RUNTIME_PROFILES[name]


@dataclass(frozen=True)
class Runtime:
    """How the host issues a graph (module docstring); times in seconds.

    ``graph_replay``: the ops are one captured graph, issued by one dispatch, each kernel leaving
    the device ``graph_launch_s`` instead of ``launch_s``. ``queue_depth``: issued ops the host
    may run ahead by before it blocks. ``copy_engines``: host and peer copies that run at once.
    """

    dispatch_s: float
    launch_s: float
    asynchronous: bool
    dispatch_source: str = ""
    launch_source: str = ""
    queue_depth: int = LAUNCH_QUEUE_DEPTH
    copy_engines: int = COPY_ENGINES
    graph_replay: bool = False
    graph_launch_s: float = 0.0
    #: Host time of a serving engine's step before its first op is dispatched (a runtime profile's
    #: engine, :mod:`.engines`), and where the figure comes from.
    step_s: float = 0.0
    step_source: str = ""
    #: ``(framework, seconds)`` of a CPU profile's measured dispatch per framework: an op pays its
    #: host framework's (:func:`~pytest_charz.models.opclass_costs.host_framework`: a bare aten op
    #: of a ``forward`` the bare op's, the first op of a module call ``torch-module``'s), else
    #: ``dispatch_s``. Empty: every op pays ``dispatch_s``.
    framework_dispatch: tuple[tuple[str, float], ...] = ()

    @property
    def synchronous(self) -> bool:
        """Whether the host waits for every op (never under graph replay: one launch issues all)."""
        return not self.asynchronous and not self.graph_replay

    def op_dispatch_s(self, framework: str, module_calls: float = 0.0, python_calls: float = 0.0) -> float:
        """The host dispatch of an op of ``framework`` (its figure, else for an operand variant the
        figure of the one it refines, else ``dispatch_s``); an op of module code (``torch-module``) also
        pays each ``nn.Module`` call it begins (``module_calls``) and each Python call before it
        (``python_calls``) at the measured ``torch-module-call`` and ``torch-module-python``
        figures, where the profile has them (:func:`~pytest_charz.models.model_code.module_code_s`)."""
        figures = dict(self.framework_dispatch)
        found = variant_dispatch(framework, figures.get)[1]
        if found is None:
            return self.dispatch_s
        # the op's own dispatch, part of its time alone, runs longer in model code as its kernel does
        own_s = (self.op_slowdown(framework) - 1.0) * figures.get("torch", 0.0)
        return found + sum(module_code_s(framework, module_calls, python_calls, figures.get).values()) + own_s

    def op_slowdown(self, framework: str) -> float:
        """How many times its own time (kernel and bare dispatch) an op of ``framework`` takes:
        ``1 +`` the profile's ``torch-module-cold`` for an op of module code (its operands evicted
        by the ops between, :mod:`pytest_charz.models.model_code`), else 1."""
        if framework != "torch-module":
            return 1.0
        return 1.0 + dict(self.framework_dispatch).get(MODULE_COLD, 0.0)


def _dispatch_costs(kind: str, profile: Mapping[str, Any] | None, costs: "OpCosts | None") -> Any:
    """The dispatch figures per framework a CPU's graph is issued with: the prediction core's
    (``costs``: a calibration's, filled from the profile, as the core prices one op), else the
    profile's; None elsewhere or without either."""
    if kind != "cpu":
        return None
    if costs is None and profile is not None:
        from ..models.ceilings_profile import read_op_costs

        costs = read_op_costs(profile)
    return costs.dispatch_s if costs is not None else None


def _model_code_dispatch(dispatch: Mapping[str, Any]) -> Any:
    """The measured host time per op of eager PyTorch model code among ``dispatch``'s figures
    (:func:`_dispatch_costs`): ``dispatch:torch-module`` (ops issued from ``nn.Module`` code,
    module calls and views included: what a workload graph's ops cost), else the bare
    ``dispatch:torch``; else None. A Figure (``value``, ``source``)."""
    return dispatch.get("torch-module") or dispatch.get("torch")


def runtime_of(ceilings: "Ceilings", profile: Mapping[str, Any] | None = None, host_dispatch_s: float | None = None,
               asynchronous: bool | None = None, runtime: str | None = None, costs: "OpCosts | None" = None,
               graph: "Graph | None" = None) -> Runtime:
    """The launch gap, host dispatch and synchrony for ``ceilings`` (the prediction core's) and
    ``profile`` (module docstring). ``host_dispatch_s`` replaces the host dispatch only;
    ``asynchronous`` (default: the target kind is a GPU or an ASIC) whether the host runs ahead;
    ``runtime`` names a profile of :data:`RUNTIME_PROFILES` (its dispatch, graph replay and engine
    step, which depend on ``graph``'s phase and parameters: :func:`profile_figures`)."""
    named = runtime_profile(runtime)
    from_profile = named is not None and named.dispatch_s is not None and host_dispatch_s is None
    if from_profile and named is not None:
        host_dispatch_s = named.dispatch_s
    base = _runtime_of(ceilings, profile, host_dispatch_s, asynchronous, costs)
    if named is None:
        return base
    from dataclasses import replace

    source = named.dispatch_source if from_profile else base.dispatch_source
    replay, step_s, step_source = profile_figures(named, graph)
    return replace(base, dispatch_source=source, graph_replay=replay, graph_launch_s=GRAPH_NODE_LAUNCH_S,
                   step_s=step_s, step_source=step_source)


def profile_figures(named: RuntimeProfile, graph: "Graph | None") -> tuple[bool, float, str]:
    """``(graph replay, engine step s, its source)`` of the profile ``named`` for ``graph`` (None: a
    graph of no known phase or parameters: replayed as the profile says of every phase, a step of
    one sequence on one device), the one reading ``predict_graph`` and the simulator share."""
    replay = named.replays(graph.phase if graph is not None else None)
    step_s = named.step_s(graph.params if graph is not None else {})
    if not step_s or named.engine is None:
        return replay, 0.0, ""
    from .engines import engine_step_source

    return replay, step_s, engine_step_source(named.engine)


def _runtime_of(ceilings: "Ceilings", profile: Mapping[str, Any] | None, host_dispatch_s: float | None,
                asynchronous: bool | None, costs: "OpCosts | None") -> Runtime:
    dispatch = _dispatch_costs(ceilings.kind, profile, costs) or {}
    framework = _model_code_dispatch(dispatch)
    measured = ceilings.launch_overhead_s
    if framework is not None:
        launch_s, launch_source = 0.0, NO_LAUNCH_SOURCE
        dispatch_s, dispatch_source = framework.value, framework.source
    else:
        if measured is not None:
            launch_s, launch_source = measured.value, measured.source or ceilings.origin
            dispatch_s, dispatch_source = launch_s, f"the ceilings' launch figure ({launch_source})"
        else:
            launch_s, launch_source = DEFAULT_LAUNCH_OVERHEAD_S, DEFAULT_LAUNCH_SOURCE
            dispatch_s, dispatch_source = DEFAULT_HOST_DISPATCH_S, DEFAULT_DISPATCH_SOURCE
    if host_dispatch_s is not None:
        dispatch_s, dispatch_source = check_non_negative("host_dispatch_s", host_dispatch_s), "given"
    overlapping = asynchronous if asynchronous is not None else ceilings.kind in ASYNCHRONOUS_KINDS
    return Runtime(dispatch_s, launch_s, overlapping, dispatch_source, launch_source,
                   framework_dispatch=_figures(dispatch) if host_dispatch_s is None else ())


def framework_figures(kind: str, profile: Mapping[str, Any] | None,
                      costs: "OpCosts | None" = None) -> tuple[tuple[str, float], ...]:
    """A CPU's measured dispatch per framework (:func:`_dispatch_costs`), as
    :attr:`Runtime.framework_dispatch` holds it."""
    return _figures(_dispatch_costs(kind, profile, costs) or {})


def _figures(dispatch: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    return tuple(sorted((name, figure.value) for name, figure in dispatch.items()))
