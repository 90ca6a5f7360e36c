"""The plugin's own hooks end to end with pytester: a conftest registers a toy backend, a model
and a report section. The toy device times the Work it is handed (it never runs the case's
function) on the fake clock, so every figure in the run file is known in advance."""
from __future__ import annotations

import json

import pytest

from pytest_charz.work import Work

TOY_BACKEND = '''
from pytest_charz.devices.base import DeviceInfo, VisibleDevice
from pytest_charz.measure import clock
from pytest_charz.targets.spec import Compute, Figure, Identity, MemoryLevel, TargetSpec

TOY_FLOP_PER_S = 1e12
TOY_MIN_CALL_S = 1e-6    # a floor, so that every batch moves the clock (an empty Work cannot stall)


class ToyDevice:
    """Times the work it is given at TOY_FLOP_PER_S on the fake clock; never calls fn."""

    backend = "toy"

    def __init__(self, index, name):
        self.info = DeviceInfo(backend="toy", index=index, name=name)
        self.seen = []

    def timer_resolution_s(self):
        return 1e-9

    def time_batch(self, fn, inner, work=None):
        self.seen.append(work)
        elapsed_s = inner * max(work.total_flops / TOY_FLOP_PER_S, TOY_MIN_CALL_S)
        clock.current().advance(elapsed_s * 1e9)
        return elapsed_s

    def synchronize(self):
        return None

    def flush_caches(self):
        return None

    def telemetry(self):
        return None

    def check_sample(self):
        return None

    def close(self):
        return None


class ToyBackend:
    name = "toy"

    def select(self, name, worker):
        spec = TargetSpec(
            identity=Identity(id=f"toy-{name}", name=f"Toy {name}", vendor="toy", kind="accelerator",
                              backend="toy"),
            compute=Compute(units=Figure(1.0, "toy"), unit_name="unit", clock_base_mhz=None,
                            clock_boost_mhz=None, peak_flops={"fp32": Figure(TOY_FLOP_PER_S, "toy")}),
            memory=(MemoryLevel("dram", "DRAM", "device", None, Figure(1e11, "toy")),),
            host_link=None, peer_links=(), power=None, sources={"toy": "made up for the test"},
            origin="toy")
        return spec, VisibleDevice("toy", worker or 0, f"toy {name}")

    def open(self, visible, spec):
        return ToyDevice(visible.index, visible.name)


def pytest_charz_backends(register):
    register(ToyBackend())
'''

TOY_CASE = '''
from pytest_charz import Work

WORK = Work(flops=2.5e8, dtype="fp32", op="toy")


def test_toy(charz, device):
    calls = []
    charz.measure(lambda: calls.append(1), work=Work(flops=2.5e8, dtype="fp32", op="toy"))
    assert calls == []                    # the toy device timed the work, it never ran it
    assert device.seen and all(seen == WORK for seen in device.seen)
'''


def run_file(pytester: pytest.Pytester, name: str = "run.json") -> dict:
    return json.loads((pytester.path / name).read_text())


@pytest.fixture
def toy(pytester: pytest.Pytester, fake_clock, quiet_host) -> pytest.Pytester:
    pytester.makeconftest(TOY_BACKEND)
    pytester.makepyfile(test_toy=TOY_CASE)
    return pytester


def test_a_registered_backend_binds_its_prefix_and_times_the_case_work(toy: pytest.Pytester) -> None:
    result = toy.runpytest("--target=toy:thing", "-p", "no:cacheprovider", "--charz-out=run.json")
    result.assert_outcomes(passed=1)
    run = run_file(toy)
    assert run["target"]["id"] == "toy-thing" and run["target"]["origin"] == "toy"
    assert run["target"]["kind"] == "accelerator"
    assert run["device"]["backend"] == "toy" and run["device"]["name"] == "toy thing"
    (case,) = run["cases"]
    assert case["work"] == Work(flops=2.5e8, dtype="fp32", op="toy").to_json()
    # 2.5e8 FLOP at the toy's 1e12 FLOP/s: what the device computed from the Work it was handed
    assert case["measurement"]["median_s"] == pytest.approx(2.5e-4, rel=1e-9)
    assert case["achieved"]["flop_per_s"]["fp32"] == pytest.approx(1e12, rel=1e-9)


