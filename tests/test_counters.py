"""Counters of a case: the one interface, what the collector adds up (only the timed batches,
per call), the perf_event_open source on this machine, and the parsers of perf stat, ncu and
rocprofv3 output (recorded or documented outputs under data/evidence/)."""
from __future__ import annotations

import errno
import sys
import json
import os
from pathlib import Path
from typing import Any, Mapping

import pytest

from pytest_charz.errors import FormatError
from pytest_charz.evidence import perf_events
from pytest_charz.evidence.collect import EvidenceDevice, check_counter_mode
from pytest_charz.evidence.ncu import counters_from_ncu, parse_ncu_csv
from pytest_charz.evidence.perf_stat import counters_from_perf_stat, parse_perf_stat
from pytest_charz.evidence.rocprof import counters_from_rocprof, parse_counter_collection
from pytest_charz.errors import UsageError
from pytest_charz.measure.readings import CounterReading
from pytest_charz.measure.sampler import SamplerSettings, sample

DATA = Path(__file__).parent / "data" / "evidence"


class CallCounter:
    """A CounterSource that counts 100 'instructions' per call of the measured function and 7 per
    anything else the process does (the sampler's own work between batches)."""

    name = "fake"

    def __init__(self) -> None:
        self.instructions = 0.0
        self.started = 0

    def available(self) -> tuple[tuple[str, ...], Mapping[str, str]]:
        return ("instructions",), {"cycles": "no PMU: test"}

    def start(self) -> None:
        self.started += 1

    def read(self) -> dict[str, float]:
        self.instructions += 7          # reading itself, and what happened since the last read
        return {"instructions": self.instructions}

    def stop(self) -> CounterReading:
        return CounterReading(self.read(), {"cycles": "no PMU: test"}, self.name, 1)


def _measured(fake_device: Any, counter: CallCounter, discard: Any = None, mode: str = "hot",
              energy: Any = None, fake_clock: Any = None) -> tuple[EvidenceDevice, Any]:
    device = fake_device(cost_ns=lambda: 1000.0, discard=discard)
    calls = {"n": 0}

    def fn() -> None:
        calls["n"] += 1
        counter.instructions += 100

    now = (lambda: fake_clock.now_ns() / 1e9) if fake_clock is not None else (lambda: 0.0)
    wrapped = EvidenceDevice(device, counter, energy, now, cold=mode == "cold")
    settings = SamplerSettings(min_samples=10, max_samples=40, max_time_s=0.2, warmup_s=0.001, mode=mode,
                               noise_target=1e-9)
    measurement = sample(wrapped, fn, settings)
    return wrapped, (measurement, calls["n"])


def test_only_the_timed_batches_are_counted_per_call(fake_device: Any) -> None:
    counter = CallCounter()
    wrapped, (measurement, all_calls) = _measured(fake_device, counter)
    reading, _ = wrapped.finish()
    assert reading is not None
    timed_calls = len(measurement.samples_s) * measurement.inner_loops
    assert reading.calls == timed_calls < all_calls          # warm-up and calibration left out
    # 100 per call plus one 7 of the after-batch read per batch: nothing of the sampler's work in between.
    assert reading.values["instructions"] == pytest.approx(100 + 7 / measurement.inner_loops)
    assert reading.missing == {"cycles": "no PMU: test"} and reading.source == "fake"


def test_a_discarded_sample_is_counted_with_its_calls(fake_device: Any) -> None:
    counter = CallCounter()
    wrapped, (measurement, _) = _measured(fake_device, counter, discard=lambda n: "throttled" if n % 3 == 0 else None)
    reading, _ = wrapped.finish()
    assert reading is not None and measurement.discarded_total > 0
    taken = len(measurement.samples_s) + measurement.discarded_total
    assert reading.calls == taken * measurement.inner_loops
    assert reading.values["instructions"] == pytest.approx(100 + 7 / measurement.inner_loops)


