"""The simulator scored like every other model: against measured runs and published figures.

* **Measured runs.** Every workload case of a run (``suites/test_workloads.py``: ``work.op ==
  "workload"`` with its per-op timings) is simulated on the machine of its target, from a
  capability profile when one is given (``sim:cpu`` from this host's own profile): end to end, the
  timed ops in issue order as one stream (host dispatch and launch gaps included) against the
  case's median; per op, each op's Work (``simulate_work``) against its profiled time.
* **Published figures.** The rows of the committed table of published GPU measurements
  (:mod:`pytest_charz.published`, each with its citation): a GEMM row is its Work simulated on
  the catalogue spec's machine; an LLM row is the prefill of its prompt plus ``output - 1`` decode
  steps at the middle context, each ``simulate_graph`` of the builder's graph for one tensor-
  parallel rank. Rows of products outside the catalogue are listed as not simulated, with why.

Errors are ``simulated / measured - 1`` (positive: the simulator is too slow), the convention of
the published table's spec-only scores, so both read the same way. The document is versioned
(``kind`` ``charz-sim-validation``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import UsageError
from ..formats import Format

SIM_VALIDATION = Format("charz-sim-validation", 1, "charz simulator validation")
KINDS = ("end-to-end", "op", "published")


@dataclass(frozen=True)
class SimScore:
    """One measured time against the simulator's. ``kind`` is one of :data:`KINDS`; ``detail``
    the op class (per-op scores), the row's kind (published) or the phase; ``reason`` says why
    a figure was not simulated (then ``simulated_s`` is None)."""

    id: str
    kind: str
    target: str
    measured_s: float
    simulated_s: float | None
    detail: str = ""
    source: str = ""
    reason: str = ""
    role: str = ""            # a published row's: "held-out", or "fitted-on" (a catalogue prior was fitted on it)

    @property
    def error(self) -> float | None:
        return None if self.simulated_s is None else self.simulated_s / self.measured_s - 1.0

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "target": self.target, "measured_s": self.measured_s,
                "simulated_s": self.simulated_s, "error": self.error, "detail": self.detail, "source": self.source,
                "reason": self.reason, "role": self.role}


def simulated_machine(target_id: str, profile: Mapping[str, Any] | None, calibration: Any = None) -> Any:
    """The simulated machine of ``target_id``: from ``profile`` when given, else its spec; its ops
    priced by the one prediction core of that target, profile and ``calibration`` (a file
    ``charz calibrate`` wrote, or its path), as ``charz sim --calibration`` prices them."""
    from . import Machine
    from ..prediction import load_predictor
    from ..targets.catalogue import resolve

    spec = resolve(target_id)
    # with a profile, the target is the one it and the calibration were measured on (a recorded
    # run of another CPU is still "cpu"); the spec only fills what the profile lacks
    predictor = (load_predictor(None if profile is not None else spec, profile=profile, calibration=calibration)
                 if calibration is not None else None)
    return (Machine.from_profile(profile, spec, predictor) if profile is not None
            else Machine.from_spec(spec, predictor))


def case_graph(case: Any) -> Any:
    """The timed ops of a workload case as one stream, in the order they were timed."""
    from ..workloads.graph import Graph, Op, sequential

    shape = case.work.shape
    phase = str(shape.get("phase", "forward"))
    ops = [Op(name=op.name, op_class=op.op_class, work=op.work, source=op.source) for op in case.ops]
    return Graph(name=str(shape.get("model", case.test)), phase=phase, ops=sequential(ops),
                 params={k: shape[k] for k in ("batch", "seq", "dtype") if k in shape})


def score_runs(runs: Sequence[Any], profile: Mapping[str, Any] | None = None,
               calibration: Any = None) -> list[SimScore]:
    """Every workload case of ``runs`` (typed :class:`~pytest_charz.records.Run` values) end to end
    and op by op, on its target's machine (from ``profile`` when given; its ops priced with
    ``calibration`` when given, :func:`simulated_machine`)."""
    from . import simulate_graph, simulate_work

    scores: list[SimScore] = []
    machines: dict[str, Any] = {}
    for run in runs:
        target = run.target.id
        if target not in machines:
            machines[target] = simulated_machine(target, profile, calibration)
        machine = machines[target]
        for case in run.cases:
            if case.work.op != "workload" or not case.ops or not case.median_s:
                continue
            graph = case_graph(case)
            scores.append(SimScore(case.id, "end-to-end", target, float(case.median_s),
                                   float(simulate_graph(graph, machine).latency_s), graph.phase))
            for op in case.ops:
                if op.time_s > 0:
                    scores.append(SimScore(f"{case.id}::{op.name}", "op", target, float(op.time_s),
                                           float(simulate_work(op.work, machine).latency_s), op.op_class))
    return scores


def score_published(rows: Sequence[Any] | None = None) -> list[SimScore]:
    """The published table's rows (default: the committed one) against the simulator."""
    from . import simulate_work
    from ..published import load_measurements
    from ..published.score import case_work
    from ..published.serving import ServingCase
    from .simulate import simulate_serving_case
    from ..targets.catalogue import catalogue

    known = {name for spec in catalogue().values() for name in (spec.id, *spec.identity.aliases)}
    scores = []
    for row in load_measurements() if rows is None else rows:
        measured = row.measured_time_s()
        if row.target not in known:
            scores.append(SimScore(row.id, "published", row.target, measured, None, row.kind, row.source,
                                   f"{row.target!r} is not a catalogue target", row.role))
            continue
        try:
            if isinstance(row.case, ServingCase):
                simulated = simulate_serving_case(row.case, simulated_machine(row.target, None))
            else:
                work = case_work(row.case)
                simulated = float(simulate_work(work, simulated_machine(row.target, None)).latency_s)
        except UsageError as exc:
            scores.append(SimScore(row.id, "published", row.target, measured, None, row.kind, row.source, str(exc),
                                   row.role))
            continue
        scores.append(SimScore(row.id, "published", row.target, measured, simulated, row.kind, row.source,
                               role=row.role))
    return scores


