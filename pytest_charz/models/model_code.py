"""Eager model code's host time beyond its ops, fitted over the runtime suite's model-code cases.

A model-code case (``suites/test_runtime.py::test_module_dispatch_cpu``) times a small model's
forward whole and replays each of its ops alone, back to back (:mod:`pytest_charz.workloads.optimer`).
What the forward takes beyond its replayed ops is fitted as

    ``per_op * ops + per_call * module calls + per_python * Python calls + cold * replayed seconds``

* ``per_op``: what each op costs its host beyond its replay (argument handling, views, the
  dispatcher's way in);
* ``per_call``: each ``nn.Module`` call (hooks, ``__call__``, the forward's own code);
* ``per_python``: each Python function call the forward makes (``shape["python_calls"]``, counted
  by the capture: :class:`pytest_charz.workloads.capture_paths.PythonCalls`). Model code is
  Python, and its families differ in how much of it they run per op: on a Xeon core a GPT-2
  decode step of 45 ops and 31 module calls left 547 us beyond its replayed ops, a Llama step of
  88 ops and 36 calls 559 us; they made 529 and 501 Python calls. Fitted per op and per call
  over eight other families, GPT-2's step was priced 27% short; with the Python calls its error
  was 9-12%, and leaving each family out of the fit in turn, the largest miss on a family's
  forward fell from 15-17% to 5-9% (median 3.9-4.2% to 2.5-3.4%; two measurements). The least
  squares take the columns the cases carry (the Python calls only where every case counted
  them); where the Python calls explain the module calls, the per-call figure comes out 0.
* ``cold``: what the ops lose inside the forward against their replays. A replayed op finds its
  operands and weights in the caches its previous call left them in; inside the forward the
  ops between evicted them. It grows with the ops' own work, not their count: a two-layer Llama
  of 91 ops and 32 module calls left 486 us at 1 token, 630 at 32 and 1049 at 128 beyond its ops
  replayed (179, 401, 1087 us) on one Xeon core, about 0.63 s per replayed second on top of a
  fixed 370 us. Fitted with ``per_op`` and ``per_call`` alone on forwards of one size, that
  growth went into the per-op figure: a decode step of the same model (88 ops, 147 us replayed)
  was priced 797 us of model code against the 528 it took.

``cold`` is fitted only where a family was measured at two sizes (its replayed seconds at least
:data:`SIZES_APART` apart): across families alone, the replayed time moves with the op and call
counts and cannot be told apart from them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..work import Work

#: The profile's figures of an op of module code beyond its per-op one (the framework names of
#: :data:`pytest_charz.models.opclass_costs.FRAMEWORKS`): per ``nn.Module`` call it begins, per
#: Python call before it, and seconds per second of its own time lost in the forward.
MODULE_CALL = "torch-module-call"
MODULE_PYTHON = "torch-module-python"
MODULE_COLD = "torch-module-cold"

#: The least ratio of replayed seconds between two cases of one family for the fit to take a
#: ``cold`` term (the suite's 1- and 32-token forwards of a family differ 2-3x).
SIZES_APART = 1.5


def is_model_code_case(work: Work) -> bool:
    """Whether ``work`` is a model-code dispatch case (``suites/test_runtime.py::
    test_module_dispatch_cpu``): a forward timed whole beside its ops replayed alone, its ops
    (``shape["ops"]``), module calls (``shape["module_calls"]``) and replayed seconds
    (``shape["replayed_s"]``) counted."""
    return work.op == "dispatch" and all(
        isinstance(work.shape.get(key), (int, float)) and not isinstance(work.shape.get(key), bool)
        for key in ("ops", "module_calls", "replayed_s"))


@dataclass(frozen=True)
class ModelCodeCase:
    """One model-code case: its ops, module calls, forward and replayed seconds, and its family
    (the model it ran; empty where not recorded)."""

    ops: float
    calls: float
    forward_s: float
    replayed_s: float
    family: str = ""
    #: the forward's Python calls (``shape["python_calls"]``); None where not counted
    python_calls: float | None = None

    @classmethod
    def of(cls, work: Work, forward_s: float) -> "ModelCodeCase":
        shape = work.shape
        return cls(float(shape["ops"]), float(shape["module_calls"]), forward_s, float(shape["replayed_s"]),
                   str(shape.get("family") or ""), python_calls_of(work))


@dataclass(frozen=True)
class ModelCodeFit:
    """Eager model code's host time beyond its ops: ``per_op_s`` per op, ``per_call_s`` per
    ``nn.Module`` call, ``per_python_s`` per Python call and ``cold`` seconds per second of the
    ops' own time (module docstring); ``kept`` and ``dropped`` index the cases."""

    per_op_s: float
    per_call_s: float
    kept: tuple[int, ...]
    dropped: tuple[int, ...]
    worst_miss: float             # the largest |fit - model code| over the kept, as a share of a forward
    cold: float = 0.0
    per_python_s: float = 0.0


