"""``opclass``: what each op class of the workload IR really costs, against measured figures.

Per op class (:func:`~.opclass_costs.op_class_of`) the kernel's terms are:

* **gemm, bmm, conv, attention**: FLOPs at the *measured GEMM* rate of the dtype
  (``OpCosts.gemm_flops_per_s``; the FMA-chain peak only where no GEMM was measured, named
  ``compute:<dtype>:peak``), divided by a shape efficiency: tile padding (:func:`.gemm.gemm_tiling`)
  times ``d / (d + GEMM_HALF_DIM[kind])`` for each of m, n and k, so a skinny product (m = 1), a
  small inner dimension (k = 16) or a small batched product runs below the square GEMM's rate. The
  dims come from ``shape`` (``m``, ``n``, ``k``, ``batch``; a convolution's ``out_channels``,
  ``in_channels``, ``groups`` and kernel size as an implicit GEMM; attention's ``s_q``, ``s_kv``,
  ``d``). Attention adds its softmax's exponentials.
* **elementwise, reduction, copy, embedding**: bytes at the bandwidth of the level their working
  set fits in (see residency below), FLOPs at the vector peak.
* **transcendental**: elements (``shape["elements"]``, else one per FLOP as the IR counts) at the
  measured transcendental throughput, else ``TRANSCENDENTAL_FLOPS`` vector FLOPs each.
* **softmax, norm, transpose**: the real passes over the data: ``PASSES[class]`` times the minimal
  bytes the Work counts (softmax reads its input three times: max, sum of exponentials,
  normalisation; a norm twice; a transpose pays ``PASSES["transpose"]`` for the strided side),
  plus softmax's exponentials.
* chases, transfers and collectives: the latency, link and collective terms of the other models.

**Residency.** Bytes a Work counts at ``dram`` (the default of user and graph Work) are charged at
the innermost cache level whose capacity holds the working set (``shape["working_set_bytes"]``,
else the Work's total bytes) and which has a bandwidth figure; bytes a Work names at a cache level
stay there. **Dispatch.** On a CPU each of ``work.launches`` costs the framework's measured host
dispatch (``OpCosts.dispatch_s`` of :func:`~.opclass_costs.framework_of`; term
``dispatch:<framework>``), else the ceilings' launch figure; elsewhere the ceilings' launch
overhead (:mod:`.launch`). A CPU runs them in turn: kernel + dispatch + transfers. On an
asynchronous device, launches and copies overlap kernels as :mod:`.composite` describes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping

from ..work import DTYPE_BYTES, Work
from .base import Prediction, Uncovered, guarded, overlapped
from .ceilings import Ceilings
from .comm import collective_terms, transfer_terms
from .gemm import GemmParams, gemm_compute_terms, gemm_tiling
from .launch import launch_terms
from .opclass_costs import GEMM_CLASSES, OpCosts, allocator_of, framework_of, op_class_of, work_dtype
from .roofline import latency_terms, target_label

#: Matrix dimension at which a GEMM reaches half its large-square efficiency, per target kind: the
#: order of a BLAS micro-kernel's register block on a CPU (BLIS/OpenBLAS AVX2-AVX-512 kernels are
#: 6x16 to 16x14 with k unrolled by 4-8), of an MMA tile's edge on a GPU and of a systolic array's
#: edge on an ASIC. A dimension far above it costs nothing; one at it halves the rate.
GEMM_HALF_DIM: Mapping[str, float] = {"cpu": 8.0, "gpu": 32.0, "asic": 64.0}
#: Passes over the minimal bytes a Work counts (reads and writes once) that the real kernel makes.
PASSES: Mapping[str, float] = {"softmax": 2.0, "norm": 1.5, "transpose": 2.0}
#: Vector FLOPs one transcendental element costs where no throughput was measured: a
#: range reduction and a degree-6 to 8 polynomial, as in SLEEF's and glibc's libmvec exp.
TRANSCENDENTAL_FLOPS = 20.0
#: Elementwise exponentials per score element of a softmax, and FLOPs the IR counts per element.
SOFTMAX_FLOPS_PER_ELEMENT = 5.0
_CACHE_LEVELS = ("l1", "l2", "l3")
#: Output size from which glibc's malloc always maps fresh pages: ``DEFAULT_MMAP_THRESHOLD_MAX``,
#: 4 * 1024 * 1024 * sizeof(long) on a 64-bit system, the ceiling of its dynamic mmap threshold
#: (mallopt(3), M_MMAP_THRESHOLD).
FRESH_OUTPUT_BYTES = 32 * 1024 * 1024
PAGE_BYTES = 4096
#: The kind of the fresh-page term, ``alloc:<allocator>``: a cost of the operating system, which
#: a class calibration's efficiency does not scale (:meth:`pytest_charz.calibration.classes.ClassFit.apply`).
ALLOC_KIND = "alloc"


def _dim(shape: Mapping[str, float], *names: str) -> float | None:
    for name in names:
        value = shape.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1:
            return float(value)
    return None


def gemm_dims(work: Work, op_class: str) -> tuple[float, float, float, float] | None:
    """``(m, n, k, batch)`` of a GEMM-like work from its shape, or None when the shape does not say."""
    shape, flops = work.shape, work.total_flops
    if op_class in ("gemm", "bmm"):
        m, n, k = _dim(shape, "m"), _dim(shape, "n"), _dim(shape, "k")
        batch = _dim(shape, "batch") or 1.0
        return (m, n, k, batch) if m and n and k else None
    if op_class == "conv":
        cout, cin = _dim(shape, "out_channels"), _dim(shape, "in_channels")
        if not (cout and cin and flops):
            return None
        kernel = math.prod(_dim(shape, key) or 1.0 for key in ("kernel_h", "kernel_w", "kernel_d"))
        # kernel elements: as a builder names them, as the capture does ("kernel"), or from h x w x d
        k = cin / (_dim(shape, "groups") or 1.0) * (_dim(shape, "kernel_elements", "kernel") or kernel)
        return flops / (2.0 * cout * k), cout, k, 1.0
    if op_class == "attention":
        s_q, s_kv, d = _dim(shape, "s_q", "seq_q"), _dim(shape, "s_kv", "seq_kv"), _dim(shape, "d", "head_dim")
        batch = (_dim(shape, "batch") or 1.0) * (_dim(shape, "heads") or 1.0)
        return (s_q, s_kv, d, batch) if s_q and s_kv and d else None
    return None


def gemm_shape_efficiency(work: Work, op_class: str, ceilings: Ceilings) -> float:
    """Fraction of the large-square GEMM rate a GEMM-like work reaches (module docstring); 1 when
    its shape gives no dims."""
    dims = gemm_dims(work, op_class)
    if dims is None:
        return 1.0
    m, n, k, batch = dims
    half = GEMM_HALF_DIM.get(ceilings.kind, GEMM_HALF_DIM["gpu"])
    efficiency = math.prod(d / (d + half) for d in (m, n, k))
    if ceilings.units() and ceilings.kind in GemmParams().tiles:
        tiled = Work({"fp32": 2.0 * m * n * k * batch}, op="gemm", shape={"m": m, "n": n, "k": k, "batch": batch})
        _, _, executed = gemm_tiling(tiled, ceilings, GemmParams())
        efficiency *= min(1.0, 2.0 * m * n * k * batch / executed)
    return efficiency


def fits_level(working_set_bytes: float, ceilings: Ceilings) -> str:
    """The innermost level whose capacity holds ``working_set_bytes`` (``dram`` when none does).

    Capacities are as the ceilings give them (a private level's per core): the suites declare
    their bytes at the level this names, so calibration and prediction agree on residency.
    """
    for level in _CACHE_LEVELS:
        capacity = ceilings.capacity(level)
        if capacity is not None and working_set_bytes <= capacity:
            return level
    return "dram"


def residency(work: Work, ceilings: Ceilings) -> str:
    """The level ``dram``-counted bytes are charged at: the level holding the working set
    (``shape["working_set_bytes"]``, else the total bytes), or the next outer one with a
    bandwidth figure when it has none."""
    working_set = float(work.shape.get("working_set_bytes") or work.total_bytes)
    levels = (*_CACHE_LEVELS, "dram")
    start = levels.index(fits_level(working_set, ceilings))
    return next((lv for lv in levels[start:] if ceilings.bandwidth(lv) is not None), "dram")


def leveled_memory_terms(work: Work, ceilings: Ceilings, passes: float = 1.0) -> dict[str, float]:
    """``{"memory:<level>": passes * bytes / bandwidth}``, ``dram`` bytes moved to their residency
    and bytes of a level without a bandwidth figure to the next outer level that has one."""
    moved: dict[str, float] = {}
    home = residency(work, ceilings) if work.bytes.get("dram") else "dram"
    levels = (*_CACHE_LEVELS, "dram")
    for level, amount in work.bytes.items():
        target = home if level == "dram" else level
        # a level without a bandwidth figure hands its bytes to the next outer one that has one
        target = next((lv for lv in levels[levels.index(target):] if ceilings.bandwidth(lv) is not None), "dram")
        moved[target] = moved.get(target, 0.0) + amount
    terms = {}
    for level, amount in moved.items():
        bandwidth = ceilings.bandwidth(level)
        if bandwidth is None:
            raise Uncovered(f"no {level} bandwidth on {target_label(ceilings)} for {amount:.6g} bytes")
        terms[f"memory:{level}"] = passes * amount / bandwidth
    return terms


def _elements(work: Work, op_class: str) -> float:
    shape = work.shape
    if _dim(shape, "elements"):
        return float(shape["elements"])
    if _dim(shape, "rows") and _dim(shape, "width"):
        return float(shape["rows"]) * float(shape["width"])
    per_element = SOFTMAX_FLOPS_PER_ELEMENT if op_class == "softmax" else 1.0
    return work.total_flops / per_element


def _transcendental_s(elements: float, dtype: str, ceilings: Ceilings, costs: OpCosts) -> tuple[str, float]:
    rate = costs.transcendental(dtype)
    if rate is not None:
        return f"compute:{dtype}", elements / rate
    peak = ceilings.peak(dtype if dtype != "*" else "fp32", "elementwise")
    if peak is None:
        raise Uncovered(f"no transcendental throughput or {dtype} vector peak on {target_label(ceilings)}")
    return f"compute:{dtype}:peak", elements * TRANSCENDENTAL_FLOPS / peak


def kernel_terms(work: Work, ceilings: Ceilings, costs: OpCosts) -> dict[str, float]:
    """The kernel's terms (they overlap; compute dtypes add) for the work's op class."""
    op_class = op_class_of(work)
    terms: dict[str, float] = {}
    if op_class in GEMM_CLASSES:
        if _library_gemm(work, op_class, ceilings, costs):
            # no GEMM measured on an accelerator: the library's GEMM as the GEMM model prices it
            # (tiles, waves, efficiency by size and generation: :func:`.gemm.gemm_compute_terms`)
            shaped = Work(dict(work.flops), op="gemm", shape=dict(work.shape))
            return {**gemm_compute_terms(shaped, ceilings, GemmParams()), **leveled_memory_terms(work, ceilings)}
        efficiency = gemm_shape_efficiency(work, op_class, ceilings)
        for dtype, flops in work.flops.items():
            rate = costs.gemm(dtype)
            name = f"compute:{dtype}"
            if rate is None:
                rate, name = ceilings.peak(dtype, "gemm"), f"compute:{dtype}:peak"
            if rate is None:
                raise Uncovered(f"no GEMM rate or {dtype} peak on {target_label(ceilings)}")
            terms[name] = flops / (rate * efficiency)
        if op_class == "attention" and gemm_dims(work, op_class):
            m, n, _, batch = gemm_dims(work, op_class) or (0.0, 0.0, 0.0, 0.0)
            name, seconds = _transcendental_s(m * n * batch, work_dtype(work), ceilings, costs)
            terms[name] = terms.get(name, 0.0) + seconds
        return {**terms, **leveled_memory_terms(work, ceilings)}
    if op_class == "transcendental":
        name, seconds = _transcendental_s(_elements(work, op_class), work_dtype(work), ceilings, costs)
        return {name: seconds, **leveled_memory_terms(work, ceilings)}
    for dtype, flops in work.flops.items():
        if op_class == "softmax":
            continue
        peak = ceilings.peak(dtype, work.op or "elementwise")
        if peak is None:
            raise Uncovered(f"no peak FLOP/s for {dtype} on {target_label(ceilings)}")
        terms[f"compute:{dtype}"] = flops / peak
    if op_class == "softmax":
        name, seconds = _transcendental_s(_elements(work, op_class), work_dtype(work), ceilings, costs)
        terms[name] = seconds
    memory = leveled_memory_terms(work, ceilings, PASSES.get(op_class, 1.0))
    return {**terms, **memory, **latency_terms(work, ceilings)}


def _library_gemm(work: Work, op_class: str, ceilings: Ceilings, costs: OpCosts) -> bool:
    """Whether a GEMM is priced by the GEMM model: a plain GEMM of one dtype with its m, n, k, on
    an accelerator, where no GEMM rate of that dtype was measured."""
    return (op_class == "gemm" and ceilings.kind in ("gpu", "asic") and len(work.flops) == 1
            and costs.gemm(work_dtype(work)) is None and all(key in work.shape for key in ("m", "n", "k")))


def output_bytes(work: Work) -> float | None:
    """Bytes of the tensor a work allocates for its output: ``shape["output_bytes"]``, else its
    elements (``elements``; ``rows`` x ``width``; a GEMM's ``m`` x ``n`` x ``batch``) times its
    dtype's size; None when the shape does not say or the op writes in place."""
    shape = work.shape
    if shape.get("inplace") or shape.get("out"):
        return None
    stated = _dim(shape, "output_bytes")
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
        elements = _dim(shape, "elements") or ((_dim(shape, "rows") or 0.0) * (_dim(shape, "width") or 0.0))
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
        pages = _dim(work.shape, "pages")
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


def dispatch_terms(work: Work, ceilings: Ceilings, costs: OpCosts) -> dict[str, float]:
    """Per-op overhead: ``dispatch:<framework>`` on a CPU (measured dispatch, else the ceilings'
    launch figure), the launch overhead elsewhere (and for an OpenMP team's wake-up, which no
    framework dispatches); empty when the work launches nothing."""
    if not work.launches:
        return {}
    if ceilings.kind == "cpu" and op_class_of(work) != "wakeup":
        framework = framework_of(work)
        seconds = costs.dispatch(framework)
        if seconds is None and framework.endswith("-scalar"):
            # no scalar-operand figure measured: the framework's own dispatch, a lower bound
            framework = framework.removesuffix("-scalar")
            seconds = costs.dispatch(framework)
        if seconds is None:
            seconds = ceilings.launch_overhead()
        if seconds is None:
            raise Uncovered(f"no {framework} dispatch or launch figure on {target_label(ceilings)} for "
                            f"{work.launches} op(s) (the runtime suite's dispatch cases measure it)")
        return {f"dispatch:{framework}": work.launches * seconds}
    return launch_terms(work, ceilings)


@dataclass(frozen=True)
class OpClassModel:
    """The op-class model (module docstring); ``costs`` are the measured op-class figures."""

    name: str = "opclass"
    costs: OpCosts = field(default_factory=OpCosts)

    def with_costs(self, costs: OpCosts) -> "OpClassModel":
        """The same model with ``costs`` first and its own figures where ``costs`` lacks one."""
        return replace(self, costs=costs.filled_from(self.costs))

    def predict(self, work: Work, ceilings: Ceilings) -> Prediction:
        return guarded(self.name, lambda: self._predict(work, ceilings))

    def _predict(self, work: Work, ceilings: Ceilings) -> Prediction:
        kernel = kernel_terms(work, ceilings, self.costs)
        overhead = {**dispatch_terms(work, ceilings, self.costs), **allocation_terms(work, ceilings, self.costs)}
        moves = {**transfer_terms(work, ceilings), **collective_terms(work.collectives, ceilings)}
        breakdown = {**kernel, **overhead, **moves}
        if not breakdown:
            raise Uncovered("the work has no FLOPs, bytes, accesses, launches, transfers or collectives")
        kernel_s, kernel_bound = overlapped(kernel)
        overhead_s = sum(overhead.values())
        moves_s, moves_bound = overlapped(moves)
        asynchronous = bool(work.shape["overlap"]) if "overlap" in work.shape else ceilings.kind in ("gpu", "asic")
        if asynchronous and ceilings.kind != "cpu":
            overhead_bound = next(iter(overhead), "")
            time_s, bound = max((kernel_s, kernel_bound), (overhead_s, overhead_bound), (moves_s, moves_bound))
        else:
            time_s = kernel_s + overhead_s + moves_s
            addends = {**({kernel_bound: kernel_s} if kernel_bound else {}), **overhead, **moves}
            bound = max(addends, key=lambda term: addends[term])
        return Prediction.of_terms(self.name, time_s, bound, breakdown)
