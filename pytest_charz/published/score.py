"""Published measurements scored against spec-only predictions, and the priors' rules re-fitted.

A GEMM row is ``predict(Work(2mnk FLOPs, the three matrices' bytes, op="gemm", shape), target)``
with no profile (the default model, datasheet ceilings and the target's priors); a copy row is
``predict(Work(bytes=...), target)``; a collective row is ``predict(Work(collectives=...), target)``
(the collective library's algorithm choice, :mod:`pytest_charz.models.comm`); an LLM serving row
is its run's graphs priced by ``predict_graph`` under the row's runtime profile
(:mod:`.serving`). Rows of products outside the catalogue cannot be
predicted: they are fitted-on rows, and :func:`fitted_fractions` re-derives from them the fraction
each catalogue rule holds (``value / peak``, averaged over the rule's rows; for a GEMM row, the
fraction of peak at which the GEMM model takes the row's time, :func:`gemm_row_fraction`; for a
rule fitted on a GEMM sweep, the rate its shapes share, :func:`fitted_gemm_sweeps`), so that a test
can check the catalogue against the table it cites. A sweep also fits the GPUs' per-tile fixed time
(:func:`fitted_gemm_tile_fixed_s`). Rows fitted on by the models' own constants
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
from .serving import SERVING_KINDS, ServingCase, score_serving_row
from .table import CollectiveCase, GemmCase, PublishedRow, StreamCase, load_measurements

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
    the targets they cover, and the held-out rows left unpredicted (with why); ``by_level``: the
    count and median of the end-to-end LLM serving rows (``serving``) and of the kernel-level
    ones (``kernel``: GEMM, copy and collective rows) apart, which an acceptance judges apart."""
    held = [s for s in scored if s.row.held_out]
    predicted = [s for s in held if s.error is not None]
    errors = [abs(s.error) for s in predicted]  # type: ignore[arg-type]
    by_level = {}
    for level, rows in (("serving", [s for s in predicted if s.row.kind in SERVING_KINDS]),
                        ("kernel", [s for s in predicted if s.row.kind not in SERVING_KINDS])):
        level_errors = [abs(s.error) for s in rows]  # type: ignore[arg-type]
        by_level[level] = {"rows": len(level_errors),
                           "median_abs_error": statistics.median(level_errors) if level_errors else None}
    return {"rows": len(errors), "targets": sorted({s.row.target for s in predicted}),
            "median_abs_error": statistics.median(errors) if errors else None,
            "max_abs_error": max(errors) if errors else None,
            "within_10pct": sum(e <= 0.10 for e in errors), "by_level": by_level,
            "unpredicted": {s.row.id: s.reason for s in held if s.error is None}}


def fitted_fractions(rows: Sequence[PublishedRow] | None = None) -> dict[str, float]:
    """``{"<catalogue source key>:<efficiency key>": fraction}`` over the fitted-on rows: a GEMM
    sweep's shared rate (:func:`fitted_gemm_sweeps`); else the mean over the rule's rows of, for a
    GEMM row, the fraction at which the GEMM model takes its time (:func:`gemm_row_fraction`), and
    for any other row ``value / peak`` (a fitted-on row of a catalogue target without ``peak``
    takes the datasheet figure its efficiency key scales)."""
    from ..targets.catalogue import resolve

    table = load_measurements() if rows is None else rows
    sweeps = fitted_gemm_sweeps(table)
    groups: dict[str, list[float]] = {}
    for row in table:
        if row.held_out or row.fits.startswith("gemm-model:") or row.fits in sweeps:
            continue
        if isinstance(row.case, GemmCase):   # its peak and units: _sweep_ceilings
            groups.setdefault(row.fits, []).append(gemm_row_fraction(row))
            continue
        peak = row.peak
        if peak is None:
            figure = resolve(row.target).bandwidth("dram")
            peak = figure / 1e9 if figure is not None else None
        if peak is None:
            raise UsageError(f"published row {row.id!r} has no peak to fit a fraction of")
        groups.setdefault(row.fits, []).append(row.value / peak)
    fractions = {key: statistics.fmean(values) for key, values in groups.items()}
    fractions.update({rule: fit.fraction for rule, fit in sweeps.items()})
    return fractions


