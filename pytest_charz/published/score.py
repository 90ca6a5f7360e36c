"""Published measurements scored against spec-only predictions, and the priors' rules re-fitted.

A GEMM row is ``predict(Work(2mnk FLOPs, the three matrices' bytes, op="gemm", shape), target)``
with no profile (the default model, datasheet ceilings and the target's priors); a copy row is
``predict(Work(bytes=...), target)``; an LLM row is the prefill of its prompt plus ``output - 1``
decode steps at the middle context, each ``predict_graph`` of a graph from
:func:`pytest_charz.workloads.builders.build`. Rows of products outside the catalogue cannot be
predicted: they are fitted-on rows, and :func:`fitted_fractions` re-derives from them the fraction
each catalogue rule holds (``value / peak``, averaged over the rule's rows), so that a test can
check the catalogue against the table it cites.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import UsageError
from ..work import Work
from .table import GemmCase, LlmCase, PublishedRow, StreamCase, load_measurements

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
    if isinstance(row.case, LlmCase):
        try:
            predicted, missing = llm_time_s(row.case, row.target)
        except UsageError as exc:
            return ScoredRow(row, measured, None, (), str(exc))
        if missing:
            return ScoredRow(row, measured, None, (), f"uncovered ops: {missing[0]}")
        return ScoredRow(row, measured, predicted, ("llm: the priors of every op (see the GEMM and copy rows)",))
    work = gemm_work(row.case) if isinstance(row.case, GemmCase) else stream_work(row.case)
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
    """``{"<catalogue source key>:<efficiency key>": mean(value / peak)}`` over the fitted-on rows
    (a fitted-on row of a catalogue target without ``peak`` takes the datasheet figure its
    efficiency key scales)."""
    from ..targets.catalogue import resolve

    groups: dict[str, list[float]] = {}
    for row in load_measurements() if rows is None else rows:
        if row.held_out:
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
        groups.setdefault(row.fits, []).append(row.value / peak)
    return {key: statistics.fmean(values) for key, values in groups.items()}
