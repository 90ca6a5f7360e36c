"""Session state of the plugin (kept in ``config.stash``) and the per-case measuring API."""
from __future__ import annotations

import datetime
import os
import shutil
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pytest

from .errors import CharzError, UsageError
from .options import DEFAULT_MAX_TIME_S, DEFAULT_NOISE

if TYPE_CHECKING:
    from .devices.base import Device, VisibleDevice
    from .measure.sampler import Measurement, SamplerSettings
    from .run import RunWriter
    from .targets.spec import TargetSpec
    from .work import Work


@dataclass(frozen=True)
class Binding:
    spec: "TargetSpec"
    visible: "VisibleDevice"
    device: "Device"


VERDICT_KEYS = ("threshold", "strict")
MARKER_KEYS = {
    "noise": "noise_target",
    "mode": "mode",
    "max_time": "max_time_s",
    "min_samples": "min_samples",
    "max_samples": "max_samples",
    "min_time": "min_time_s",
    "warmup": "warmup_s",
}


class CharzSession:
    """Everything one pytest session knows about its characterization run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.binding: Binding | None = None
        self.writer: "RunWriter | None" = None
        self.out_path: str | None = None
        self.measured = 0
        self.seed = int(config.getoption("charz_seed") or 0)
        self.quick = bool(config.getoption("charz_quick"))
        self._lock: Any = None
        self._provenance: dict[str, Any] | None = None
        self._judge: Any = None
        self._run_path: str | None = None

    @property
    def xdist_worker(self) -> str | None:
        """The pytest-xdist worker id when this session is a worker (``gw0``...), else None."""
        workerinput = getattr(self.config, "workerinput", None)
        return str(workerinput["workerid"]) if workerinput else None

    # -- binding -----------------------------------------------------------------------------
    def bind(self) -> Binding:
        if self.binding is None:
            from .devices.detect import open_device, select_target

            worker = self.xdist_worker
            number = int(worker[2:]) if worker and worker[2:].isdigit() else None
            spec, visible = select_target(self.config.getoption("charz_target"), worker=number)
            self.binding = Binding(spec, visible, open_device(visible))
        return self.binding

    def base_settings(self) -> "SamplerSettings":
        from .measure.sampler import QUICK, SamplerSettings

        settings = SamplerSettings()
        if self.quick:
            settings = settings.updated(**QUICK)
        noise = self.config.getoption("charz_noise")
        max_time = self.config.getoption("charz_max_time")
        try:
            return settings.updated(
                noise_target=noise if noise is not None else DEFAULT_NOISE,
                max_time_s=max_time if max_time is not None else (settings.max_time_s if self.quick else DEFAULT_MAX_TIME_S),
            )
        except UsageError as exc:
            raise pytest.UsageError(f"--charz-noise / --charz-max-time: {exc}") from None

    def provenance(self) -> dict[str, Any]:
        if self._provenance is None:
            from .measure import provenance

            worker = self.xdist_worker
            self._provenance = provenance.collect(
                str(self.config.rootpath), [sys.executable, "-m", "pytest", *self.config.invocation_params.args],
                {"charz_seed": self.seed}, {"xdist_worker": worker} if worker else None)
        return self._provenance

    def judge(self) -> Any:
        """The session's CaseJudge (model, baselines, calibration), made on first use."""
        if self._judge is None:
            from .judging import CaseJudge

            binding = self.bind()
            self._judge = CaseJudge(self.config, binding.spec,
                                    {**self.provenance(), "device": binding.device.info.to_json()})
        return self._judge

    # -- the run file ------------------------------------------------------------------------
    def run_path(self) -> str:
        """Where this session's run goes: --charz-out, else a time-stamped file under .charz/runs.
        pytest-xdist workers get the controller's choice (see plugin.XdistHooks)."""
        workerinput = getattr(self.config, "workerinput", None)
        if workerinput and workerinput.get("charz_run_path"):
            return str(workerinput["charz_run_path"])
        if self._run_path is None:
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            self._run_path = self.config.getoption("charz_out") or os.path.join(
                str(self.config.rootpath), ".charz", "runs", f"run-{stamp}.json")
        return self._run_path

    def _start_run(self) -> "RunWriter":
        from .measure import clock
        from .run import Run, RunWriter

        binding = self.bind()
        path = self.run_path()
        worker = self.xdist_worker
        if worker:
            path = worker_run_path(path, worker)
        created = datetime.datetime.fromtimestamp(clock.wall_time(), datetime.timezone.utc).isoformat()
        run = Run(
            target={"id": binding.spec.id, "name": binding.spec.identity.name, "kind": binding.spec.identity.kind,
                    "origin": binding.spec.origin, "spec": binding.spec.to_json()},
            device=binding.device.info.to_json(),
            provenance=self.provenance(),
            settings={**self.base_settings().to_json(), "quick": self.quick},
            created=created,
        )
        try:
            writer = RunWriter(path, run)
        except (UsageError, OSError) as exc:
            raise UsageError(f"--charz-out: {exc}") from None
        self.out_path = path
        return writer

    def record(self, case: dict[str, Any]) -> None:
        if self.writer is None:
            self.writer = self._start_run()
        self.writer.add_case(case)
        self.measured += 1

    def run_json(self) -> Mapping[str, Any]:
        assert self.writer is not None
        return self.writer.run.to_json()

    def finish(self, interrupted: bool) -> None:
        if self.writer is None or self.writer.run.status != "running":
            return
        self.writer.finish("interrupted" if interrupted else "complete")
        if not self.xdist_worker and self.out_path:
            self.copy_to_latest(self.out_path)

    def copy_to_latest(self, path: str) -> None:
        if not self.config.getoption("charz_out"):
            shutil.copyfile(path, os.path.join(os.path.dirname(path), "latest.json"))

    def merge_workers(self, interrupted: bool) -> str | None:
        """On the pytest-xdist controller: merge the workers' run files into one run file."""
        from .run import merge_runs

        path = self.run_path()
        merged = merge_runs(path, interrupted)
        if merged:
            self.copy_to_latest(path)
        return path if merged else None

    def close(self) -> None:
        if self.binding is not None:
            self.binding.device.close()

    # -- exclusive use of the device across pytest-xdist workers -----------------------------
    def device_lock(self) -> Any:
        """An exclusive lock on the bound device, held while a case measures, so that workers
        of pytest-xdist sharing one device take turns instead of disturbing each other."""
        from .device_lock import DeviceLock

        if self._lock is None:
            binding = self.bind()
            self._lock = DeviceLock(binding.visible.backend, binding.visible.index)
        return self._lock


