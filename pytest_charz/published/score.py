"""Published measurements scored against spec-only predictions, and the priors' rules re-fitted.

A GEMM row is ``predict(Work(2mnk FLOPs, the three matrices' bytes, op="gemm", shape), target)``
with no profile (the default model, datasheet ceilings and the target's priors); a copy row is
``predict(Work(bytes=...), target)``; a collective row is ``predict(Work(collectives=...), target)``
(the collective library's algorithm choice, :mod:`pytest_charz.models.comm`); an LLM row is the
prefill of its prompt plus ``output - 1`` decode steps at the middle context, each ``predict_graph`` of a graph from
:func:`pytest_charz.workloads.builders.build`. Rows of products outside the catalogue cannot be
predicted: they are fitted-on rows, and :func:`fitted_fractions` re-derives from them the fraction
each catalogue rule holds (``value / peak``, averaged over the rule's rows; for a rule fitted on a
GEMM sweep, the rate its shapes share, :func:`fitted_gemm_sweeps`), so that a test can check the
catalogue against the table it cites. A sweep also fits the per-tile fixed cost of its dtype
(:func:`fitted_gemm_tile_fixed_k`). Rows fitted on by the models' own constants
(``fits = "gemm-model:..."`` or ``"collective-model:..."``) are re-fitted the same way:
:func:`fitted_gemm_ramp_s` for the GEMM ramp, :func:`fitted_fractions` for the collective fractions.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import UsageError
from ..work import Collective, Work
from .serving import ServingCase, score_serving_row
from .table import CollectiveCase, GemmCase, LlmCase, PublishedRow, StreamCase, load_measurements

BYTES_PER_ELEMENT = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int32": 4}


@dataclass(frozen=True)
class ScoredRow:
    """One row against its spec-only prediction: ``error`` is predicted / measured time - 1
    (positive: predicted too slow); None with ``reason`` where the row cannot be predicted."""

    row: PublishedRow
    measured_s: float
    predicted_s: float | None
    priors: tuple[str, ...]
    reason: str = ""

    @property
    def error(self) -> float | None:
        return None if self.predicted_s is None else self.predicted_s / self.measured_s - 1.0

    def to_json(self) -> dict[str, Any]:
        return {"id": self.row.id, "target": self.row.target, "kind": self.row.kind, "role": self.row.role,
                "value": self.row.value, "unit": self.row.unit, "measured_s": self.measured_s,
                "predicted_s": self.predicted_s, "error": self.error, "priors": list(self.priors),
                "reason": self.reason, "source": self.row.source}


def gemm_work(case: GemmCase) -> Work:
    """The Work of one GEMM: 2mnk FLOPs, A, B and C read or written once."""
    size = BYTES_PER_ELEMENT[case.dtype]
    return Work(2.0 * case.m * case.n * case.k, size * (case.m * case.k + case.k * case.n + case.m * case.n),
                dtype=case.dtype, op="gemm", shape={"m": case.m, "n": case.n, "k": case.k})


def stream_work(case: StreamCase) -> Work:
    return Work(bytes=case.bytes, op="stream")


def collective_work(case: CollectiveCase) -> Work:
    """The Work of one collective as nccl-tests runs it (``bytes`` its buffer size)."""
    return Work(collectives=(Collective(case.op, case.bytes, case.ranks),))


def case_work(case: GemmCase | StreamCase | CollectiveCase) -> Work:
    """The Work of a kernel-level row's case (GEMM, copy or collective)."""
    if isinstance(case, GemmCase):
        return gemm_work(case)
    if isinstance(case, CollectiveCase):
        return collective_work(case)
    return stream_work(case)


