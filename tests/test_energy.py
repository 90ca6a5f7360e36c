"""Measured energy: RAPL from a powercap tree (wrap-around, permission, absence), NVML and amdsmi
total-energy counters through fake libraries answering the documented shapes, the stretch of
timed batches the collector measures, and joules per FLOP / per byte in the profile."""
from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from pytest_charz.evidence import energy as energy_module
from pytest_charz.evidence.collect import EvidenceDevice
from pytest_charz.evidence.energy import (AmdsmiEnergy, EnergyUnavailable, NvmlEnergy, RaplEnergy, open_energy,
                                          rapl_domains, unwrap_uj)
from pytest_charz.measure.readings import EnergyReading
from pytest_charz.measure.sampler import SamplerSettings, sample
from pytest_charz.profile.energy import energy_section

DATA = Path(__file__).parent / "data" / "evidence"


@pytest.fixture
def powercap(tmp_path: Path) -> Path:
    root = tmp_path / "powercap"
    shutil.copytree(DATA / "powercap", root)
    return root


def _set_uj(root: Path, domain: str, value: int) -> None:
    (root / domain / "energy_uj").write_text(f"{value}\n")


def test_rapl_adds_the_packages_not_their_sub_domains(powercap: Path) -> None:
    assert [Path(p).name for p in rapl_domains(str(powercap))] == ["intel-rapl:0", "intel-rapl:1"]
    rapl = RaplEnergy(str(powercap))
    assert rapl.read_j() == 0.0
    _set_uj(powercap, "intel-rapl:0", 261_999_000_000 + 2_500_000)
    _set_uj(powercap, "intel-rapl:1", 1_000_000 + 500_000)
    _set_uj(powercap, "intel-rapl:0:0", 9_000_000)             # inside package 0: not added again
    assert rapl.read_j() == pytest.approx(3.0)
    rapl.close()


def test_rapl_undoes_the_wrap_at_max_energy_range(powercap: Path) -> None:
    rapl = RaplEnergy(str(powercap))
    top = 262_143_328_850
    _set_uj(powercap, "intel-rapl:0", 1_000_000)               # wrapped past the range
    assert rapl.read_j() == pytest.approx((top - 261_999_000_000 + 1 + 1_000_000) * 1e-6)
    assert unwrap_uj(10, 4, 9) == 4 and unwrap_uj(4, 10, 9) == 6
    rapl.close()


def test_rapl_absent_or_unreadable_says_why(tmp_path: Path, powercap: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EnergyUnavailable, match=r"^no RAPL: .* does not exist"):
        RaplEnergy(str(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(EnergyUnavailable, match="no intel-rapl:<n> package domain"):
        RaplEnergy(str(tmp_path / "empty"))

    def refuse(path: str, *args: Any, **kwargs: Any) -> Any:
        if str(path).endswith("energy_uj"):
            raise PermissionError(13, "Permission denied")
        return open(path, *args, **kwargs)

    monkeypatch.setattr(energy_module, "open", refuse, raising=False)
    with pytest.raises(EnergyUnavailable, match="^no permission: .*readable by root only"):
        RaplEnergy(str(powercap))


def test_this_machines_cpu_energy_is_measured_or_says_why() -> None:
    source, why = open_energy("cpu")
    if source is None:
        assert why.startswith(("no RAPL", "no permission", "RAPL unreadable"))
    else:
        assert source.read_j() >= 0.0
        source.close()
    assert open_energy("sim") == (None, "no energy counter for backend 'sim' (known: cpu, cuda, rocm)")


# -- GPUs through fake vendor libraries ----------------------------------------------------------
class FakeLibraryError(Exception):
    pass


def fake_pynvml(answers: list[int] | None, bus_id: str) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    module.NVMLError = FakeLibraryError  # type: ignore[attr-defined]
    module.nvmlInit = lambda: None  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: 1  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    module.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=bus_id)  # type: ignore[attr-defined]
    module.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980  # type: ignore[attr-defined]
    queue = list(answers or [])

    def total_energy(handle: int) -> int:
        if answers is None:
            raise FakeLibraryError("Not Supported")
        return queue.pop(0)

    module.nvmlDeviceGetTotalEnergyConsumption = total_energy  # type: ignore[attr-defined]
    return module


def test_nvml_total_energy_in_joules_around_a_case(monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = json.loads((DATA / "nvml" / "h200-total-energy.json").read_text())
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(recorded["nvmlDeviceGetTotalEnergyConsumption"],
                                                            recorded["pci_bus_id"]))
    source, name = open_energy("cuda", "0000:19:00.0")
    assert name == "nvml" and isinstance(source, NvmlEnergy)
    before = source.read_j()                   # the constructor took the first answer
    after = source.read_j()
    assert before == pytest.approx(987_654.321) and after - before == pytest.approx(65.0)
    source.close()


def test_nvml_without_the_energy_query_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(None, "00000000:19:00.0"))
    source, why = open_energy("cuda", "0000:19:00.0")
    assert source is None
    assert why.startswith("nvml: the energy counter cannot be read") and "Not Supported" in why
    monkeypatch.setitem(sys.modules, "pynvml", None)
    source, why = open_energy("cuda", None)
    assert source is None and "pytest-charz[cuda]" in why


