"""The ``sim`` backend end to end with pytester: ``--target=sim:h100-sxm`` times each case's Work
with the simulator (the case's callable never runs), runs are deterministic, cases without Work
are skipped with the reason, references live under ``baselines/sim-<target>/``, and the committed
references of the suites turn a 10% change of the simulated DRAM bandwidth into ``drift``."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_charz.sim import Machine, simulate_work
from pytest_charz.targets.catalogue import resolve
from pytest_charz.work import Work

ROOT = Path(__file__).resolve().parent.parent
GEMM = Work(flops=2.0 * 4096**3, bytes=3.0 * 4096 * 4096 * 2, dtype="bf16", launches=1, op="gemm",
            shape={"m": 4096, "n": 4096, "k": 4096})

CASES = '''
from pytest_charz import Work

GEMM = Work(flops=2.0 * 4096**3, bytes=3.0 * 4096 * 4096 * 2, dtype="bf16", launches=1, op="gemm",
            shape={"m": 4096, "n": 4096, "k": 4096})


def never_called():
    raise AssertionError("the simulated device must not call the case")


def test_gemm(charz):
    charz.measure(never_called, work=GEMM)


def test_without_work(charz):
    charz.measure(never_called)


def test_helper_loop(charz, device):
    device.time_batch(never_called, 1, None)
'''


def run_file(pytester: pytest.Pytester, name: str) -> dict[str, Any]:
    return json.loads((pytester.path / name).read_text())


@pytest.fixture
def sim_suite(pytester: pytest.Pytester, quiet_host: None) -> pytest.Pytester:
    pytester.makepyfile(test_sim_cases=CASES)
    return pytester


def test_a_sim_target_times_the_work_without_running_the_case(sim_suite: pytest.Pytester) -> None:
    result = sim_suite.runpytest("--target=sim:h100-sxm", "-p", "no:cacheprovider", "--charz-out=run.json",
                                 "--charz-baselines=store", "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*case gives no Work*nothing for the simulator to time*",
                                 "*passed none (a helper loop timed directly)*"])
    run = run_file(sim_suite, "run.json")
    assert run["target"]["id"] == "sim-h100-sxm"
    assert run["device"]["backend"] == "sim"
    (case,) = run["cases"]
    expected = simulate_work(GEMM, Machine.from_spec(resolve("h100-sxm"))).latency_s
    assert case["measurement"]["median_s"] == pytest.approx(expected, rel=1e-9)
    assert set(case["measurement"]["samples_s"]) == {case["measurement"]["median_s"]}
    assert (sim_suite.path / "store" / "sim-h100-sxm" / "test_sim_cases.json").exists()


def test_two_sim_runs_give_identical_medians(sim_suite: pytest.Pytester) -> None:
    medians = []
    for name in ("first.json", "second.json"):
        sim_suite.runpytest("--target=sim:h100-sxm", "-p", "no:cacheprovider", f"--charz-out={name}",
                            "--charz-no-save").assert_outcomes(passed=1, skipped=2)
        medians.append([c["measurement"]["median_s"] for c in run_file(sim_suite, name)["cases"]])
    assert medians[0] == medians[1]


def test_a_sim_param_changes_the_machine(sim_suite: pytest.Pytester) -> None:
    base = Machine.from_spec(resolve("h100-sxm"))
    slower = base.param("clock_mhz") / 2
    sim_suite.runpytest("--target=sim:h100-sxm", "-p", "no:cacheprovider", "--charz-out=run.json", "--charz-no-save",
                        f"--charz-sim-param=clock_mhz={slower}").assert_outcomes(passed=1, skipped=2)
    (case,) = run_file(sim_suite, "run.json")["cases"]
    expected = simulate_work(GEMM, base.with_params({"clock_mhz": slower})).latency_s
    assert case["measurement"]["median_s"] == pytest.approx(expected, rel=1e-9)
    assert expected > simulate_work(GEMM, base).latency_s


@pytest.mark.parametrize("args, message", [
    (["--target=sim:", ], "*names no target; use sim:NAME*h100-sxm*"),
    (["--target=sim:h100-sxn"], "*unknown target 'h100-sxn'*did you mean 'h100-sxm'*"),
    (["--target=sim:h100-sxm", "--charz-sim-param=memory_bandwidth=-1"], "*memory_bandwidth*"),
    (["--target=sim:h100-sxm", "--charz-sim-param=compute_units=0"], "*compute_units*"),
    (["--target=sim:h100-sxm", "--charz-sim-param=bandwidth"], "*expected NAME=VALUE*"),
])
def test_bad_sim_targets_are_usage_errors(sim_suite: pytest.Pytester, args: list[str], message: str) -> None:
    result = sim_suite.runpytest(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def _copy_suites(pytester: pytest.Pytester) -> None:
    for name in ("conftest.py",):
        shutil.copy(ROOT / name, pytester.path / name)
    shutil.copytree(ROOT / "suites", pytester.path / "suites",
                    ignore=shutil.ignore_patterns("__pycache__", "test_collectives.py", "test_contention.py"))
    shutil.copytree(ROOT / "baselines" / "sim-h100-sxm", pytester.path / "store" / "sim-h100-sxm")


@pytest.fixture
def loaded_host(quiet_host: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every case's interval reads as a busy, stolen-from host: what a shared CI runner records."""
    from dataclasses import replace

    from pytest_charz.measure import conditions

    compare = conditions.compare

    def disturbed(before: Any, after: Any) -> Any:
        interval = compare(before, after)
        return replace(interval, flags=("other-load", "steal"), steal_fraction=0.2, other_cpu_s_per_s=1.9)

    monkeypatch.setattr(conditions, "compare", disturbed)