def llm_time_s(case: LlmCase, target: str) -> tuple[float, tuple[str, ...]]:
    """Spec-only end-to-end time of an LLM row and the uncovered ops' reasons (empty when complete)."""
    from ..workloads.builders import build
    from ..workloads.predict import predict_graph

    prefill = predict_graph(build(case.model, "prefill", batch=case.batch, seq=case.input, dtype=case.dtype,
                                  tp=case.tp), target)
    middle = case.input + case.output // 2
    decode = predict_graph(build(case.model, "decode", batch=case.batch, context=middle, dtype=case.dtype,
                                 tp=case.tp), target)
    missing = tuple(reason for _, reason in (*prefill.uncovered, *decode.uncovered))
    return prefill.latency_s + (case.output - 1) * decode.latency_s, missing


def score_row(row: PublishedRow) -> ScoredRow:
    """``row`` against the spec-only prediction of its case on its target."""
    from ..models.ceilings import Ceilings
    from ..prediction import predict
    from ..targets.catalogue import catalogue, resolve

    measured = row.measured_time_s()
    known = {name for spec in catalogue().values() for name in (spec.id, *spec.identity.aliases)}
    if row.target not in known:
        return ScoredRow(row, measured, None, (), f"{row.target!r} is not a catalogue target (a fitted-on row)")
    if isinstance(row.case, ServingCase):
        return score_serving_row(row)
    if isinstance(row.case, LlmCase):
        try:
            predicted, missing = llm_time_s(row.case, row.target)
        except UsageError as exc:
            return ScoredRow(row, measured, None, (), str(exc))
        if missing:
            return ScoredRow(row, measured, None, (), f"uncovered ops: {missing[0]}")
        return ScoredRow(row, measured, predicted, ("llm: the priors of every op (see the GEMM and copy rows)",))
    work = case_work(row.case)
    prediction = predict(work, target=row.target)
    if not prediction.covered:
        return ScoredRow(row, measured, None, (), prediction.reason)
    used = Ceilings.from_spec(resolve(row.target)).priors_used(work)
    return ScoredRow(row, measured, prediction.time_s, tuple(sorted(used)))


def score_rows(rows: Sequence[PublishedRow] | None = None) -> list[ScoredRow]:
    """Every row (default: the packaged table) scored, in table order."""
    return [score_row(row) for row in (load_measurements() if rows is None else rows)]


def held_out_summary(scored: Sequence[ScoredRow]) -> dict[str, Any]:
    """Median and largest |time error| over the held-out rows that were predicted, their count,
    the targets they cover, and the held-out rows left unpredicted (with why)."""
    held = [s for s in scored if s.row.held_out]
    errors = [abs(s.error) for s in held if s.error is not None]
    return {"rows": len(errors), "targets": sorted({s.row.target for s in held if s.error is not None}),
            "median_abs_error": statistics.median(errors) if errors else None,
            "max_abs_error": max(errors) if errors else None,
            "within_10pct": sum(e <= 0.10 for e in errors),
            "unpredicted": {s.row.id: s.reason for s in held if s.error is None}}


def fitted_fractions(rows: Sequence[PublishedRow] | None = None) -> dict[str, float]:
    """``{"<catalogue source key>:<efficiency key>": fraction}`` over the fitted-on rows: a GEMM
    sweep's shared rate (:func:`fitted_gemm_sweeps`), else ``mean(value / peak)`` over the rule's
    rows (a fitted-on row of a catalogue target without ``peak`` takes the datasheet figure its
    efficiency key scales)."""
    from ..targets.catalogue import resolve

    table = load_measurements() if rows is None else rows
    sweeps = fitted_gemm_sweeps(table)
    groups: dict[str, list[float]] = {}
    for row in table:
        if row.held_out or row.fits.startswith("gemm-model:") or row.fits in sweeps:
            continue
        peak = row.peak
        if peak is None:
            spec = resolve(row.target)
            if isinstance(row.case, GemmCase):
                figure = spec.peak(row.case.dtype)
                peak = figure / 1e12 if figure is not None else None
            else:
                figure = spec.bandwidth("dram")
                peak = figure / 1e9 if figure is not None else None
        if peak is None:
            raise UsageError(f"published row {row.id!r} has no peak to fit a fraction of")
        scale = shape_fraction(row.case) if isinstance(row.case, GemmCase) else 1.0
        groups.setdefault(row.fits, []).append(row.value / peak * scale)
    fractions = {key: statistics.fmean(values) for key, values in groups.items()}
    fractions.update({rule: fit.fraction for rule, fit in sweeps.items()})
    return fractions


