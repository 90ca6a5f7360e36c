"""GPU backends without a GPU: telemetry parsing, detection, the discard rule, kernel accounting.

NVML and amdsmi are replaced by fake modules (``monkeypatch.setitem(sys.modules, ...)``) that
replay the answers in ``tests/data/telemetry/*.json``; CuPy by a small fake that records what the
backend asks of it. The CUDA source is compiled with ``nvcc`` where one is installed.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_charz.devices import detect_gpu
from pytest_charz.devices.amdsmi_telemetry import (
    AmdsmiTelemetry,
    decode_indep_throttle_status,
    decode_violation_status,
    parse_activity,
    parse_clock_info,
    parse_energy_count,
    parse_power_info,
    parse_process_list,
)
from pytest_charz.devices.base import Device, VisibleDevice
from pytest_charz.devices.nvml import (
    NvmlTelemetry,
    decode_clock_event_reasons,
    sm_clock_discard_reason,
)
from pytest_charz.errors import MissingExtraError, UsageError
from pytest_charz.kernels import gpu
from pytest_charz.measure.conditions import Snapshot, compare
from pytest_charz.work import Work

DATA = Path(__file__).parent / "data" / "telemetry"
GPU_LIBRARIES = ("pynvml", "amdsmi", "cupy", "torch")


def _recorded(name: str) -> dict[str, Any]:
    text = (DATA / name).read_text().replace('"SELF"', str(os.getpid()))
    return json.loads(text)


# ---------------------------------------------------------------- fake pynvml

class FakeNVMLError(Exception):
    pass


def fake_pynvml(recorded: dict[str, Any]) -> types.ModuleType:
    """A ``pynvml`` that answers from ``recorded``; a call listed under a device's ``errors``
    raises, and a call the recording has no answer for does not exist in the module."""
    mod = types.ModuleType("pynvml")
    mod.NVMLError = FakeNVMLError  # type: ignore[attr-defined]
    mod.NVML_CLOCK_SM, mod.NVML_CLOCK_MEM, mod.NVML_TEMPERATURE_GPU = 1, 2, 0  # type: ignore[attr-defined]
    mod.calls = {"init": 0, "shutdown": 0}  # type: ignore[attr-defined]
    devices = recorded["devices"]

    def init() -> None:
        mod.calls["init"] += 1  # type: ignore[attr-defined]

    def shutdown() -> None:
        mod.calls["shutdown"] += 1  # type: ignore[attr-defined]

    mod.nvmlInit, mod.nvmlShutdown = init, shutdown  # type: ignore[attr-defined]
    mod.nvmlDeviceGetCount = lambda: len(devices)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    mod.nvmlSystemGetDriverVersion = lambda: recorded["nvmlSystemGetDriverVersion"]  # type: ignore[attr-defined]
    mod.nvmlSystemGetProcessName = lambda pid: recorded["process_names"].get(str(pid), "")  # type: ignore[attr-defined]

    def device_call(name: str):
        def call(handle: int, *args: Any) -> Any:
            device = devices[handle]
            if name in device.get("errors", {}):
                raise FakeNVMLError(device["errors"][name])
            answer = device[name]
            if args and isinstance(answer, dict) and str(args[0]) in answer:
                return answer[str(args[0])]
            if name == "nvmlDeviceGetPciInfo" or name == "nvmlDeviceGetUtilizationRates":
                return types.SimpleNamespace(**answer)
            if name == "nvmlDeviceGetComputeRunningProcesses":
                return [types.SimpleNamespace(**p) for p in answer]
            return answer
        return call

    names = {key for device in devices for key in (*device, *device.get("errors", {})) if key.startswith("nvml")}
    for name in names:
        setattr(mod, name, device_call(name))
    return mod


@pytest.fixture
def no_gpu_libraries(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """None of pynvml, amdsmi, CuPy, torch importable; no *_VISIBLE_DEVICES set."""
    for name in GPU_LIBRARIES:
        monkeypatch.setitem(sys.modules, name, None)
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.fixture
def nvml(no_gpu_libraries: pytest.MonkeyPatch) -> types.ModuleType:
    module = fake_pynvml(_recorded("nvml_h200_x2.json"))
    no_gpu_libraries.setitem(sys.modules, "pynvml", module)
    return module


# ---------------------------------------------------------------- NVML

def test_clock_event_reasons_decode_each_bit_to_its_name() -> None:
    expected = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}
    for bit, name in expected.items():
        assert decode_clock_event_reasons(bit) == (name,)
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x4 | 0x40) == ("sw_power_cap", "hw_thermal")


def test_clock_event_reasons_keep_unknown_bits_visible() -> None:
    assert decode_clock_event_reasons(0x1 | 0x1000) == ("gpu_idle", "unknown_0x1000")
    with pytest.raises(ValueError):
        decode_clock_event_reasons(-1)


def test_nvml_reading_converts_units_and_leaves_out_this_process(nvml: types.ModuleType) -> None:
    telemetry = NvmlTelemetry(0)
    reading = telemetry.read()
    assert reading.sm_clock_mhz == pytest.approx(1980.0)
    assert reading.mem_clock_mhz == pytest.approx(3201.0)
    assert reading.max_sm_clock_mhz == pytest.approx(1980.0)
    assert reading.power_w == pytest.approx(612.345)           # mW -> W
    assert reading.energy_j == pytest.approx(987654.321)       # mJ -> J
    assert reading.temperature_c == pytest.approx(54.0)
    assert reading.utilization_pct == pytest.approx(100.0)
    assert reading.throttle_reasons == ()
    assert reading.processes == ({"pid": 4242, "name": "other_trainer", "memory_bytes": 2147483648},)
    assert telemetry.unreadable == {}
    telemetry.close()
    telemetry.close()
    assert nvml.calls == {"init": 1, "shutdown": 1}


def test_nvml_partial_driver_gives_what_it_can(nvml: types.ModuleType) -> None:
    telemetry = NvmlTelemetry(pci_bus_id="0000:1a:00.0")     # device 1, found by bus id
    reading = telemetry.read()
    assert reading.power_w is None and reading.energy_j is None and reading.temperature_c is None
    assert reading.sm_clock_mhz == pytest.approx(1305.0)
    assert reading.utilization_pct == pytest.approx(99.0)
    # the older entry point answers when the renamed one is missing: 68 = 0x4 | 0x40
    assert reading.throttle_reasons == ("sw_power_cap", "hw_thermal")
    assert set(telemetry.unreadable) == {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption",
                                         "nvmlDeviceGetTemperature"}
    assert telemetry.identity()["pci_device_id"] == "0x2335"
    telemetry.close()


def test_nvml_unknown_bus_id_is_an_error_and_releases_nvml(nvml: types.ModuleType) -> None:
    with pytest.raises(LookupError, match="0000:99:00.0"):
        NvmlTelemetry(pci_bus_id="0000:99:00.0")
    assert nvml.calls["init"] == nvml.calls["shutdown"] == 1


def test_sm_clock_discard_rule_is_75_percent_of_expected() -> None:
    assert sm_clock_discard_reason(1485.0, 1980.0) is None               # exactly 75%
    assert sm_clock_discard_reason(1484.0, 1980.0) == "sm-clock-below-threshold"
    assert sm_clock_discard_reason(1305.0, 1980.0, threshold=0.6) is None
    assert sm_clock_discard_reason(None, 1980.0) is None
    assert sm_clock_discard_reason(1000.0, None) is None


def test_a_low_clock_discards_only_while_throttling() -> None:
    assert sm_clock_discard_reason(1000.0, 1980.0, throttled=True) == "sm-clock-below-threshold"
    assert sm_clock_discard_reason(1000.0, 1980.0, throttled=False) is None     # idle, or locked low
    assert sm_clock_discard_reason(1000.0, 1980.0, throttled=None) == "sm-clock-below-threshold"
    assert sm_clock_discard_reason(1900.0, 1980.0, throttled=True) is None


@pytest.mark.parametrize("mask, throttling", [(0x1, False), (0x2, False), (0x1 | 0x2 | 0x10, False), (0x4, True),
                                              (0x1 | 0x20, True), (0x80, True), (0, False)])
def test_nvml_throttling_reads_only_throttle_reasons(nvml: types.ModuleType, mask: int, throttling: bool) -> None:
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: mask  # type: ignore[attr-defined]
    telemetry = NvmlTelemetry(0)
    assert telemetry.throttling() is throttling
    telemetry.close()


def test_idle_gpu_with_a_low_clock_keeps_its_samples(nvml: types.ModuleType, cuda_device_factory) -> None:
    # Device 1 reads 1305 MHz of 1980; with only gpu_idle set the sample stands.
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: 0x1  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: 0x1  # type: ignore[attr-defined]
    device = cuda_device_factory(index=1, cupy=FakeCupy(bus_ids=("0000:19:00.0", "0000:1a:00.0")))
    assert device.check_sample() is None
    device.close()


def test_throttle_names_reach_the_interval_flags() -> None:
    from pytest_charz.measure.conditions import DeviceTelemetry

    def interval(*reasons: str):
        device = DeviceTelemetry(throttle_reasons=decode_clock_event_reasons(0) if not reasons else reasons)
        return compare(Snapshot(wall_time=0.0, device=device), Snapshot(wall_time=1.0, device=device))

    assert "throttled" not in interval("gpu_idle").flags
    assert "throttled" in interval(*decode_clock_event_reasons(0x4)).flags


# ---------------------------------------------------------------- fake CuPy and the cuda backend

class FakeCupy(types.ModuleType):
    """Enough of CuPy for CudaDevice: devices, properties, a stream, events, arrays."""

    def __init__(self, elapsed_ms: float = 2.5, bus_ids: tuple[str, ...] = ("0000:19:00.0",),
                 uuid: bytes = bytes(range(16))) -> None:
        super().__init__("cupy")
        self.__version__ = "13.3.0"
        self.log: list[str] = []
        self.current_stream: Any = None
        log, cupy = self.log, self

        class Stream:
            ptr = 0xC0FFEE

            def __init__(self, non_blocking: bool = False) -> None:
                log.append(f"stream(non_blocking={non_blocking})")

            def __enter__(self) -> "Stream":
                cupy.current_stream = self
                return self

            def __exit__(self, *exc: Any) -> None:
                cupy.current_stream = None

            def synchronize(self) -> None:
                log.append("stream.synchronize")

        class Event:
            def record(self, stream: Any = None) -> None:
                log.append(f"record({'device stream' if stream is cupy.stream else stream})")

            def synchronize(self) -> None:
                log.append("event.synchronize")

        class Device:
            def __init__(self, index: int) -> None:
                self.pci_bus_id = bus_ids[index].upper()

            def __enter__(self) -> "Device":
                return self

            def __exit__(self, *exc: Any) -> None:
                return None

            def synchronize(self) -> None:
                log.append("device.synchronize")

        class Array:
            def __init__(self, size: int, dtype: str) -> None:
                self.size, self.dtype = size, dtype

            def fill(self, value: int) -> None:
                log.append(f"fill({value}) on {'device stream' if cupy.current_stream is cupy.stream else 'other'}")

        def new_stream(non_blocking: bool = False) -> Stream:
            cupy.stream = Stream(non_blocking)
            return cupy.stream

        props = {"name": b"NVIDIA H200", "multiProcessorCount": 132, "l2CacheSize": 50 * 2**20,
                 "clockRate": 1980000, "major": 9, "minor": 0, "uuid": uuid}
        self.cuda = types.SimpleNamespace(
            Device=Device, Stream=new_stream, Event=Event,
            get_elapsed_time=lambda start, end: elapsed_ms,
            runtime=types.SimpleNamespace(getDeviceCount=lambda: len(bus_ids),
                                          getDeviceProperties=lambda i: props,
                                          driverGetVersion=lambda: 12040, runtimeGetVersion=lambda: 12060))
        self.empty = lambda size, dtype: Array(size, dtype)


@pytest.fixture
def cuda_device_factory(monkeypatch: pytest.MonkeyPatch):
    from pytest_charz.devices import cuda

    monkeypatch.setattr(cuda, "_optional_torch", lambda: None)

    def make(**kwargs: Any) -> Any:
        return cuda.CudaDevice(**kwargs)
    return make


@pytest.mark.parametrize("raw, expected", [
    (bytes(range(1, 17)), "GPU-01020304-0506-0708-090a-0b0c0d0e0f10"),
    (bytes(range(1, 17)) + b"\x07\x08", "GPU-01020304-0506-0708-090a-0b0c0d0e0f10"),  # ran on into luid
    (b"\x11\x22\x33\x44\x55", None),                                         # cut at a zero byte
    (b"", None)])
def test_cuda_uuid_from_cupy_is_trusted_only_whole(no_gpu_libraries, cuda_device_factory, raw: bytes,
                                                   expected: str | None) -> None:
    device = cuda_device_factory(index=0, cupy=FakeCupy(uuid=raw))
    assert device.info.ids.get("uuid") == expected
    device.close()


def test_cuda_device_runs_without_pytorch_when_its_stream_cannot_be_shared(no_gpu_libraries,
                                                                           cuda_device_factory) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("CUDA driver version is insufficient for CUDA runtime version")

    torch = types.SimpleNamespace(__version__="2.13.0", cuda=types.SimpleNamespace(ExternalStream=refuse))
    device = cuda_device_factory(index=0, cupy=FakeCupy(), torch=torch)
    assert device._torch is None and "insufficient" in (device.torch_unavailable or "")
    assert device.time_batch(lambda: None, inner=1) > 0
    device.close()


def test_cuda_peers_are_the_other_visible_gpus_and_copies_need_pytorch(no_gpu_libraries, cuda_device_factory) -> None:
    from pytest_charz.errors import UsageError

    device = cuda_device_factory(index=1, cupy=FakeCupy(bus_ids=("0000:19:00.0", "0000:3b:00.0", "0000:5d:00.0")))
    assert device.peer_indices() == [0, 2]
    with pytest.raises(UsageError, match="peer copies go through PyTorch"):
        device.peer_copy(2, "to-peer", None)
    device.close()
    alone = cuda_device_factory(index=0, cupy=FakeCupy())
    assert alone.peer_indices() == []
    alone.close()


def test_cuda_device_times_the_batch_between_events_on_its_stream(nvml: types.ModuleType, cuda_device_factory) -> None:
    cp = FakeCupy(elapsed_ms=2.5)
    device = cuda_device_factory(index=0, cupy=cp)
    assert isinstance(device, Device)
    calls: list[Any] = []
    elapsed_s = device.time_batch(lambda: calls.append(cp.current_stream), inner=4)
    assert elapsed_s == pytest.approx(2.5e-3)
    assert calls == [device.stream] * 4                 # the work ran on the device's stream
    assert cp.log[-4:] == ["device.synchronize", "record(device stream)", "record(device stream)", "event.synchronize"]
    assert "stream(non_blocking=True)" in cp.log
    # no kernel module here (the fake has no RawModule): timed without the hold, and it says why
    assert "RawModule" in (device.hold_unavailable or "")
    # The case's Work comes with the batch (the sampler always passes it); a real GPU runs fn
    # and times it with events all the same.
    calls.clear()
    work = Work(flops=1e9, dtype="fp32", op="fma")
    assert device.time_batch(lambda: calls.append(cp.current_stream), 3, work) == pytest.approx(2.5e-3)
    assert calls == [device.stream] * 3
    with pytest.raises(UsageError):
        device.time_batch(lambda: None, inner=0)
    device.close()


def test_cuda_batch_starts_behind_the_hold_kernel(nvml: types.ModuleType, cuda_device_factory) -> None:
    from pytest_charz.devices.cuda import BATCH_HOLD_S

    cp = FakeCupy(elapsed_ms=2.5)

    class Module:                       # CuPy's RawModule: every kernel logs its launch
        def __init__(self, code: str, options: tuple[str, ...]) -> None:
            assert 'void hold(' in code

        def get_function(self, name: str) -> Any:
            def launch(grid: tuple[int], block: tuple[int], args: tuple[Any, ...]) -> None:
                where = "device stream" if cp.current_stream is cp.stream else "other"
                cp.log.append(f"{name}{grid}{block}({', '.join(str(int(a)) for a in args)}) on {where}")
            return launch

    cp.RawModule = Module
    device = cuda_device_factory(index=0, cupy=cp)
    cycles = int(BATCH_HOLD_S * 1e6 * device.expected_sm_clock_mhz)
    assert device.time_batch(lambda: cp.log.append("call"), inner=2) == pytest.approx(2.5e-3)
    # the stream is held busy, then the start event queues behind the hold and the calls behind it
    assert cp.log[-7:] == ["device.synchronize", f"hold(1,)(1,)({cycles}) on device stream", "record(device stream)",
                           "call", "call", "record(device stream)", "event.synchronize"]
    assert device.hold_unavailable is None
    device.close()


def test_cuda_device_info_and_flush(nvml: types.ModuleType, cuda_device_factory) -> None:
    cp = FakeCupy()
    device = cuda_device_factory(index=0, cupy=cp)
    info = device.info
    assert info.name == "NVIDIA H200"
    assert info.ids["pci_bus_id"] == "0000:19:00.0"
    assert info.ids["pci_device_id"] == "0x2335"
    assert info.ids["uuid"] == "GPU-5a1c2e0f-1b7d-4c3e-9f0a-8d2b6e4c1a07"   # NVML's, preferred
    assert info.versions["cuda_driver"] == "12.4" and info.versions["driver"] == "550.90.07"
    device.flush_caches()
    device.flush_caches()
    assert device._flush_buffer.size * 4 == 2 * 50 * 2**20
    assert [line for line in cp.log if line.startswith("fill")] == ["fill(1) on device stream", "fill(0) on device stream"]
    device.close()


def test_cuda_check_sample_discards_a_throttled_gpu(nvml: types.ModuleType, cuda_device_factory) -> None:
    healthy = cuda_device_factory(index=0, cupy=FakeCupy(bus_ids=("0000:19:00.0", "0000:1a:00.0")))
    throttled = cuda_device_factory(index=1, cupy=FakeCupy(bus_ids=("0000:19:00.0", "0000:1a:00.0")))
    assert healthy.check_sample() is None
    assert throttled.expected_sm_clock_mhz == pytest.approx(1980.0)
    assert throttled.check_sample() == "sm-clock-below-threshold"        # 1305 < 0.75 x 1980
    assert throttled.telemetry().throttle_reasons == ("sw_power_cap", "hw_thermal")
    healthy.close()
    throttled.close()


def test_cuda_device_without_nvml_has_no_telemetry_and_never_discards(no_gpu_libraries, cuda_device_factory) -> None:
    device = cuda_device_factory(index=0, cupy=FakeCupy())
    assert device.telemetry() is None
    assert device.check_sample() is None
    assert "pynvml" in (device.telemetry_unavailable or "")
    assert device.expected_sm_clock_mhz == pytest.approx(1980.0)        # from the clock-rate property


def test_backends_name_the_extra_when_their_library_is_missing(no_gpu_libraries) -> None:
    from pytest_charz.devices.cuda import CudaDevice
    from pytest_charz.devices.rocm import RocmDevice

    with pytest.raises(MissingExtraError, match=r"pytest-charz\[cuda\]"):
        CudaDevice(0)
    with pytest.raises(MissingExtraError, match=r"pytest-charz\[rocm\]"):
        RocmDevice(0)
    cpu_torch = types.SimpleNamespace(version=types.SimpleNamespace(hip=None, cuda=None))
    with pytest.raises(UsageError, match="ROCm"):
        RocmDevice(0, torch=cpu_torch)


def test_cuda_helpers() -> None:
    from pytest_charz.devices.cuda import format_cuda_version, format_uuid
    from pytest_charz.devices.gpu_common import flush_bytes
    from pytest_charz.devices.rocm import last_level_cache_bytes

    assert format_cuda_version(12040) == "12.4" and format_cuda_version(11080) == "11.8"
    assert format_uuid(bytes(range(16))) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert flush_bytes(50 * 2**20) == 100 * 2**20 and flush_bytes(0) == 2**20
    assert last_level_cache_bytes("gfx942:sramecc+:xnack-", 4 * 2**20) == 256 * 2**20
    assert last_level_cache_bytes("gfx90a", 8 * 2**20) == 8 * 2**20


# ---------------------------------------------------------------- fake amdsmi

class FakeAmdSmiException(Exception):
    pass


def fake_amdsmi(recorded: dict[str, Any]) -> types.ModuleType:
    mod = types.ModuleType("amdsmi")
    mod.AmdSmiException = FakeAmdSmiException  # type: ignore[attr-defined]
    mod.AmdSmiClkType = types.SimpleNamespace(GFX="GFX", MEM="MEM")  # type: ignore[attr-defined]
    mod.AmdSmiTemperatureType = types.SimpleNamespace(HOTSPOT="HOTSPOT", EDGE="EDGE")  # type: ignore[attr-defined]
    mod.AmdSmiTemperatureMetric = types.SimpleNamespace(CURRENT="CURRENT")  # type: ignore[attr-defined]
    mod.calls = {"init": 0, "shutdown": 0}  # type: ignore[attr-defined]
    devices = recorded["devices"]
    mod.amdsmi_init = lambda *flags: mod.calls.__setitem__("init", mod.calls["init"] + 1)  # type: ignore[attr-defined]
    mod.amdsmi_shut_down = lambda: mod.calls.__setitem__("shutdown", mod.calls["shutdown"] + 1)  # type: ignore[attr-defined]
    mod.amdsmi_get_processor_handles = lambda: list(range(len(devices)))  # type: ignore[attr-defined]

    def device_call(name: str):
        def call(handle: int, *args: Any) -> Any:
            device = devices[handle]
            if name in device.get("errors", {}):
                raise FakeAmdSmiException(device["errors"][name])
            answer = device[name]
            return answer[args[0]] if args and isinstance(answer, dict) and args[0] in answer else answer
        return call

    names = {key for device in devices for key in (*device, *device.get("errors", {})) if key.startswith("amdsmi")}
    for name in names:
        setattr(mod, name, device_call(name))
    return mod


@pytest.fixture
def amdsmi(no_gpu_libraries: pytest.MonkeyPatch) -> types.ModuleType:
    module = fake_amdsmi(_recorded("amdsmi_mi300x_x2.json"))
    no_gpu_libraries.setitem(sys.modules, "amdsmi", module)
    return module


def test_amdsmi_parsers_follow_both_spellings() -> None:
    assert parse_clock_info({"clk": 2100, "max_clk": 2100}) == (2100.0, 2100.0)
    assert parse_clock_info({"cur_clk": 1400, "max_clk": 2100}) == (1400.0, 2100.0)
    assert parse_clock_info({"clk": "N/A", "max_clk": "N/A"}) == (None, None)
    assert parse_power_info({"socket_power": 650, "current_socket_power": 702}) == pytest.approx(650.0)
    assert parse_power_info({"current_socket_power": "N/A", "average_socket_power": 540}) == pytest.approx(540.0)
    assert parse_power_info({"average_socket_power": "N/A"}) is None
    # accumulator x resolution is in microjoules
    assert parse_energy_count({"energy_accumulator": 2_000_000, "counter_resolution": 15.3}) == pytest.approx(30.6)
    assert parse_energy_count({"power": 1_000_000, "counter_resolution": 1.0}) == pytest.approx(1.0)
    assert parse_energy_count({"energy_accumulator": "N/A", "counter_resolution": 15.3}) is None
    assert parse_activity({"gfx_activity": 98, "umc_activity": 63}) == pytest.approx(98.0)


def test_amdsmi_throttle_decoders() -> None:
    assert decode_indep_throttle_status(0) == ()
    assert decode_indep_throttle_status((1 << 36) | 1) == ("ppt0", "temp_hotspot")
    assert decode_indep_throttle_status((1 << 46) | (1 << 57)) == ("prochot_cpu", "fit")
    assert decode_indep_throttle_status(1 << 60) == ("unknown_bit60",)
    assert decode_indep_throttle_status("N/A") == ()
    status = {"active_ppt_pwr": True, "active_socket_thrm": False, "active_hbm_thrm": "N/A", "acc_ppt_pwr": 5}
    assert decode_violation_status(status) == ("ppt_power",)


def test_amdsmi_process_list_leaves_out_this_process() -> None:
    rows = [{"name": "a", "pid": 7, "mem": 1024}, {"name": "me", "pid": 99, "mem": 1},
            {"name": "b", "pid": 8, "mem": "N/A", "memory_usage": {"vram_mem": 2048}}]
    assert parse_process_list(rows, own_pid=99) == (
        {"pid": 7, "name": "a", "memory_bytes": 1024}, {"pid": 8, "name": "b", "memory_bytes": 2048})


def test_amdsmi_reading_of_a_full_answer(amdsmi: types.ModuleType) -> None:
    telemetry = AmdsmiTelemetry(pci_bus_id="0000:0C:00.0")
    reading = telemetry.read()
    assert reading.sm_clock_mhz == pytest.approx(2100.0)
    assert reading.mem_clock_mhz == pytest.approx(1300.0)
    assert reading.max_sm_clock_mhz == pytest.approx(2100.0)
    assert reading.power_w == pytest.approx(702.0)
    assert reading.energy_j == pytest.approx(41797534008 * 15.259e-6)
    assert reading.temperature_c == pytest.approx(71.0)
    assert reading.utilization_pct == pytest.approx(98.0)
    assert reading.throttle_reasons == ("ppt_power", "ppt0")
    assert reading.processes == ({"pid": 4242, "name": "other_trainer", "memory_bytes": 8589934592},)
    assert telemetry.identity() == {"name": "AMD Instinct MI300X", "pci_device_id": "0x74a1",
                                    "uuid": "b6ff74a1-0000-1000-8000-0a1b2c3d4e5f",
                                    "pci_bus_id": "0000:0c:00.0", "driver": "6.8.5"}
    telemetry.close()
    assert amdsmi.calls == {"init": 1, "shutdown": 1}


def test_amdsmi_partial_answers_of_an_older_library(amdsmi: types.ModuleType) -> None:
    telemetry = AmdsmiTelemetry(1)
    reading = telemetry.read()
    assert reading.power_w is None
    assert reading.sm_clock_mhz == pytest.approx(1400.0)                 # "cur_clk"
    assert reading.energy_j == pytest.approx(1_000_000 * 15.259e-6)      # accumulator named "power"
    assert reading.temperature_c == pytest.approx(65.0)                  # no hotspot: edge
    assert reading.throttle_reasons == ("ppt0", "temp_hotspot")          # no violation status: metrics bits
    assert {"amdsmi_get_power_info", "amdsmi_get_violation_status"} <= set(telemetry.unreadable)
    assert sm_clock_discard_reason(reading.sm_clock_mhz, telemetry.max_sm_clock_mhz) == "sm-clock-below-threshold"
    assert telemetry.throttling() is True                                # ppt0, temp_hotspot
    telemetry.close()


def test_amdsmi_throttling_is_unknown_without_either_answer(amdsmi: types.ModuleType) -> None:
    telemetry = AmdsmiTelemetry(1)
    telemetry._call = lambda name, *args: None      # type: ignore[method-assign]  # every query fails
    assert telemetry.throttling() is None
    telemetry.close()


# ---------------------------------------------------------------- detection

def test_detection_without_any_gpu_library_finds_nothing(no_gpu_libraries) -> None:
    assert detect_gpu.visible_gpus() == []


def test_detection_numbers_nvml_gpus_by_cuda_visible_devices(nvml, monkeypatch: pytest.MonkeyPatch) -> None:
    assert detect_gpu.visible_gpus() == [VisibleDevice("cuda", 0, "NVIDIA H200", "0x2335"),
                                         VisibleDevice("cuda", 1, "NVIDIA H200", "0x2335")]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-77e0")
    assert detect_gpu.visible_gpus() == [VisibleDevice("cuda", 0, "NVIDIA H200", "0x2335")]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_gpu.visible_gpus() == []


def test_detection_follows_the_cuda_runtime_order(nvml, monkeypatch: pytest.MonkeyPatch) -> None:
    nvml.nvmlDeviceGetName = lambda h: ["NVIDIA H200 first", "NVIDIA H200 second"][h]
    monkeypatch.setitem(sys.modules, "cupy", FakeCupy(bus_ids=("0000:1a:00.0",)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")   # the runtime's answer wins over the env parse
    assert detect_gpu.visible_gpus() == [VisibleDevice("cuda", 0, "NVIDIA H200 second", "0x2335")]


def test_detection_of_amd_gpus_honours_hip_visible_devices(amdsmi, monkeypatch: pytest.MonkeyPatch) -> None:
    assert [d.index for d in detect_gpu.visible_gpus()] == [0, 1]
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    assert detect_gpu.visible_gpus() == [VisibleDevice("rocm", 0, "AMD Instinct MI300X", "0x74a1")]
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "0")    # ROCR first: only device 0 remains, as 0
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")
    assert [d.pci_device_id for d in detect_gpu.visible_gpus()] == ["0x74a1"]


def test_detection_survives_a_failing_library(no_gpu_libraries) -> None:
    broken = types.ModuleType("pynvml")

    def init() -> None:
        raise RuntimeError("driver/library version mismatch")
    broken.nvmlInit = init  # type: ignore[attr-defined]
    no_gpu_libraries.setitem(sys.modules, "pynvml", broken)
    assert detect_gpu.visible_gpus() == []


@pytest.mark.parametrize("spec, expected", [
    (None, [0, 1, 2, 3]), ("", []), ("2,0", [2, 0]), ("0,7,1", [0]), ("1,1", [1]),
    ("MIG-abc,0", []), ("GPU-bb", [1]), ("cc", [2]),
    ("GPU-a", []),   # an ambiguous prefix (aa11, ab44) stops the list
])
def test_visible_devices_semantics(spec: str | None, expected: list[int]) -> None:
    uuids = ["GPU-aa11", "GPU-bb22", "GPU-cc33", "GPU-ab44"]
    assert detect_gpu.apply_visible_devices(list(range(4)), spec, lambda i: uuids[i]) == expected


def test_pci_bus_ids_normalize() -> None:
    assert detect_gpu.normalize_pci_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert detect_gpu.normalize_pci_bus_id("0000:3b:00.0") == "0000:3b:00.0"
    assert detect_gpu.normalize_pci_bus_id("3b:00.0") == "0000:3b:00.0"
    with pytest.raises(ValueError):
        detect_gpu.normalize_pci_bus_id("GPU-0")
    assert detect_gpu.format_pci_id(29857) == "0x74a1" and detect_gpu.format_pci_id("0x74A1") == "0x74a1"
    assert detect_gpu.format_pci_id("N/A") is None


def test_sysfs_pci_device_id(tmp_path: Path) -> None:
    (tmp_path / "0000:19:00.0").mkdir()
    (tmp_path / "0000:19:00.0" / "device").write_text("0x2335\n")
    assert detect_gpu.sysfs_pci_device_id("00000000:19:00.0", root=str(tmp_path)) == "0x2335"
    assert detect_gpu.sysfs_pci_device_id("0000:20:00.0", root=str(tmp_path)) is None


# ---------------------------------------------------------------- kernels: accounting and source

def test_every_kernel_name_is_defined_in_the_source() -> None:
    text = gpu.source()
    for name in gpu.KERNEL_NAMES:
        assert re.search(rf'extern "C" __global__ void (CHARZ_(STREAM_)?BOUNDS )?{name}\(', text), name
    assert gpu.fma_chains() == 8


def test_stream_byte_accounting() -> None:
    n = 1_000_001
    assert gpu.stream_bytes("copy", n) == 16 * n
    assert gpu.stream_bytes("scale", n) == 16 * n
    assert gpu.stream_bytes("add", n) == 24 * n
    assert gpu.stream_bytes("triad", n) == 24 * n
    work = gpu.stream_work("triad", n)
    assert work.bytes == {"dram": pytest.approx(24 * n)}
    assert work.flops == {"fp64": pytest.approx(2 * n)}
    assert gpu.stream_work("copy", n).flops == {}
    with pytest.raises(UsageError):
        gpu.stream_bytes("daxpy", n)


def test_fma_flop_accounting() -> None:
    chains = gpu.fma_chains()
    # 2 FLOPs per FMA, chains x iters FMAs per thread, chains - 1 adds to combine them
    assert gpu.fma_flops("fp32", threads=256, iters=1000) == pytest.approx(256 * (2 * chains * 1000 + chains - 1))
    assert gpu.fma_flops("fp16", threads=256, iters=1000) == pytest.approx(2 * gpu.fma_flops("fp32", 256, 1000))
    work = gpu.fma_work("fp64", blocks=132 * 8, threads_per_block=256, iters=4096)
    assert work.flops == {"fp64": pytest.approx(132 * 8 * 256 * (2 * chains * 4096 + chains - 1))}
    assert work.bytes == {} and work.launches == 1
    assert gpu.fill_grid(132) == 1056


def test_kernel_grids_follow_the_occupancy_the_driver_reports() -> None:
    kernels = gpu.GpuKernels.__new__(gpu.GpuKernels)
    asked: list[tuple[Any, int, int]] = []

    def occupancy(function: Any, threads: int, shared: int) -> int:
        asked.append((function, threads, shared))
        return {"ptr-triad": 6, "ptr-fma": 12}[function]

    kernels._cp = types.SimpleNamespace(cuda=types.SimpleNamespace(
        driver=types.SimpleNamespace(occupancyMaxActiveBlocksPerMultiprocessor=occupancy)))
    kernels.functions = {"stream_triad": types.SimpleNamespace(ptr="ptr-triad"),
                         "fma_fp64": types.SimpleNamespace(ptr="ptr-fma")}
    assert kernels.grid("triad", 58) == 58 * 6            # an L4-like SM holds 6 blocks of 256
    assert kernels.grid("fp64", 132) == 132 * 8           # never more than the default 8
    assert kernels.grid("triad", 132, 0.5) == 132 * 3     # half for each of two co-running kernels
    assert asked[0] == ("ptr-triad", 256, 0)
    # CuPy's RawKernel keeps the driver's function as ``kernel``: its pointer is the one asked
    kernels.functions["stream_triad"] = types.SimpleNamespace(kernel=types.SimpleNamespace(ptr="ptr-triad"))
    assert kernels.grid("triad", 58) == 58 * 6
    kernels._cp = types.SimpleNamespace()                 # no occupancy call: the default
    assert kernels.grid("stream_triad", 10) == 80
    with pytest.raises(UsageError):
        kernels.grid("triad", 10, 0.0)


def test_kernel_source_bounds_match_the_launch_defaults() -> None:
    text = gpu.source()
    assert re.search(rf"#define CHARZ_BLOCK_THREADS {gpu.DEFAULT_THREADS_PER_BLOCK}\b", text)
    assert re.search(rf"#define CHARZ_BLOCKS_PER_SM {gpu.DEFAULT_BLOCKS_PER_SM}\b", text)
    for name in (*gpu.FMA_KERNELS.values(), "copy_passes"):
        assert f"CHARZ_BOUNDS {name}(" in text
    # the STREAM kernels ask no minimum of resident blocks (so add and triad do not spill): the
    # main-memory case covers the arrays with one double2 per thread
    for name in gpu.STREAM_KERNELS.values():
        assert f"CHARZ_STREAM_BOUNDS {name}(" in text
    assert gpu.stream_grid(2 * 256 * 1000) == 1000 and gpu.stream_grid(2 * 256 * 1000 + 2) == 1001
    assert gpu.stream_grid(1) == 1
    with pytest.raises(UsageError):
        gpu.fma_flops("int8", 1, 1)


def test_chase_and_launch_accounting() -> None:
    work = gpu.chase_work(steps=1 << 20, footprint_bytes=64 << 20, level="l2")
    assert work.accesses == 1 << 20 and work.bytes == {"l2": pytest.approx(4 * (1 << 20))}
    assert gpu.launch_work(1000).launches == 1000 and gpu.launch_work().total_flops == 0


@pytest.mark.parametrize("slots, stride", [(1, 1), (2, 1), (1000, 1), (257, 32)])
def test_chase_permutation_is_one_cycle_over_all_slots(slots: int, stride: int) -> None:
    table = gpu.build_chase_permutation(slots, stride, seed=3)
    assert table.dtype == np.uint32 and table.size == slots * stride
    seen, index = set(), 0
    for _ in range(slots):
        assert index % stride == 0
        seen.add(index)
        index = int(table[index])
    assert index == 0 and len(seen) == slots


def test_gpu_kernels_compile_with_nvcc(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed: the CUDA source cannot be compiled here")
    result = subprocess.run([nvcc, "-arch=sm_90", "-ptx", "-o", str(tmp_path / "k.ptx"), str(gpu.SOURCE_PATH)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    ptx = (tmp_path / "k.ptx").read_text()
    # the FMA chains survived optimisation: at least one FMA per chain in each kernel's loop
    for instruction in ("fma.rn.f64", "fma.rn.f32", "fma.rn.f16x2"):
        assert ptx.count(instruction) >= gpu.fma_chains(), instruction
    for name in gpu.KERNEL_NAMES:
        assert f".entry {name}(" in ptx


def test_gpu_check_script_is_valid_bash() -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    script = Path(__file__).parents[1] / "benchmarks" / "gpu_check.sh"
    result = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # The preflight's Python (a here-document) must at least compile.
    text = script.read_text()
    start = text.index("<<'PY'\n") + len("<<'PY'\n")
    compile(text[start : text.index("\nPY\n", start)], "gpu_check.sh preflight", "exec")
