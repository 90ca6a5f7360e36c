"""Bottleneck attribution: what limits each case of a run, and each op of a workload case, with
the evidence for it.

:func:`attribute_case` is a pure function of a :class:`~pytest_charz.records.CaseRecord` and a
:class:`BottleneckContext` (the run's contention pairs, the ceilings of a capability profile or
of the target's spec, the host dispatch and launch figures); it returns a frozen
:class:`Bottleneck`: a ``kind`` (:data:`KINDS`), a ``confidence`` (rules in
:mod:`.bottleneck_rules`), the ``evidence`` that decided it and the ``alternatives``.

* **Terms.** The model (``composite`` by default) predicts the case's Work on the context's
  ceilings; where it cannot, the case's own recorded prediction is used. The largest term is the
  candidate; its share of the measured median and the achieved rate against its ceiling are cited.
* **Interference.** A contended case of a contention pair slower than its alone medians by
  :data:`~.bottleneck_rules.INTERFERENCE_SLOWDOWN` is bound by interference; disturbance flags
  lower the confidence of any verdict, and make one whose terms explain too little interference.
* **Workload ops.** Each profiled op (:class:`~pytest_charz.records.OpTiming`) is attributed like
  a case: its kernel's terms (the Work without its launch, as ``workloads.predict`` counts it)
  against the host's dispatch per op (and, on an asynchronous device, the launch overhead). The
  workload case's verdict is the kind that takes the largest share of the op time.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ..models.base import overlapped
from ..models.registry import get_model
from ..units import format_time
from ..workloads.predict import kernel_work
from .bottleneck_context import BottleneckContext, ContentionPair, context_for
from .bottleneck_rules import (BEYOND_CEILING, CLEAR_MARGIN, INTERFERENCE_SLOWDOWN, UNEXPLAINED, Candidate,
                               Evidence, candidates, confidence_of, counted_work, disturbance_evidence,
                               figure_evidence, lower, matching_latency_level, near, overhead_figure_name, rate_evidence,
                               read_counters)

if TYPE_CHECKING:
    from ..records import CaseRecord, OpTiming, Run
    from ..work import Work

__all__ = ["KINDS", "Alternative", "Bottleneck", "BottleneckContext", "ContentionPair", "attribute_case",
           "attribute_op", "attribute_run", "context_for"]

KINDS = ("compute", "memory:<level>", "latency:<level>", "launch", "dispatch", "communication", "interference",
         "unknown")


@dataclass(frozen=True)
class Alternative:
    """A runner-up: its kind and term, and ``margin``, how many times the verdict's term exceeds
    it (None where the two are not compared by time); ``note`` says why it lost."""

    kind: str
    term: str
    margin: float | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "term": self.term, "margin": self.margin, "note": self.note}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Alternative":
        margin = data.get("margin")
        return cls(str(data["kind"]), str(data.get("term") or ""), None if margin is None else float(margin),
                   str(data.get("note") or ""))


@dataclass(frozen=True)
class Bottleneck:
    """What limits one case (or one op of a workload case, ``op_class`` set): ``kind`` (one of
    :data:`KINDS`, levels filled in), ``confidence`` (``high``/``medium``/``low``), the model
    ``term`` behind it, the ``measured_s`` it explains (s), its ``evidence`` (most telling first),
    the ``alternatives`` and, for a workload case, each op's own bottleneck in ``ops``."""

    subject: str
    kind: str
    confidence: str
    term: str
    measured_s: float | None
    evidence: tuple[Evidence, ...]
    alternatives: tuple[Alternative, ...] = ()
    ops: tuple["Bottleneck", ...] = ()
    op_class: str = ""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"subject": self.subject, "kind": self.kind, "confidence": self.confidence,
                                "term": self.term, "measured_s": self.measured_s,
                                "evidence": [e.to_json() for e in self.evidence],
                                "alternatives": [a.to_json() for a in self.alternatives]}
        if self.op_class:
            data["op_class"] = self.op_class
        if self.ops:
            data["ops"] = [op.to_json() for op in self.ops]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Bottleneck":
        measured = data.get("measured_s")
        return cls(str(data["subject"]), str(data["kind"]), str(data["confidence"]), str(data.get("term") or ""),
                   None if measured is None else float(measured),
                   tuple(Evidence.from_json(e) for e in data.get("evidence") or ()),
                   tuple(Alternative.from_json(a) for a in data.get("alternatives") or ()),
                   tuple(cls.from_json(op) for op in data.get("ops") or ()), str(data.get("op_class") or ""))