def test_counter_reading_round_trips_with_its_kind_and_version() -> None:
    reading = CounterReading({"instructions": 1.5e6, "task-clock-s": 3e-4}, {"cycles": "no PMU"}, "perf_event_open",
                             1200, notes=("threads counted: 2",))
    data = json.loads(json.dumps(reading.to_json()))
    assert data["kind"] == "charz-counters" and data["version"] == 1 and data["per"] == "call"
    assert CounterReading.from_json(data) == reading
    with pytest.raises(FormatError, match="version 2 is not supported"):
        CounterReading.from_json({**data, "version": 2})


def test_counter_mode_names_the_choices() -> None:
    assert check_counter_mode("off") == "off"
    with pytest.raises(UsageError, match="auto, off"):
        check_counter_mode("on")


# -- perf_event_open on this machine ----------------------------------------------------------
def test_perf_event_open_counts_software_events_and_gives_a_reason_for_the_rest() -> None:
    source = perf_events.PerfEventSource()
    counted, missing = source.available()
    sources = perf_events.pmu_sources()
    assert {"task-clock-s", "context-switches", "cpu-migrations", "page-faults"} <= set(counted)
    for event in perf_events.EVENTS:
        assert (event.name in counted) != (event.name in missing), event.name   # never silently absent
    if perf_events.core_pmu(sources) is None:   # a guest without a PMU, as the development VMs
        for name in ("cycles", "instructions"):
            assert missing[name].startswith("no PMU: /sys/bus/event_source/devices has no 'cpu' source")
    assert "fp-ops-by-width" in missing and "dram-bytes" in missing
    source.start()
    before = source.read()
    total = 0
    for i in range(200_000):
        total += i
    after = source.read()
    reading = source.stop()
    assert after["task-clock-s"] > before["task-clock-s"] > 0
    assert reading.source == "perf_event_open" and any(n.startswith("threads counted:") for n in reading.notes)


def test_the_reason_of_a_failed_event_says_what_to_do() -> None:
    no_pmu = [line for line in (DATA / "event_source" / "kvm-no-pmu.txt").read_text().split() if line]
    cycles = perf_events.EVENTS[4]
    assert cycles.name == "cycles"
    assert perf_events.failure_reason(cycles, errno.ENOENT, no_pmu, 2).startswith(
        "no PMU: /sys/bus/event_source/devices has no 'cpu' source (virtual machine without PMU passthrough)")
    with_pmu = [*no_pmu, "cpu"]
    assert perf_events.failure_reason(cycles, errno.EACCES, with_pmu, 3).startswith("no permission")
    assert "perf_event_paranoid=3" in perf_events.failure_reason(cycles, errno.EACCES, with_pmu, 3)
    assert perf_events.failure_reason(cycles, errno.ENOENT, with_pmu, 2).startswith("not supported here")
    assert perf_events.core_pmu(["breakpoint", "cpu_core", "cpu_atom"]) == "cpu_core"
    assert perf_events.core_pmu(["armv8_pmuv3_0", "software"]) == "armv8_pmuv3_0"


# -- perf stat ---------------------------------------------------------------------------------
def test_perf_stat_output_of_a_guest_without_pmu() -> None:
    lines = parse_perf_stat((DATA / "perf_stat" / "kvm-no-pmu.csv").read_text())
    reading = counters_from_perf_stat(lines, calls=1, no_pmu_reason="no 'cpu' event source")
    assert reading.values["task-clock-s"] == pytest.approx(0.03230)
    assert reading.values["page-faults"] == 824 and reading.values["context-switches"] == 19
    assert set(reading.missing) == {"cycles", "instructions", "cache-references", "cache-misses"}
    assert reading.missing["cycles"] == "perf stat: not supported (no 'cpu' event source)"


def test_perf_stat_with_comment_lines_and_per_call_division() -> None:
    lines = parse_perf_stat((DATA / "perf_stat" / "kvm-no-pmu-numpy.csv").read_text())
    assert [line.event for line in lines][:4] == ["task-clock", "context-switches", "cpu-migrations", "page-faults"]
    reading = counters_from_perf_stat(lines, calls=4)
    assert reading.values["page-faults"] == pytest.approx(4756 / 4)
    for failed in ("unknown-event.txt", "nopid.txt"):      # perf refused: usage text, no event line
        assert parse_perf_stat((DATA / "perf_stat" / failed).read_text()) == []


