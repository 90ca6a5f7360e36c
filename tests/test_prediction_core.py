"""One prediction core: the same work gets the same price from ``predict``, the plugin's verdict
and ``charz validate``, and a calibration means the same thing in every form it arrives in.

The recorded Zen 5 run (``data/runs/``) and a fresh fake-clock session are calibrated with
``charz calibrate``; every held-out case is then priced three ways and compared at a relative
1e-9. The calibration is checked where it enters: another model, target or host CPU, a file of
another kind, or the record nested in a file, is a usage error that names what differs.
"""
from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_charz import cli
from pytest_charz.calibration.file import Calibration, load_calibration
from pytest_charz.errors import UsageError
from pytest_charz.prediction import predict
from pytest_charz.run import load_run
from pytest_charz.validation.models import validate
from pytest_charz.work import Work

DATA = Path(__file__).parent / "data"
RECORDED = DATA / "runs" / "amd-epyc-zen5-kvm-2vcpu.run.json.gz"
REL = 1e-9


def same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=0.0)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The recorded run calibrated (default model, alternate split) and validated with it."""
    directory = tmp_path_factory.mktemp("recorded")
    run_path = directory / "run.json"
    with gzip.open(RECORDED, "rb") as packed, open(run_path, "wb") as unpacked:
        shutil.copyfileobj(packed, unpacked)
    calibration_path = directory / "calibration.json"
    assert cli.main(["calibrate", str(run_path), "--out", str(calibration_path)]) == 0
    report = validate([str(run_path)], models=["opclass"]).to_json()
    return {"run": load_run(str(run_path)), "calibration": calibration_path, "validation": report}


def test_predict_and_validate_give_one_price_on_the_recorded_run(recorded: dict[str, Any]) -> None:
    works = {case.id: case.work for case in recorded["run"].cases}
    calibration = recorded["calibration"]
    held = [row for row in recorded["validation"]["cases"] if row["kind"] == "held-out"]
    assert len(held) >= 20
    assert set(load_calibration(calibration).held_out) >= {row["case"] for row in held}
    differing = []
    for row in held:
        predicted = predict(works[row["case"]], calibration=calibration)
        if not (same(predicted.time_s, row["predicted_s"])
                and all(same(a, b) for a, b in zip(predicted.interval_s, row["interval_s"]))):
            differing.append((row["case"], predicted.time_s, row["predicted_s"]))
    assert differing == []


def test_the_calibration_forms_give_one_price_that_the_calibration_changed(recorded: dict[str, Any]) -> None:
    path = recorded["calibration"]
    document = json.loads(path.read_text())
    forms = [path, str(path), document, load_calibration(path)]
    core = load_calibration(path).predictor()
    assert core.calibration is not None and core.calibration.classes
    cases = [case for case in recorded["run"].cases if case.work.op][:40]
    changed = 0
    for case in cases:
        prices = [predict(case.work, calibration=form) for form in forms]
        assert all(p.time_s == prices[0].time_s and p.interval_s == prices[0].interval_s for p in prices)
        # uncalibrated: the same model and ceilings without the fit
        uncalibrated = core.model.predict(case.work, core.ceilings)
        if any(note.startswith("calibrated as") for note in prices[0].notes):
            changed += prices[0].time_s != uncalibrated.time_s
            assert prices[0].model == "opclass+calibration"
            assert prices[0].interval_s[0] < prices[0].time_s < prices[0].interval_s[1]
    assert changed >= 10


def test_a_calibration_of_another_model_target_host_or_kind_is_a_usage_error(recorded: dict[str, Any],
                                                                              tmp_path: Path) -> None:
    path = recorded["calibration"]
    work = Work(flops=2.0 * 512**3, dtype="fp32", op="gemm", shape={"m": 512, "n": 512, "k": 512})
    with pytest.raises(UsageError, match=r"of model 'opclass', not 'composite'"):
        predict(work, model="composite", calibration=path)
    with pytest.raises(UsageError, match=r"of target 'cpu', not 'h100-sxm'.*target='cpu'"):
        predict(work, target="h100", calibration=path)
    with pytest.raises(UsageError, match=r"nested in a calibration file"):
        predict(work, calibration=json.loads(path.read_text())["fit"])
    profile = {"kind": "charz-profile", "version": 1}
    other_kind = tmp_path / "not-a-calibration.json"
    other_kind.write_text(json.dumps(profile))
    with pytest.raises(UsageError, match=r"not-a-calibration\.json.*not a charz calibration file"):
        predict(work, calibration=other_kind)
    with pytest.raises(UsageError, match=r"does not exist"):
        predict(work, calibration=tmp_path / "missing.json")
    with pytest.raises(UsageError, match=r"calibration= takes"):
        predict(work, calibration=3.0)  # type: ignore[arg-type]
    # a host CPU's calibration on another CPU: named, never applied silently
    other_host = json.loads(path.read_text())
    other_host["host"] = "Some Other CPU"
    with pytest.raises(UsageError, match=r"measured on the CPU 'Some Other CPU'"):
        predict(work, target="cpu", calibration=other_host)
    with pytest.raises(UsageError, match=r"needs a target"):
        predict(work)


SUITE = '''
import os
import numpy as np
import pytest
from pytest_charz import Work
from pytest_charz.measure import clock

SIZES = [2 ** 16, 2 ** 18, 2 ** 20, 2 ** 22, 2 ** 24, 2 ** 26]

@pytest.mark.charz(noise=0.005, max_time=1.0)
@pytest.mark.parametrize("n_bytes", SIZES)
def test_copy(charz, n_bytes):
    fake = clock.current()
    rng = np.random.default_rng(n_bytes)
    # 2 us of dispatch plus 4 GB/s, a little faster per byte for the larger copies
    cost_ns = 2000.0 + n_bytes / (4.0 * (1.0 + 0.05 * np.log2(n_bytes / 2 ** 16)))
    charz.measure(lambda: fake.advance(cost_ns * rng.lognormal(0.0, 0.01)),
                  work=Work(bytes=2.0 * n_bytes, launches=1, op="copy", shape={"bytes": n_bytes}))
'''


def test_a_fresh_sessions_verdicts_predict_and_validate_give_one_price(pytester: pytest.Pytester, fake_clock: Any,
                                                                     quiet_host: Any) -> None:
    pytester.makepyfile(test_suite=SUITE)
    first = pytester.runpytest("--target=cpu", "--charz-out=first.json", "--charz-no-save")
    first.assert_outcomes(passed=6)
    run = load_run(str(pytester.path / "first.json"))
    from pytest_charz.store import run_target_key

    calibration = pytester.path / "baselines" / run_target_key(run) / "calibration-opclass.json"
    # written where the session's judge looks, with no --out (the host CPU's key, fingerprint and all)
    assert cli.main(["calibrate", str(pytester.path / "first.json")]) == 0
    assert calibration.is_file()
    second = pytester.runpytest("--target=cpu", "--charz-out=second.json", "--charz-no-save")
    # (a case outside its calibrated band fails as model-error: the price is what is compared here)
    judged = json.loads((pytester.path / "second.json").read_text())["cases"]
    assert len(judged) == 6 and second.ret in (0, 1)
    report = validate([str(pytester.path / "first.json")], models=["opclass"]).to_json()
    validated = {row["case"]: row for row in report["cases"] if row["kind"] == "held-out"}
    assert validated
    for case in judged:
        verdict_price = case["prediction"]
        assert verdict_price["model"] == "opclass+calibration"
        mine = predict(Work.from_json(case["work"]), calibration=calibration)
        assert same(mine.time_s, verdict_price["time_s"]), case["id"]
        assert all(same(a, b) for a, b in zip(mine.interval_s, verdict_price["interval_s"])), case["id"]
        if case["id"] in validated:
            assert same(mine.time_s, validated[case["id"]]["predicted_s"]), case["id"]


def test_the_public_api_has_real_signatures_and_every_name_resolves() -> None:
    import inspect
    import pydoc

    import pytest_charz

    for name in pytest_charz.__all__:
        assert getattr(pytest_charz, name) is not None, name
    for name in ("Calibration", "Graph", "Prediction", "Predictor", "simulate_graph", "load_predictor"):
        assert name in pytest_charz.__all__
    for name in ("predict", "predict_graph", "build", "capture", "load_predictor", "load_calibration",
                 "simulate_graph", "load_target"):
        function = getattr(pytest_charz, name)
        parameters = inspect.signature(function).parameters
        # its own parameters, never a forwarding wrapper's (*args, **kwargs)
        assert parameters and list(parameters) != ["args", "kwargs"], (name, parameters)
        assert function.__module__.startswith("pytest_charz.") and function.__module__ != "pytest_charz", name
    assert list(inspect.signature(pytest_charz.predict).parameters)[:5] == [
        "work_or_works", "target", "model", "profile", "calibration"]
    assert "calibration" in pydoc.render_doc(pytest_charz.predict)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pytest_charz.nope  # noqa: B018