def fitted_gemm_ramp_s(rows: Sequence[PublishedRow] | None = None, tile_s: float | None = None) -> dict[str, float]:
    """``{"gemm-model:<key>": seconds}``: the GEMM ramp re-fitted on its fitted-on sweep rows,
    under the per-tile time ``tile_s`` (default: its rule's, :func:`rule_tile_s`; none for the
    ramp's Hopper 16-bit sweep).

    Per rule, the rows are one product's square sweep (``peak`` and ``units`` given): the large-
    shape rate is the mean over all but the smallest shape of the fraction of peak at which the
    GEMM model without a ramp takes each row's time (:func:`gemm_row_fraction`: its schedule and
    per-tile fixed time on ``units`` units); the ramp is the smallest shape's time less the model's
    time for it at that rate."""
    from ..models.gemm import GemmParams, gemm_compute_terms

    groups: dict[str, list[PublishedRow]] = {}
    for row in load_measurements() if rows is None else rows:
        if not row.held_out and row.fits.startswith("gemm-model:ramp_") and isinstance(row.case, GemmCase):
            groups.setdefault(row.fits, []).append(row)
    ramps: dict[str, float] = {}
    no_ramp = GemmParams(ramp_s={})
    for rule, members in groups.items():
        if len(members) < 2 or any(r.peak is None or r.units is None for r in members):
            raise UsageError(f"GEMM ramp rule {rule!r} needs two or more rows with peak and units")
        members = sorted(members, key=lambda r: gemm_work(r.case).total_flops)  # type: ignore[arg-type]
        rate = statistics.fmean(gemm_row_fraction(row, no_ramp, tile_s) for row in members[1:])
        smallest = members[0]
        tile = rule_tile_s(smallest) if tile_s is None else tile_s
        work = gemm_work(smallest.case)  # type: ignore[arg-type]
        ceilings = _sweep_ceilings(smallest, rate, tile, rule_architecture(smallest))
        (modelled,) = gemm_compute_terms(work, ceilings, no_ramp).values()
        ramps[rule] = smallest.measured_time_s() - modelled
    return ramps


#: The per-tile fixed times :func:`fitted_gemm_sweeps` tries, seconds (0 to 12 us by 0.05 us).
TILE_FIXED_S_GRID = tuple(step * 0.05e-6 for step in range(0, 241))
#: Shapes a fitted-on rule needs to be fitted as a sweep rather than row by row.
SWEEP_MIN_ROWS = 3


@dataclass(frozen=True)
class GemmSweepFit:
    """A catalogue GEMM fraction fitted on a published sweep of one product and dtype.

    ``tile_fixed_s`` is the per-tile fixed time under which one rate explains every shape best;
    ``fraction`` is that rate over the product's peak: the large-K rate of a GEMM of this dtype,
    which the catalogue's ``gemm_<dtype>`` efficiency gives. ``rates`` are the rows' own fractions
    at that time (their spread is what the fit leaves unexplained)."""

    rule: str
    dtype: str
    tile_fixed_s: float
    fraction: float
    rates: tuple[float, ...]


def _rule_specs(row: PublishedRow) -> list[Any]:
    """The catalogue targets that take their fraction from ``row``'s rule
    (``fits = "<source>:gemm_<dtype>"``); none for a constant of the model itself (``gemm-model:``)."""
    from ..targets.catalogue import catalogue

    source, _, key = row.fits.partition(":")
    specs = []
    for spec in catalogue().values():
        fraction = spec.priors.efficiency.get(key) if spec.priors is not None else None
        if fraction is not None and fraction.source == source:
            specs.append(spec)
    return specs


