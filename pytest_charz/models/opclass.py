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
  measured throughput of its function (``shape["function"]``: ``tanh``, ``gelu``...; ``exp``'s
  where its own was not measured), else ``TRANSCENDENTAL_FLOPS`` vector FLOPs each.
* **softmax, norm** on a CPU: the kernel's real passes over each row (ATen's kernels): softmax takes
  the row's max (a reduction), writes ``exp(x - max)`` (an exponential per element), sums it (a
  reduction) and scales it (a multiply); a layer norm takes the row's moments (Welford updates,
  ``NORM_REDUCTIONS``) and normalises (its remaining FLOPs), an RMS norm
  (``shape["norm"] == "rms"``) its sum of squares. Reductions run at the measured reduction rate
  (``OpCosts.reduction_per_s``), exponentials at the measured ``exp`` rate, the rest at the
  vector peak; the compute of the passes adds up. A layer norm's compute is its elements at the
  measured layer norm rate where there is one (``OpCosts.layernorm_per_s``: Welford updates are a
  dependency chain, no sum) plus its rows at the measured seconds per row
  (``OpCosts.layernorm_row_s``; both fitted by :mod:`.layernorm_costs`). Memory: the minimal bytes once at their
  residency, and the further traversals (``CPU_ROW_PASSES[class] - 1`` times the minimal bytes)
  at the level one row (``shape["width"]`` elements in and out) fits in, where each pass finds
  it. Elsewhere ``PASSES[class]`` times the minimal bytes, softmax's exponentials beside them.
* **transpose**: ``PASSES["transpose"]`` times the minimal bytes (the strided side).
* chases, transfers and collectives: the latency, link and collective terms of the other models.

