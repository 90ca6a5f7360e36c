"""Session state of the plugin, kept in ``config.stash``: the bound target and device, the
sampler settings of the command line, the run's provenance, the run file (see
:mod:`.recording`), the device lock, and what could not be written (:meth:`CharzSession.problems`).
The per-case API is :mod:`.context`, which also makes the session's judge
(:func:`.context.session_judge`): this module imports nothing of the judging."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from .options import DEFAULT_MAX_TIME_S, DEFAULT_NOISE

if TYPE_CHECKING:
    from .devices.base import Device, VisibleDevice
    from .measure.sampler import SamplerSettings
    from .records import CaseRecord, Run
    from .store import StoreWriteError
    from .targets.spec import TargetSpec


@dataclass(frozen=True)
class Binding:
    spec: "TargetSpec"
    visible: "VisibleDevice"
    device: "Device"


class CharzSession:
    """Everything one pytest session knows about its characterization run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.binding: Binding | None = None
        self.seed = int(config.getoption("charz_seed") or 0)
        self.quick = bool(config.getoption("charz_quick"))
        self._lock: Any = None
        self._provenance: dict[str, Any] | None = None
        # (baseline file, what the file system said) -> the cases whose reference was not written
        self._store_failures: dict[tuple[str, str], list[str]] = {}
        from .recording import RunRecorder

        self.recorder = RunRecorder(config, self.xdist_worker, self._new_run)

    @property
    def xdist_worker(self) -> str | None:
        """The pytest-xdist worker id when this session is a worker (``gw0``...), else None."""
        workerinput = getattr(self.config, "workerinput", None)
        return str(workerinput["workerid"]) if workerinput else None

    # -- binding -----------------------------------------------------------------------------
    def bind(self) -> Binding:
        if self.binding is None:
            from .devices.registry import bind
            from .extensions import registered_backends

            worker = self.xdist_worker
            number = int(worker[2:]) if worker and worker[2:].isdigit() else None
            spec, visible, device = bind(self.config.getoption("charz_target"), number,
                                         registered_backends(self.config))
            self.binding = Binding(spec, visible, device)
        return self.binding

    def base_settings(self) -> "SamplerSettings":
        """The sampler settings of the command line (checked by ``pytest_configure``)."""
        from .measure.sampler import QUICK, SamplerSettings

        settings = SamplerSettings()
        if self.quick:
            settings = settings.updated(**QUICK)
        noise = self.config.getoption("charz_noise")
        max_time = self.config.getoption("charz_max_time")
        return settings.updated(
            noise_target=noise if noise is not None else DEFAULT_NOISE,
            max_time_s=max_time if max_time is not None else (settings.max_time_s if self.quick else DEFAULT_MAX_TIME_S),
        )

    def provenance(self) -> dict[str, Any]:
        if self._provenance is None:
            from .measure import provenance

            worker = self.xdist_worker
            self._provenance = provenance.collect(
                str(self.config.rootpath), [sys.executable, "-m", "pytest", *self.config.invocation_params.args],
                {"charz_seed": self.seed}, {"xdist_worker": worker} if worker else None)
        return self._provenance

    def judge_provenance(self) -> dict[str, Any]:
        """The provenance the session's judge stores with a reference: the run's, and the bound
        device's description (the judge itself is :func:`pytest_charz.context.session_judge`)."""
        return {**self.provenance(), "device": self.bind().device.info.to_json()}

    # -- the run file ------------------------------------------------------------------------
    def _new_run(self) -> "Run":
        from .measure import clock
        from .records import Run, RunTarget

        binding = self.bind()
        return Run(target=RunTarget.of(binding.spec), device=binding.device.info.to_json(),
                   provenance=self.provenance(), settings={**self.base_settings().to_json(), "quick": self.quick},
                   created=clock.utc_now_iso())

    def run_path(self) -> str:
        return self.recorder.run_path()

    def record(self, case: "CaseRecord") -> None:
        self.recorder.record(case)

    @property
    def measured(self) -> int:
        return self.recorder.measured

    @property
    def out_path(self) -> str | None:
        return self.recorder.out_path

    @property
    def run(self) -> "Run":
        """The run as recorded so far (after ``finish``: as written)."""
        return self.recorder.run

    def finish(self, interrupted: bool) -> None:
        self.recorder.finish(interrupted)

    def merge_workers(self, interrupted: bool) -> str | None:
        return self.recorder.merge_workers(interrupted)

    def store_write_failed(self, case_id: str, error: "StoreWriteError") -> None:
        """Note that the baseline of ``case_id`` could not be written (the judge calls this)."""
        from .store import write_error_text

        self._store_failures.setdefault((error.path, write_error_text(error.error)), []).append(case_id)

    def problems(self) -> list[str]:
        """One line for each thing the session could not write: each baseline file, with how many
        cases' references it lost, and the run file (where its cases are instead)."""
        lines = [f"charz: the baseline store was not written: cannot write {path}: {error}; "
                 f"{len(cases)} case{'s' if len(cases) != 1 else ''} not saved or accepted "
                 f"({cases[0]}{', ...' if len(cases) > 1 else ''}); their measurements are kept in the run"
                 for (path, error), cases in self._store_failures.items()]
        return lines + list(self.recorder.problems)

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


def session_for(config: pytest.Config) -> CharzSession:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        session = CharzSession(config)
        config.stash[SESSION_KEY] = session
    return session


__all__ = ["Binding", "CharzSession", "SESSION_KEY", "session_for"]
