"""The op-class suite's rates a softmax and a norm are priced from: ``transcendental:<dtype>``
and ``reduction:<dtype>``, elements per second.

* ``transcendental:<dtype>``: the fastest ``exp`` case of the op-class suite
  (``suites/test_opclasses.py``, ``exp-<n>``: elements over the time net of the framework's
  dispatch), the rate of a softmax's and an attention's exponentials.
* ``reduction:<dtype>``: the fastest ``sum`` case (``sum-<n>``), elements folded per second net of
  dispatch: the rate of a softmax's max and sum passes and a norm's moments.

A case whose time is less than twice its dispatch gives no rate (its rate would be its dispatch's
noise). The model reads them with :func:`pytest_charz.models.ceilings_profile.read_op_costs`.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from ..models.opclass_costs import framework_of, op_class_of, sums_elements
from .figures import Case, CaseFigures, time_s

#: Profile figure name per op class of the cases it reads, and the function a transcendental
#: case must compute to count.
RATES = {"transcendental": "transcendental", "reduction": "reduction"}
EXP = "exp"


def _elements(case: Case) -> float:
    work = case.work
    stated = work.shape.get("elements")
    if isinstance(stated, (int, float)) and not isinstance(stated, bool) and stated > 0:
        return float(stated)
    return work.total_flops


def opclass_rates(cases: Sequence[Case], dispatch_s: Mapping[str, float]) -> list[CaseFigures]:
    """The rates of ``cases`` (module docstring); ``dispatch_s`` is the host dispatch per
    framework this run measured (none: times are taken whole)."""
    rated: dict[str, list[tuple[float, Case]]] = {}
    for case in cases:
        work = case.work
        op_class = op_class_of(work)
        if op_class not in RATES or len(work.flops) != 1 or not work.launches:
            continue
        if op_class == "transcendental" and work.shape.get("function", EXP) != EXP:
            continue
        if op_class == "reduction" and not sums_elements(work):
            continue                             # a mean over rows: the sum cases set the rate
        dispatch = dispatch_s.get(framework_of(work), 0.0)
        elapsed = time_s(case)
        elements = _elements(case)
        if not (elapsed and elements > 0) or elapsed < 2 * work.launches * dispatch:
            continue
        (dtype,) = work.flops
        rated.setdefault(f"{RATES[op_class]}:{dtype}", []).append((elements / (elapsed - work.launches * dispatch), case))
    figures = []
    for name, found in sorted(rated.items()):
        rate, best = max(found, key=lambda item: item[0])
        what = "exp" if name.startswith("transcendental:") else "sum"
        figures.append(CaseFigures(name, rate, "elements/s", [c for _, c in found], best.id,
                                   notes=[f"fastest {what} case of the op-class suite, elements per second net of "
                                          "its dispatch"]))
    return figures
