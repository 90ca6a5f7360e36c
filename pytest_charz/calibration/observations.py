"""What calibration reads from runs: observations (work and measured median per case), the split
into calibration and held-out cases, and the ceilings a model predicts them with.

A model's uncalibrated prediction of a case uses the ceilings of the run's target (the TargetSpec
recorded in the run file; see :func:`ceilings_from_run`). Figures the spec lacks (a host CPU spec
has no DRAM bandwidth or launch overhead) are filled from the calibration cases themselves
(:func:`measured_ceilings`): the best rate they achieved (FLOP/s per dtype, bytes/s per memory
level and link), the median per-launch time, the median load latency per memory level. They come
only from the calibration split, so held-out cases never inform their own prediction, and every
filled figure says so in its source.
"""
from __future__ import annotations

import fnmatch
import math
import os
import statistics
from dataclasses import dataclass, replace
from typing import Iterable, Sequence, Union

from ..errors import FormatError, UsageError
from ..models.base import Uncovered
from ..models.ceilings import Ceilings
from ..models.layernorm_costs import fit_layernorm, layernorm_point
from ..models.model_code import (MODULE_CALL, MODULE_COLD, MODULE_PYTHON, ModelCodeCase, fit_model_code,
                                 is_model_code_case)
from ..models.opclass_costs import OpCosts, case_rate, framework_of, is_workload, op_class_of
from ..models.roofline import latency_level
from ..curves.links import link_figures
from ..records import Run
from ..targets.spec import Figure
from ..work import MEMORY_LEVELS, Work
from .class_keys import runs_own_kernel
from .efficiency import calibration_key

RunArg = Union[Run, str, "os.PathLike[str]"]


# -- reading runs ---------------------------------------------------------------------------------
def load_runs(runs: Iterable[RunArg]) -> list[Run]:
    """Typed runs of run file paths (loaded, their ``path`` the path as given) or of Runs."""
    from ..run import load_run

    # The path as given, not where the run was read from (a journal, for an interrupted run):
    # outputs record it, and must not change with how the run was stored.
    return [item if isinstance(item, Run) else replace(load_run(os.fspath(item)), path=os.fspath(item))
            for item in runs]


def ceilings_from_run(run: Run) -> Ceilings:
    """Datasheet ceilings of the run's target: its recorded spec, else the catalogue entry.

    The host CPU (``cpu``) has no catalogue entry that would describe another machine, so its
    run must carry the spec (the plugin always records it).
    """
    if run.target.spec is not None:
        return Ceilings.from_spec(run.target.spec)
    target_id = run.target.id
    if not target_id or target_id in ("cpu", "host"):
        raise FormatError(f"the run of target {target_id or '?'!r} records no target spec to predict from")
    from ..targets.catalogue import resolve

    return Ceilings.from_spec(resolve(target_id))


@dataclass(frozen=True)
class Observation:
    """One case of one target: its work and measured median in seconds (the median over runs
    when several runs measured it)."""

    case_id: str
    target: str
    work: Work
    measured_s: float
    runs: int = 1

    @property
    def calibration_key(self) -> str:
        return calibration_key(self.work)


def observations(runs: Sequence[Run]) -> list[Observation]:
    """Measured cases of ``runs`` (one target), by case id; cases without a positive median or
    without work (a record of no work at all) are skipped."""
    grouped: dict[str, list[tuple[Work, float]]] = {}
    targets = {run.target.id for run in runs}
    if len(targets) > 1:
        raise UsageError(f"observations of one target only; these runs are of {', '.join(sorted(targets))}")
    empty = Work()
    for run in runs:
        for case in run.cases:
            median_s = case.median_s
            if case.work != empty and median_s is not None and math.isfinite(median_s) and median_s > 0:
                grouped.setdefault(case.id, []).append((case.work, median_s))
    target = targets.pop() if targets else ""
    return [Observation(case_id, target, found[0][0], statistics.median(m for _, m in found), len(found))
            for case_id, found in sorted(grouped.items())]


