"""Measured per-op-class figures that :class:`~.ceilings.Ceilings` does not hold, and the op classes.

:class:`OpCosts` carries what the ``opclass`` model needs beyond peaks and bandwidths: the rate the
vendor GEMM reached per dtype (``gemm:<dtype>`` in a capability profile: on the recorded Zen 5 guest
263 GFLOP/s fp32 against an FMA-chain peak of 546), the host time one framework op costs per
framework (``dispatch:<framework>``: 0.32 us for a NumPy ufunc call, about 1-3 us for a PyTorch
eager op on the development VMs), and a transcendental function's throughput per dtype
(``transcendental:<dtype>``, elements per second of a large ``exp``; another function's own,
``transcendental.<function>:<dtype>``, where its cases measured it), a vectorised reduction's
throughput per dtype (``reduction:<dtype>``, elements per second a ``sum`` folds, net of its
dispatch: the max and sum passes of a softmax, an RMS norm's squares), a whole layer norm's
throughput per dtype (``layernorm:<dtype>``, elements per second, net of its dispatch: its Welford
moments are no sum) and its cost per row (``layernorm-row:<dtype>``, seconds: both read by
:mod:`.layernorm_costs`), and what a page the framework's allocator takes fresh from the operating
system costs (``fresh-page:<framework>``: the mapping, the first-touch fault that zeroes the page,
the unmapping; 1.7 us per 4 KiB page on the development VMs). A figure nobody measured stays absent,
and the model falls back to the ceilings (and says so in its breakdown's term names, never
silently).

:func:`op_class_of` maps a Work's ``op`` to the op class a model and a calibration key on: the
workload IR's classes (:data:`pytest_charz.workloads.graph.OP_CLASSES`) plus ``transcendental``
(an elementwise op bound by its math, marked ``shape["transcendental"]`` or named ``exp``...) and
``dispatch`` (framework overhead alone). The suites' op names map onto them (``stream`` and
``read`` are elementwise or reduction passes over memory; ``fma`` is elementwise compute).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import FormatError, UsageError
from ..targets.spec import Figure
from ..work import DTYPES, Work
from .model_code import module_calls

OP_COSTS_VERSION = 1
#: Frameworks whose per-op host dispatch is measured; ``torch-scalar`` is a PyTorch op with a
#: Python scalar operand (``shape["scalar_operand"]``), which wraps the scalar on every call and,
#: where the wrapped number is not of the op's dtype (a Python float, wrapped as a double, beside
#: an fp32 tensor), casts it; ``torch-scalar-uncast`` one whose number is of the op's dtype
#: (``shape["scalar_uncast"]``: a Python int beside an int64 position or index), wrapped and not
#: cast (on a Xeon core 1.03 us for an int64 tensor plus an int, 1.67 for an fp32 one plus a
#: float or an int, 0.66 for two tensors);
#: ``torch-broadcast`` one of two tensor operands whose shapes differ (``shape["broadcast"]``: a
#: norm's ``x * rsqrt(var)``, its ``weight * x``, a rotary ``q * cos``), whose TensorIterator
#: computes the broadcast shape and strides on every call (0.78 against 0.69 us for 128 floats on
#: a Xeon core).
#: ``torch-module`` is the host time per op of eager ``nn.Module`` code (module calls and the
#: views between ops included), what a captured model graph's ops cost their host.
#: ``torch-module-call`` is the host time of one ``nn.Module`` call of model code beyond its ops
#: (the profile's ``dispatch:torch-module-call``), paid per call a captured op's
#: ``shape["module_calls"]`` counts, beside ``torch-module`` per op.
#: ``torch-module-python`` is the host time of one Python function call of model code (the
#: profile's ``dispatch:torch-module-python``), paid per call a captured op's
#: ``shape["python_calls"]`` counts (:func:`.model_code.python_calls_of`), beside the other two.
#: ``torch-module-cold`` is no time per op but seconds per second: how much longer an op of eager
#: model code runs than alone, back to back (:mod:`.model_code`), its unit ``s/s``.
FRAMEWORKS = ("torch", "numpy", "torch-scalar", "torch-scalar-uncast", "torch-broadcast", "torch-module",
              "torch-module-call", "torch-module-python", "torch-module-cold")
#: Operand variants of a framework (:func:`framework_of`), each the suffix of the variant it
#: refines: unmeasured, an uncast scalar's dispatch is the scalar's (which bounds it from above),
#: a scalar's or a broadcast's the framework's own (which bounds it from below).
OPERAND_VARIANTS = ("-uncast", "-scalar", "-broadcast")
#: Work.op names (IR classes, suite ops, common aliases) -> the op class models key on.
CLASS_OF_OP: Mapping[str, str] = {
    **{name: "gemm" for name in ("gemm", "matmul", "mm", "addmm", "linear")},
    **{name: "bmm" for name in ("bmm", "baddbmm")},
    "conv": "conv", "convolution": "conv", "attention": "attention",
    **{name: "elementwise" for name in ("elementwise", "add", "mul", "fma", "stream")},
    **{name: "transcendental" for name in ("transcendental", "exp", "tanh", "gelu", "silu", "sigmoid", "log",
                                            "erf", "sqrt", "rsqrt")},
    **{name: "reduction" for name in ("reduction", "sum", "mean", "read")},
    "softmax": "softmax",
    **{name: "norm" for name in ("norm", "layernorm", "layer_norm", "rmsnorm")},
    **{name: "embedding" for name in ("embedding", "gather")},
    "copy": "copy", "clone": "copy", "transpose": "transpose", "permute": "transpose",
    "dispatch": "dispatch", "launch": "dispatch", "wakeup": "wakeup", "allocation": "allocation",
    "chase": "latency", "transfer": "transfer", "collective": "collective",
}
OP_CLASSES = tuple(dict.fromkeys(CLASS_OF_OP.values()))
#: Classes that run GEMM-like on the library's GEMM kernels (the measured GEMM rate applies).
GEMM_CLASSES = frozenset({"gemm", "bmm", "conv", "attention"})
#: The figure maps of :class:`OpCosts`, in its fields' order.
_FIELDS = ("gemm_flops_per_s", "dispatch_s", "transcendental_per_s", "fresh_page_s", "reduction_per_s",
           "layernorm_per_s", "layernorm_row_s", "function_per_s")


def op_class_of(work: Work) -> str:
    """The op class of ``work`` (:data:`CLASS_OF_OP`; ``other`` for an op it does not know).

    An ``elementwise`` work with a truthy ``shape["transcendental"]`` is ``transcendental``.
    """
    found = CLASS_OF_OP.get(work.op, "other" if work.op else "")
    if found == "elementwise" and work.shape.get("transcendental"):
        return "transcendental"
    return found


def work_dtype(work: Work) -> str:
    """The dtype a work's class is calibrated per: its FLOPs' dtype when of one, else
    ``shape["dtype"]`` when a known dtype, else ``*`` (bytes-only work of no stated dtype)."""
    if len(work.flops) == 1:
        return next(iter(work.flops))
    stated = work.shape.get("dtype")
    return str(stated) if stated in DTYPES else "*"


def allocator_of(framework: str) -> str:
    """The framework whose allocator a framework variant uses: ``torch-scalar``, ``torch-module``
    -> ``torch``."""
    return framework.split("-", 1)[0]


def framework_of_kind(kind: str) -> str | None:
    """The framework a dispatch case's ``kind`` names (``numpy-add`` -> ``numpy``,
    ``torch-scalar-add`` -> ``torch-scalar``: the longest known name first), else None."""
    return next((name for name in sorted(FRAMEWORKS, key=len, reverse=True) if kind.startswith(f"{name}-")), None)


def framework_of(work: Work) -> str:
    """The framework whose dispatch a work pays: ``shape["framework"]`` (``torch``, ``numpy``),
    else ``shape["library"]`` when one of those, else the framework a ``shape["kind"]`` starts
    with (the runtime suite's ``numpy-add``), else ``torch`` (the workload IR is PyTorch's); with
    ``shape["scalar_operand"]`` true, that framework's scalar-operand variant (``torch-scalar``;
    ``torch-scalar-uncast`` where ``shape["scalar_uncast"]`` says the number is of the op's
    dtype), else with ``shape["broadcast"]`` true its broadcast variant (``torch-broadcast``)."""
    found = "torch"
    for key in ("framework", "library"):
        value = work.shape.get(key)
        if value in FRAMEWORKS:
            found = str(value)
            break
    else:
        found = framework_of_kind(str(work.shape.get("kind", ""))) or "torch"
    if work.shape.get("scalar_operand") and f"{found}-scalar" in FRAMEWORKS:
        if work.shape.get("scalar_uncast") and f"{found}-scalar-uncast" in FRAMEWORKS:
            return f"{found}-scalar-uncast"
        return f"{found}-scalar"
    if work.shape.get("broadcast") and f"{found}-broadcast" in FRAMEWORKS:
        return f"{found}-broadcast"
    return found


def operand_variant_base(framework: str) -> str | None:
    """The framework an operand variant refines (``torch-broadcast`` -> ``torch``,
    ``torch-scalar-uncast`` -> ``torch-scalar``), else None."""
    return next((framework.removesuffix(s) for s in OPERAND_VARIANTS if framework.endswith(s)), None)


def variant_dispatch(framework: str, figure: Callable[[str], float | None]) -> tuple[str, float | None]:
    """``(framework, seconds)`` of the first of ``framework`` and the variants it refines
    (:func:`operand_variant_base`, in turn) that ``figure`` has a dispatch figure of; the last one
    tried and None when none has."""
    seconds = figure(framework)
    base = operand_variant_base(framework)
    while seconds is None and base is not None:
        framework, seconds = base, figure(base)
        base = operand_variant_base(framework)
    return framework, seconds


def sums_elements(work: Work) -> bool:
    """Whether a work is a reduction that sums its elements (``torch.sum``, no other function
    named): the cases whose rate is the reduction rate a softmax's and a norm's passes are
    priced from (a ``mean`` over rows has a fixed cost of its own)."""
    return op_class_of(work) == "reduction" and work.shape.get("function", "sum") == "sum"


def is_layer_norm(work: Work) -> bool:
    """Whether a work is a layer norm (the ``norm`` class, not an RMS norm's ``shape["norm"] ==
    "rms"``): the cases whose rate is the ``layernorm`` rate."""
    return op_class_of(work) == "norm" and str(work.shape.get("norm", "layer")) != "rms"


def is_workload(work: Work) -> bool:
    """Whether a case's Work is a workload's (an op graph end to end, or an op of one: ``op ==
    "workload"`` or a ``workload`` key in its shape), not a microbenchmark's: workload cases are
    what a calibration is tested on, never fitted on, and set no rate."""
    return work.op == "workload" or "workload" in work.shape


def case_rate(work: Work, seconds: float, dispatch_s: float | None) -> tuple[str, float] | None:
    """The rate a microbenchmark case of ``work`` measured in ``seconds`` sets, as a figure name
    and elements per second net of its dispatch (``elements / (seconds - launches x
    dispatch_s)``); None for a case that sets none. The one reading of these rates, for the
    capability profile (:mod:`pytest_charz.profile.opclass_rates`) and the calibration
    (:func:`pytest_charz.calibration.observations.measured_op_costs`) alike:

    * ``transcendental:<dtype>``: an ``exp`` (``shape["function"]`` absent or ``exp``) over
      ``shape["elements"]``, the rate of a softmax's and an attention's exponentials; another
      function's case reads as ``transcendental.<function>:<dtype>``, which a calibration falls
      back on where no ``exp`` was measured.
    * ``reduction:<dtype>``: a ``sum`` over ``shape["elements"]`` (:func:`sums_elements`), the rate
      of a softmax's max and sum passes and an RMS norm's sum of squares.

    A layer norm's figures are fitted over its cases together (:mod:`.layernorm_costs`): its
    Welford moments are no sum (on the recorded Xeon run a layer norm of 64 x 512 took 0.26 ns
    per element net of dispatch, a sum of 256 Ki elements 0.032), and its rows cost beyond its
    elements. A case whose time is under twice its dispatch sets none (its rate would be its
    dispatch's noise), nor does a workload's op (:func:`is_workload`)."""
    if is_workload(work) or len(work.flops) != 1 or not work.launches:
        return None
    (dtype, flops), = work.flops.items()
    if sums_elements(work):
        name = f"reduction:{dtype}"
    elif op_class_of(work) == "transcendental":
        function = work.shape.get("function", "exp")
        name = f"transcendental:{dtype}" if function == "exp" else f"transcendental.{function}:{dtype}"
    else:
        return None
    stated = work.shape.get("elements")
    elements = float(stated) if isinstance(stated, (int, float)) and not isinstance(stated, bool) and stated > 0 \
        else flops
    spent = work.launches * (dispatch_s or 0.0)
    if not (elements > 0 and seconds > 0) or seconds < 2 * spent:
        return None
    return name, elements / (seconds - spent)


def pays_module_call(work: Work) -> bool:
    """Whether a captured op's host pays eager module code's per-op cost (``dispatch:torch-module``,
    measured per op of small transformer blocks, their module calls and the Python between ops
    included). Not a bare aten op of the root module's own ``forward`` (``shape["root_op"]`` with
    no module call before it: :func:`module_calls` 0), whose host pays the bare dispatch; every
    op of a submodule's code, the first op of a module call, and an op that does not count its
    module calls (a builder's, a capture recorded before they were counted) pay it."""
    calls = module_calls(work)
    return not (calls == 0 and work.shape.get("root_op"))


def host_framework(work: Work) -> str:
    """The framework whose per-op host cost a graph's op pays: the one its Work names
    (:func:`framework_of`), else ``torch-module`` for an op of module code (:func:`pays_module_call`),
    else the bare framework op's (``torch``, ``torch-scalar``)."""
    if "framework" in work.shape or "library" in work.shape or not pays_module_call(work):
        return framework_of(work)
    return "torch-module"


def shape_dim(shape: Mapping[str, Any], *names: str) -> float | None:
    """The first of ``names`` in ``shape`` that is a number of at least 1, else None."""
    for name in names:
        value = shape.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1:
            return float(value)
    return None


def gemm_dims(work: Work, op_class: str) -> tuple[float, float, float, float] | None:
    """``(m, n, k, batch)`` of a GEMM-like work from its shape, or None when the shape does not say."""
    shape, flops = work.shape, work.total_flops
    if op_class in ("gemm", "bmm"):
        m, n, k = shape_dim(shape, "m"), shape_dim(shape, "n"), shape_dim(shape, "k")
        batch = shape_dim(shape, "batch") or 1.0
        return (m, n, k, batch) if m and n and k else None
    if op_class == "conv":
        cout, cin = shape_dim(shape, "out_channels"), shape_dim(shape, "in_channels")
        if not (cout and cin and flops):
            return None
        kernel = math.prod(shape_dim(shape, key) or 1.0 for key in ("kernel_h", "kernel_w", "kernel_d"))
        # kernel elements: as a builder names them, as the capture does ("kernel"), or from h x w x d
        k = cin / (shape_dim(shape, "groups") or 1.0) * (shape_dim(shape, "kernel_elements", "kernel") or kernel)
        return flops / (2.0 * cout * k), cout, k, 1.0
    if op_class == "attention":
        s_q, s_kv, d = shape_dim(shape, "s_q", "seq_q"), shape_dim(shape, "s_kv", "seq_kv"), shape_dim(shape, "d", "head_dim")
        batch = (shape_dim(shape, "batch") or 1.0) * (shape_dim(shape, "heads") or 1.0)
        return (s_q, s_kv, d, batch) if s_q and s_kv and d else None
    return None


def _check_figures(name: str, figures: Mapping[str, Any], keys: tuple[str, ...], functions: bool = False
                   ) -> dict[str, Figure]:
    """``figures`` checked: each key one of ``keys`` (``functions``: ``<function>:<key>``)."""
    out: dict[str, Figure] = {}
    for key, figure in figures.items():
        function, _, keyed = key.rpartition(":") if functions else ("", "", key)
        if keyed not in keys or (functions and not function.isidentifier()):
            raise UsageError(f"OpCosts.{name} key {key!r} is not {'<function>:' * functions}one of {', '.join(keys)}")
        if not isinstance(figure, Figure) or not (math.isfinite(figure.value) and figure.value > 0):
            raise UsageError(f"OpCosts.{name}[{key!r}] must be a Figure with a finite positive value, got {figure!r}")
        out[key] = figure
    return out


@dataclass(frozen=True)
class OpCosts:
    """Measured op-class figures: GEMM FLOP/s and transcendental elements/s per dtype, host
    dispatch seconds per framework op, seconds per fresh page of a framework's allocations,
    reduction and layer norm elements/s per dtype, a layer norm's seconds per row per dtype
    (:mod:`.layernorm_costs`). Every figure is a :class:`Figure` with its source."""

    gemm_flops_per_s: Mapping[str, Figure] = field(default_factory=dict)
    dispatch_s: Mapping[str, Figure] = field(default_factory=dict)
    transcendental_per_s: Mapping[str, Figure] = field(default_factory=dict)
    fresh_page_s: Mapping[str, Figure] = field(default_factory=dict)
    reduction_per_s: Mapping[str, Figure] = field(default_factory=dict)
    layernorm_per_s: Mapping[str, Figure] = field(default_factory=dict)
    layernorm_row_s: Mapping[str, Figure] = field(default_factory=dict)
    function_per_s: Mapping[str, Figure] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gemm_flops_per_s", _check_figures("gemm_flops_per_s", self.gemm_flops_per_s, DTYPES))
        object.__setattr__(self, "dispatch_s", _check_figures("dispatch_s", self.dispatch_s, FRAMEWORKS))
        object.__setattr__(self, "transcendental_per_s",
                           _check_figures("transcendental_per_s", self.transcendental_per_s, DTYPES))
        object.__setattr__(self, "fresh_page_s", _check_figures("fresh_page_s", self.fresh_page_s, FRAMEWORKS))
        object.__setattr__(self, "reduction_per_s", _check_figures("reduction_per_s", self.reduction_per_s, DTYPES))
        object.__setattr__(self, "layernorm_per_s", _check_figures("layernorm_per_s", self.layernorm_per_s, DTYPES))
        object.__setattr__(self, "layernorm_row_s", _check_figures("layernorm_row_s", self.layernorm_row_s, DTYPES))
        object.__setattr__(self, "function_per_s",
                           _check_figures("function_per_s", self.function_per_s, DTYPES, functions=True))

    def gemm(self, dtype: str) -> float | None:
        figure = self.gemm_flops_per_s.get(dtype)
        return figure.value if figure is not None else None

    def dispatch(self, framework: str) -> float | None:
        figure = self.dispatch_s.get(framework)
        return figure.value if figure is not None else None

    def transcendental(self, dtype: str, function: str | None = None) -> float | None:
        """Elements/s of ``function`` (``tanh``, ``gelu``...) in ``dtype``: its own where measured
        (``function_per_s``), else the measured functions' median (tanh ran 2.7x slower than exp),
        else ``exp``'s, the rate of no function named too (fp32's for a dtype not measured)."""
        if function and function != "exp":
            own = self.function_per_s.get(f"{function}:{dtype}")
            if own is not None:
                return own.value
            others = [f.value for key, f in self.function_per_s.items() if key.endswith(f":{dtype}")]
            if others:
                return statistics.median(others)
        figure = self.transcendental_per_s.get(dtype) or self.transcendental_per_s.get("fp32")
        return figure.value if figure is not None else None

    def reduction(self, dtype: str) -> float | None:
        """Elements per second a vectorised reduction of ``dtype`` folds (fp32's for a dtype not
        measured), None when none was measured."""
        figure = self.reduction_per_s.get(dtype) or self.reduction_per_s.get("fp32")
        return figure.value if figure is not None else None

    def layernorm(self, dtype: str) -> float | None:
        """Elements per second a layer norm of ``dtype`` normalises, its whole kernel (fp32's for a
        dtype not measured), None when none was measured."""
        figure = self.layernorm_per_s.get(dtype) or self.layernorm_per_s.get("fp32")
        return figure.value if figure is not None else None

    def layernorm_row(self, dtype: str) -> float:
        """Seconds a layer norm of ``dtype`` spends per row beyond its elements (fp32's for a dtype
        not measured; :mod:`.layernorm_costs`), 0.0 when none was measured."""
        figure = self.layernorm_row_s.get(dtype) or self.layernorm_row_s.get("fp32")
        return figure.value if figure is not None else 0.0

    def fresh_page(self, framework: str) -> float | None:
        """Seconds per fresh page of ``framework``'s allocations; a variant of a framework
        (``torch-scalar``, ``torch-module``) allocates as the framework does."""
        figure = self.fresh_page_s.get(framework) or self.fresh_page_s.get(allocator_of(framework))
        return figure.value if figure is not None else None

    def filled_from(self, other: "OpCosts") -> "OpCosts":
        """A copy whose missing figures come from ``other``."""
        return OpCosts(*({**getattr(other, name), **getattr(self, name)} for name in _FIELDS))

    def __bool__(self) -> bool:
        return any(getattr(self, name) for name in _FIELDS)

    def to_json(self) -> dict[str, Any]:
        return {"version": OP_COSTS_VERSION,
                **{name: {k: f.to_json() for k, f in getattr(self, name).items()} for name in _FIELDS}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "OpCosts":
        if data.get("version") != OP_COSTS_VERSION:
            raise FormatError(f"OpCosts JSON version {data.get('version')!r} is not {OP_COSTS_VERSION}")
        try:
            maps = {name: {str(k): Figure(float(f["value"]), str(f["source"])) for k, f in (data.get(name) or {}).items()}
                    for name in _FIELDS}
            return cls(**maps)
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"OpCosts JSON is malformed: {exc}") from exc
