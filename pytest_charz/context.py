"""The ``charz`` fixture of one case: measure on the bound device under recorded conditions,
build the case's typed record, have the session's judge predict and judge it, record it."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import pytest

from .errors import CharzError, UsageError
from .markers import MARKER_KEYS, VERDICT_KEYS, marker_settings, marker_verdict_settings

if TYPE_CHECKING:
    from .devices.base import Device
    from .judging import CaseJudge
    from .measure.sampler import Measurement, SamplerSettings
    from .models.base import Prediction
    from .records import CaseRecord, OpTiming
    from .session import CharzSession
    from .targets.spec import TargetSpec
    from .work import Work


class CaseContext:
    """The ``charz`` fixture: measure one case, on the bound device, under recorded conditions."""

    def __init__(self, session: "CharzSession", node: pytest.Item) -> None:
        import numpy as np

        self._session = session
        self._node = node
        binding = session.bind()
        self.target = binding.spec
        self.device = binding.device
        self.quick = session.quick
        # Fresh random inputs per case, reproducible from the run's seed and the case's id.
        digest = sum((i + 1) * b for i, b in enumerate(node.nodeid.encode())) & 0xFFFFFFFF
        self.rng = np.random.default_rng([session.seed, digest])
        self.results: list["CaseRecord"] = []

    def measure(self, fn: Callable[[], Any], work: "Work | None" = None, *, name: str = "",
                ops: "Sequence[OpTiming]" = (), device: "Device | None" = None, **settings: Any) -> "Measurement":
        """Measure ``fn`` (no arguments; does the case's ``work`` once per call) and record it.

        Keyword settings override the marker's: ``noise``, ``mode``, ``max_time``, ``min_samples``,
        ``max_samples``, ``min_time``, ``warmup``. ``ops`` are the per-op timings of a workload
        case (:class:`pytest_charz.records.OpTiming`, e.g. from one profiled run), kept in its
        record. ``device`` times this measurement instead of the bound device: a wrapper of it of
        the same backend, such as the lock-step device of a collective that keeps the peer ranks
        in step batch by batch (:mod:`pytest_charz.distributed.lockstep`). Returns the
        Measurement; the full case record (conditions, achieved rates) is in ``charz.results``.
        """
        from .records import OpTiming

        from .measure import conditions
        from .measure.sampler import OverBudget, sample
        from .measure.turns import process_turns
        from .work import Work

        if any(case.label == name for case in self.results):
            raise UsageError(f"{self._node.nodeid} measures twice under the same name {name!r}: give each "
                             "measurement of a test its own name= (it is part of the case's id)")
        ops = tuple(ops)
        if any(not isinstance(op, OpTiming) for op in ops):
            raise UsageError(f"{self._node.nodeid}: ops must be pytest_charz.records.OpTiming values")
        if work is None:
            work = Work()
        if not isinstance(work, Work):
            raise UsageError(f"{self._node.nodeid}: work must be a pytest_charz.Work, got {type(work).__name__}")
        unknown = set(settings) - set(MARKER_KEYS) - set(VERDICT_KEYS)
        if unknown:
            raise UsageError(f"charz.measure: unknown setting(s) {sorted(unknown)}; "
                             f"known: {sorted([*MARKER_KEYS, *VERDICT_KEYS])}")
        verdict_settings = {**marker_verdict_settings(self._node),
                            **{k: v for k, v in settings.items() if k in VERDICT_KEYS}}
        sampler_settings = marker_settings(self._node, self._session.base_settings(), self.quick).updated(
            **{MARKER_KEYS[k]: v for k, v in settings.items() if k in MARKER_KEYS})
        if device is None:
            device = self.device
        elif getattr(device, "backend", None) != self.device.backend:
            raise UsageError(f"{self._node.nodeid}: measure(device=...) must wrap the bound {self.device.backend} "
                             f"device, got a {getattr(device, 'backend', type(device).__name__)!r} one")
        from .evidence.session import case_evidence

        evidence = case_evidence(self._session.config, self.device)
        counted = evidence.wrap(device, cold=sampler_settings.mode == "cold")
        pace = reference_kernel(self.device.backend, work)
        # Under charz ab's interleaved rounds a sibling process measures the same case while this
        # one waits its turn: the sampler hands the turn over slice by slice, and the sibling's
        # CPU time is not load beside this case (it never ran while this one measured).
        turns = process_turns()
        take_turn = turns.taker(self._node.nodeid + (f"[{name}]" if name else "")) if turns else None
        with self._session.device_lock():
            before = conditions.host_snapshot(device.telemetry(), turns.sibling_pids if turns else frozenset())
            try:
                measurement = sample(counted, fn, sampler_settings, work=work, pace=pace, take_turn=take_turn)
            except OverBudget as over:
                # one call longer than the whole budget: a fact about this machine, not a failure
                pytest.skip(str(over))
            after = conditions.host_snapshot(device.telemetry(), turns.sibling_pids if turns else frozenset())
        counters, energy = evidence.finish(counted)
        case = replace(case_record(self._node, name, work, sampler_settings, measurement, before, after, self.target),
                       ops=ops, counters=counters, energy=energy)
        prediction: "Prediction | None" = None
        try:
            judge = session_judge(self._session)
            prediction = judge.predict(work)
            verdict = judge.judge(case, prediction, verdict_settings.get("threshold"), verdict_settings.get("strict"))
        except BaseException as exc:
            # Whatever stops the judging (a corrupt baseline file, a model that cannot price the
            # work), the measurement is kept in the run, with its prediction when there is one.
            self._session.record(replace(case, prediction=prediction))
            if isinstance(exc, CharzError):
                pytest.fail(f"charz: the case was measured but not judged: {exc}", pytrace=False)
            raise
        case = case.judged(prediction, verdict)
        self._session.record(case)
        self.results.append(case)
        # Before a failing verdict stops the test, so a failed case carries its figures too.
        self._node.user_properties.extend(junit_properties(case, name))
        if verdict.fails:
            pytest.fail(f"charz {verdict.outcome}: {verdict.message}", pytrace=False)
        return measurement


def reference_kernel(backend: str, work: "Work") -> Any:
    """The short fixed kernel timed between the case's batches, by which its times travel
    between processes (:mod:`pytest_charz.measure.pace`): the CPU backend's core-clock or memory
    kernel; None for other backends (their devices' clocks are read by their telemetry) and
    where it cannot be built."""
    if backend != "cpu":
        return None
    from .kernels.pace import cpu_pace_probe

    return cpu_pace_probe(work)


#: The session's judge, made by the first case that measures (see :func:`session_judge`).
JUDGE_KEY = pytest.StashKey["CaseJudge"]()


def session_judge(session: "CharzSession") -> "CaseJudge":
    """The session's one CaseJudge (model, baselines, calibration), made on first use and kept in
    the session's ``config.stash``: every case of the session is judged by the same judge."""
    judge = session.config.stash.get(JUDGE_KEY, None)
    if judge is None:
        from .judging import CaseJudge

        binding = session.bind()
        judge = CaseJudge(session.config, binding.spec, session.judge_provenance(),
                          on_store_error=session.store_write_failed)
        session.config.stash[JUDGE_KEY] = judge
    return judge


def junit_properties(case: "CaseRecord", label: str = "") -> list[tuple[str, Any]]:
    """A judged case's figures as ``(name, value)`` pairs for the node's ``user_properties``,
    which ``--junitxml`` writes as ``<property>`` elements: ``charz.outcome``, ``charz.ratio``,
    ``charz.model_error``, ``charz.median_s``, ``charz.predicted_s`` (``charz.<label>.…`` for a
    named measurement). An unknown figure (no baseline, an uncovered model) is left out rather
    than written as "None" or "nan", so a CI tool reading a property gets a number."""
    import math

    prefix = f"charz.{label}." if label else "charz."
    verdict, prediction = case.verdict, case.prediction
    figures: list[tuple[str, Any]] = [
        ("outcome", verdict.outcome if verdict is not None else None),
        ("ratio", verdict.ratio if verdict is not None else None),
        ("model_error", verdict.model_error if verdict is not None else None),
        ("median_s", case.median_s),
        ("predicted_s", prediction.time_s if prediction is not None else None),
    ]
    return [(prefix + key, value) for key, value in figures
            if value is not None and not (isinstance(value, float) and not math.isfinite(value))]


def case_record(node: pytest.Item, label: str, work: "Work", settings: "SamplerSettings",
                measurement: "Measurement", before: Any, after: Any, spec: "TargetSpec") -> "CaseRecord":
    """The run file's record of one measured case."""
    from .measure import conditions
    from .records import CaseConditions, CaseRecord
    from .work import achieved_rates

    interval = with_pace_check(conditions.compare(before, after), measurement)
    if spec.identity.backend == "sim":
        # A simulated time is computed, not measured on this host: the host's load, steal and
        # clock are recorded but flag nothing, so they neither explain a change nor keep a
        # reference from being saved.
        interval = replace(interval, flags=())
    rates = achieved_rates(work, measurement.median_s or 0.0)
    peak_fraction: dict[str, float] = {}
    for dtype, rate in rates["flop_per_s"].items():
        peak = spec.peak(dtype)
        if peak:
            peak_fraction[f"flops:{dtype}"] = rate / peak
    for level, rate in rates["bytes_per_s"].items():
        bandwidth = spec.bandwidth(level)
        if bandwidth:
            peak_fraction[f"bandwidth:{level}"] = rate / bandwidth
    flags = list(interval.flags)
    if measurement.stop_reason == "all-discarded":
        flags.append("all-discarded")
    elif not measurement.noise_met:
        flags.append("noisy")
    if measurement.discarded_total:
        flags.append("discarded")
    callspec = getattr(node, "callspec", None)
    params = _jsonable(dict(callspec.params)) if callspec is not None else {}
    module = node.nodeid.split("::", 1)[0]
    return CaseRecord(
        id=node.nodeid + (f"::{label}" if label else ""),
        nodeid=node.nodeid,
        suite=module,
        test=getattr(node, "originalname", node.name),
        label=label,
        params=params,
        work=work,
        settings=settings,
        measurement=measurement,
        conditions=CaseConditions(before, after, interval),
        achieved=rates,
        peak_fraction=peak_fraction,
        flags=tuple(flags),
    )


def with_pace_check(interval: Any, measurement: "Measurement") -> Any:
    """The interval with the core-clock reference kernel's clock check: its runs, spread over the whole
    case, moving by more than PACE_CHANGE_SUSPICIOUS from the first half to the second flag
    ``cpu-clock-changed`` (with that change) even where the snapshots before and after agree."""
    from .measure.pace import PACE_CHANGE_SUSPICIOUS

    pace = measurement.pace
    # Only the core-clock kernel reads the clock; the memory kernel's pace moves with neighbours too.
    change = pace.change_within() if pace is not None and pace.kind == "core-clock" else None
    if change is None or abs(change) <= PACE_CHANGE_SUSPICIOUS or "cpu-clock-changed" in interval.flags:
        return interval
    # A slower kernel is a slower clock: the clock's change is the inverse of the time's.
    return replace(interval, flags=(*interval.flags, "cpu-clock-changed"), cpu_freq_change=1.0 / (1.0 + change) - 1.0)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    name = getattr(value, "__name__", None) or getattr(value, "name", None)
    return str(name) if isinstance(name, str) else repr(value)