def split_cases(cases: Sequence[Observation], calibrate_on: str | None = None) -> tuple[list[Observation], list[Observation]]:
    """(calibration, held-out) cases.

    With ``calibrate_on`` (a glob over case ids), the matching cases calibrate and the rest is held
    out. Otherwise, within each op class sorted by size (FLOPs, else bytes, accesses, launches,
    transfer bytes; then id), every other case calibrates starting with the smallest, and the
    largest always does: held-out cases lie between calibrated sizes, so the split measures
    interpolation. A class of one or two cases is all calibration.
    """
    if calibrate_on is not None:
        chosen = [c for c in cases if fnmatch.fnmatchcase(c.case_id, calibrate_on)]
        return chosen, [c for c in cases if not fnmatch.fnmatchcase(c.case_id, calibrate_on)]
    by_class: dict[str, list[Observation]] = {}
    for case in cases:
        by_class.setdefault(case.calibration_key, []).append(case)
    calibration: list[Observation] = []
    held_out: list[Observation] = []
    for members in by_class.values():
        members.sort(key=lambda c: (_work_size(c.work), c.case_id))
        for index, case in enumerate(members):
            (calibration if index % 2 == 0 or index == len(members) - 1 else held_out).append(case)
    return calibration, held_out


def _work_size(work: Work) -> tuple[float, ...]:
    return (work.total_flops, work.total_bytes, float(work.accesses), float(work.launches), sum(work.transfers.values()))


# -- measured figures for what the spec lacks -----------------------------------------------------
def measured_ceilings(cases: Sequence[Observation], spec: Ceilings) -> Ceilings:
    """Ceilings measured on ``cases``: best FLOP/s per dtype, best bytes/s per level and link,
    alpha-beta link latency (s), median per-launch time (s), median load latency (s) per level."""
    peak: dict[str, float] = {}
    bandwidth: dict[str, float] = {}
    links: dict[str, list[tuple[float, float]]] = {}
    launches: list[tuple[str, float]] = []       # (op, seconds per launch) of the cases doing no work
    latency: dict[str, list[float]] = {}
    for case in cases:
        work, time_s = case.work, case.measured_s
        for dtype, flops in work.flops.items():
            peak[dtype] = max(peak.get(dtype, 0.0), flops / time_s)
        for level, moved in work.bytes.items():
            bandwidth[level] = max(bandwidth.get(level, 0.0), moved / time_s)
        if len(work.transfers) == 1 and not work.flops and not work.bytes:
            (kind, moved), = work.transfers.items()
            links.setdefault(kind, []).append((moved, time_s))
        # a launch with no work of any kind (a chase's loads are work: an H200's chase cases, a
        # millisecond each, once set its launch overhead at 1.15 ms)
        if work.launches and not work.flops and not work.bytes and not work.transfers and not work.accesses:
            launches.append((work.op, time_s / work.launches))
        if work.accesses and "working_set_bytes" in work.shape:
            try:
                level, _ = latency_level(float(work.shape["working_set_bytes"]), spec.with_overrides(
                    latency_s={lv: 1.0 for lv in MEMORY_LEVELS}))
            except Uncovered:
                continue
            latency.setdefault(level, []).append(time_s / work.accesses)
    source = f"measured on {len(cases)} calibration case(s)"
    link_bandwidth, link_latency = {}, {}
    for kind, points in links.items():
        link = link_figures([p[0] for p in points], [p[1] for p in points])
        how = f"{source}: {len(points)} {kind} transfer(s), latency from an alpha-beta fit, bandwidth from the largest"
        if link.bandwidth_bytes_per_s is not None:
            link_bandwidth[kind] = Figure(link.bandwidth_bytes_per_s, how)
        link_latency[kind] = Figure(link.latency_s or 0.0, how)
    return Ceilings(
        target_id=spec.target_id, kind=spec.kind, origin="calibration cases",
        peak_flops={d: Figure(v, f"{source}: best achieved {d} FLOP/s") for d, v in peak.items()},
        bandwidth_bytes_per_s={lv: Figure(v, f"{source}: best achieved {lv} bytes/s") for lv, v in bandwidth.items()},
        latency_s={lv: Figure(statistics.median(v), f"{source}: median {lv} load latency") for lv, v in latency.items()},
        link_bandwidth_bytes_per_s=link_bandwidth, link_latency_s=link_latency,
        launch_overhead_s=_launch_overhead(launches, source),
        compute_units=spec.compute_units,
    )


