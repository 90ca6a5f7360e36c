"""A layer norm's kernel on a CPU, read from the op-class suite's layer norm cases: seconds per
element normalised and seconds per row.

ATen's layer norm (``LayerNormKernelImpl``) walks the rows: each row's moments (Welford updates,
a dependency chain within a vector lane), their horizontal fold across the lanes, then the
normalised row. Besides its elements, each row costs the fold and the loop's own setup, and a
narrow row has few elements to amortise it: on a Xeon core ``torch.layer_norm`` of 512 x 128
floats took 33 us, of 64 x 1024 (the same elements) 18 us. A rate per element alone, read from
the widest case, prices every norm of a given size the same; the calibration's curve over bytes
cannot tell 512 rows of 128 from 64 of 1024 either.

:func:`fit_layernorm` fits, per dtype, the cases' times net of their dispatch as
``call + row_s x rows + elements / rate`` (non-negative, on the relative error, so a 1 us case
weighs as much as a 1 ms one, and robust: :data:`ROBUST_SCALE`). ``call`` is the kernel's fixed cost per call (its
outputs' and moments' allocation), which the calibration's curve and small end already carry
for every class; it is fitted so that it does not leak into the per-row figure, and not kept.
``rate`` and ``row_s`` are the profile's ``layernorm:<dtype>`` (elements/s) and
``layernorm-row:<dtype>`` (seconds per row) and the calibration's, read by the one function
here. Where the cases cannot separate a row from its elements (fewer than
:data:`MIN_CASES` of them, rows of too alike widths, :data:`MIN_WIDTH_SPREAD`, or one row
count), the rate is the fastest case's and there is no per-row figure, as before the per-row
term existed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ..work import Work
from .opclass_costs import is_layer_norm, is_workload, shape_dim

#: Fewest cases of a dtype for three figures (call, row, element) to be fitted.
MIN_CASES = 4
#: Widest over narrowest row of the cases for a row's cost to be told from its elements': across
#: rows of 384-1024 floats only (the op-class suite of the recorded Zen 3 run, whose 8 x 256 case
#: was under twice its dispatch) the fit put 124 ns on a row and a BERT's 32 x 128 norms read
#: +359%; the suite's rows of 128-1024 part them.
MIN_WIDTH_SPREAD = 4.0
#: Relative error past which a case's pull on the fit grows linearly, not quadratically (a soft
#: L1 loss): the suite's largest norm (4096 x 1024, 32 MiB moved) took 1.47, 2.07 and 1.98 ms in
#: three rounds on a Xeon guest, a neighbour's memory traffic, where the others moved by 1-10%;
#: with squared errors it pulled the per-element figure 10% off the rest.
ROBUST_SCALE = 0.1


@dataclass(frozen=True)
class LayerNormPoint:
    """One layer norm case: its dtype, rows, elements and seconds net of its dispatch."""

    dtype: str
    rows: float
    elements: float
    net_s: float


@dataclass(frozen=True)
class LayerNormFit:
    """A dtype's layer norm figures: elements per second, seconds per row (0.0: none fitted),
    the cases they rest on and how they were read."""

    rate: float
    row_s: float
    cases: int
    how: str


def layernorm_point(work: Work, seconds: float, dispatch_s: float | None) -> LayerNormPoint | None:
    """The point a microbenchmark case of ``work`` measured in ``seconds`` gives, net of its
    dispatch (``launches x dispatch_s``); None for a case that gives none: not a layer norm over
    ``shape["rows"] x shape["width"]``, a workload's op, or a time under twice its dispatch (its
    net time would be the dispatch's noise)."""
    if is_workload(work) or not is_layer_norm(work) or len(work.flops) != 1 or not work.launches:
        return None
    rows, width = shape_dim(work.shape, "rows"), shape_dim(work.shape, "width")
    if not (rows and width):
        return None
    spent = work.launches * (dispatch_s or 0.0)
    if not seconds > 0 or seconds < 2 * spent:
        return None
    (dtype, _), = work.flops.items()
    return LayerNormPoint(dtype, float(rows), float(rows) * float(width), seconds - spent)


def _fit_one(points: Sequence[LayerNormPoint]) -> LayerNormFit:
    fastest = max(p.elements / p.net_s for p in points)
    widths = [p.elements / p.rows for p in points]
    if len(points) >= MIN_CASES and max(widths) >= MIN_WIDTH_SPREAD * min(widths) \
            and len({p.rows for p in points}) >= 2:
        from scipy.optimize import least_squares

        times = np.array([p.net_s for p in points])
        design = np.array([[1.0, p.rows, p.elements] for p in points]) / times[:, None]
        scale = design.max(axis=0)
        scale[scale == 0] = 1.0
        design = design / scale
        solution = least_squares(lambda x: design @ x - 1.0, np.full(3, 1.0 / 3.0), bounds=(0.0, np.inf),
                                 loss="soft_l1", f_scale=ROBUST_SCALE).x
        _, row_s, per_element = (float(x) for x in solution / scale)
        if per_element > 0:
            return LayerNormFit(1.0 / per_element, row_s, len(points),
                                f"fitted on {len(points)} layer norm case(s) as a fixed cost per call, seconds per row "
                                "and per element, net of dispatch")
    return LayerNormFit(fastest, 0.0, len(points), f"fastest of {len(points)} layer norm case(s), elements per "
                        "second net of dispatch")


def fit_layernorm(points: Iterable[LayerNormPoint]) -> dict[str, LayerNormFit]:
    """Per dtype, the layer norm figures of ``points`` (module docstring)."""
    by_dtype: dict[str, list[LayerNormPoint]] = {}
    for point in points:
        by_dtype.setdefault(point.dtype, []).append(point)
    return {dtype: _fit_one(found) for dtype, found in sorted(by_dtype.items())}