SESSION_KEY = pytest.StashKey[CharzSession]()


def worker_run_path(path: str, worker: str) -> str:
    root, ext = os.path.splitext(path)
    return f"{root}.{worker}{ext or '.json'}"


def session_for(config: pytest.Config) -> CharzSession:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        session = CharzSession(config)
        config.stash[SESSION_KEY] = session
    return session


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    name = getattr(value, "__name__", None) or getattr(value, "name", None)
    return str(name) if isinstance(name, str) else repr(value)


def _charz_marks(node: pytest.Item) -> list[Any]:
    """The case's ``charz`` marks, farthest first: module, class, function, then the marks of
    its ``pytest.param(...)`` (the most specific, so they win over the function's)."""
    callspec = getattr(node, "callspec", None)
    param_marks = [m for m in (callspec.marks if callspec is not None else []) if m.name == "charz"]
    others = [m for m in node.iter_markers("charz") if not any(m is p for p in param_marks)]
    return [*reversed(others), *param_marks]


def marker_verdict_settings(node: pytest.Item) -> dict[str, Any]:
    """The case's verdict settings (``threshold``, ``strict``) from its ``charz`` markers."""
    found: dict[str, Any] = {}
    for mark in _charz_marks(node):
        found.update({k: v for k, v in mark.kwargs.items() if k in VERDICT_KEYS})
    return found


