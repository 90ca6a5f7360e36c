"""Eager model code's host time beyond its ops, fitted over the runtime suite's model-code cases.

A model-code case (``suites/test_runtime.py::test_module_dispatch_cpu``) times a small model's
forward whole and replays each of its ops alone, back to back (:mod:`pytest_charz.workloads.optimer`).
What the forward takes beyond its replayed ops is fitted as

    ``per_op * ops + per_call * module calls + cold * replayed seconds``

* ``per_op``: the Python between ops (argument handling, views, the dispatcher's way in);
* ``per_call``: each ``nn.Module`` call (hooks, ``__call__``, the forward's own code);
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
from typing import Sequence

from ..work import Work

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

    @classmethod
    def of(cls, work: Work, forward_s: float) -> "ModelCodeCase":
        shape = work.shape
        return cls(float(shape["ops"]), float(shape["module_calls"]), forward_s, float(shape["replayed_s"]),
                   str(shape.get("family") or ""))


@dataclass(frozen=True)
class ModelCodeFit:
    """Eager model code's host time beyond its ops: ``per_op_s`` per op, ``per_call_s`` per
    ``nn.Module`` call and ``cold`` seconds per second of the ops' own time (module docstring);
    ``kept`` and ``dropped`` index the cases."""

    per_op_s: float
    per_call_s: float
    kept: tuple[int, ...]
    dropped: tuple[int, ...]
    worst_miss: float             # the largest |fit - model code| over the kept, as a share of a forward
    cold: float = 0.0


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
    replayed = np.array([c.replayed_s for c in cases], dtype=float)
    code = np.array([max(c.forward_s - c.replayed_s, 0.0) for c in cases], dtype=float)
    columns = [ops, calls, replayed] if two_sizes(cases) else [ops, calls]

    def fit(keep: list[int]) -> tuple[float, ...]:
        design = np.column_stack([column[keep] for column in columns])
        if len(keep) >= len(columns) and np.linalg.matrix_rank(design) == len(columns):
            solution, _ = nnls(design, code[keep])
            return (*(float(v) for v in solution), *(0.0,) * (3 - len(columns)))
        return 0.0, float(np.median(code[keep] / np.maximum(calls[keep], 1.0))), 0.0

    def misses(figures: tuple[float, ...]) -> "np.ndarray":
        return np.abs(figures[0] * ops + figures[1] * calls + figures[2] * replayed - code)

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
    per_op, per_call, cold = figures
    cold = cold if cold > 1e-9 else 0.0        # least squares' rounding of a zero
    return ModelCodeFit(per_op, per_call, tuple(keep), tuple(i for i in range(len(cases)) if i not in keep), worst,
                        cold)