def test_perf_stat_multiplexed_event_is_noted() -> None:
    lines = parse_perf_stat("1000,,instructions,500,50.00,,\n")
    assert counters_from_perf_stat(lines).notes == ("instructions multiplexed: counted 50.0% of the time, scaled by perf",)


# -- Nsight Compute and rocprofv3 (documented formats, not captured) ----------------------------
def test_ncu_raw_csv_per_kernel_launch() -> None:
    kernels = parse_ncu_csv((DATA / "ncu" / "h100-triad-raw.csv").read_text())
    assert len(kernels) == 3 and kernels[0]["Kernel Name"] == "charz_triad_f64"
    assert kernels[0]["dram__bytes_read.sum"] == 134_217_728.0
    assert kernels[0]["gpu__time_duration.sum"] == pytest.approx(63_488e-9)
    assert kernels[2]["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"] is None      # n/a
    reading = counters_from_ncu(kernels)
    assert reading.per == "kernel" and reading.calls == 3 and reading.source == "ncu"
    assert reading.values["dram-read-bytes"] == pytest.approx((134_217_728 + 134_217_856 + 25_165_824) / 3)
    assert reading.values["achieved-occupancy-pct"] == pytest.approx((87.31 + 87.12 + 24.98) / 3)
    assert reading.values["fp32-fma-thread-inst"] == 0.0          # only the launches that have it
    assert "fp64-add-thread-inst" in reading.missing and "no value" in reading.missing["fp64-add-thread-inst"]
    assert counters_from_ncu([]).missing["dram-read-bytes"] == "ncu profiled no kernel launch"


def test_rocprofv3_counter_collection_per_dispatch() -> None:
    rows = parse_counter_collection((DATA / "rocprofv3" / "mi300x-triad_counter_collection.csv").read_text())
    reading = counters_from_rocprof(rows)
    assert reading.calls == 2 and reading.per == "kernel" and reading.missing == {}
    assert reading.values["dram-read-bytes"] == pytest.approx(131072.0 * 1024)
    assert reading.values["dram-write-bytes"] == pytest.approx(65536.0 * 1024)
    assert reading.values["gpu-busy-cycles"] == pytest.approx((142391 + 141977) / 2)
    partial = counters_from_rocprof([r for r in rows if r["Counter_Name"] != "WRITE_SIZE"])
    assert "dram-write-bytes" in partial.missing


def test_counters_never_silently_empty_for_every_backend() -> None:
    from pytest_charz.evidence.sources import open_counters

    for backend in ("cuda", "rocm", "sim"):
        factory, missing, name = open_counters(backend)
        if factory is None:
            assert missing and all(isinstance(why, str) and why for why in missing.values()), backend
    assert os.path.isdir("/proc/self/task")


# -- end to end: the run file ------------------------------------------------------------------
E2E_SUITE = '''
from pytest_charz import Work
from pytest_charz.measure import clock

def test_steady(charz):
    fake = clock.current()
    charz.measure(lambda: fake.advance(20_000), work=Work(flops=2e4, dtype="fp64", op="fma"))
'''


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_each_case_of_a_cpu_run_records_counters_or_why_not(pytester: pytest.Pytester, fake_clock: Any,
                                                            quiet_host: None, mode: str) -> None:
    pytester.makepyfile(test_suite=E2E_SUITE)
    run = pytester.path / "run.json"
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--charz-out={run}", f"--charz-counters={mode}",
                                          "--charz-no-save", f"--charz-baselines={pytester.path / 'baselines'}")
    result.assert_outcomes(passed=1)
    case = json.loads(run.read_text())["cases"][0]
    energy = case["energy"]
    assert energy["kind"] == "charz-energy" and energy["source"] == "rapl"
    assert (energy["joules_per_call"] is None) == (energy["missing"] is not None)
    if mode == "off":
        assert "counters" not in case
        return
    counters = case["counters"]
    assert counters["kind"] == "charz-counters" and counters["version"] == 1 and counters["per"] == "call"
    assert counters["source"] == "perf_event_open" and counters["calls"] > 0
    assert {"task-clock-s", "context-switches", "cpu-migrations", "page-faults"} <= set(counters["values"])
    for name in ("cycles", "instructions"):
        assert (name in counters["values"]) != (name in counters["missing"])
    if perf_events.core_pmu(perf_events.pmu_sources()) is None:
        assert counters["missing"]["cycles"].startswith("no PMU: ")
    from pytest_charz.run import load_run

    loaded = load_run(str(run)).cases[0]
    assert loaded.counters is not None and loaded.counters.source == "perf_event_open"