def marker_settings(node: pytest.Item, base: "SamplerSettings", quick: bool) -> "SamplerSettings":
    """Apply the case's ``charz`` markers (most specific last) to the session's settings; in
    quick runs the markers' ``quick={...}`` settings then apply on top."""
    changes: dict[str, Any] = {}
    quick_changes: dict[str, Any] = {}
    for mark in _charz_marks(node):
        if mark.args:
            raise UsageError(f"{node.nodeid}: @pytest.mark.charz takes keyword arguments only, got {mark.args!r}")
        for key, value in mark.kwargs.items():
            if key == "quick":
                if quick:
                    quick_changes.update({MARKER_KEYS[k]: v for k, v in dict(value).items() if k in MARKER_KEYS})
                continue
            if key in VERDICT_KEYS:
                continue
            if key not in MARKER_KEYS:
                raise UsageError(
                    f"{node.nodeid}: unknown @pytest.mark.charz setting {key!r}; known: "
                    f"{', '.join(sorted([*MARKER_KEYS, *VERDICT_KEYS, 'quick']))}")
            changes[MARKER_KEYS[key]] = value
    changes.update(quick_changes)
    if node.config.getoption("charz_noise") is not None:
        changes.pop("noise_target", None)     # the command line wins over the suite
    if node.config.getoption("charz_max_time") is not None:
        changes.pop("max_time_s", None)
    return base.updated(**changes)


class CaseContext:
    """The ``charz`` fixture: measure one case, on the bound device, under recorded conditions."""

    def __init__(self, session: CharzSession, node: pytest.Item) -> None:
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
        self.results: list[dict[str, Any]] = []

    def measure(self, fn: Callable[[], Any], work: "Work | None" = None, *, name: str = "",
                **settings: Any) -> "Measurement":
        """Measure ``fn`` (no arguments; does the case's ``work`` once per call) and record it.

        Keyword settings override the marker's: ``noise``, ``mode``, ``max_time``, ``min_samples``,
        ``max_samples``, ``min_time``, ``warmup``. Returns the Measurement; the full case record
        (conditions, achieved rates) is in ``charz.results``.
        """
        from .measure import conditions
        from .measure.sampler import sample
        from .work import Work

        if any(case["label"] == name for case in self.results):
            raise UsageError(f"{self._node.nodeid} measures twice under the same name {name!r}: give each "
                             "measurement of a test its own name= (it is part of the case's id)")
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
        device = self.device
        with self._session.device_lock():
            before = conditions.host_snapshot(device.telemetry())
            measurement = sample(device, fn, sampler_settings)
            after = conditions.host_snapshot(device.telemetry())
        case = case_record(self._node, name, work, sampler_settings, measurement, before, after, self.target)
        judge = self._session.judge()
        prediction = judge.predict(work)
        verdict = judge.judge(case, prediction, verdict_settings.get("threshold"), verdict_settings.get("strict"))
        case["prediction"] = prediction.to_json()
        case["verdict"] = verdict.to_json()
        self._session.record(case)
        self.results.append(case)
        if verdict.fails:
            pytest.fail(f"charz {verdict.outcome}: {verdict.message}", pytrace=False)
        return measurement


def case_record(node: pytest.Item, label: str, work: "Work", settings: "SamplerSettings",
                measurement: "Measurement", before: Any, after: Any, spec: "TargetSpec") -> dict[str, Any]:
    """The run file's record of one measured case."""
    from .measure import conditions
    from .work import achieved_rates

    interval = conditions.compare(before, after)
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
    return {
        "id": node.nodeid + (f"::{label}" if label else ""),
        "nodeid": node.nodeid,
        "suite": module,
        "test": getattr(node, "originalname", node.name),
        "label": label,
        "params": params,
        "work": work.to_json(),
        "settings": settings.to_json(),
        "measurement": measurement.to_json(),
        "conditions": {"before": before.to_json(), "after": after.to_json(), "interval": interval.to_json()},
        "achieved": rates,
        "peak_fraction": peak_fraction,
        "flags": flags,
    }


__all__ = ["CharzSession", "CaseContext", "SESSION_KEY", "session_for", "case_record", "CharzError"]