def two_sizes(cases: Sequence[ModelCodeCase]) -> bool:
    """Whether some family of ``cases`` was measured at two sizes (:data:`SIZES_APART`)."""
    by_family: dict[str, list[float]] = {}
    for case in cases:
        if case.family and case.replayed_s > 0:
            by_family.setdefault(case.family, []).append(case.replayed_s)
    return any(max(times) >= SIZES_APART * min(times) for times in by_family.values())


def fit_model_code(cases: Sequence[ModelCodeCase]) -> ModelCodeFit | None:
    """The model code of ``cases`` fitted (module docstring), every figure never negative
    (non-negative least squares); per call alone with one case or cases of one ratio of calls to
    ops. A forward no longer than its ops replayed alone (a replay a neighbour slowed) is left
    out, and, once, with four cases or more, any the fit misses by over three times the median
    miss. None without a case."""
    if not cases:
        return None
    import numpy as np
    from scipy.optimize import nnls

    ops = np.array([c.ops for c in cases], dtype=float)
    calls = np.array([c.calls for c in cases], dtype=float)
    python = np.array([c.python_calls or 0.0 for c in cases], dtype=float)
    replayed = np.array([c.replayed_s for c in cases], dtype=float)
    code = np.array([max(c.forward_s - c.replayed_s, 0.0) for c in cases], dtype=float)
    # the figures in order (per op, per call, cold, per Python call); cold and per Python call
    # fitted only where the cases allow, else 0
    table = [ops, calls, replayed, python]
    fitted = [0, 1, *([2] if two_sizes(cases) else []),
              *([3] if all(c.python_calls is not None for c in cases) else [])]

    def fit(keep: list[int]) -> tuple[float, ...]:
        design = np.column_stack([table[i][keep] for i in fitted])
        if len(keep) >= len(fitted) and np.linalg.matrix_rank(design) == len(fitted):
            solution, _ = nnls(design, code[keep])
            figures = [0.0] * len(table)
            for i, value in zip(fitted, solution):
                figures[i] = float(value)
            return tuple(figures)
        return 0.0, float(np.median(code[keep] / np.maximum(calls[keep], 1.0))), 0.0, 0.0

    def misses(figures: tuple[float, ...]) -> "np.ndarray":
        return np.abs(sum(figures[i] * table[i] for i in fitted) - code)

    keep = [i for i, c in enumerate(cases) if c.forward_s > c.replayed_s] or list(range(len(cases)))
    figures = fit(keep)
    miss = misses(figures)
    median_miss = float(np.median(miss[keep]))
    outliers = [i for i in keep if miss[i] > 3.0 * max(median_miss, 1e-12)]
    if len(keep) >= 4 and outliers:
        keep = [i for i in keep if i not in outliers]
        figures = fit(keep)
        miss = misses(figures)
    worst = max(float(miss[i]) / cases[i].forward_s for i in keep) if keep else 0.0
    per_op, per_call, cold, per_python = figures
    cold = cold if cold > 1e-9 else 0.0        # least squares' rounding of a zero
    return ModelCodeFit(per_op, per_call, tuple(keep), tuple(i for i in range(len(cases)) if i not in keep), worst,
                        cold, per_python)


def _count(work: Work, key: str) -> float | None:
    value = work.shape.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def module_calls(work: Work) -> float | None:
    """The ``nn.Module`` calls a captured op's host entered since the op before it
    (``shape["module_calls"]``, :mod:`pytest_charz.workloads.capture`); None when not counted (a
    builder's op, a capture recorded before they were counted)."""
    return _count(work, "module_calls")


def python_calls_of(work: Work) -> float | None:
    """The Python function calls a captured op's host made since the op before it
    (``shape["python_calls"]``, :mod:`pytest_charz.workloads.capture`); None when not counted."""
    return _count(work, "python_calls")


def module_code_s(framework: str, calls: float | None, python_calls: float | None,
                  figure: Callable[[str], float | None]) -> dict[str, float]:
    """What the model code before an op adds to its host dispatch, per figure: the ``nn.Module``
    calls it begins (``calls``, :func:`module_calls`) at ``dispatch:torch-module-call`` and the
    Python calls it makes (``python_calls``, :func:`python_calls_of`) at
    ``dispatch:torch-module-python``, each where the op counts them and ``figure`` (a framework's
    seconds, or None) has one, for an op of module code (``torch-module``); else nothing. The one
    rule of the op-class model's dispatch terms and of a graph's schedule."""
    if framework != "torch-module":
        return {}
    terms: dict[str, float] = {}
    for name, count in ((MODULE_CALL, calls), (MODULE_PYTHON, python_calls)):
        seconds = figure(name)
        if count and seconds:
            terms[name] = count * seconds
    return terms