# -- one case -----------------------------------------------------------------------------------
def _model_terms(work: "Work", context: BottleneckContext) -> tuple[dict[str, float], str]:
    """The model's terms of ``work`` on the context's ceilings, or ({}, why not)."""
    if context.ceilings is None:
        return {}, "no ceilings (neither a capability profile nor a target spec)"
    prediction = get_model(context.model).predict(work, context.ceilings)
    return (dict(prediction.breakdown), "") if prediction.covered else ({}, prediction.reason)


def _case_terms(record: "CaseRecord", context: BottleneckContext) -> tuple[dict[str, float], str, str]:
    """Terms, what they come from, and why the context's model could not predict (or "")."""
    terms, why = _model_terms(record.work, context)
    if terms:
        return terms, f"{context.model} model on {context.ceilings_origin}", ""
    recorded = record.prediction
    if recorded is not None and recorded.covered:
        return dict(recorded.breakdown), f"the case's recorded prediction ({recorded.model})", why
    work = record.work
    figure = context.figure(overhead_figure_name(work, context.figures))
    if figure is not None and work.launches and not (work.flops or work.bytes or work.accesses or work.transfers):
        # An overhead case (framework dispatch, a parallel region's wake-up): launches only.
        return {"launch": work.launches * figure[0]}, figure[1], why
    return {}, "", why or (recorded.reason if recorded is not None else "no prediction recorded")


def _rates(term: str, work: "Work", measured_s: float, context: BottleneckContext, source: str
           ) -> tuple[list[Evidence], float | None]:
    """The achieved rate of ``term`` against its ceilings, and the fraction that decides "near":
    a profile figure for this very op (the best GEMM, the overhead ceiling) before the peak."""
    found = [e for e in (rate_evidence(term, work, measured_s, context.ceilings, source),
                         figure_evidence(term, work, measured_s, context.figures, source)) if e is not None]
    return found, (found[-1].fraction if found else None)