def test_an_unknown_counter_mode_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=E2E_SUITE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--charz-counters=on")
    assert result.ret != 0
    assert "invalid choice: 'on'" in result.stderr.str()


def test_a_case_without_counters_loads_and_one_with_them_round_trips() -> None:
    from charz_factories import case_json

    from pytest_charz.records import CaseRecord

    old = CaseRecord.from_json(case_json("old", {"op": "fma"}, 1e-3))
    assert old.counters is None and old.energy is None
    assert "counters" not in old.to_json() and "energy" not in old.to_json()
    reading = CounterReading({"task-clock-s": 1e-4}, {"cycles": "no PMU: x"}, "perf_event_open", 50)
    new = CaseRecord.from_json(case_json("new", {"op": "fma"}, 1e-3, counters=reading.to_json()))
    assert new.counters == reading
    assert CaseRecord.from_json(new.to_json()).to_json() == new.to_json()
    with pytest.raises(FormatError, match="counters record"):
        CaseRecord.from_json(case_json("bad", {"op": "fma"}, 1e-3, counters={"kind": "charz-energy", "version": 1}))


def test_cupti_kernel_records_become_kernels_and_kernel_time_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUPTI through a fake ``cupti.cupti`` in the documented Activity API shape: buffers of
    activity records handed to the completed-buffer callback on ``activity_flush_all``."""
    import types

    from pytest_charz.evidence import cupti as cupti_module
    from pytest_charz.evidence.sources import open_counters

    binding = types.ModuleType("cupti.cupti")
    binding.ActivityKind = types.SimpleNamespace(CONCURRENT_KERNEL=10, MEMCPY=1)  # type: ignore[attr-defined]
    pending: list[Any] = []
    state: dict[str, Any] = {}
    binding.activity_register_callbacks = lambda requested, completed: state.update(  # type: ignore[attr-defined]
        requested=requested, completed=completed)
    binding.activity_enable = lambda kind: state.setdefault("enabled", set()).add(kind)  # type: ignore[attr-defined]
    binding.activity_disable = lambda kind: state["enabled"].discard(kind)  # type: ignore[attr-defined]

    def flush(forced: int) -> None:
        records, pending[:] = list(pending), []
        state["completed"](records)

    binding.activity_flush_all = flush  # type: ignore[attr-defined]
    package = types.ModuleType("cupti")
    package.cupti = binding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupti", package)
    assert cupti_module.load_cupti() is binding
    factory, missing, name = open_counters("cuda")
    assert factory is not None and name == "cupti" and missing == {}
    source = factory()
    source.start()
    assert state["requested"]() == (8 << 20, 0) and 10 in state["enabled"]
    before = source.read()
    pending.extend([types.SimpleNamespace(kind=10, start=1_000, end=4_000),
                    types.SimpleNamespace(kind=1, start=0, end=99_000),          # a copy: not a kernel
                    types.SimpleNamespace(kind=10, start=5_000, end=6_000)])
    after = source.read()
    assert after["kernels"] - before["kernels"] == 2
    assert after["kernel-time-s"] - before["kernel-time-s"] == pytest.approx(4e-6)
    reading = source.stop()
    assert reading.source == "cupti" and "dram-read-bytes" in reading.missing and 10 not in state["enabled"]
    monkeypatch.setitem(sys.modules, "cupti", None)
    factory, missing, _ = open_counters("cuda")
    assert factory is None and "pytest-charz[cupti]" in missing["kernels"]
    assert "pytest_charz.evidence.ncu" in missing["dram-read-bytes"]