def rule_tile_s(row: PublishedRow) -> float:
    """The GEMM per-tile fixed time (seconds) a fitted-on GEMM row is fitted under: the
    ``gemm_tile_us`` prior of its dtype on the targets of its rule (:func:`_rule_specs`), which
    must agree; 0 where they carry none or the rule has no target."""
    assert isinstance(row.case, GemmCase)
    values = set()
    for spec in _rule_specs(row):
        tile = spec.priors.gemm_tile_us.get(row.case.dtype)
        values.add(tile.value * 1e-6 if tile is not None else 0.0)
    if len(values) > 1:
        raise UsageError(f"the targets of rule {row.fits!r} carry different GEMM tile times: {sorted(values)}")
    return values.pop() if values else 0.0


def rule_architecture(row: PublishedRow) -> str:
    """The architecture of the targets of a fitted-on GEMM row's rule, which picks the library's
    tile shapes (``models/gemm.py``); they must agree; empty where the rule has no target."""
    names = {spec.identity.architecture for spec in _rule_specs(row)}
    if len(names) > 1:
        raise UsageError(f"the targets of rule {row.fits!r} are of different architectures: {sorted(names)}")
    return names.pop() if names else ""


def _row_peak_units(row: PublishedRow) -> tuple[float, int]:
    """A GEMM row's datasheet peak (TFLOP/s) and compute units: the row's ``peak`` and
    ``units``, else its catalogue target's."""
    from ..targets.catalogue import resolve

    assert isinstance(row.case, GemmCase)
    peak, units = row.peak, row.units
    if peak is None or units is None:
        spec = resolve(row.target)
        if peak is None:
            figure = spec.peak(row.case.dtype)
            peak = figure / 1e12 if figure is not None else None
        if units is None:
            units = spec.compute.units
    if peak is None or units is None:
        raise UsageError(f"published GEMM row {row.id!r} needs a peak and compute units (give 'peak' and 'units')")
    return peak, int(units)


def _sweep_ceilings(row: PublishedRow, fraction: float = 1.0, tile_s: float = 0.0, architecture: str = "",
                    peak_units: tuple[float, int] | None = None) -> Any:
    """The ceilings of ``row``'s product for the GEMM model: ``fraction`` of its datasheet peak
    on its compute units (:func:`_row_peak_units`, or ``peak_units`` already looked up), a GPU of
    ``architecture`` whose GEMM pays ``tile_s`` per output tile."""
    from ..models.ceilings import Ceilings
    from ..targets.spec import Figure

    assert isinstance(row.case, GemmCase)
    peak, units = peak_units or _row_peak_units(row)
    dtype = row.case.dtype
    return Ceilings(target_id=row.target, kind="gpu", architecture=architecture,
                    peak_flops={dtype: Figure(fraction * peak * 1e12, row.source)},
                    compute_units=Figure(float(units), row.source),
                    gemm_tile_s={dtype: Figure(tile_s, "fit")} if tile_s else {})


def gemm_row_fraction(row: PublishedRow, params: Any = None, tile_s: float | None = None) -> float:
    """The fraction of ``row``'s datasheet peak at which the GEMM model (``params``, default
    :class:`~pytest_charz.models.gemm.GemmParams`: its tiles, schedules and ramp; ``tile_s`` per
    output tile, default :func:`rule_tile_s`; the tiles of :func:`rule_architecture`) takes the
    row's measured time. Found by fixed-point iteration: at a fraction ``f`` the model executes
    ``E(f)`` FLOPs (the per-tile time adds FLOPs in proportion to ``f``), so
    ``f = E(f) / (peak * (time - ramp))``, a contraction while the tile time is below the row's
    time."""
    from ..models.gemm import GemmParams, gemm_schedule

    assert isinstance(row.case, GemmCase)
    params = GemmParams() if params is None else params
    tile = rule_tile_s(row) if tile_s is None else tile_s
    architecture = rule_architecture(row)
    peak_units = _row_peak_units(row)
    work = gemm_work(row.case)
    peak = peak_units[0] * 1e12
    measured = row.measured_time_s()
    fraction = work.total_flops / measured / peak
    for _ in range(60):
        schedule = gemm_schedule(work, _sweep_ceilings(row, fraction, tile, architecture, peak_units), params)
        if schedule.ramp_s >= measured:
            raise UsageError(f"published GEMM row {row.id!r} takes {measured:.3g} s, less than the ramp")
        updated = schedule.executed_flops / (measured - schedule.ramp_s) / peak
        if abs(updated - fraction) <= 1e-9 * fraction:
            return updated
        fraction = updated
    return fraction


