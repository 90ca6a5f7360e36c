"""The run file's typed records: one measured case (:class:`CaseRecord`) and a run (:class:`Run`).

The session builds them from typed values (``Work``, ``SamplerSettings``, ``Measurement``, the
conditions' ``Snapshot`` and ``Interval``, ``Prediction``, ``Verdict``); profile, calibration and
validation read them. ``to_json`` writes the run format (``formats.RUN``, every nested record
stamped with its own ``kind`` and ``version``); ``from_json`` reads it back, and version-1 runs
(whose nested records were unstamped) migrate on load. ``docs/run-format.md`` documents every
field.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Mapping

from .errors import FormatError, UsageError
from .formats import CASE, RUN
from .measure.conditions import Interval, Snapshot
from .measure.readings import CounterReading, EnergyReading
from .measure.sampler import Measurement, SamplerSettings
from .targets.spec import TargetSpec
from .work import Work

if TYPE_CHECKING:
    from .models.base import Prediction
    from .verdict import Verdict

RUN_STATUSES = ("running", "complete", "interrupted", "failed")


@RUN.migrate_from(1)
def _run_v1(document: dict[str, Any]) -> dict[str, Any]:
    # Version 2 stamps each nested record (case, work, measurement, prediction, verdict, spec)
    # with its own kind and version; version-1 records are read as their version 1, unstamped.
    return document


@dataclass(frozen=True)
class CaseConditions:
    """What was true before and after a case measured, and the interval between."""

    before: Snapshot
    after: Snapshot
    interval: Interval

    def to_json(self) -> dict[str, Any]:
        return {"before": self.before.to_json(), "after": self.after.to_json(), "interval": self.interval.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CaseConditions":
        return cls(Snapshot.from_json(data.get("before") or {}), Snapshot.from_json(data.get("after") or {}),
                   Interval.from_json(data.get("interval") or {}))


@dataclass(frozen=True)
class OpTiming:
    """One op of a workload case, timed inside the case: a profiled execution of the op within
    one run of the whole (the profiler's time, seconds), matched to the op of the case's graph.
    Not sampled like the case itself: one observation per op, beside the case's measurement."""

    name: str
    op_class: str
    source: str
    time_s: float
    work: Work

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "op_class": self.op_class, "source": self.source, "time_s": self.time_s,
                "work": self.work.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "OpTiming":
        return cls(str(data["name"]), str(data.get("op_class", "")), str(data.get("source", "")),
                   float(data["time_s"]), Work.from_json(data.get("work") or {}))


def _settings_from_json(data: Mapping[str, Any]) -> SamplerSettings:
    known = {f.name for f in fields(SamplerSettings)}
    return SamplerSettings(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class CaseRecord:
    """One measured case of a run.

    ``id`` is the node id plus ``::label`` for a named measurement; ``suite`` the suite module's
    path; ``params`` the case's parameters as JSON values; ``achieved`` the rates of ``work`` at
    the measured median (:func:`pytest_charz.work.achieved_rates`); ``peak_fraction`` those rates
    against the target's peaks; ``flags`` what the conditions and the sampler found suspicious;
    ``ops`` the per-op timings of a workload case (empty for a microbenchmark); ``counters`` and
    ``energy`` the profiler counters and measured energy of the timed samples (None in runs
    recorded without them; each says what is missing and why).
    """

    id: str
    nodeid: str
    suite: str
    test: str
    label: str
    params: Mapping[str, Any]
    work: Work
    settings: SamplerSettings
    measurement: Measurement
    conditions: CaseConditions
    achieved: Mapping[str, Mapping[str, float]]
    peak_fraction: Mapping[str, float]
    flags: tuple[str, ...]
    prediction: "Prediction | None" = None
    verdict: "Verdict | None" = None
    ops: tuple[OpTiming, ...] = ()
    counters: CounterReading | None = None
    energy: EnergyReading | None = None

    @property
    def median_s(self) -> float | None:
        """The measured median per call in seconds, None when every sample was discarded."""
        median = self.measurement.median_s
        return float(median) if isinstance(median, (int, float)) and math.isfinite(median) else None

    @property
    def shape(self) -> Mapping[str, Any]:
        return self.work.shape

    def judged(self, prediction: "Prediction", verdict: "Verdict") -> "CaseRecord":
        """This record with its prediction and verdict."""
        return replace(self, prediction=prediction, verdict=verdict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            **CASE.stamp(),
            "id": self.id, "nodeid": self.nodeid, "suite": self.suite, "test": self.test, "label": self.label,
            "params": dict(self.params),
            "work": self.work.to_json(),
            "settings": self.settings.to_json(),
            "measurement": self.measurement.to_json(),
            "conditions": self.conditions.to_json(),
            "achieved": {k: dict(v) for k, v in self.achieved.items()},
            "peak_fraction": dict(self.peak_fraction),
            "flags": list(self.flags),
        }
        if self.ops:
            data["ops"] = [op.to_json() for op in self.ops]
        if self.counters is not None:
            data["counters"] = self.counters.to_json()
        if self.energy is not None:
            data["energy"] = self.energy.to_json()
        if self.prediction is not None:
            data["prediction"] = self.prediction.to_json()
        if self.verdict is not None:
            data["verdict"] = self.verdict.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "a run") -> "CaseRecord":
        from .models.base import Prediction
        from .verdict import Verdict

        where = f"{source}: case {data.get('id', '?')!r}" if isinstance(data, Mapping) else source
        data = CASE.check_nested(data, where)
        try:
            return cls(
                id=str(data["id"]), nodeid=str(data.get("nodeid", data["id"])), suite=str(data.get("suite", "")),
                test=str(data.get("test", "")), label=str(data.get("label", "")),
                params=dict(data.get("params") or {}),
                work=Work.from_json(data.get("work") or {}),
                settings=_settings_from_json(data.get("settings") or {}),
                measurement=Measurement.from_json(data["measurement"]),
                conditions=CaseConditions.from_json(data.get("conditions") or {}),
                achieved={str(k): dict(v) for k, v in (data.get("achieved") or {}).items()},
                peak_fraction=dict(data.get("peak_fraction") or {}),
                flags=tuple(str(f) for f in data.get("flags") or ()),
                prediction=Prediction.from_json(data["prediction"]) if data.get("prediction") else None,
                verdict=Verdict.from_json(data["verdict"]) if data.get("verdict") else None,
                ops=tuple(OpTiming.from_json(op) for op in data.get("ops") or ()),
                counters=CounterReading.from_json(data["counters"]) if data.get("counters") else None,
                energy=EnergyReading.from_json(data["energy"]) if data.get("energy") else None,
            )
        except FormatError as exc:
            raise FormatError(f"{where}: {exc}") from None
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"{where} is malformed: {exc!r}") from None