def _launch_overhead(launches: Sequence[tuple[str, float]], source: str) -> Figure | None:
    """From ``(op, seconds per launch)`` of the cases that do no work: a device's launch cases (a
    GPU's runtime suite), the fastest, what one more kernel costs the device, as the profile's
    ``launch`` reads them (on an H200: 0.70 us a kernel of a CUDA graph, against 3.9 us launched
    one by one from Python, whose host cost is the dispatch's); a host with no launch case, the
    median of them all."""
    kernels = [seconds for op, seconds in launches if op == "launch"]
    if kernels:
        return Figure(min(kernels), f"{source}: fastest launch case")
    if not launches:
        return None
    return Figure(statistics.median(seconds for _, seconds in launches), f"{source}: median per-launch time")


def measured_op_costs(cases: Sequence[Observation]) -> OpCosts:
    """Op-class figures measured on ``cases``: the best GEMM FLOP/s per dtype, the median host
    dispatch per framework op (the runtime suite's dispatch cases), the best ``exp`` elements/s
    per dtype (the best of any transcendental function where no ``exp`` was measured), each other
    function's own and the best reduction elements/s per dtype, net of the op's dispatch
    (:func:`case_rates`), a layer
    norm's elements/s and seconds per row (:func:`layer_norm_figures`), the median
    seconds per fresh page of a framework's allocations (the runtime suite's fresh-page case).
    Each figure's source names the cases it rests on."""
    gemm: dict[str, float] = {}
    dispatch: dict[str, list[float]] = {}
    fresh: dict[str, list[float]] = {}
    model_code: list[ModelCodeCase] = []
    for case in cases:
        work, time_s = case.work, case.measured_s
        if work.op == "gemm" and len(work.flops) == 1:
            (dtype, flops), = work.flops.items()
            gemm[dtype] = max(gemm.get(dtype, 0.0), flops / time_s)
        elif is_model_code_case(work):
            model_code.append(ModelCodeCase.of(work, time_s))
        elif work.op == "dispatch" and work.launches and not work.flops and not work.bytes:
            dispatch.setdefault(framework_of(work), []).append(time_s / work.launches)
        elif work.op == "allocation" and float(work.shape.get("pages") or 0) > 0:
            fresh.setdefault(framework_of(work), []).append(time_s / float(work.shape["pages"]))
    source = f"measured on {len(cases)} calibration case(s)"
    dispatch_figures = {f: Figure(statistics.median(v), f"{source}: median {f} dispatch per op")
                        for f, v in dispatch.items()}
    fitted = fit_model_code(model_code)
    if fitted is not None and "torch" in dispatch_figures:
        # the model-code cases decide an op of module code's cost, as the profile reads them
        how = f"{source}: {len(fitted.kept)} model-code case(s) fitted per op and per module call"
        dispatch_figures["torch-module"] = Figure(dispatch_figures["torch"].value + fitted.per_op_s,
                                                  f"{how}, the median torch dispatch plus the code per op")
        if fitted.per_call_s > 0:
            dispatch_figures[MODULE_CALL] = Figure(fitted.per_call_s, how)
        if fitted.per_python_s > 0:
            dispatch_figures[MODULE_PYTHON] = Figure(fitted.per_python_s, f"{how}, and per Python call")
        if fitted.cold > 0:
            dispatch_figures[MODULE_COLD] = Figure(fitted.cold, f"{how}, and per second of the ops' own time")
    dispatched = OpCosts(dispatch_s=dispatch_figures)
    rates = case_rates(cases, dispatched, source)
    return OpCosts(
        {d: Figure(v, f"{source}: best achieved {d} GEMM FLOP/s") for d, v in gemm.items()},
        dispatch_figures, rates["transcendental"],
        {f: Figure(statistics.median(v), f"{source}: median {f} seconds per fresh page") for f, v in fresh.items()},
        rates["reduction"], *layer_norm_figures(cases, dispatched, source), function_per_s=rates["function"])