def test_an_unknown_prefix_is_a_usage_error_naming_the_known_backends(toy: pytest.Pytester) -> None:
    result = toy.runpytest("--target=nosuch:thing", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no backend 'nosuch' is registered; known backends: cpu, cuda, rocm, sim, toy*"])


def test_the_sim_prefix_without_the_simulator_says_it_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # An installation without pytest_charz.sim registers no `sim` backend; the error says why.
    from pytest_charz.devices import registry

    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name, *args: None)
    error = registry.unknown_backend("sim:h100-sxm", "sim", registry.BackendRegistry(registry.builtin_backends()))
    assert str(error).startswith("--target 'sim:h100-sxm': no backend 'sim' is registered; known backends: "
                                 "cpu, cuda, rocm; the simulator (pytest_charz.sim) is not installed")


def test_a_second_backend_under_a_taken_name_is_a_usage_error(toy: pytest.Pytester) -> None:
    toy.makeconftest(TOY_BACKEND + '''
class Impostor(ToyBackend):
    name = "cpu"


def pytest_charz_backends(register):
    register(ToyBackend())
    register(Impostor())
''')
    result = toy.runpytest("--target=toy:thing", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*a backend named 'cpu' is already registered*"])


TOY_MODEL = '''
from pytest_charz.hookspec import ReportSection
from pytest_charz.models.base import Prediction


class ToyModel:
    name = "toy-model"

    def predict(self, work, ceilings):
        return Prediction.of_terms(self.name, 1.25e-3, "compute:fp64", {"compute:fp64": 1.25e-3})


def pytest_charz_models(register):
    register("toy-model", ToyModel)


def pytest_charz_report_sections(run):
    return [ReportSection("toy checks", (f"cases: {len(run.cases)}", f"target: {run.target.id}"))]
'''

TIMED_CASE = '''
from pytest_charz import Work
from pytest_charz.measure import clock


def test_timed(charz):
    fake = clock.current()
    charz.measure(lambda: fake.advance(1_250_000), work=Work(flops=1e6, dtype="fp64"))
'''


@pytest.fixture
def modelled(pytester: pytest.Pytester, fake_clock, quiet_host) -> pytest.Pytester:
    pytester.makeconftest(TOY_MODEL)
    pytester.makepyfile(test_timed=TIMED_CASE)
    return pytester


def test_a_model_from_the_hook_predicts_when_chosen(modelled: pytest.Pytester) -> None:
    result = modelled.runpytest("--target=cpu", "--charz-model=toy-model", "-p", "no:cacheprovider",
                                "--charz-out=run.json")
    result.assert_outcomes(passed=1)
    (case,) = run_file(modelled)["cases"]
    assert case["prediction"]["model"] == "toy-model"
    assert case["prediction"]["time_s"] == pytest.approx(1.25e-3)
    assert case["measurement"]["median_s"] == pytest.approx(1.25e-3)


def test_models_from_the_hook_last_one_session(modelled: pytest.Pytester) -> None:
    from pytest_charz.models.registry import MODELS

    for _ in range(2):      # a second session in the same process registers the model anew
        result = modelled.runpytest("--target=cpu", "--charz-model=toy-model", "-p", "no:cacheprovider",
                                    "--charz-out=run.json")
        result.assert_outcomes(passed=1)
        assert "toy-model" not in MODELS


def test_report_sections_follow_the_plugin_summary(modelled: pytest.Pytester) -> None:
    result = modelled.runpytest("--target=cpu", "--charz-model=toy-model", "-p", "no:cacheprovider",
                                "--charz-out=run.json")
    result.stdout.fnmatch_lines(["*charz: measurements*", "run file: *run.json", "*toy checks*",
                                 "cases: 1", "target: cpu"])