def test_amdsmi_energy_count_in_joules(monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = json.loads((DATA / "amdsmi" / "mi300x-energy-count.json").read_text())
    answers = list(recorded["answers"])
    module = types.ModuleType("amdsmi")
    module.AmdSmiException = FakeLibraryError  # type: ignore[attr-defined]
    module.amdsmi_init = lambda *a: None  # type: ignore[attr-defined]
    module.amdsmi_shut_down = lambda: None  # type: ignore[attr-defined]
    module.amdsmi_get_processor_handles = lambda: ["gpu0"]  # type: ignore[attr-defined]
    module.amdsmi_get_gpu_device_bdf = lambda h: "0000:0c:00.0"  # type: ignore[attr-defined]
    module.amdsmi_get_clock_info = lambda h, kind: {"clk": 2100, "max_clk": 2100}  # type: ignore[attr-defined]
    module.amdsmi_get_energy_count = lambda h: answers.pop(0)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "amdsmi", module)
    source, name = open_energy("rocm", "0000:0c:00.0")
    assert name == "amdsmi" and isinstance(source, AmdsmiEnergy)
    first, second = source.read_j(), source.read_j()
    assert second - first == pytest.approx(32_768_000 * 15.259e-6)
    source.close()


# -- the stretch of timed batches -------------------------------------------------------------
class Watts:
    """An energy counter of a device drawing ``watts`` all the time, read off the fake clock."""

    name = "fake"

    def __init__(self, fake_clock: Any, watts: float) -> None:
        self.fake, self.watts, self.reads = fake_clock, watts, 0

    def read_j(self) -> float:
        self.reads += 1
        return self.fake.now_ns() * 1e-9 * self.watts

    def close(self) -> None:
        return None


@pytest.mark.parametrize("mode", ["hot", "cold"])
def test_energy_covers_the_timed_batches_and_leaves_out_flushes(fake_device: Any, fake_clock: Any,
                                                                 mode: str) -> None:
    device = fake_device(cost_ns=lambda: 10_000.0)
    flush = device.flush_caches

    def slow_flush() -> None:           # a flush costs 1 ms of 100 W: never part of a call's energy
        flush()
        fake_clock.advance(1_000_000)

    device.flush_caches = slow_flush
    meter = Watts(fake_clock, 100.0)
    wrapped = EvidenceDevice(device, None, meter, lambda: fake_clock.now_ns() / 1e9, cold=mode == "cold")
    settings = SamplerSettings(min_samples=10, max_samples=30, max_time_s=0.5, warmup_s=0.001, mode=mode,
                               noise_target=1e-9)
    measurement = sample(wrapped, lambda: None, settings)
    _, (joules, seconds, calls) = wrapped.finish()
    assert calls >= len(measurement.samples_s) * measurement.inner_loops
    assert joules / calls == pytest.approx(100.0 * 10e-6)       # 100 W x 10 us per call, no flush in it
    assert joules / seconds == pytest.approx(100.0)
    if mode == "hot":
        assert meter.reads < 2 * len(measurement.samples_s)     # not read per timed batch


def test_energy_reading_json_and_its_absent_form() -> None:
    reading = EnergyReading("rapl", 4.0, 2000, 0.5)
    data = reading.to_json()
    assert data["kind"] == "charz-energy" and data["joules_per_call"] == pytest.approx(2e-3)
    assert data["watts"] == pytest.approx(8.0) and EnergyReading.from_json(data) == reading
    absent = EnergyReading("rapl", missing="no RAPL: /sys/class/powercap does not exist").to_json()
    assert absent["joules_per_call"] is None and absent["missing"].startswith("no RAPL")


# -- the profile ---------------------------------------------------------------------------------
def _case(case_id: str, op: str, flops: float, dram: float, joules_per_call: float | None) -> dict[str, Any]:
    from charz_factories import case_json

    energy = EnergyReading("rapl", joules_per_call * 100 if joules_per_call is not None else None, 100, 0.2,
                           missing=None if joules_per_call is not None else "no RAPL: test")
    work: dict[str, Any] = {"op": op, "flops": {"fp64": flops} if flops else {}, "bytes": {"dram": dram} if dram else {}}
    return case_json(case_id, work, 1e-3, energy=energy.to_json())


def test_joules_per_flop_and_per_byte_cite_their_cases() -> None:
    from charz_factories import make_run

    run = make_run([_case("fma-a", "fma", 1e9, 0, 0.5), _case("fma-b", "fma", 2e9, 0, 0.8),
                    _case("triad", "stream", 0, 1e8, 0.3), _case("llama", "workload", 1e12, 1e10, 12.0)])
    assert run.cases[0].energy is not None and run.cases[0].energy.joules_per_call == pytest.approx(0.5)
    section = energy_section([run])
    assert section is not None and section["sources"] == ["rapl"] and section["cases_with_energy"] == 4
    per_flop = section["joules_per_flop"]["fp64"]
    assert per_flop["value"] == pytest.approx((0.5e-9 + 0.4e-9) / 2)
    assert [p["case"] for p in per_flop["cases"]] == ["suites/test_synth.py::fma-a", "suites/test_synth.py::fma-b"]
    assert section["joules_per_byte"]["dram"]["value"] == pytest.approx(3e-9)
    assert section["workloads"] == [{"case": "suites/test_synth.py::llama", "joules_per_call": pytest.approx(12.0),
                                     "watts": pytest.approx(6000.0)}]


def test_no_energy_gives_a_reason_and_no_record_gives_no_section() -> None:
    from charz_factories import case_json, make_run

    missing = energy_section([make_run([_case("fma-a", "fma", 1e9, 0, None)])])
    assert missing == {"sources": ["rapl"], "cases_with_energy": 0,
                       "missing": "no case measured energy: no RAPL: test"}
    old = make_run([case_json("old", {"op": "fma", "flops": {"fp64": 1e9}}, 1e-3)])
    assert energy_section([old]) is None