**Residency.** Bytes a Work counts at ``dram`` (the default of user and graph Work) are charged at
the innermost cache level whose capacity holds the working set (``shape["working_set_bytes"]``,
else the Work's total bytes) and which has a bandwidth figure; bytes a Work names at a cache level
stay there. **Dispatch.** On a CPU each of ``work.launches`` costs the framework's measured host
dispatch (``OpCosts.dispatch_s`` of :func:`~.opclass_costs.framework_of`; term
``dispatch:<framework>``), else the ceilings' launch figure; elsewhere the ceilings' launch
overhead (:mod:`.launch`). **Fresh pages** of a large output: :mod:`.opclass_alloc`. A CPU runs
them in turn: kernel + dispatch + pages + transfers. On an asynchronous device, launches and
copies overlap kernels as :mod:`.composite` describes.
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
from .opclass_alloc import ALLOC_KIND, FRESH_OUTPUT_BYTES, allocation_terms, output_bytes  # noqa: F401
from .model_code import module_calls, module_code_s, python_calls_of
from .opclass_costs import (GEMM_CLASSES, OpCosts, allocator_of, framework_of, gemm_dims, op_class_of, shape_dim,
                            variant_dispatch, work_dtype)
from .roofline import CACHE_LEVELS, fits_level, latency_terms, residency, target_label

#: Matrix dimension at which a GEMM reaches half its large-square efficiency, per target kind: the
#: order of a BLAS micro-kernel's register block on a CPU (BLIS/OpenBLAS AVX2-AVX-512 kernels are
#: 6x16 to 16x14 with k unrolled by 4-8), of an MMA tile's edge on a GPU and of a systolic array's
#: edge on an ASIC. A dimension far above it costs nothing; one at it halves the rate.
GEMM_HALF_DIM: Mapping[str, float] = {"cpu": 8.0, "gpu": 32.0, "asic": 64.0}
#: Passes over the minimal bytes a Work counts (reads and writes once) that the real kernel makes
#: (an accelerator's softmax: a read for the max and sum, one to normalise).
PASSES: Mapping[str, float] = {"softmax": 2.0, "norm": 1.5, "transpose": 2.0}
#: The same on a CPU, whose kernels pass over each row in turn (ATen's ``vec_softmax_lastdim``):
#: softmax traverses each row six times (reads the input for the max and for the exponentials,
#: writes them, reads them for the sum, reads and writes them for the scale) against the two of
#: its minimal bytes; a layer norm three (reads for the moments, reads and writes to normalise).
CPU_ROW_PASSES: Mapping[str, float] = {"softmax": 3.0, "norm": 1.5}
#: A norm's moments per element, in a sum's per-element vector ops (one add): a layer norm's are
#: Welford updates (ATen's ``RowwiseMoments``, ``moments_utils.h``: ``delta = x - m1;
#: m1 += delta * c; m2 += delta * (x - m1)``, a subtract, an FMA, a subtract and an FMA), an RMS
#: norm's the sum of squares (one FMA).
NORM_REDUCTIONS: Mapping[str, float] = {"layer": 4.0, "rms": 1.0}
#: Per element of a softmax: reductions (max, sum), exponentials, multiplies (the scale).
SOFTMAX_PASSES = {"reductions": 2.0, "exponentials": 1.0, "multiplies": 1.0}
#: Vector FLOPs one transcendental element costs where no throughput was measured: a
#: range reduction and a degree-6 to 8 polynomial, as in SLEEF's and glibc's libmvec exp.
TRANSCENDENTAL_FLOPS = 20.0
#: Elementwise exponentials per score element of a softmax, and FLOPs the IR counts per element.
SOFTMAX_FLOPS_PER_ELEMENT = 5.0
#: FLOPs the IR counts per element of an affine layer norm (5, plus 1 each for weight and bias).
NORM_FLOPS_PER_ELEMENT = 7.0


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


def leveled_memory_terms(work: Work, ceilings: Ceilings, passes: float = 1.0) -> dict[str, float]:
    """``{"memory:<level>": passes * bytes / bandwidth}``, ``dram`` bytes moved to their residency
    and bytes of a level without a bandwidth figure to the next outer level that has one."""
    moved: dict[str, float] = {}
    home = residency(work, ceilings) if work.bytes.get("dram") else "dram"
    levels = (*CACHE_LEVELS, "dram")
    for level, amount in work.bytes.items():
        target = home if level == "dram" else level
        # a level without a bandwidth figure hands its bytes to the next outer one that has one
        target = next((lv for lv in levels[levels.index(target):] if ceilings.bandwidth(lv) is not None), "dram")
        moved[target] = moved.get(target, 0.0) + amount
    # Bytes served from an outer level pass through every inner level the work also moves bytes
    # at: an inner level's term counts them too (inclusive traffic), so a working set that
    # outgrows a level never makes the work cheaper than when its bytes all stayed there.
    order = {level: index for index, level in enumerate(levels)}
    inclusive = {level: amount + sum(other for outer, other in moved.items() if order[outer] > order[level])
                 for level, amount in moved.items()}
    terms = {}
    for level, amount in inclusive.items():
        bandwidth = ceilings.bandwidth(level)
        if bandwidth is None:
            raise Uncovered(f"no {level} bandwidth on {target_label(ceilings)} for {amount:.6g} bytes")
        terms[f"memory:{level}"] = passes * amount / bandwidth
    return terms


def _elements(work: Work, op_class: str) -> float:
    shape = work.shape
    if shape_dim(shape, "elements"):
        return float(shape["elements"])
    if shape_dim(shape, "rows") and shape_dim(shape, "width"):
        return float(shape["rows"]) * float(shape["width"])
    per_element = {"softmax": SOFTMAX_FLOPS_PER_ELEMENT, "norm": NORM_FLOPS_PER_ELEMENT}.get(op_class, 1.0)
    return work.total_flops / per_element


def _transcendental_s(elements: float, dtype: str, ceilings: Ceilings, costs: OpCosts,
                      function: str | None = None) -> tuple[str, float]:
    rate = costs.transcendental(dtype, function)
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
        function = work.shape.get("function")
        name, seconds = _transcendental_s(_elements(work, op_class), work_dtype(work), ceilings, costs,
                                          function if isinstance(function, str) else None)
        return {name: seconds, **leveled_memory_terms(work, ceilings)}
    if op_class in CPU_ROW_PASSES and ceilings.kind == "cpu":
        return {**row_pass_terms(work, op_class, ceilings, costs), **latency_terms(work, ceilings)}
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


def _reduction_s(elements: float, dtype: str, ceilings: Ceilings, costs: OpCosts) -> tuple[bool, float]:
    """(measured, seconds) of ``elements`` folded by a vectorised reduction: at the measured
    reduction rate, else one FLOP each at the vector peak."""
    rate = costs.reduction(dtype)
    if rate is not None:
        return True, elements / rate
    peak = ceilings.peak(dtype if dtype != "*" else "fp32", "elementwise")
    if peak is None:
        raise Uncovered(f"no reduction throughput or {dtype} vector peak on {target_label(ceilings)}")
    return False, elements / peak


def row_pass_terms(work: Work, op_class: str, ceilings: Ceilings, costs: OpCosts) -> dict[str, float]:
    """A softmax's or a norm's terms from its passes over each row (module docstring): one
    compute term (``compute:<dtype>``, ``:peak`` when a rate it needed was not measured) and the
    memory terms of the first traversal at the residency and the others where a row fits."""
    dtype = work_dtype(work)
    compute_dtype = dtype if dtype != "*" else "fp32"
    elements = _elements(work, op_class)
    peak = ceilings.peak(compute_dtype, "elementwise")
    measured = True
    if op_class == "softmax":
        folded, reduce_s = _reduction_s(SOFTMAX_PASSES["reductions"] * elements, dtype, ceilings, costs)
        exp_name, exp_s = _transcendental_s(SOFTMAX_PASSES["exponentials"] * elements, dtype, ceilings, costs)
        rest_flops = SOFTMAX_PASSES["multiplies"] * elements
        measured = folded and not exp_name.endswith(":peak")
        seconds = reduce_s + exp_s
    else:
        kind = "rms" if str(work.shape.get("norm", "")) == "rms" else "layer"
        whole = costs.layernorm(dtype) if kind == "layer" else None
        if whole is not None:
            # the measured layer norm figures are the whole kernel's: moments and normalising,
            # per element and per row (the row's fold and loop setup, :mod:`.layernorm_costs`)
            width = shape_dim(work.shape, "width")
            rows = shape_dim(work.shape, "rows") or (elements / width if width else 0.0)
            seconds, rest_flops = elements / whole + rows * costs.layernorm_row(dtype), 0.0
        else:
            reductions = NORM_REDUCTIONS[kind] * elements
            measured, seconds = _reduction_s(reductions, dtype, ceilings, costs)
            rest_flops = max(work.total_flops - reductions, elements)
    if peak is None:
        raise Uncovered(f"no peak FLOP/s for {compute_dtype} on {target_label(ceilings)}")
    seconds += rest_flops / peak
    terms = {f"compute:{compute_dtype}" + ("" if measured else ":peak"): seconds}
    passes = CPU_ROW_PASSES[op_class]
    memory = leveled_memory_terms(work, ceilings)
    width = shape_dim(work.shape, "width")
    size = DTYPE_BYTES.get(compute_dtype, 4)
    if width:
        # each further pass finds the row (read and written) where it fits, or where the bytes
        # live when that is further in: the same kernel whether a Work counts its bytes at dram
        # (a graph's op) or at the level its tensors fit in (a microbenchmark's)
        levels = (*CACHE_LEVELS, "dram")
        row_level = residency(Work(bytes={"dram": 2.0 * width * size}), ceilings)
        again = {}
        for level, amount in work.bytes.items():
            home = residency(work, ceilings) if level == "dram" else level
            found = min(row_level, home, key=levels.index) if home in levels else home
            for name, value in leveled_memory_terms(Work(bytes={found: amount}), ceilings, passes - 1.0).items():
                again[name] = again.get(name, 0.0) + value
    else:
        again = leveled_memory_terms(work, ceilings, passes - 1.0)
    for name, value in again.items():
        memory[name] = memory.get(name, 0.0) + value
    return {**terms, **memory}


def _library_gemm(work: Work, op_class: str, ceilings: Ceilings, costs: OpCosts) -> bool:
    """Whether a GEMM is priced by the GEMM model: a plain GEMM of one dtype with its m, n, k, on
    an accelerator, where no GEMM rate of that dtype was measured."""
    return (op_class == "gemm" and ceilings.kind in ("gpu", "asic") and len(work.flops) == 1
            and costs.gemm(work_dtype(work)) is None and all(key in work.shape for key in ("m", "n", "k")))


def dispatch_terms(work: Work, ceilings: Ceilings, costs: OpCosts) -> dict[str, float]:
    """Per-op overhead: ``dispatch:<framework>`` on a CPU (measured dispatch, else the ceilings'
    launch figure), the launch overhead elsewhere (and for an OpenMP team's wake-up, which no
    framework dispatches); empty when the work launches nothing."""
    if not work.launches:
        return {}
    if ceilings.kind == "cpu" and op_class_of(work) != "wakeup":
        # no figure of an operand variant measured: the one it refines (OPERAND_VARIANTS)
        framework, seconds = variant_dispatch(framework_of(work), costs.dispatch)
        if seconds is None:
            seconds = ceilings.launch_overhead()
        if seconds is None:
            raise Uncovered(f"no {framework} dispatch or launch figure on {target_label(ceilings)} for "
                            f"{work.launches} op(s) (the runtime suite's dispatch cases measure it)")
        base = allocator_of(framework)
        base_s = costs.dispatch(base) if base != framework else None
        terms = {f"dispatch:{framework}": work.launches * seconds}
        if base_s is not None and base_s <= seconds:
            # a variant (a scalar operand's wrapping, a module call's code): the framework's own
            # dispatch, which every class microbenchmark pays, and the variant's extra apart
            # (dispatch_extra_s: a calibration scales the one, not the other)
            terms = {f"dispatch:{base}": work.launches * base_s,
                     f"dispatch:{framework}": work.launches * (seconds - base_s)}
        # each nn.Module call the op begins and each Python call before it, as the model-code
        # cases measured them
        for name, seconds in module_code_s(framework, module_calls(work), python_calls_of(work),
                                           costs.dispatch).items():
            terms[f"dispatch:{name}"] = seconds
        return terms
    return launch_terms(work, ceilings)


def dispatch_s(prediction: Prediction) -> float:
    """The seconds of a prediction that are its host's dispatch (every ``dispatch:`` term)."""
    return sum(seconds for term, seconds in prediction.breakdown.items() if term.startswith("dispatch:"))


def dispatch_extra_s(prediction: Prediction) -> float:
    """The seconds of a prediction's dispatch that a variant adds to its framework's own (a scalar
    operand's wrapping, a module call's code: ``dispatch:torch-scalar`` beside ``dispatch:torch``,
    :func:`dispatch_terms`), as measured by the variant's own dispatch case: a class's calibration,
    fitted on cases that pay only the framework's dispatch, leaves it as measured."""
    extra = 0.0
    for term, seconds in prediction.breakdown.items():
        kind, _, framework = term.partition(":")
        base = allocator_of(framework)
        if kind == "dispatch" and base != framework and f"dispatch:{base}" in prediction.breakdown:
            extra += seconds
    return extra


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