def _decide(subject: str, measured_s: float, found: list[Candidate], *, work: "Work", context: BottleneckContext,
            source: str, origin: str, counted: tuple[list[Candidate], "Work", str] | None, counters_note: Evidence,
            disturbed: list[Evidence], extra: list[Evidence], op_class: str = "") -> Bottleneck:
    """The verdict from the candidates (largest first) and what else was found."""
    top = found[0]
    runner = found[1] if len(found) > 1 else None
    margin = top.seconds / runner.seconds if runner is not None and runner.seconds > 0 else math.inf
    share = top.seconds / measured_s
    evidence = [Evidence(f"model term {top.term}", top.seconds, "s", f"measured {format_time(measured_s)}", share,
                         origin)]
    rates, rate_fraction = _rates(top.term, work, measured_s, context, source)
    evidence += rates
    main = len(evidence)  # the term and its rates first, then what set the confidence, then the rest
    notes: list[Evidence] = []
    alternatives = [Alternative(runner.kind, runner.term, margin)] if runner is not None else []
    if runner is not None:
        evidence.append(Evidence(f"runner-up term {runner.term}", runner.seconds, "s", f"{top.term} "
                                 f"{format_time(top.seconds)}", runner.seconds / top.seconds, origin))
    kind, term = top.kind, top.term
    relevelled = False
    if top.kind.startswith("latency:") and work.accesses and not near(rate_fraction):
        # The time per access says which level served the loads better than the working set does.
        matched = matching_latency_level(measured_s / work.accesses, context.ceilings)
        if matched is not None and f"latency:{matched[0]}" != top.kind:
            kind, relevelled = f"latency:{matched[0]}", True
            latency = context.ceilings.latency(matched[0]) if context.ceilings is not None else None
            main += 1
            evidence.insert(0, Evidence(f"time per access matches latency:{matched[0]}", measured_s / work.accesses,
                                        "s", f"latency:{matched[0]} {format_time(latency)}", matched[1], source))
            alternatives.insert(0, Alternative(top.kind, top.term, None, "the model's level for the working set"))
    agrees: bool | None = None
    counted_fraction: float | None = None
    if counted is not None:
        counted_found, counted_as, counters_source = counted
        counted_top = counted_found[0]
        agrees = counted_top.kind == kind
        counted_rate = rate_evidence(counted_top.term, counted_as, measured_s, context.ceilings, counters_source,
                                     counted=counters_source)
        counted_fraction = counted_rate.fraction if counted_rate is not None else None
        evidence.append(counted_rate or Evidence(f"counted term {counted_top.term}", counted_top.seconds, "s",
                                                 source=counters_source))
        if not agrees:
            notes.append(Evidence(f"counters disagree with the model: {counted_top.kind}, not {kind}",
                                  source=counters_source))
            alternatives.insert(0, Alternative(kind, term, None, "the model's term; counters say otherwise"))
            kind, term = counted_top.kind, counted_top.term
    else:
        evidence.append(counters_note)
    confidence = confidence_of(margin, rate_fraction if rates else share, agrees, counted_fraction, bool(disturbed))
    if relevelled and counted is None:
        confidence = "low"
    elif share < UNEXPLAINED and counted is None:
        note = f"explains {100 * share:.0f}% of the measured time"
        alternatives.insert(0, Alternative(top.kind, top.term, None, note))
        kind, term, confidence = ("interference" if disturbed else "unknown"), "", "low"
        main += 1
        evidence.insert(0, Evidence(f"the largest model term {note}: the limit is "
                                    + ("a disturbance of the measurement" if disturbed else "not in the model"),
                                    share, "fraction", f"at least {UNEXPLAINED:.0%} expected", share, origin))
    elif rate_fraction is not None and rate_fraction > BEYOND_CEILING:
        notes.append(Evidence(f"faster than the {top.term} ceiling allows: the ceiling does not hold for this "
                              "case (another level or path served it)", rate_fraction, "fraction",
                              f"at most {BEYOND_CEILING}", None, origin))
    elif runner is not None and margin < CLEAR_MARGIN:
        notes.append(Evidence(f"close terms: {top.term} exceeds {runner.term} by {margin:.3g}x only",
                              margin, "x", f"clear margin {CLEAR_MARGIN}x", None, origin))
    ordered = evidence[:main] + notes + disturbed + evidence[main:]
    return Bottleneck(subject, kind, confidence, term, measured_s, tuple(ordered + extra), tuple(alternatives),
                      op_class=op_class)


def _counted(work: "Work", record: Any, context: BottleneckContext
             ) -> tuple[tuple[list[Candidate], "Work", str] | None, Evidence]:
    counters, reason = read_counters(record)
    if counters is None:
        return None, Evidence(f"counters absent: {reason}", source="the run")
    as_counted, used = counted_work(work, counters)
    missing = "; ".join(f"{k}: {v}" for k, v in counters.missing.items())
    if as_counted is None:
        return None, Evidence(f"counters absent: none of {', '.join(counters.values)} counts a term's quantity"
                              + (f" ({missing})" if missing else ""), source=counters.source)
    terms, _ = _model_terms(as_counted, context)
    found = candidates(terms, as_counted, context.ceilings)
    if not found:
        return None, Evidence("counters absent: the counted work has no term on these ceilings", source=counters.source)
    return (found, as_counted, f"{counters.source} counters {', '.join(used)} per call"), Evidence("")


def _pair_evidence(record: "CaseRecord", context: BottleneckContext) -> tuple[ContentionPair | None, list[Evidence]]:
    for pair in context.pairs:
        if record.id in pair.alone_cases or record.id in pair.contended_cases:
            side = "contended" if record.id in pair.contended_cases else "alone"
            return pair, [Evidence(f"contention pair {pair.pair} ({side} side), aggressor {pair.aggressor or '-'}",
                                   pair.slowdown, "x", f"alone median {format_time(statistics.median(pair.alone_s))}",
                                   None, f"cases {', '.join(pair.contended_cases + pair.alone_cases)}")]
    return None, []


