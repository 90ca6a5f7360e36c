"""The runtime suite's overheads as a profile reads them: the fastest of each op (``launch``,
``dispatch``, ``wakeup``), the host dispatch per framework, eager model code per op and per
module call (fitted over the model-code cases), and the cost of a freshly mapped page."""
from __future__ import annotations

import statistics
from typing import Any

from ..models.model_code import (MODULE_CALL, MODULE_COLD, MODULE_PYTHON, ModelCodeCase, fit_model_code,
                                 is_model_code_case)
from ..models.opclass_costs import framework_of_kind
from .figures import Case, CaseFigures, shape, time_s


def overhead_figures(cases: list[Case]) -> tuple[list[CaseFigures], dict[str, Any]]:
    """The overhead figures of ``cases`` (module docstring) and the curve's points."""
    by_op: dict[str, list[tuple[float, Case]]] = {}
    for case in cases:
        launches = case.work.launches
        per_op = time_s(case) / launches if launches else time_s(case)
        by_op.setdefault(case.work.op, []).append((per_op, case))
    figures = []
    for op, timed in ((op, timed) for op, timed in by_op.items() if op != "allocation"):  # per page, below
        best, case = min(timed, key=lambda item: item[0])
        figures.append(CaseFigures(op, best, "s", [c for _, c in timed], case.id,
                                   notes=["fastest variant" if len(timed) > 1 else "one variant"]))
    # Per framework (the kind without its op: numpy-add, torch-add, torch-scalar-add with a Python
    # scalar operand): what one op of that framework costs its host, which is what a prediction of
    # that framework's ops needs (not the fastest of all).
    frameworks: dict[str, list[tuple[float, Case]]] = {}
    model_code = [case for _, case in by_op.get("dispatch", []) if is_model_code_case(case.work)]
    for per_op, case in by_op.get("dispatch", []):
        framework = framework_of_kind(str(shape(case).get("kind", "")))
        if framework is not None and not is_model_code_case(case.work):
            frameworks.setdefault(framework, []).append((per_op, case))
    bare = min((t for t, _ in frameworks.get("torch", [])), default=None)
    if model_code and bare is not None:
        # the model-code cases decide what an op of module code costs (an older run's one
        # module case, of the ops' time per op, is read only where they are absent)
        frameworks.pop("torch-module", None)
        figures.extend(_module_code_figures(model_code, bare))
    for framework, timed in sorted(frameworks.items()):
        best, case = min(timed, key=lambda item: item[0])
        figures.append(CaseFigures(f"dispatch:{framework}", best, "s", [c for _, c in timed], case.id,
                                   notes=[_dispatch_note(framework)]))
    # Per framework, the median cost of a page its allocator maps fresh (mapping, fault, unmapping)
    fresh: dict[str, list[tuple[float, Case]]] = {}
    for _, case in by_op.get("allocation", []):
        pages, framework = float(shape(case).get("pages") or 0), framework_of_kind(str(shape(case).get("kind", "")))
        if pages > 0 and framework is not None:
            fresh.setdefault(framework, []).append((time_s(case) / pages, case))
    for framework, timed in sorted(fresh.items()):
        figures.append(CaseFigures(f"fresh-page:{framework}", statistics.median(t for t, _ in timed), "s",
                                   [c for _, c in timed], timed[0][1].id, notes=[f"per 4 KiB page of a {framework} "
                                   "tensor mapped fresh: the mapping, the first-touch fault, the unmapping"]))
    points = [{"case": c.id, "op": op, "kind": shape(c).get("kind"), "time_s": t}
              for op, timed in by_op.items() for t, c in timed]
    return figures, {"points": points}


def _module_code_figures(cases: list[Case], bare_s: float) -> list[CaseFigures]:
    """``dispatch:torch-module`` (an op of module code: the bare op's dispatch ``bare_s`` plus the
    model code's per op), ``dispatch:torch-module-call`` (per ``nn.Module`` call) and, where a
    family was measured at two sizes, ``dispatch:torch-module-cold`` (seconds per second of the
    ops' own time), fitted over the model-code cases (:func:`~pytest_charz.models.model_code.fit_model_code`)."""
    fit = fit_model_code([ModelCodeCase.of(c.work, time_s(c)) for c in cases])
    if fit is None:
        return []
    kept = [cases[i] for i in fit.kept]
    families = ", ".join(sorted({str(shape(c).get("family", c.id)) for c in kept}))
    note = (f"fitted over {len(kept)} model-code case(s) ({families}): {fit.per_op_s * 1e6:.3g} us per op beyond "
            f"the ops replayed alone, {fit.per_call_s * 1e6:.3g} us per module call, "
            f"{fit.per_python_s * 1e6:.3g} us per Python call, {fit.cold:.3g} s per second of "
            f"the ops' own time; the fit's largest miss {100 * fit.worst_miss:.0f}% of a forward")
    if fit.dropped:
        note += ("; left out (no longer than their ops replayed alone, or missed by over 3x the median): "
                 + ", ".join(cases[i].id for i in fit.dropped))
    best = min(kept, key=lambda c: time_s(c)).id
    figures = [CaseFigures("dispatch:torch-module", bare_s + fit.per_op_s, "s", kept, best,
                           notes=[f"per op of eager model code: the bare torch dispatch plus {fit.per_op_s * 1e6:.3g} us "
                                  "of the code between ops", note])]
    if fit.per_call_s > 0:
        figures.append(CaseFigures(f"dispatch:{MODULE_CALL}", fit.per_call_s, "s", kept, best,
                                   notes=["per nn.Module call of eager model code, beyond its ops", note]))
    if fit.per_python_s > 0:
        figures.append(CaseFigures(f"dispatch:{MODULE_PYTHON}", fit.per_python_s, "s", kept, best,
                                   notes=["per Python function call of eager model code (the forward's "
                                          "python_calls, counted by the capture), beyond its ops", note]))
    if fit.cold > 0:
        figures.append(CaseFigures(f"dispatch:{MODULE_COLD}", fit.cold, "s/s", kept, best,
                                   notes=["seconds an op of eager model code runs longer than alone, per second of its "
                                          "own time (its operands and weights evicted by the ops between)", note]))
    return figures


def _dispatch_note(framework: str) -> str:
    if framework == "torch-module":
        return "per op of eager nn.Module code (two small transformer blocks), views and module calls included"
    if framework.endswith("-broadcast"):
        return f"one {framework.removesuffix('-broadcast')} op of two operands of different shapes (broadcast)"
    if framework.endswith("-scalar-uncast"):
        return (f"one {framework.removesuffix('-scalar-uncast')} op on a one-element int64 operand and a Python int "
                "(wrapped, not cast)")
    suffix = " and a Python scalar" if framework.endswith("-scalar") else ""
    return f"one {framework.removesuffix('-scalar')} op on a one-element operand{suffix}"