@dataclass(frozen=True)
class RunTarget:
    """The target a run characterized: catalogue id, name, kind, where its spec came from, and
    the spec itself (the host CPU's is derived at run time, so the run must carry it)."""

    id: str
    name: str
    kind: str
    origin: str
    spec: TargetSpec | None

    @classmethod
    def of(cls, spec: TargetSpec) -> "RunTarget":
        return cls(spec.id, spec.identity.name, spec.identity.kind, spec.origin, spec)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "kind": self.kind, "origin": self.origin,
                "spec": self.spec.to_json() if self.spec is not None else None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str) -> "RunTarget":
        spec = data.get("spec")
        return cls(str(data.get("id") or ""), str(data.get("name") or ""), str(data.get("kind") or ""),
                   str(data.get("origin") or ""),
                   TargetSpec.from_json(spec, f"{source}: the target spec") if spec else None)


@dataclass(frozen=True)
class Run:
    """One characterization run: what was characterized, on which device, under which provenance
    and settings, and its cases. ``path`` is where it was read from (not part of the file)."""

    target: RunTarget
    device: Mapping[str, Any]
    provenance: Mapping[str, Any]
    settings: Mapping[str, Any]
    created: str
    cases: tuple[CaseRecord, ...] = ()
    status: str = "running"
    path: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.status not in RUN_STATUSES:
            raise UsageError(f"run status must be one of {', '.join(RUN_STATUSES)}; got {self.status!r}")

    def header(self) -> dict[str, Any]:
        return {
            **RUN.stamp(),
            "created": self.created,
            "status": self.status,
            "target": self.target.to_json(),
            "device": dict(self.device),
            "provenance": dict(self.provenance),
            "settings": dict(self.settings),
        }

    def to_json(self) -> dict[str, Any]:
        return {**self.header(), "cases": [case.to_json() for case in self.cases]}

    def with_cases(self, cases: tuple[CaseRecord, ...], status: str | None = None) -> "Run":
        return replace(self, cases=cases, status=status or self.status)

    @classmethod
    def from_json(cls, data: Any, source: str = "a run") -> "Run":
        """A run from its JSON (any version this code migrates); FormatError naming ``source``."""
        document = RUN.check(data, source)
        cases = document.get("cases")
        if not isinstance(cases, list):
            raise FormatError(f"{source}: 'cases' is missing or not a list")
        return cls.from_parts(document, cases, source)

    @classmethod
    def from_parts(cls, header: Mapping[str, Any], cases: list[Any], source: str,
                   status: str | None = None) -> "Run":
        """A run from a checked header and its case JSONs (as the journal keeps them)."""
        try:
            return cls(
                target=RunTarget.from_json(header.get("target") or {}, source),
                device=dict(header.get("device") or {}),
                provenance=dict(header.get("provenance") or {}),
                settings=dict(header.get("settings") or {}),
                created=str(header.get("created") or ""),
                cases=tuple(CaseRecord.from_json(case, source) for case in cases),
                status=status or str(header.get("status") or "complete"),
                path=source,
            )
        except UsageError as exc:
            raise FormatError(f"{source}: {exc}") from None