def attribute_case(record: "CaseRecord", context: BottleneckContext) -> Bottleneck:
    """The bottleneck of one case (module docstring); a workload case's carries its ops'."""
    median = record.median_s
    if record.ops:
        return _workload_case(record, context)
    if median is None or median <= 0:
        return Bottleneck(record.id, "unknown", "low", "", None, (Evidence("no kept samples: nothing to attribute",
                                                                            source=f"case {record.id}"),))
    source = f"case {record.id} median of {len(record.measurement.samples_s)} samples"
    disturbed = disturbance_evidence(record.flags, record.conditions.interval, source)
    pair, extra = _pair_evidence(record, context)
    terms, origin, why = _case_terms(record, context)
    found = candidates(terms, record.work, context.ceilings)
    if why:
        extra.append(Evidence(f"{context.model} model on {context.ceilings_origin or 'no ceilings'} cannot "
                              f"predict the case: {why}", source=origin or "the model"))
    if pair is not None and record.id in pair.contended_cases and pair.slowdown >= INTERFERENCE_SLOWDOWN:
        agree = pair.alone_spread <= 0.05 and record.measurement.noise_met
        own = [Alternative(found[0].kind, found[0].term, None, "the kernel's own term, alone")] if found else []
        return Bottleneck(record.id, "interference", lower("high", 0 if agree else 1), "", median,
                          tuple(extra + [Evidence("alone medians before and after agree" if agree else
                                                  "alone medians differ or the noise target was missed",
                                                  pair.alone_spread, "fraction", "agree within 5%", None,
                                                  f"cases {', '.join(pair.alone_cases)}")] + disturbed),
                          tuple(own))
    if not found:
        return Bottleneck(record.id, "interference" if disturbed else "unknown", "low", "", median,
                          tuple(extra + disturbed or [Evidence("no model term to attribute", source=source)]))
    counted, counters_note = _counted(record.work, record, context)
    return _decide(record.id, median, found, work=record.work, context=context, source=source, origin=origin,
                   counted=counted, counters_note=counters_note, disturbed=disturbed, extra=extra)


# -- workload ops -------------------------------------------------------------------------------
def _op_verdict(op: "OpTiming", context: BottleneckContext, case_id: str) -> tuple[Bottleneck, float]:
    """The op's bottleneck and its kernel time by the model (s; 0 when the model has none)."""
    subject = f"{case_id} :: {op.name}" if case_id else op.name
    source = f"op {op.name}: one profiled time (median of the profiled passes, not sampled like a case)"
    kernel = kernel_work(op.work)
    has_kernel = bool(kernel.flops or kernel.bytes or kernel.accesses or kernel.collectives or kernel.transfers)
    terms, why = _model_terms(kernel, context) if has_kernel else ({}, "")
    kernel_s = overlapped(terms)[0] if terms else 0.0
    terms["dispatch"] = context.dispatch_s
    if context.asynchronous and op.work.launches:
        terms["launch"] = op.work.launches * context.launch_s
    found = candidates(terms, op.work, context.ceilings)
    extra = [Evidence(f"host dispatch per op {format_time(context.dispatch_s)}", context.dispatch_s, "s",
                      f"op time {format_time(op.time_s)}", context.dispatch_s / op.time_s if op.time_s > 0 else None,
                      context.dispatch_source)]
    if why:
        extra.append(Evidence(f"no kernel term: {why}", source=context.ceilings_origin or "the model"))
    if not op.time_s > 0:
        return Bottleneck(subject, "unknown", "low", "", op.time_s, (Evidence("no profiled time", source=source),),
                          op_class=op.op_class), kernel_s
    if not context.asynchronous and kernel_s < UNEXPLAINED * op.time_s:
        return _host_bound_op(subject, op, kernel_s, found, context, source, extra[1:]), kernel_s
    return _decide(subject, op.time_s, found, work=kernel, context=context, source=source,
                   origin=f"{context.model} model on {context.ceilings_origin or 'no ceilings'}", counted=None,
                   counters_note=Evidence("counters absent: ops are timed by the profiler, without counters",
                                          source=source), disturbed=[], extra=extra, op_class=op.op_class), kernel_s