def fitted_gemm_ramp_s(rows: Sequence[PublishedRow] | None = None) -> dict[str, float]:
    """``{"gemm-model:<key>": seconds}``: the GEMM ramp re-fitted on its fitted-on sweep rows.

    Per rule, the rows are one product's square sweep (``peak`` and ``units`` given): the large-
    shape rate is the mean over all but the smallest shape of measured over scheduled rate (the
    GEMM model's executed FLOPs on ``units`` units at peak); the ramp is the smallest shape's time
    less its executed FLOPs at that rate."""
    from ..models.gemm import GemmParams, gemm_schedule

    groups: dict[str, list[PublishedRow]] = {}
    for row in load_measurements() if rows is None else rows:
        if not row.held_out and row.fits.startswith("gemm-model:ramp_") and isinstance(row.case, GemmCase):
            groups.setdefault(row.fits, []).append(row)
    ramps: dict[str, float] = {}
    no_ramp = GemmParams(ramp_s={})
    for rule, members in groups.items():
        if len(members) < 2 or any(r.peak is None or r.units is None for r in members):
            raise UsageError(f"GEMM ramp rule {rule!r} needs two or more rows with peak and units")
        executed: list[tuple[float, float, float]] = []   # (flops, executed, measured seconds)
        for row in members:
            assert isinstance(row.case, GemmCase)
            work = gemm_work(row.case)
            executed.append((work.total_flops, gemm_schedule(work, _sweep_ceilings(row), no_ramp).executed_flops,
                             row.measured_time_s()))
        executed.sort()
        rate = statistics.fmean(done / seconds for _, done, seconds in executed[1:])
        _, smallest_done, smallest_s = executed[0]
        ramps[rule] = smallest_s - smallest_done / rate
    return ramps


#: The per-tile fixed costs :func:`fitted_gemm_sweeps` tries, elements of k.
TILE_FIXED_K_GRID = tuple(range(0, 4097, 4))
#: Shapes a fitted-on rule needs to be fitted as a sweep rather than row by row.
SWEEP_MIN_ROWS = 3


@dataclass(frozen=True)
class GemmSweepFit:
    """A catalogue GEMM fraction fitted on a published sweep of one product and dtype.

    ``tile_fixed_k`` is the per-tile fixed cost (elements of k) under which one rate explains
    every shape best; ``fraction`` is that rate over the product's peak: the large-K rate of a
    GEMM of this dtype, which the catalogue's ``gemm_<dtype>`` efficiency gives. ``rates`` are the
    rows' own rates over peak at that cost (their spread is what the fit leaves unexplained)."""

    rule: str
    dtype: str
    tile_fixed_k: float
    fraction: float
    rates: tuple[float, ...]


def _sweep_ceilings(row: PublishedRow) -> Any:
    from ..models.ceilings import Ceilings
    from ..targets.spec import Figure

    assert isinstance(row.case, GemmCase) and row.peak is not None and row.units is not None
    return Ceilings(target_id=row.target, kind="gpu", peak_flops={row.case.dtype: Figure(row.peak * 1e12, row.source)},
                    compute_units=Figure(float(row.units), row.source))


def _sweep_rates(members: Sequence[PublishedRow], dtype: str, fixed: float) -> list[float]:
    from ..models.gemm import GemmParams, gemm_schedule

    params = GemmParams(tile_fixed_k={f"gpu:{dtype}": float(fixed)})
    rates = []
    for row in members:
        assert row.peak is not None
        schedule = gemm_schedule(gemm_work(row.case), _sweep_ceilings(row), params)  # type: ignore[arg-type]
        rates.append(schedule.executed_flops / (row.measured_time_s() - schedule.ramp_s) / (row.peak * 1e12))
    return rates


