from __future__ import annotations

from typing import Any

from pytest_charz.explain import conditions_summary, find_cause, provenance_summary

CLEAN: dict[str, Any] = {"flags": [], "steal_fraction": 0.0, "other_cpu_s_per_s": 0.01, "top_other_processes": [],
                         "cpu_freq_change": 0.0, "throttle_reasons": [], "device_processes": None}


def run_provenance(**libraries: str) -> dict[str, Any]:
    return {
        "host": "bench-1",
        "os": {"system": "Linux", "release": "6.8.0-45-generic"},
        "cpu": {"model": "AMD EPYC 9654", "logical_cpus": 192},
        "python": {"version": "3.11.9"},
        "libraries": {"numpy": "1.26.4", "torch": "2.4.1", **libraries},
        "suite_git": {"commit": "a" * 40, "dirty": False},
        "device": {"name": "NVIDIA H100 80GB HBM3", "versions": {"driver": "580.65", "cuda": "12.8"}},
    }


def test_clean_interval_and_same_provenance_has_no_cause() -> None:
    assert find_cause(CLEAN, conditions_summary(CLEAN), run_provenance(), provenance_summary(run_provenance())) is None


def test_other_load_names_the_process_and_its_rate() -> None:
    interval = {**CLEAN, "flags": ["other-load"], "other_cpu_s_per_s": 1.9,
                "top_other_processes": [{"pid": 1234, "name": "stress-ng", "cpu_s": 1.8}]}
    assert find_cause(interval, None, {}, None) == "other-load: 1.9 CPU-s/s by stress-ng (pid 1234)"


def test_each_disturbance_flag_names_its_figures() -> None:
    interval = {**CLEAN, "flags": ["steal", "cpu-clock-changed", "throttled", "device-shared"],
                "steal_fraction": 0.083, "cpu_freq_change": -0.22, "throttle_reasons": ["hw_slowdown", "sw_thermal"],
                "device_processes": 2}
    cause = find_cause(interval, None, {}, None)
    assert cause == ("steal: 8.3% of CPU time stolen by the hypervisor; "
                     "cpu-clock-changed: CPU clock -22% during the case; "
                     "throttled: hw_slowdown, sw_thermal; device-shared: 2 other process(es) on the device")


def test_changed_driver_and_library_versions_are_named() -> None:
    now = run_provenance(numpy="2.1.0")
    now["device"] = {"name": "NVIDIA H100 80GB HBM3", "versions": {"driver": "590.10", "cuda": "12.8"}}
    cause = find_cause(CLEAN, CLEAN, now, provenance_summary(run_provenance()))
    assert cause == "device driver 580.65 -> 590.10; library numpy 1.26.4 -> 2.1.0"


def test_kernel_change_is_a_cause_but_a_new_commit_is_not() -> None:
    then = provenance_summary(run_provenance())
    new_commit = run_provenance()
    new_commit["suite_git"] = {"commit": "b" * 40}
    assert find_cause(CLEAN, None, new_commit, then) is None
    new_kernel = run_provenance()
    new_kernel["os"] = {"release": "6.11.0-9-generic"}
    assert find_cause(CLEAN, None, new_kernel, then) == "kernel 6.8.0-45-generic -> 6.11.0-9-generic"


def test_disturbed_reference_explains_a_clean_run() -> None:
    reference = conditions_summary({**CLEAN, "flags": ["other-load"], "other_cpu_s_per_s": 1.2,
                                    "top_other_processes": [{"pid": 77, "name": "make", "cpu_s": 1.0}]})
    cause = find_cause(CLEAN, reference, {}, None)
    assert cause == "reference was disturbed (other-load: 1.2 CPU-s/s by make (pid 77)); this run was not"


def test_governor_and_clock_changes_since_the_reference() -> None:
    def conditions(governor: str, mhz: float) -> dict[str, Any]:
        return {"before": {"governor": governor, "cpu_freq_mhz": [mhz, mhz]}, "after": {}, "interval": CLEAN}

    now = conditions_summary(conditions("powersave", 2000.0))
    then = conditions_summary(conditions("performance", 3000.0))
    assert find_cause(now, then, {}, None) == (
        "cpu governor performance -> powersave; mean CPU clock 3000 -> 2000 MHz (-33%) since the reference")
    assert find_cause(now, conditions_summary(conditions("powersave", 2050.0)), {}, None) is None