def _host_bound_op(subject: str, op: "OpTiming", kernel_s: float, found: list[Candidate],
                   context: BottleneckContext, source: str, extra: list[Evidence]) -> Bottleneck:
    """A synchronous op whose kernel, at the ceilings, explains little of its time: the rest is host
    work around the kernel, which the dispatch figure measures for the simplest op."""
    residual = op.time_s - kernel_s
    kernel = [c for c in found if c.kind != "dispatch"]
    evidence = [Evidence("host time beyond the model's kernel time", residual, "s", f"op time {format_time(op.time_s)}",
                         residual / op.time_s, f"{source}; framework dispatch, allocation, thread-pool wake-up "
                                               "or the profiler's own cost"),
                Evidence("host dispatch per op", context.dispatch_s, "s", f"host time {format_time(residual)}",
                         context.dispatch_s / residual, context.dispatch_source),
                Evidence(f"model kernel time{f' ({kernel[0].term})' if kernel else ''}", kernel_s, "s",
                         f"op time {format_time(op.time_s)}", kernel_s / op.time_s,
                         f"{context.model} model on {context.ceilings_origin or 'no ceilings'}"),
                Evidence("counters absent: ops are timed by the profiler, without counters", source=source)]
    alternatives = tuple(Alternative(c.kind, c.term, residual / c.seconds if c.seconds > 0 else None,
                                     "the kernel's largest term") for c in kernel[:1])
    confidence = "medium" if near(context.dispatch_s / residual) else "low"
    return Bottleneck(subject, "dispatch", confidence, "dispatch", op.time_s, tuple(evidence + extra), alternatives,
                      op_class=op.op_class)


def attribute_op(op: "OpTiming", context: BottleneckContext, case_id: str = "") -> Bottleneck:
    """The bottleneck of one profiled op: its kernel's terms against the host dispatch per op
    (and an asynchronous device's launch overhead), held against its profiled time."""
    return _op_verdict(op, context, case_id)[0]


def _workload_case(record: "CaseRecord", context: BottleneckContext) -> Bottleneck:
    verdicts = [_op_verdict(op, context, record.id) for op in record.ops]
    ops = tuple(verdict for verdict, _ in verdicts)
    kernel_s = sum(seconds for _, seconds in verdicts)
    total = sum(op.time_s for op in record.ops)
    by_kind: dict[str, list[float]] = {}
    for op, verdict in zip(record.ops, ops):
        by_kind.setdefault(verdict.kind, []).append(op.time_s)
    ranked = sorted(by_kind.items(), key=lambda item: -sum(item[1]))
    source = f"the {len(ops)} profiled ops of {record.id}"
    evidence = [Evidence(f"op time bound by {kind} ({len(times)} ops)", sum(times), "s",
                         f"all ops {format_time(total)}", sum(times) / total if total else None, source)
                for kind, times in ranked[:3]]
    median = record.median_s
    coverage = total / median if median else None
    evidence.append(Evidence("ops add up to", total, "s", f"end-to-end median {format_time(median)}", coverage,
                             f"case {record.id}"))
    host_s = len(ops) * context.dispatch_s
    evidence.append(Evidence(f"host dispatch of {len(ops)} ops ({'host' if host_s > kernel_s else 'device'}-bound "
                             "by the model)", host_s, "s", f"kernel time by the model {format_time(kernel_s)}",
                             host_s / kernel_s if kernel_s else None, context.dispatch_source))
    disturbed = disturbance_evidence(record.flags, record.conditions.interval, f"case {record.id}")
    kind = ranked[0][0] if ranked else "unknown"
    share = sum(ranked[0][1]) / total if ranked and total else 0.0
    second = sum(ranked[1][1]) / total if len(ranked) > 1 and total else 0.0
    margin = share / second if second else math.inf
    sure = sum(op.time_s for op, verdict in zip(record.ops, ops) if verdict.kind == kind and verdict.confidence != "low")
    confident = (kind != "unknown" and share >= 0.5 and margin >= CLEAR_MARGIN and coverage is not None
                 and 0.7 <= coverage <= 1.3 and sure >= 0.5 * share * total)
    confidence = lower("medium" if confident else "low", 1 if disturbed else 0)
    alternatives = (Alternative(ranked[1][0], "", margin, f"{100 * second:.0f}% of the op time"),) if second else ()
    return Bottleneck(record.id, kind, confidence, "", median, tuple(evidence + disturbed), alternatives, ops)


def attribute_run(run: "Run", context: BottleneckContext | None = None) -> tuple[Bottleneck, ...]:
    """Every case of ``run`` attributed (``context`` defaults to :func:`context_for` the run)."""
    context = context if context is not None else context_for(run)
    return tuple(attribute_case(case, context) for case in run.cases)
