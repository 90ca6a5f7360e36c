"""The op-class suite's rates a softmax and a norm are priced from: ``transcendental:<dtype>``,
``reduction:<dtype>`` and ``layernorm:<dtype>``, elements per second.

* ``transcendental:<dtype>``: the fastest ``exp`` case of the op-class suite
  (``suites/test_opclasses.py``, ``exp-<n>``: elements over the time net of the framework's
  dispatch), the rate of a softmax's and an attention's exponentials.
* ``transcendental.<function>:<dtype>``: the fastest case of another function (``tanh-<n>``,
  ``gelu-<n>``...), the rate of that function's ops (``exp``'s is the fallback of one not
  measured).
* ``reduction:<dtype>``: the fastest ``sum`` case (``sum-<n>``), elements folded per second net of
  dispatch: the rate of a softmax's max and sum passes and an RMS norm's squares.
* ``layernorm:<dtype>`` and ``layernorm-row:<dtype>``: a layer norm's elements normalised per
  second and seconds per row beyond them, fitted over the layer norm cases
  (``layernorm-<rows>x<width>``) net of dispatch (:mod:`pytest_charz.models.layernorm_costs`):
  its Welford moments are no sum, and a narrow row pays its fold and setup on few elements.

The exp and reduction rates are read by :func:`pytest_charz.models.opclass_costs.case_rate`, the layer
norm's by :func:`pytest_charz.models.layernorm_costs.fit_layernorm`, as the calibration reads
them. A case whose time is less than twice its dispatch gives no figure (its rate would be its
dispatch's noise), nor does a workload's op. The model reads them with
:func:`pytest_charz.models.ceilings_profile.read_op_costs`.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from ..models.layernorm_costs import LayerNormPoint, fit_layernorm, layernorm_point
from ..models.opclass_costs import case_rate, framework_of
from .figures import Case, CaseFigures, time_s

#: What each figure's rate is, for its note (another transcendental function's is its name).
WHAT = {"transcendental": "exp", "reduction": "sum"}


def opclass_rates(cases: Sequence[Case], dispatch_s: Mapping[str, float]) -> list[CaseFigures]:
    """The rates of ``cases`` (module docstring); ``dispatch_s`` is the host dispatch per
    framework this run measured (none: times are taken whole)."""
    rated: dict[str, list[tuple[float, Case]]] = {}
    norms: list[tuple[LayerNormPoint, Case]] = []
    for case in cases:
        dispatch = dispatch_s.get(framework_of(case.work), 0.0)
        point = layernorm_point(case.work, time_s(case), dispatch)
        if point is not None:
            norms.append((point, case))
            continue
        found = case_rate(case.work, time_s(case), dispatch)
        if found is not None:
            rated.setdefault(found[0], []).append((found[1], case))
    figures = []
    for name, found in sorted(rated.items()):
        rate, best = max(found, key=lambda item: item[0])
        kind, _, function = name.split(":", 1)[0].partition(".")
        what = function or WHAT[kind]
        figures.append(CaseFigures(name, rate, "elements/s", [c for _, c in found], best.id,
                                   notes=[f"fastest {what} case of the op-class suite, elements per second net of "
                                          "its dispatch"]))
    for dtype, fit in fit_layernorm(point for point, _ in norms).items():
        used = [(point, case) for point, case in norms if point.dtype == dtype]
        fastest = max(used, key=lambda item: item[0].elements / item[0].net_s)[1]
        figures.append(CaseFigures(f"layernorm:{dtype}", fit.rate, "elements/s", [c for _, c in used], fastest.id,
                                   notes=[f"layer norm elements per second of the op-class suite, {fit.how}"]))
        if fit.row_s > 0:
            figures.append(CaseFigures(f"layernorm-row:{dtype}", fit.row_s, "s", [c for _, c in used], None,
                                       notes=[f"layer norm seconds per row of the op-class suite, {fit.how}"]))
    return sorted(figures, key=lambda figure: figure.name)