def summary(scores: Sequence[SimScore]) -> dict[str, dict[str, Any]]:
    """Per kind (and per published row kind, per op class of the ``op`` scores: ``op:<class>``):
    n, MAPE, median and P90 |error|, bias (median error)."""
    from ..validation.models import error_summary

    groups: dict[str, list[float]] = {}
    for score in scores:
        if score.error is None:
            continue
        groups.setdefault(score.kind, []).append(score.error)
        if score.kind == "op" and score.detail:
            groups.setdefault(f"op:{score.detail}", []).append(score.error)   # per op class
        if score.kind == "published":
            groups.setdefault(f"published:{score.detail}", []).append(score.error)
            groups.setdefault(f"published:{score.role}", []).append(score.error)
    out = {}
    for key, errors in sorted(groups.items()):
        figures = error_summary(errors, [None] * len(errors))
        out[key] = {k: v for k, v in figures.items() if k != "coverage"}
    return out


def validation_document(scores: Sequence[SimScore], runs: Sequence[str], profile_path: str | None) -> dict[str, Any]:
    """The versioned JSON document of a simulator validation."""
    return {**SIM_VALIDATION.stamp(), "runs": list(runs), "profile": profile_path,
            "error": "simulated / measured - 1", "summary": summary(scores),
            "scores": [score.to_json() for score in scores]}


def _pct(value: float | None, signed: bool = True) -> str:
    return "-" if value is None else (f"{100 * value:+.1f}%" if signed else f"{100 * value:.1f}%")


def render_markdown(document: Mapping[str, Any]) -> str:
    """The summary, the published rows one by one with their sources, and the end-to-end cases."""
    lines = ["# Simulator validation", "",
             f"Runs: {', '.join(document['runs']) or 'none'}; machine from "
             f"{document['profile'] or 'the catalogue specs'}. Error = {document['error']}.", "",
             "| scored | n | median abs | P90 abs | bias |", "|---|---|---|---|---|"]
    for key, figures in document["summary"].items():
        lines.append(f"| {key} | {figures['n']} | {_pct(figures['median_abs'], False)} | "
                     f"{_pct(figures['p90_abs'], False)} | "
                     f"{_pct(figures['bias'])} |")
    for kind, title in (("published", "Published figures"), ("end-to-end", "Measured workloads, end to end")):
        rows = [s for s in document["scores"] if s["kind"] == kind]
        if not rows:
            continue
        lines += ["", f"## {title}", "", "| id | target | role | measured | simulated | error | source or reason |",
                  "|---|---|---|---|---|---|---|"]
        for s in rows:
            simulated = "-" if s["simulated_s"] is None else f"{1e3 * s['simulated_s']:.4g} ms"
            note = (s["reason"] or s["source"]).replace("|", "\\|")
            lines.append(f"| {s['id']} | {s['target']} | {s['role'] or '-'} | {1e3 * s['measured_s']:.4g} ms | {simulated} | "
                         f"{_pct(s['error'])} | {note} |")
    return "\n".join(lines) + "\n"




def validate_sim_command(run_paths: Sequence[str], profile_path: str | None, out_dir: str,
                         quiet: bool = False, calibration_path: str | None = None) -> dict[str, Any]:
    """``charz validate RUN... --sim [--sim-profile P] [--sim-calibration C]``: score the
    simulator, write ``validation-sim.json`` and ``.md`` in ``out_dir``, print the summary (not
    with ``quiet``: :func:`print_sim_summary` then prints it); returns the document."""
    import os

    from ..formats import PROFILE, atomic_write_json, atomic_write_text
    from ..run import load_run

    profile = PROFILE.load(profile_path) if profile_path else None
    scores = score_runs([load_run(path) for path in run_paths], profile, calibration_path) + score_published()
    document = validation_document(scores, run_paths, profile_path)
    atomic_write_json(os.path.join(out_dir, "validation-sim.json"), document)
    atomic_write_text(os.path.join(out_dir, "validation-sim.md"), render_markdown(document))
    if not quiet:
        print_sim_summary(document, out_dir)
    return document


def print_sim_summary(document: Mapping[str, Any], out_dir: str) -> None:
    """The simulator's error by kind of case, and where its report was written."""
    import os

    print(f"simulator error ({document['error']}):")
    for key, figures in document["summary"].items():
        print(f"  {key:<19} n={figures['n']:<4} median |error| {_pct(figures['median_abs'], False):>6}  "
              f"P90 {_pct(figures['p90_abs'], False):>6}  bias {_pct(figures['bias']):>7}")
    print(f"simulator validation: {os.path.join(out_dir, 'validation-sim.md')} (.json)")


__all__ = ["KINDS", "SIM_VALIDATION", "SimScore", "case_graph", "print_sim_summary", "render_markdown", "score_published",
           "score_runs", "simulated_machine", "summary", "validate_sim_command", "validation_document"]
