"""Calibration over run files: efficiency per op class, conformal bands per regime.

A model's uncalibrated prediction of a case uses the ceilings of the run's target (the TargetSpec
recorded in the run file; see :func:`ceilings_from_run`). Figures the spec lacks (a host CPU spec
has no DRAM bandwidth or launch overhead) are filled from the calibration cases themselves: the
best rate they achieved (FLOP/s per dtype, bytes/s per memory level and link), the median
per-launch time, the median load latency per memory level. They come only from the calibration
split, so held-out cases never inform their own prediction, and every filled figure says so in
its source.

Then, per op class (``op:dtype`` for single-dtype FLOPs, else ``op``), :func:`fit_efficiency`
fits predicted / measured time against log10 of the class's size (FLOPs for compute-bound classes,
bytes for memory-bound ones, accesses, launches or transfer bytes otherwise). Interval factors are
split-conformal on leave-one-out residuals: each calibration case is predicted by the table
refitted without it, so a residual is an honest out-of-sample error. Bands per regime are the
relative error ``(low_factor - 1, high_factor - 1)`` of that regime's residuals.

Calibration file (version 1)::

    {"version": 1, "kind": "charz-calibration", "target": id, "model": name, "created": ISO-8601,
     "calibration": Calibration JSON (tables by op and by op class, pooled interval),
     "ceilings": Ceilings JSON (the spec, filled as above),
     "bands": {regime: {"lo", "hi", "n", "level", "coverage", "method"}},
     "fitted_on": {"runs": [{"path", "created"}], "cases": [ids]}, "held_out": [ids]}

``method`` says how a band was made: ``conformal`` (the regime's own residuals), ``pooled``
(too few of its own for the level: the residuals of all regimes) or ``range`` (too few in all:
the widest residuals seen, coverage not guaranteed). ``coverage`` is the fraction of held-out
cases of the regime inside the band (null without held-out cases).
"""
from __future__ import annotations

import datetime
import fnmatch
import math
import os
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from ..errors import CharzError, FormatError, UsageError
from ..profile_fit import link_figures
from ..targets.spec import Compute, Figure, Identity, Link, MemoryLevel, Power, TargetSpec
from ..work import MEMORY_LEVELS, Work
from .base import REGIMES, Model, Prediction, Uncovered
from .calibrate import Calibration, EfficiencyTable, conformal_interval, fit_efficiency
from .ceilings import Ceilings
from .roofline import latency_level, roofline_floor_s

CALIBRATION_FILE_VERSION = 1
CALIBRATION_FILE_KIND = "charz-calibration"
_SIZE_OF_REGIME = {"compute": "flops", "memory": "bytes", "latency": "accesses", "launch": "launches",
                   "transfer": "transfers"}


# -- reading runs ---------------------------------------------------------------------------------
def _figure(raw: Any) -> Figure | None:
    return _required(raw) if raw else None


def _required(raw: Any) -> Figure:
    if not raw:
        raise ValueError(f"a required figure is missing ({raw!r})")
    return Figure(float(raw["value"]), str(raw["source"]))


def _link(raw: Mapping[str, Any]) -> Link:
    return Link(raw["name"], _required(raw["bandwidth_bytes_per_s"]), _figure(raw.get("latency_us")),
                int(raw.get("count", 1)))