@pytest.mark.parametrize("host", ["quiet_host", "loaded_host"])
def test_committed_references_turn_a_10_percent_bandwidth_change_into_drift(pytester: pytest.Pytester,
                                                                           request: pytest.FixtureRequest,
                                                                           host: str) -> None:
    # On a loaded host too: the host's load and versions never explain a simulated change.
    request.getfixturevalue(host)
    _copy_suites(pytester)
    committed = json.loads((ROOT / "baselines" / "sim-h100-sxm" / "test_memory.json").read_text())
    triad = [case for case in committed["cases"] if "test_stream_sim[triad]" in case]
    assert triad, "the committed references hold the simulated STREAM cases"
    args = ["suites/test_memory.py", "suites/test_compute.py", "--target=sim:h100-sxm", "--charz-quick",
            "--charz-baselines=store", "-p", "no:cacheprovider", "-k", "sim"]
    unchanged = pytester.runpytest(*args, "--charz-out=same.json")
    assert unchanged.ret == pytest.ExitCode.OK
    outcomes = {c["id"]: c["verdict"]["outcome"] for c in run_file(pytester, "same.json")["cases"]}
    assert outcomes and set(outcomes.values()) == {"pass"}, outcomes

    bandwidth = Machine.from_spec(resolve("h100-sxm")).param("memory_bandwidth")
    changed = pytester.runpytest(*args, "--charz-out=changed.json", f"--charz-sim-param=memory_bandwidth={0.9 * bandwidth}")
    assert changed.ret == pytest.ExitCode.TESTS_FAILED
    verdicts = {c["id"]: c["verdict"] for c in run_file(pytester, "changed.json")["cases"]}
    drifted = sorted(case for case, verdict in verdicts.items() if verdict["outcome"] == "drift")
    assert any("test_stream_sim[triad]" in case for case in drifted), drifted
    changed.stdout.fnmatch_lines(["*test_stream_sim?triad?*charz drift*"])
    # The compute-bound GEMMs do not move with DRAM bandwidth.
    assert verdicts[next(c for c in verdicts if "test_gemm_sim[bf16-4096]" in c)]["outcome"] == "pass"
