"""Shared fixtures of the plugin's own tests."""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy  # noqa: F401  - C extensions are loaded once here, before pytester snapshots sys.modules
import psutil  # noqa: F401
import pytest
import scipy.stats  # noqa: F401
from hypothesis import settings

# Property tests are deterministic here (the same examples every run) and have no deadline: a
# loaded 2-core CI machine must never turn a slow example into a failure.
settings.register_profile("charz", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("charz")

from pytest_charz.measure import clock
from pytest_charz.measure.clock import FakeClock
from pytest_charz.measure.conditions import DeviceTelemetry


@pytest.fixture
def fake_clock() -> Iterator[FakeClock]:
    """Time that moves only when the test moves it."""
    with clock.use(FakeClock()) as fake:
        yield fake  # type: ignore[misc]


@pytest.fixture
def quiet_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Host snapshots that do not read this machine's live state (other processes, steal time,
    clock changes), so flags and verdicts are deterministic: an idle host whose CPU counters
    advance with the fake clock."""
    from pytest_charz.measure import clock as clock_module
    from pytest_charz.measure import conditions

    def cpu_times(stat_text=None):
        jiffies = clock_module.now_ns() / 1e7        # 100 jiffies per second, 2 CPUs
        return {"total": 2 * jiffies, "idle": jiffies, "steal": 0.0}

    monkeypatch.setattr(conditions, "read_busy_processes", lambda *a, **k: ())
    monkeypatch.setattr(conditions, "read_cpu_times", cpu_times)
    monkeypatch.setattr(conditions, "read_cpu_freq_mhz", lambda *a, **k: (2600.0, 2600.0))
    monkeypatch.setattr(conditions, "read_core_clock_mhz", lambda: 3000.0)


class FakeDevice:
    """A simulated device: each call of the measured function costs ``cost_ns()`` on the fake
    clock; ``discard`` decides which samples the device rejects; ``works`` keeps the Work each
    batch was given."""

    backend = "sim"

    def __init__(self, fake: FakeClock, cost_ns: Callable[[], float] | None = None,
                 discard: Callable[[int], str | None] | None = None, resolution_s: float = 1e-7) -> None:
        from pytest_charz.devices.base import DeviceInfo

        self.fake = fake
        self.cost_ns = cost_ns
        self.discard = discard
        self.resolution = resolution_s
        self.flushes = 0
        self.samples = 0
        self.works: list[Any] = []
        self.info = DeviceInfo(backend="sim", index=0, name="fake")

    def timer_resolution_s(self) -> float:
        return self.resolution

    def time_batch(self, fn: Callable[[], Any], inner: int, work: Any = None) -> float:
        self.works.append(work)
        start = self.fake.now_ns()
        for _ in range(inner):
            fn()
            if self.cost_ns is not None:
                self.fake.advance(self.cost_ns())
        return (self.fake.now_ns() - start) / 1e9

    def synchronize(self) -> None:
        return None

    def flush_caches(self) -> None:
        self.flushes += 1

    def telemetry(self) -> DeviceTelemetry | None:
        return None

    def check_sample(self) -> str | None:
        self.samples += 1
        return self.discard(self.samples) if self.discard else None

    def close(self) -> None:
        return None


@pytest.fixture
def fake_device(fake_clock: FakeClock) -> Callable[..., FakeDevice]:
    def make(**kwargs: Any) -> FakeDevice:
        return FakeDevice(fake_clock, **kwargs)

    return make