def fitted_gemm_sweeps(rows: Sequence[PublishedRow] | None = None) -> dict[str, GemmSweepFit]:
    """``{"<catalogue source key>:gemm_<dtype>": fit}`` for every catalogue GEMM rule fitted on a
    sweep: :data:`SWEEP_MIN_ROWS` or more fitted-on GEMM rows of one dtype, each with ``peak`` and
    ``units`` (the product's datasheet peak and compute units, for the GEMM schedule).

    For each cost of :data:`TILE_FIXED_K_GRID`, every row's executed FLOPs under the GEMM model
    (its tiles, waves and stream-K, that fixed cost per tile) over its measured time less the
    ramp is a rate; the fit is the cost whose rates agree best (least squares of their logs), and
    the fraction is their shared rate (the geometric mean) over the peak. A sweep spans shapes,
    so its fraction is the rate of typical shapes, not the best one a search found."""
    groups: dict[str, list[PublishedRow]] = {}
    for row in load_measurements() if rows is None else rows:
        if (not row.held_out and not row.fits.startswith("gemm-model:") and isinstance(row.case, GemmCase)
                and row.units is not None):
            groups.setdefault(row.fits, []).append(row)
    fits: dict[str, GemmSweepFit] = {}
    for rule, members in groups.items():
        if len(members) < SWEEP_MIN_ROWS or any(r.peak is None for r in members):
            raise UsageError(f"GEMM sweep rule {rule!r} needs {SWEEP_MIN_ROWS} or more rows with peak and units")
        dtypes = {r.case.dtype for r in members if isinstance(r.case, GemmCase)}
        if len(dtypes) != 1:
            raise UsageError(f"GEMM sweep rule {rule!r} mixes dtypes {sorted(dtypes)}")
        (dtype,) = dtypes
        best: tuple[float, float, list[float]] | None = None
        for fixed in TILE_FIXED_K_GRID:
            logs = [math.log(rate) for rate in _sweep_rates(members, dtype, fixed)]
            mean = statistics.fmean(logs)
            loss = sum((value - mean) ** 2 for value in logs)
            if best is None or loss < best[0]:
                best = (loss, float(fixed), logs)
        assert best is not None
        _, fixed, logs = best
        fits[rule] = GemmSweepFit(rule, dtype, fixed, math.exp(statistics.fmean(logs)),
                                  tuple(math.exp(value) for value in logs))
    return fits


def fitted_gemm_tile_fixed_k(rows: Sequence[PublishedRow] | None = None) -> dict[str, float]:
    """``{"gemm-model:tile_fixed_gpu_<dtype>": elements of k}``: the per-tile fixed cost of each
    dtype with a fitted sweep (:func:`fitted_gemm_sweeps`), the figure
    :data:`pytest_charz.models.gemm.GEMM_TILE_FIXED_K` holds."""
    fits: dict[str, float] = {}
    for fit in fitted_gemm_sweeps(rows).values():
        key = f"gemm-model:tile_fixed_gpu_{fit.dtype}"
        if key in fits:
            raise UsageError(f"two GEMM sweeps fit the per-tile cost of {fit.dtype}")
        fits[key] = fit.tile_fixed_k
    return fits


def shape_fraction(case: GemmCase, kind: str = "gpu") -> float:
    """``(k + fixed) / k``: how much faster than at ``case``'s shape a GEMM of the same dtype runs
    at large ``k`` (the per-tile fixed cost of :data:`pytest_charz.models.gemm.GEMM_TILE_FIXED_K`;
    1 for a dtype without one). A fitted-on row measured at ``k`` holds this much more than
    ``value / peak`` of the large-K rate."""
    from ..models.gemm import GemmParams, tile_fixed_k

    return (case.k + tile_fixed_k(gemm_work(case), kind, GemmParams())) / case.k