def spec_from_json(data: Mapping[str, Any]) -> TargetSpec:
    """The TargetSpec a run file records (``TargetSpec.to_json()``), rebuilt."""
    try:
        identity = {**data["identity"]}
        for key in ("aliases", "match_name", "pci_device_ids"):
            identity[key] = tuple(identity.get(key) or ())
        compute = data["compute"]
        power = data.get("power")
        return TargetSpec(
            identity=Identity(**identity),
            compute=Compute(_required(compute["units"]), compute["unit_name"], _figure(compute.get("clock_base_mhz")),
                            _figure(compute.get("clock_boost_mhz")),
                            {k: _required(v) for k, v in compute["peak_flops"].items()},
                            {k: _required(v) for k, v in (compute.get("vector_peak_flops") or {}).items()}),
            memory=tuple(MemoryLevel(m["name"], m["label"], m["scope"], _figure(m.get("capacity_bytes")),
                                     _figure(m.get("bandwidth_bytes_per_s")), _figure(m.get("latency_ns")))
                         for m in data["memory"]),
            host_link=_link(data["host_link"]) if data.get("host_link") else None,
            peer_links=tuple(_link(raw) for raw in data.get("peer_links") or ()),
            power=Power(_figure(power.get("tdp_w")), _figure(power.get("idle_w"))) if power else None,
            sources=dict(data.get("sources") or {}), origin=str(data.get("origin", "")),
            notes=tuple(data.get("notes") or ()),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise FormatError(f"the run's target spec is malformed: {exc!r}") from exc


def ceilings_from_run(run: Mapping[str, Any]) -> Ceilings:
    """Datasheet ceilings of the run's target: its recorded spec, else the catalogue entry.

    The host CPU (``cpu``) has no catalogue entry that would describe another machine, so its
    run must carry the spec (the plugin always records it).
    """
    target = run.get("target") or {}
    if target.get("spec"):
        return Ceilings.from_spec(spec_from_json(target["spec"]))
    target_id = str(target.get("id") or "")
    if not target_id or target_id in ("cpu", "host"):
        raise FormatError(f"the run of target {target_id or '?'!r} records no target spec to predict from")
    from ..targets.catalogue import resolve

    return Ceilings.from_spec(resolve(target_id))


@dataclass(frozen=True)
class Observation:
    """One case of one target: its work and measured median (the median over runs when several)."""

    case_id: str
    target: str
    work: Work
    measured_s: float
    runs: int = 1

    @property
    def op_class(self) -> str:
        return op_class(self.work)


# Shape keys that name a variant of an op whose efficiency differs wholesale: the thread count
# (a read sweep on one core is half as fast as on two), the STREAM kernel, the transfer kind.
VARIANT_KEYS = ("kernel", "kind", "pinned", "threads", "role")


def op_class(work: Work) -> str:
    """``op:dtype`` when the work's FLOPs are of one dtype, else ``op`` (``""`` for no op), with
    the variant keys of its shape (``read@threads=2``): each class gets its own efficiency table."""
    name = f"{work.op}:{next(iter(work.flops))}" if len(work.flops) == 1 else work.op
    variants = [f"{key}={work.shape[key]}" for key in VARIANT_KEYS if key in work.shape]
    return f"{name}@{','.join(variants)}" if variants else name


def observations(runs: Sequence[Mapping[str, Any]]) -> list[Observation]:
    """Measured cases of ``runs`` (one target), by case id; cases without a median are skipped."""
    grouped: dict[str, list[tuple[Mapping[str, Any], float]]] = {}
    targets = {str((run.get("target") or {}).get("id")) for run in runs}
    if len(targets) > 1:
        raise UsageError(f"observations of one target only; these runs are of {', '.join(sorted(targets))}")
    for run in runs:
        for case in run.get("cases") or ():
            median_s = (case.get("measurement") or {}).get("median_s")
            if case.get("work") and isinstance(median_s, (int, float)) and math.isfinite(median_s) and median_s > 0:
                grouped.setdefault(str(case["id"]), []).append((case, float(median_s)))
    target = targets.pop() if targets else ""
    return [Observation(case_id, target, Work.from_json(found[0][0]["work"]),
                        statistics.median(m for _, m in found), len(found))
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
        by_class.setdefault(case.op_class, []).append(case)
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
    alpha-beta link latency, median per-launch time, median load latency per level."""
    peak: dict[str, float] = {}
    bandwidth: dict[str, float] = {}
    links: dict[str, list[tuple[float, float]]] = {}
    launches: list[float] = []
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
        if work.launches and not work.flops and not work.bytes and not work.transfers:
            launches.append(time_s / work.launches)
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
        launch_overhead_s=Figure(statistics.median(launches), f"{source}: median per-launch time") if launches else None,
        compute_units=spec.compute_units,
    )


def model_ceilings(model: str, spec: Ceilings, measured: Ceilings) -> Ceilings:
    """``empirical-roofline`` sees measured figures first; every other model the spec's first."""
    return measured.filled_from(spec) if model == "empirical-roofline" else spec.filled_from(measured)


# -- fitting --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fitted:
    """A model calibrated on some cases of one target, ready to predict others."""

    model: Model
    ceilings: Ceilings
    calibration: Calibration
    bands: Mapping[str, Mapping[str, Any]]
    residuals: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def predict(self, work: Work) -> Prediction:
        """The calibrated prediction, its interval from the band of its regime."""
        return calibrated_prediction(self.model, self.calibration, self.ceilings, work, self.bands)


def calibrated_prediction(model: Model, calibration: Calibration, ceilings: Ceilings, work: Work,
                          bands: Mapping[str, Mapping[str, Any]] | None = None) -> Prediction:
    """``model``'s prediction divided by the efficiency of the work's op class (else op, else the
    ``""`` table), never below the roofline floor; interval from ``bands[regime]`` when there is
    one, else the calibration's pooled factors."""
    prediction = model.predict(work, ceilings)
    if not prediction.covered:
        return prediction
    try:
        floor_s = roofline_floor_s(work, ceilings)
    except Uncovered:
        floor_s = 0.0
    table = calibration.tables.get(op_class(work))
    by_class = replace(calibration, tables={work.op: table}) if table else calibration
    adjusted = by_class.adjust(prediction, work, floor_s)
    band = (bands or {}).get(adjusted.regime)
    if band is None:
        return adjusted
    return adjusted.with_interval(adjusted.time_s * (1 + band["lo"]), adjusted.time_s * (1 + band["hi"]))


def _size_amount(members: Sequence[tuple[Observation, Prediction]]) -> str:
    regimes = [p.regime for _, p in members]
    preferred = _SIZE_OF_REGIME[max(set(regimes), key=lambda r: (regimes.count(r), r))]
    for amount in (preferred, *_SIZE_OF_REGIME.values()):
        probe = EfficiencyTable("", amount, (0.0,), (1.0,))
        if all(probe.size_of(c.work) > 0 for c, _ in members):
            return amount
    raise UsageError("no size amount is positive for every case of the class")


def _fit_tables(points: Sequence[tuple[Observation, Prediction]], knots: int) -> dict[str, EfficiencyTable]:
    by_class: dict[str, list[tuple[Observation, Prediction]]] = {}
    by_op: dict[str, list[tuple[Observation, Prediction]]] = {}
    for case, prediction in points:
        by_class.setdefault(case.op_class, []).append((case, prediction))
        by_op.setdefault(case.work.op, []).append((case, prediction))
    tables: dict[str, EfficiencyTable] = {}
    for groups in (by_op, by_class):  # class tables replace op tables of the same name
        for name, members in groups.items():
            try:
                amount = _size_amount(members)
            except UsageError:
                continue  # a class mixing works of no common size (e.g. flops-only and bytes-only) gets no table
            probe = EfficiencyTable(name, amount, (0.0,), (1.0,))
            sizes = [probe.size_of(c.work) for c, _ in members]
            # knots=0: a knot at every calibrated size (at most 64), so the efficiency follows a
            # staircase (cache levels) from one calibrated size to the next.
            count = knots or min(64, len(set(sizes)))
            tables[name] = fit_efficiency([(size, p.time_s, c.measured_s) for size, (c, p) in zip(sizes, members)],
                                          op=name, size=amount, knots=count)
    return tables


def _factors(residuals: Sequence[float], level: float) -> tuple[float, float, str] | None:
    if not residuals:
        return None
    try:
        return (*conformal_interval(residuals, level), "conformal")
    except UsageError:
        return math.exp(min(residuals)), math.exp(max(residuals)), "range"


def fit(model: Model, cases: Sequence[Observation], spec: Ceilings, level: float = 0.9, knots: int = 0,
        measured_from: Sequence[Observation] | None = None) -> Fitted:
    """Calibrate ``model`` on ``cases`` (one target; spec ceilings ``spec``).

    Missing figures are measured on ``measured_from`` (default: ``cases``). Cases the model does
    not cover are left out. Raises UsageError when it covers none of them.
    """
    ceilings = model_ceilings(model.name, spec, measured_ceilings(measured_from or cases, spec))
    points = [(c, p) for c in cases for p in [model.predict(c.work, ceilings)] if p.covered and p.time_s > 0]
    if not points:
        raise UsageError(f"model {model.name!r} covers none of the {len(cases)} calibration case(s)")
    tables = _fit_tables(points, knots)
    residuals: dict[str, list[float]] = {}
    for index, (case, prediction) in enumerate(points):
        rest = [point for other, point in enumerate(points) if other != index and point[0].op_class == case.op_class]
        if not rest:
            continue  # a class of one case has no out-of-sample residual
        loo = Calibration(model.name, _fit_tables(rest, knots))
        predicted = calibrated_prediction(model, loo, ceilings, case.work)
        residuals.setdefault(prediction.regime, []).append(math.log(case.measured_s / predicted.time_s))
    pooled = [r for values in residuals.values() for r in values]
    interval = _factors(pooled, level)
    calibration = Calibration(model.name, tables, interval[:2] if interval else (1.0, 1.0), level if interval else 0.0)
    bands: dict[str, dict[str, Any]] = {}
    for regime in REGIMES:
        own = residuals.get(regime, [])
        if not own and not any(p.regime == regime for _, p in points):
            continue
        made = _factors(own, level)
        if (made is None or made[2] == "range") and interval is not None and interval[2] == "conformal":
            made = (interval[0], interval[1], "pooled")
        if made is None:
            continue
        bands[regime] = {"lo": made[0] - 1.0, "hi": made[1] - 1.0, "n": len(own), "level": level,
                         "coverage": None, "method": made[2]}
    return Fitted(model, ceilings, calibration, bands, {r: tuple(v) for r, v in residuals.items()})


def band_coverage(fitted: Fitted, held_out: Sequence[Observation]) -> dict[str, float | None]:
    """Per regime, the fraction of held-out cases whose measured median lies in the interval."""
    inside: dict[str, list[bool]] = {}
    for case in held_out:
        prediction = fitted.predict(case.work)
        if prediction.covered and prediction.regime in fitted.bands:
            low, high = prediction.interval_s
            inside.setdefault(prediction.regime, []).append(low <= case.measured_s <= high)
    return {regime: (sum(flags) / len(flags) if flags else None) for regime, flags in inside.items()}


# -- the calibration file -------------------------------------------------------------------------
@dataclass(frozen=True)
class CalibrationFile:
    target: str
    model: str
    calibration: Calibration
    ceilings: Ceilings
    bands: Mapping[str, Mapping[str, Any]]
    fitted_on: Mapping[str, Any]
    held_out: tuple[str, ...]
    created: str

    def predict(self, work: Work) -> Prediction:
        """The calibrated prediction of ``work`` on this file's target."""
        from .api import get_model

        return calibrated_prediction(get_model(self.model), self.calibration, self.ceilings, work, self.bands)

    def to_json(self) -> dict[str, Any]:
        return {"version": CALIBRATION_FILE_VERSION, "kind": CALIBRATION_FILE_KIND, "target": self.target,
                "model": self.model, "created": self.created, "calibration": self.calibration.to_json(),
                "ceilings": self.ceilings.to_json(), "bands": {r: dict(b) for r, b in self.bands.items()},
                "fitted_on": dict(self.fitted_on), "held_out": list(self.held_out)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CalibrationFile":
        if not isinstance(data, Mapping) or data.get("kind") != CALIBRATION_FILE_KIND:
            kind = data.get("kind") if isinstance(data, Mapping) else type(data).__name__
            raise FormatError(f"not a charz calibration file (kind={kind!r})")
        if data.get("version") != CALIBRATION_FILE_VERSION:
            raise FormatError(f"calibration file version {data.get('version')!r} is not supported "
                              f"(this pytest-charz reads version {CALIBRATION_FILE_VERSION})")
        try:
            bands = {str(r): {**b, "lo": float(b["lo"]), "hi": float(b["hi"])} for r, b in data["bands"].items()}
            return cls(str(data["target"]), str(data["model"]), Calibration.from_json(data["calibration"]),
                       Ceilings.from_json(data["ceilings"]), bands, dict(data["fitted_on"]),
                       tuple(data.get("held_out") or ()), str(data.get("created", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"calibration file is malformed: {exc!r}") from exc


def load_calibration_file(path: str | os.PathLike[str]) -> CalibrationFile:
    """Read a calibration file; FormatError when it is not one or of an unknown version."""
    import json

    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise FormatError(f"{os.fspath(path)}: cannot be read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{os.fspath(path)}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return CalibrationFile.from_json(data)


def band_for(calfile: CalibrationFile, regime: str) -> Mapping[str, Any] | None:
    """The verdict band ``{"lo", "hi", ...}`` (relative errors) of ``regime``, or None."""
    return calfile.bands.get(regime)


def load_runs(runs: Iterable[Mapping[str, Any] | str]) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, run) pairs of run file paths (loaded) or run mappings (path from their ``path`` key)."""
    from ..run import load_run

    return [(item, load_run(item)) if isinstance(item, str) else (str(item.get("path", "")), item) for item in runs]


def calibrate(runs: Sequence[Mapping[str, Any] | str], model: str = "composite", target: str | None = None,
              level: float = 0.9, holdout: str | None = "alternate", calibrate_on: str | None = None,
              knots: int = 0) -> CalibrationFile:
    """Calibrate ``model`` on run files (paths or loaded mappings) of one target.

    ``target`` picks the runs of that target id when they are of several. ``holdout``:
    ``"alternate"`` holds out every other size per op class (:func:`split_cases`), ``None`` fits on
    every case; ``calibrate_on`` (a glob of case ids) overrides it. Band coverage is measured on
    the held-out cases.
    """
    from .api import get_model

    if holdout not in ("alternate", None):
        raise UsageError(f"holdout must be 'alternate' or None, got {holdout!r}")
    loaded = load_runs(runs)
    ids = sorted({str((run.get("target") or {}).get("id")) for _, run in loaded})
    if target is None and len(ids) > 1:
        raise UsageError(f"the runs are of several targets ({', '.join(ids)}): choose one with target=")
    chosen = [(path, run) for path, run in loaded if target is None or (run.get("target") or {}).get("id") == target]
    if not chosen:
        raise UsageError(f"no run of target {target!r}; the runs are of {', '.join(ids)}")
    cases = observations([run for _, run in chosen])
    if calibrate_on is not None or holdout == "alternate":
        fit_cases, held = split_cases(cases, calibrate_on)
    else:
        fit_cases, held = list(cases), []
    fitted = fit(get_model(model), fit_cases, ceilings_from_run(chosen[0][1]), level, knots)
    coverage = band_coverage(fitted, held)
    bands = {regime: {**band, "coverage": coverage.get(regime)} for regime, band in fitted.bands.items()}
    return CalibrationFile(
        target=cases[0].target, model=model, calibration=fitted.calibration, ceilings=fitted.ceilings, bands=bands,
        fitted_on={"runs": [{"path": path, "created": run.get("created")} for path, run in chosen],
                   "cases": [c.case_id for c in fit_cases]},
        held_out=tuple(c.case_id for c in held),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def calibrate_command(args: Any) -> int:
    """``charz calibrate RUN... [--model M] [--out PATH]``: fit and write the calibration file."""
    from ..run import atomic_write_json
    from ..store import run_target_key

    loaded = load_runs(list(args.runs))
    calfile = calibrate([{**run, "path": path} for path, run in loaded], model=args.model,
                        target=getattr(args, "target", None),
                        level=getattr(args, "level", 0.9), calibrate_on=getattr(args, "calibrate_on", None),
                        holdout=None if getattr(args, "no_holdout", False) else "alternate")
    key = run_target_key(next(run for _, run in loaded if (run.get("target") or {}).get("id") == calfile.target))
    out = args.out or os.path.join("baselines", key, f"calibration-{calfile.model}.json")
    try:
        atomic_write_json(out, calfile.to_json())
    except OSError as exc:
        raise CharzError(f"cannot write the calibration file {out!r}: {exc}") from exc
    print(f"calibrated {calfile.model} on {len(calfile.fitted_on['cases'])} case(s) of {calfile.target}, "
          f"{len(calfile.held_out)} held out -> {out}")
    for regime, band in calfile.bands.items():
        coverage = "-" if band["coverage"] is None else f"{100 * band['coverage']:.0f}%"
        print(f"  {regime:<9} band {100 * band['lo']:+.1f}% .. {100 * band['hi']:+.1f}%  "
              f"({band['method']}, n={band['n']}, held-out coverage {coverage})")
    return 0
