"""The hard transfer: calibrated on microbenchmarks only, tested on workloads and their ops.

A **workload case** is one whose Work is ``op="workload"`` (the workload suite, a multi-op
held-out case) or carries ``shape["workload"]`` (a one-op held-out case,
``suites/test_heldout.py``); every other case is a microbenchmark. :func:`validate_workloads`
calibrates a model on the microbenchmarks of a target alone (:func:`.fit.fit`, every case
calibrates) and predicts, never having seen them:

* every **op** of every workload case (its recorded :class:`~pytest_charz.records.OpTiming`, or
  the case's own Work for a one-op case), scored per op class;
* every workload **end to end**: the sum of its ops' predictions, with the interval summed as
  :func:`~.classes.summed_interval` says (correlated within a class, independent across).

Times of held-out cases (their own timings) and of the workload suite's ops (torch.profiler's,
which include the profiler's per-op cost) are summarised apart as well as together
(``by_source``).

Given several runs (rounds) of a target, every case is scored once, at the median of its rounds'
times, as the calibration takes the median over runs: a case measured while a neighbour slowed
the host in one round of three still counts at its usual time (:func:`merge_workload_cases`).

Errors are ``measured / predicted - 1``; the summary gives median and P90 |error|, the share
within 2x (``1/2 <= measured / predicted <= 2``) and the share inside the interval.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import UsageError
from ..models.opclass_costs import host_framework, is_workload, op_class_of
from ..models.registry import DEFAULT_MODEL, get_model
from ..records import CaseRecord, Run
from ..work import Work
from ..workloads.aten_costs import TRANSCENDENTAL, aten_name
from ..calibration.classes import summed_interval
from ..calibration.fit import fit
from ..calibration.predictor import Predictor
from ..prediction import CalibrationArg, load_predictor
from ..calibration.observations import Observation, RunArg, ceilings_from_run, load_runs, observations


def op_work(work: Work, source: str, module_code: bool = True) -> Work:
    """An op's Work as the model should see it: an elementwise aten op bound by its math
    (``aten_costs.TRANSCENDENTAL``) marked ``transcendental`` with its ``function``, as the capture
    now marks it (a graph captured before kept the mark in the op's attrs only); an op that begins a module call of a model's code
    (:func:`~pytest_charz.models.opclass_costs.pays_module_call`) marked
    ``framework="torch-module"`` unless ``module_code`` is False (the op timed alone, replayed: its module code is not in its
    time, only the bare framework op's dispatch)."""
    name = aten_name(source)
    shape: dict[str, Any] = dict(work.shape)
    if work.op == "elementwise" and name in TRANSCENDENTAL and not work.shape.get("transcendental"):
        shape.update(transcendental=1, function=name)
    if module_code and source != HELDOUT and host_framework(work) == "torch-module":
        # an aten op that begins an nn.Module call: its host pays the module code's cost
        # (the call, the views folded out of the graph), dispatch:torch-module
        shape["framework"] = "torch-module"
    if shape == dict(work.shape):
        return work
    return Work(dict(work.flops), dict(work.bytes), launches=work.launches, transfers=dict(work.transfers),
                op=work.op, shape=shape, accesses=work.accesses)


#: Where a scored time comes from: a held-out case's own timing (the sampler's median, or a step
#: timed alone); an aten op of a workload suite's model replayed alone where it ran
#: (``shape["op_timer"] == "replay"``, :mod:`pytest_charz.workloads.optimer`), predicted as the
#: bare framework op it is, while the workload's end to end pays the module code's per-op cost;
#: or torch.profiler's time of an aten op inside a workload suite's model (runs recorded before
#: the replay, and GPUs). The profiler's time of a CPU op holds part of the module code's cost and
#: the profiler's own per event (a microsecond op of a captured Llama read 1.4-10 us): the
#: sources are reported apart.
HELDOUT, REPLAYED, PROFILED = "heldout", "replayed", "profiled"


@dataclass(frozen=True)
class Scored:
    """One op or workload predicted by a model calibrated on microbenchmarks only."""

    case_id: str
    name: str
    level: str                   # "op" or "workload"
    op_class: str
    measured_s: float
    predicted_s: float
    interval_s: tuple[float, float]
    notes: tuple[str, ...] = ()
    source: str = HELDOUT
    #: a multi-op workload's ops each timed alone and priced alone, summed: (measured, predicted)
    #: seconds; what the end to end holds beyond them is its model code's and its order's
    #: (:meth:`WorkloadValidation.splits`). None for an op, or where an op went untimed or unpriced
    kernels_s: tuple[float, float] | None = None

    @property
    def error(self) -> float:
        return self.measured_s / self.predicted_s - 1.0

    @property
    def within_2x(self) -> bool:
        return 0.5 <= self.measured_s / self.predicted_s <= 2.0

    @property
    def inside(self) -> bool:
        return self.interval_s[0] <= self.measured_s <= self.interval_s[1]

    @property
    def interval_score(self) -> float:
        """``|ln(measured / predicted)|`` over the log distance from the prediction to the
        interval's end on the measurement's side: at most 1 inside, above 1 outside (inf where
        that end is the prediction itself or the low end is 0)."""
        distance = math.log(self.measured_s / self.predicted_s)
        if distance == 0:
            return 0.0
        end = self.interval_s[1] if distance > 0 else self.interval_s[0]
        if end <= 0 or end == self.predicted_s:
            return math.inf
        return abs(distance) / abs(math.log(end / self.predicted_s))

    def to_json(self) -> dict[str, Any]:
        return {"case": self.case_id, "name": self.name, "level": self.level, "op_class": self.op_class,
                "measured_s": self.measured_s, "predicted_s": self.predicted_s, "interval_s": list(self.interval_s),
                "error": self.error, "within_2x": self.within_2x, "inside": self.inside, "notes": list(self.notes),
                "source": self.source}


def summary(rows: Sequence[Scored]) -> dict[str, Any]:
    """n, median and P90 |error|, share within 2x, interval coverage and the P90 of the rows'
    :attr:`Scored.interval_score` (None where empty).

    The score's P90 says how the 90% intervals are sized, where the coverage only counts: 1.0
    when they are calibrated, below 1 when too wide, above when too narrow. A count jumps when
    rows that move together (ops of one class priced alike) cross an end at once: on one
    measurement all 68 held-out rows fell inside, three of them at 0.97-0.99 of the way to their
    end, and the score's P90 read 0.88."""
    import numpy as np

    if not rows:
        return {"n": 0, "median_abs": None, "p90_abs": None, "within_2x": None, "coverage": None,
                "interval_score_p90": None}
    absolute = np.abs([r.error for r in rows])
    scores = np.array([r.interval_score for r in rows])
    return {"n": len(rows), "median_abs": float(np.quantile(absolute, 0.5)), "p90_abs": float(np.quantile(absolute, 0.9)),
            "within_2x": sum(r.within_2x for r in rows) / len(rows), "coverage": sum(r.inside for r in rows) / len(rows),
            "interval_score_p90": float(np.quantile(scores, 0.9, method="inverted_cdf"))}


@dataclass(frozen=True)
class WorkloadCase:
    """A workload case as scored: its record (of the first run that measured it) and its times,
    each the median over the runs that measured it (:func:`merge_workload_cases`)."""

    record: CaseRecord
    measured_s: float | None
    op_times: tuple[float, ...]
    runs: int = 1


def merge_workload_cases(cases: Sequence[CaseRecord]) -> list[WorkloadCase]:
    """Workload cases of several runs (rounds) of one target, one per case id: the end-to-end time
    is the median of the runs' medians and each op's time the median of its times, as the
    calibration's observations take the median over runs (:func:`.observations.observations`).
    A run whose case has other ops (another capture) than the first's keeps to the first's."""
    grouped: dict[str, list[CaseRecord]] = {}
    for case in cases:
        grouped.setdefault(case.id, []).append(case)
    out = []
    for members in grouped.values():
        first = members[0]
        names = [op.name for op in first.ops]
        same = [c for c in members if [op.name for op in c.ops] == names]
        medians = [c.median_s for c in same if c.median_s is not None and c.median_s > 0]
        measured = statistics.median(medians) if medians else None
        op_times = tuple(statistics.median(c.ops[i].time_s for c in same) for i in range(len(names)))
        out.append(WorkloadCase(first, measured, op_times, len(same)))
    return out


def _score_case(core: Predictor, merged: WorkloadCase) -> tuple[list[Scored], Scored | None, list[dict[str, str]]]:
    case = merged.record
    source = HELDOUT if all(op.source == HELDOUT for op in case.ops) else \
        REPLAYED if case.work.shape.get("op_timer") == "replay" else PROFILED
    # (name, Work end to end, Work of the op alone, time): they differ for a replayed op only
    ops: list[tuple[str, Work, Work, float | None]] = []
    for op, op_time_s in zip(case.ops, merged.op_times):
        in_model = op_work(op.work, op.source)
        alone = op_work(op.work, op.source, module_code=False) if source == REPLAYED else in_model
        ops.append((op.name, in_model, alone, op_time_s))
    ops = ops or [(case.id, case.work, case.work, None)]
    scored: list[Scored] = []
    parts: list[tuple[str, float, float, float]] = []
    missing: list[dict[str, str]] = []
    kernels: list[tuple[float, float]] = []    # (measured, predicted) of each op timed and priced alone
    for name, work, alone, time_s in ops:
        prediction = core.predict(work)
        if not prediction.covered:
            missing.append({"case": case.id, "op": name, "reason": prediction.reason})
            continue
        op_class = op_class_of(work)
        parts.append((op_class, prediction.time_s, *prediction.interval_s))
        if time_s is not None and time_s > 0:
            own = prediction if alone is work else core.predict(alone)
            if own.covered:
                scored.append(Scored(case.id, name, "op", op_class, time_s, own.time_s, own.interval_s, own.notes,
                                     source))
                kernels.append((time_s, own.time_s))
    measured = merged.measured_s
    if missing or not parts or measured is None or not measured > 0:
        return scored, None, missing
    total, low, high = summed_interval(parts)
    if not case.ops:  # a one-op case: the op is the workload
        work = ops[0][1]
        scored.append(Scored(case.id, case.id, "op", op_class_of(work), measured, total, (low, high), source=source))
    split = ((sum(m for m, _ in kernels), sum(p for _, p in kernels))
             if case.ops and len(kernels) == len(case.ops) else None)
    return scored, Scored(case.id, case.id, "workload", "workload", measured, total, (low, high), source=source,
                          kernels_s=split), missing


@dataclass(frozen=True)
class WorkloadValidation:
    """What :func:`validate_workloads` found for one model and target."""

    model: str
    target: str
    calibrated_on: tuple[str, ...]
    ops: tuple[Scored, ...]
    workloads: tuple[Scored, ...]
    not_covered: tuple[Mapping[str, str], ...]
    classes: Mapping[str, Mapping[str, Any]]

    def by_class(self, source: str | None = HELDOUT) -> dict[str, dict[str, Any]]:
        """Per op class, the summary of the ops of ``source`` (None: every source)."""
        ops = [r for r in self.ops if source is None or r.source == source]
        return {name: summary([r for r in ops if r.op_class == name]) for name in sorted({r.op_class for r in ops})}

    def by_source(self) -> dict[str, dict[str, Any]]:
        """Per source of the measured times: ops, workloads and both."""
        out = {}
        for source in sorted({r.source for r in (*self.ops, *self.workloads)}):
            ops = [r for r in self.ops if r.source == source]
            ends = [r for r in self.workloads if r.source == source]
            out[source] = {"ops": summary(ops), "workloads": summary(ends), "all": summary([*ops, *ends]),
                           "by_class": self.by_class(source)}
        return out

    def splits(self) -> list[dict[str, Any]]:
        """Each multi-op workload end to end split in two, measured and predicted: its ops each
        timed alone and priced alone (``kernels``), and the rest (``rest``): the model code
        around its ops, and what they lose in the workload's order against their times alone (a
        held-out case's steps run in turn, priced as nothing: its whole is its steps' sum).
        Where an end to end misses, this says which half: the kernels, or what surrounds them."""
        out = []
        for r in self.workloads:
            if r.kernels_s is None:
                continue
            kernels_m, kernels_p = r.kernels_s
            out.append({"case": r.case_id, "source": r.source, "measured_s": r.measured_s, "predicted_s": r.predicted_s,
                        "error": r.error, "kernels_measured_s": kernels_m, "kernels_predicted_s": kernels_p,
                        "rest_measured_s": r.measured_s - kernels_m, "rest_predicted_s": r.predicted_s - kernels_p})
        return out

    def stops_transferring(self) -> list[Scored]:
        """Ops and workloads off by more than 2x or outside their interval, worst first."""
        found = [r for r in (*self.ops, *self.workloads) if not r.within_2x or not r.inside]
        return sorted(found, key=lambda r: -abs(math.log(r.measured_s / r.predicted_s)))

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "target": self.target, "calibrated_on": len(self.calibrated_on),
                "split": "calibrated on every microbenchmark case; every workload case and op held out",
                "ops": summary(self.ops), "workloads": summary(self.workloads),
                "all": summary([*self.ops, *self.workloads]), "by_class": self.by_class(None),
                "by_source": self.by_source(),
                "stops_transferring": [r.to_json() for r in self.stops_transferring()],
                "end_to_end_split": self.splits(),
                "not_covered": [dict(m) for m in self.not_covered], "classes": dict(self.classes),
                "cases": [r.to_json() for r in (*self.ops, *self.workloads)]}


def priced_work(work: Work) -> bool:
    """Whether a microbenchmark's Work calibrates an op's kernel: it moves bytes or does math (a
    dispatch or launch case of no work calibrates the host's cost per op alone)."""
    return work.total_flops > 0 or work.total_bytes > 0


def split_runs(runs: Sequence[Run]) -> tuple[list[Observation], list[CaseRecord]]:
    """(microbenchmark observations, workload case records) of runs of one target."""
    micro = [replace_cases(run, [c for c in run.cases if not is_workload(c.work)]) for run in runs]
    workloads = [c for run in runs for c in run.cases if is_workload(c.work)]
    return observations(micro), workloads


def replace_cases(run: Run, cases: Sequence[CaseRecord]) -> Run:
    from dataclasses import replace

    return replace(run, cases=tuple(cases))


def machine_of(run: Run) -> tuple[Any, ...]:
    """What tells two machines apart in their runs: target id, host name, and the memory levels
    of the recorded spec (names and capacities: a Zen 4 and a Zen 5 guest both call themselves
    ``vm`` and ``AMD EPYC``, but their L1 and L2 differ; clocks are left out, as the host spec
    measures them anew each session)."""
    spec = run.target.spec
    levels = tuple((lv.name, lv.capacity_bytes.value if lv.capacity_bytes else None) for lv in spec.memory) if spec else ()
    return run.target.id, run.provenance.get("host"), levels


def machines_label(machine: tuple[Any, ...]) -> str:
    _, host, levels = machine
    caches = "/".join(f"{name}={int(capacity) >> 10}KiB" for name, capacity in levels if capacity and name != "dram")
    return f"{host or 'host'}[{caches}]"


def validate_workloads(runs: Sequence[RunArg], model: str = DEFAULT_MODEL, level: float = 0.9,
                       calibration: "CalibrationArg" = None) -> list[WorkloadValidation]:
    """Per target (per target and host when the runs are of several hosts) with both
    microbenchmark and workload cases: calibrate ``model`` on the microbenchmarks and score the
    workloads (module docstring). A machine whose runs hold no workload case is not scored, nor,
    when calibrating on the runs, one whose microbenchmarks are all of no work
    (:func:`priced_work`: dispatch cases alone calibrate no op's kernel, and its ops would be
    scored at the spec's ceilings under the name of a calibration).

    ``calibration`` (a calibration file in any form :func:`pytest_charz.prediction.predict`
    takes): score with it, through the same core, instead of fitting on the runs."""
    given = load_predictor(model=model, calibration=calibration) if calibration is not None else None
    loaded = load_runs(runs)
    # one machine at a time: runs of the host CPU share the target id "cpu" whatever the host
    machines = {machine_of(run) for run in loaded}
    by_target: dict[str, list[Run]] = {}
    for run in loaded:
        key = f"{run.target.id}@{machines_label(machine_of(run))}" if len(machines) > 1 else run.target.id
        by_target.setdefault(key, []).append(run)
    out = []
    for target, members in by_target.items():
        micro, workloads = split_runs(members)
        if not workloads or not micro or (given is None and not any(priced_work(o.work) for o in micro)):
            continue  # nothing to score, or (fitting on the runs) no kernel to calibrate an op's price on
        spec_run = next(run for run in members if run.target.spec is not None) if any(
            run.target.spec is not None for run in members) else members[0]
        if given is not None:
            core = given
        else:
            try:
                core = fit(get_model(model), micro, ceilings_from_run(spec_run), level).predictor
            except UsageError:
                continue
        ops: list[Scored] = []
        ends: list[Scored] = []
        missing: list[dict[str, str]] = []
        for case in merge_workload_cases(workloads):
            scored, end, gaps = _score_case(core, case)
            ops += scored
            missing += gaps
            if end is not None:
                ends.append(end)
        classes = {key: {"n": c.n, "size": c.table.size, "range": [10 ** c.log10_range[0], 10 ** c.log10_range[1]],
                         "factors": list(c.factors), "method": c.method, "ops": list(c.ops)}
                   for key, c in (core.calibration.classes if core.calibration else {}).items()}
        out.append(WorkloadValidation(model, target, tuple(c.case_id for c in micro), tuple(ops), tuple(ends),
                                      tuple(missing), classes))
    return out