def fitted_gemm_sweeps(rows: Sequence[PublishedRow] | None = None) -> dict[str, GemmSweepFit]:
    """``{"<catalogue source key>:gemm_<dtype>": fit}`` for every catalogue GEMM rule fitted on a
    sweep: :data:`SWEEP_MIN_ROWS` or more fitted-on GEMM rows of one dtype, each with ``peak`` and
    ``units`` (the product's datasheet peak and compute units, for the GEMM schedule).

    For each time of :data:`TILE_FIXED_S_GRID`, every row's fraction of peak under the GEMM model
    with that fixed time per tile (:func:`gemm_row_fraction`) is a rate; the fit is the time whose
    rates agree best (least squares of their logs), and the fraction is their shared rate (the
    geometric mean). A sweep spans shapes, so its fraction is the rate of typical shapes, not the
    best one a search found."""

    groups: dict[str, list[PublishedRow]] = {}
    for row in load_measurements() if rows is None else rows:
        if (not row.held_out and not row.fits.startswith("gemm-model:") and isinstance(row.case, GemmCase)
                and row.units is not None):
            groups.setdefault(row.fits, []).append(row)
    fits: dict[str, GemmSweepFit] = {}
    for rule, members in groups.items():
        if len(members) < SWEEP_MIN_ROWS:
            continue   # fitted row by row (fitted_fractions)
        if any(r.peak is None for r in members):
            raise UsageError(f"GEMM sweep rule {rule!r} needs a peak on every row")
        dtypes = {r.case.dtype for r in members if isinstance(r.case, GemmCase)}
        if len(dtypes) != 1:
            raise UsageError(f"GEMM sweep rule {rule!r} mixes dtypes {sorted(dtypes)}")
        (dtype,) = dtypes
        best: tuple[float, float, list[float]] | None = None
        for fixed in TILE_FIXED_S_GRID:
            logs = [math.log(gemm_row_fraction(row, tile_s=fixed)) for row in members]
            mean = statistics.fmean(logs)
            loss = sum((value - mean) ** 2 for value in logs)
            if best is None or loss < best[0]:
                best = (loss, float(fixed), logs)
        assert best is not None
        _, fixed, logs = best
        fits[rule] = GemmSweepFit(rule, dtype, fixed, math.exp(statistics.fmean(logs)),
                                  tuple(math.exp(value) for value in logs))
    return fits


#: The catalogue source key of the GEMM per-tile time (``[priors.gemm_tile_us]``).
TILE_SOURCE = "prior-gemm-tile"


def fitted_gemm_tile_fixed_s(rows: Sequence[PublishedRow] | None = None) -> dict[str, float]:
    """``{"prior-gemm-tile": seconds}``: the GEMM per-tile fixed time fitted by the sweep
    (:func:`fitted_gemm_sweeps`), the figure the catalogue's ``[priors.gemm_tile_us]`` entries of
    that source hold. One time: two sweeps would each fit it and are refused."""
    fits = fitted_gemm_sweeps(rows)
    if len(fits) > 1:
        raise UsageError(f"{len(fits)} GEMM sweeps ({', '.join(sorted(fits))}) fit the one per-tile fixed time")
    return {TILE_SOURCE: fit.tile_fixed_s for fit in fits.values()}