def case_rates(cases: Sequence[Observation], costs: OpCosts, source: str) -> dict[str, dict[str, Figure]]:
    """Best ``exp`` (``transcendental``) and ``sum`` (``reduction``) elements/s per dtype, and each
    other transcendental function's per ``<function>:<dtype>`` (``function``), over the cases that
    set them, each net of its dispatch (:func:`~pytest_charz.models.opclass_costs.case_rate`, the
    profile's reading too). Softmax and attention take their exponentials at exp's rate; where no
    exp case was measured, the best of the other functions stands in (tanh ran 2.7x slower per
    element than exp), and its source says so."""
    best: dict[str, float] = {}   # figure name -> its best rate
    for case in cases:
        found = case_rate(case.work, case.measured_s, costs.dispatch(framework_of(case.work)))
        if found is not None:
            best[found[0]] = max(best.get(found[0], 0.0), found[1])
    net = "elements/s net of dispatch"
    out: dict[str, dict[str, Figure]] = {"transcendental": {}, "reduction": {}, "function": {}}
    for name, rate in best.items():
        quantity, dtype = name.split(":", 1)
        kind, _, function = quantity.partition(".")
        if function:
            out["function"][f"{function}:{dtype}"] = Figure(rate, f"{source}: best {dtype} {function} {net}")
        else:
            what = "exp" if kind == "transcendental" else kind
            out[kind][dtype] = Figure(rate, f"{source}: best {dtype} {what} {net}")
    for key, figure in sorted(out["function"].items(), key=lambda item: -item[1].value):   # fastest first
        dtype = key.rsplit(":", 1)[1]
        out["transcendental"].setdefault(dtype, Figure(figure.value, f"{source}: best {dtype} transcendental {net} "
                                                                     "(no exp case)"))
    return out


def layer_norm_figures(cases: Sequence[Observation], costs: OpCosts, source: str
                       ) -> tuple[dict[str, Figure], dict[str, Figure]]:
    """A layer norm's elements/s and seconds per row per dtype, fitted over the cases
    (:func:`~pytest_charz.models.layernorm_costs.fit_layernorm`, the profile's reading too)."""
    points = (layernorm_point(case.work, case.measured_s, costs.dispatch(framework_of(case.work))) for case in cases)
    fits = fit_layernorm(point for point in points if point is not None)
    rates = {d: Figure(f.rate, f"{source}: {d} layer norm elements/s, {f.how}") for d, f in fits.items()}
    rows = {d: Figure(f.row_s, f"{source}: {d} layer norm seconds per row, {f.how}")
            for d, f in fits.items() if f.row_s > 0}
    return rates, rows


def net_bandwidths(cases: Sequence[Observation], costs: OpCosts) -> dict[str, Figure]:
    """Best bytes/s per level of framework ops net of their dispatch: ``bytes / (time - launches
    x dispatch)`` over single-level cases of a memory op class whose time is at least twice their
    dispatch. A small op's bytes over its whole time would charge its dispatch a second time, as
    bandwidth, once the op-class model adds the dispatch itself. A case that names its function (a
    ``mean`` over rows, a ``cat``: class_keys.FUNCTION_CLASSES) has a fixed cost of its own beyond the
    dispatch and a key of its own: it sets no level's bandwidth (a mean of one 128-wide row, 9 us,
    was the only L1 case over twice a 2.7 us dispatch on a slow Xeon round, and made L1 0.7 GB/s).
    Nor does a case of a class that runs its own kernel (class_keys.OWN_KERNEL_CLASSES): a strided
    add's time is its strides', not the level's (one of 4096 floats, 1.8 us, made L1 42 GB/s on a
    Xeon guest)."""
    best: dict[str, tuple[float, int]] = {}
    for case in cases:
        work = case.work
        if op_class_of(work) not in _MEMORY_CLASSES or len(work.bytes) != 1 or not work.launches \
                or "function" in work.shape or runs_own_kernel(work):
            continue
        dispatch = costs.dispatch(framework_of(work))
        if dispatch is None or case.measured_s < 2 * work.launches * dispatch:
            continue
        (level, moved), = work.bytes.items()
        rate = moved / (case.measured_s - work.launches * dispatch)
        if rate > best.get(level, (0.0, 0))[0]:
            best[level] = (rate, best.get(level, (0.0, 0))[1] + 1)
    return {level: Figure(rate, f"measured on {len(cases)} calibration case(s): best {level} bytes/s of "
                          "framework ops net of their dispatch") for level, (rate, _) in best.items()}


_MEMORY_CLASSES = frozenset({"elementwise", "copy", "reduction"})


def model_ceilings(model: str, spec: Ceilings, measured: Ceilings) -> Ceilings:
    """``empirical-roofline`` sees measured figures first; every other model the spec's first."""
    return measured.filled_from(spec) if model == "empirical-roofline" else spec.filled_from(measured)