def test_summaries_are_idempotent() -> None:
    summary = provenance_summary(run_provenance(), created="2025-01-01T00:00:00+00:00")
    assert summary["kernel"] == "6.8.0-45-generic"
    assert summary["device_versions"] == {"driver": "580.65", "cuda": "12.8"}
    assert summary["commit"] == "a" * 40
    assert provenance_summary(summary) == summary
    conditions = conditions_summary({"before": {"governor": "performance", "cpu_freq_mhz": [3000.0, 3100.0]},
                                     "after": {}, "interval": {**CLEAN, "flags": ["steal"]}})
    assert conditions["flags"] == ["steal"]
    assert conditions["cpu_freq_mhz"] == 3050.0
    assert conditions_summary(conditions) == conditions


def _interval(**fields):
    return {"flags": [], "steal_fraction": None, "other_cpu_s_per_s": None, "top_other_processes": [],
            "cpu_freq_change": None, "throttle_reasons": [], "device_processes": None, **fields}


def test_a_cause_explains_only_a_change_of_its_direction_and_size():
    steal = _interval(flags=["steal"], steal_fraction=0.03)
    assert find_cause(steal, None, {}, None, ratio=1.07, threshold=0.05) is not None
    assert find_cause(steal, None, {}, None, ratio=1.20, threshold=0.05) is None     # 3% steal, 20% slower
    assert find_cause(steal, None, {}, None, ratio=0.85, threshold=0.05) is None     # steal never speeds up
    load = _interval(flags=["other-load"], other_cpu_s_per_s=1.0)
    assert find_cause(load, None, {}, None, ratio=1.9, threshold=0.05) is not None   # shared bandwidth: unbounded
    assert find_cause(load, None, {}, None, ratio=0.8, threshold=0.05) is None


def test_a_clock_change_since_the_reference_explains_up_to_its_size():
    then = {"flags": [], "cpu_freq_mhz": 3800.0}
    now = _interval()
    now_conditions = {"interval": now, "before": {"core_clock_mhz": 3400.0}}
    # 3800 -> 3400 MHz: runs up to 11.8% slower, plus the 5% threshold
    assert find_cause(now_conditions, then, {}, None, ratio=1.15, threshold=0.05) is not None
    assert find_cause(now_conditions, then, {}, None, ratio=1.30, threshold=0.05) is None
    assert find_cause(now_conditions, then, {}, None, ratio=0.90, threshold=0.05) is None


def test_a_disturbed_reference_explains_only_a_faster_run():
    then = {"flags": ["other-load"], "other_cpu_s_per_s": 1.0, "top_other_processes": []}
    assert find_cause(_interval(), then, {}, None, ratio=0.8, threshold=0.05) is not None
    assert find_cause(_interval(), then, {}, None, ratio=1.2, threshold=0.05) is None


def test_a_case_s_own_child_processes_are_not_other_load():
    import subprocess
    import sys

    from pytest_charz.measure.conditions import read_busy_processes

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid not in {row["pid"] for row in read_busy_processes(top=10_000)}
    finally:
        child.kill()
        child.wait()


def test_nothing_recorded_explains_a_change_on_a_simulated_device() -> None:
    # The same disturbances and version changes that explain a physical device's drift.
    interval = {**CLEAN, "flags": ["other-load", "steal"], "other_cpu_s_per_s": 1.9, "steal_fraction": 0.2}
    then = provenance_summary(run_provenance())
    now = run_provenance(numpy="2.1.0")
    now["os"] = {"release": "6.11.0-9-generic"}
    assert find_cause(interval, conditions_summary(CLEAN), now, then, ratio=1.1, threshold=0.05) is not None
    now["device"] = {"backend": "sim", "name": "NVIDIA H100 SXM5 80GB (simulated)", "versions": {}}
    assert find_cause(interval, conditions_summary(CLEAN), now, then, ratio=1.1, threshold=0.05) is None
