"""Fresh pages of a CPU op's output: what the ``opclass`` model charges an op whose output glibc
maps fresh from the operating system (``alloc:<allocator>``), and what writes into existing
buffers (an in-place op, ``out=``, a preallocated array) are spared.

An output of ``FRESH_OUTPUT_BYTES`` or more costs its pages at the framework's measured cost per
page (``OpCosts.fresh_page_s``, the runtime suite's fresh-page case); a work that writes into
existing buffers (:func:`writes_existing`) allocates nothing. The term is the operating system's
cost: a class calibration's efficiency leaves it as it is
(:meth:`pytest_charz.calibration.classes.ClassFit.apply`).
"""
from __future__ import annotations

import math

from ..work import DTYPE_BYTES, Work
from .base import Uncovered
from .ceilings import Ceilings
from .opclass_costs import OpCosts, allocator_of, framework_of, gemm_dims, op_class_of, shape_dim, work_dtype
from .roofline import target_label

#: Output size from which glibc's malloc always maps fresh pages: ``DEFAULT_MMAP_THRESHOLD_MAX``,
#: 4 * 1024 * 1024 * sizeof(long) on a 64-bit system, the ceiling of its dynamic mmap threshold
#: (mallopt(3), M_MMAP_THRESHOLD).
FRESH_OUTPUT_BYTES = 32 * 1024 * 1024
PAGE_BYTES = 4096
#: The kind of the fresh-page term, ``alloc:<allocator>``: a cost of the operating system, which
#: a class calibration's efficiency does not scale (:meth:`pytest_charz.calibration.classes.ClassFit.apply`).
ALLOC_KIND = "alloc"


#: Shape keys that say a work writes into buffers that exist already (an in-place op, ``out=``,
#: NumPy's ``copyto`` into a preallocated array): it maps no fresh pages.
EXISTING_OUTPUT_KEYS = ("inplace", "out", "preallocated")


def writes_existing(work: Work) -> bool:
    """Whether ``work`` writes into existing buffers (:data:`EXISTING_OUTPUT_KEYS`)."""
    return any(work.shape.get(key) for key in EXISTING_OUTPUT_KEYS)


def output_bytes(work: Work) -> float | None:
    """Bytes of the tensor a work allocates for its output: ``shape["output_bytes"]``, else its
    elements (``elements``; ``rows`` x ``width``; a GEMM's ``m`` x ``n`` x ``batch``) times its
    dtype's size; None when the shape does not say or the op writes into existing buffers
    (:func:`writes_existing`)."""
    shape = work.shape
    if writes_existing(work):
        return None
    stated = shape_dim(shape, "output_bytes")
    if stated:
        return stated
    size = DTYPE_BYTES.get(work_dtype(work))
    if size is None:
        return None
    op_class = op_class_of(work)
    if op_class in ("gemm", "bmm"):
        dims = gemm_dims(work, op_class)
        return dims[0] * dims[1] * dims[3] * size if dims else None
    if op_class in ("elementwise", "transcendental", "copy", "transpose", "softmax", "norm"):
        elements = shape_dim(shape, "elements") or ((shape_dim(shape, "rows") or 0.0) * (shape_dim(shape, "width") or 0.0))
        return elements * size if elements else None
    return None


def allocation_terms(work: Work, ceilings: Ceilings, costs: OpCosts) -> dict[str, float]:
    """``alloc:<framework>``: the fresh pages of a CPU op's output of ``FRESH_OUTPUT_BYTES`` or
    more at the framework's measured cost per page (module docstring); empty otherwise, and where
    no such cost was measured. An ``allocation`` work (the runtime suite's fresh-page case) is
    its ``shape["pages"]`` at that cost."""
    framework = framework_of(work)
    per_page = costs.fresh_page(framework)
    term = f"{ALLOC_KIND}:{allocator_of(framework)}"
    if op_class_of(work) == "allocation":
        pages = shape_dim(work.shape, "pages")
        if per_page is None or not pages:
            raise Uncovered(f"no {framework} fresh-page figure on {target_label(ceilings)} for an allocation of "
                            f"{pages or 0:.0f} page(s) (the runtime suite's fresh-page case measures it)")
        return {term: pages * per_page}
    if ceilings.kind != "cpu" or not work.launches:
        return {}
    produced = output_bytes(work)
    if per_page is None or produced is None or produced < FRESH_OUTPUT_BYTES:
        return {}
    return {term: work.launches * math.ceil(produced / PAGE_BYTES) * per_page}
