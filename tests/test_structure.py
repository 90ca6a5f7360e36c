"""The shape of the package, read from its source: module sizes, the models' imports, and the
versioned files every command writes."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from pytest_charz import cli

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_charz"
MAX_MODULE_LINES = 400
# The models are data in, data out: nothing of the session, the files or the reports.
MODELS_MUST_NOT_IMPORT = ("report", "run", "records", "store", "cli", "profile", "calibration", "session",
                          "plugin")


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the pytest_charz modules ``path`` imports (relative imports resolved),
    anywhere in the file: a lazy import inside a function counts as much as one at the top."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("pytest_charz")}


def test_no_module_is_over_the_line_limit() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_models_import_no_session_file_or_report_layer() -> None:
    forbidden = tuple(f"pytest_charz.{name}" for name in MODELS_MUST_NOT_IMPORT)
    offending = {}
    for path in sorted((PACKAGE / "models").rglob("*.py")):
        bad = sorted(name for name in imported_modules(path)
                     if any(name == f or name.startswith(f + ".") for f in forbidden))
        if bad:
            offending[path.name] = bad
    assert offending == {}


def test_the_import_reader_sees_relative_and_lazy_imports(tmp_path: Path) -> None:
    # The check above is only as good as this reader: it must resolve ``from ..x import y``.
    sample = PACKAGE / "models" / "base.py"
    assert "pytest_charz.errors" in imported_modules(sample)
    assert "pytest_charz.formats.PREDICTION" in imported_modules(sample)


SUITE = '''
import pytest
from pytest_charz import Work
from pytest_charz.measure import clock

@pytest.mark.parametrize("cost_ns", [1000, 4000, 16000])
def test_steady(charz, cost_ns):
    fake = clock.current()
    charz.measure(lambda: fake.advance(cost_ns), work=Work(flops=2000.0 * cost_ns, dtype="fp64", bytes=8.0 * cost_ns,
                                                           op="stream", shape={"array_bytes": 8.0 * cost_ns}))
'''


@pytest.fixture
def written(pytester: pytest.Pytester, fake_clock: object, quiet_host: None, monkeypatch: pytest.MonkeyPatch
            ) -> dict[str, Path]:
    """A suite run (saving references), then ``charz profile``, ``calibrate`` and ``validate``."""
    pytester.makepyfile(test_suite=SUITE)
    run = pytester.path / "run.json"
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--charz-out={run}",
                                          f"--charz-baselines={pytester.path / 'baselines'}")
    result.assert_outcomes(passed=3)
    monkeypatch.chdir(pytester.path)
    assert cli.main(["profile", str(run), "-o", "out"]) == 0
    assert cli.main(["calibrate", str(run), "--out", "out/calibration.json"]) == 0
    assert cli.main(["validate", str(run), "-o", "out"]) == 0
    files = {"run": run, "profile": pytester.path / "out" / "run.profile.json",
             "calibration": pytester.path / "out" / "calibration.json",
             "validation": pytester.path / "out" / "validation.json"}
    files.update({f"baseline:{p.name}": p for p in sorted((pytester.path / "baselines").rglob("*.json"))})
    return files


def test_every_json_file_written_has_a_kind_and_a_version(written: dict[str, Path],
                                                          pytester: pytest.Pytester) -> None:
    everything = sorted(p for p in pytester.path.rglob("*.json")
                        if not any(part.startswith(".") for part in p.relative_to(pytester.path).parts))
    assert set(written.values()) <= set(everything) and any(k.startswith("baseline:") for k in written)
    for path in everything:
        data = json.loads(path.read_text())
        assert isinstance(data.get("kind"), str) and data["kind"].startswith("charz-"), path
        assert isinstance(data.get("version"), int), path
    run = json.loads(written["run"].read_text())
    for case in run["cases"]:
        for record in (case, case["work"], case["measurement"], case["prediction"], case["verdict"]):
            assert record["kind"].startswith("charz-") and isinstance(record["version"], int)
    assert run["target"]["spec"]["kind"] == "charz-target-spec"


def _restamp(path: Path, **changes: object) -> str:
    data = json.loads(path.read_text())
    data.update(changes)
    text = json.dumps(data)
    path.write_text(text)
    return text


@pytest.mark.parametrize("change", [{"version": 99}, {"kind": "charz-something-else"}])
def test_a_run_of_another_version_or_kind_is_refused_naming_it(written: dict[str, Path], change: dict,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    profile_before = written["profile"].read_text()
    run_text = _restamp(written["run"], **change)
    capsys.readouterr()
    assert cli.main(["profile", str(written["run"]), "-o", "out"]) == 2
    assert str(written["run"]) in capsys.readouterr().err
    assert written["profile"].read_text() == profile_before and written["run"].read_text() == run_text
    assert cli.main(["calibrate", str(written["run"]), "--out", "out/calibration.json"]) == 2
    assert cli.main(["validate", str(written["run"]), "-o", "out"]) == 2


@pytest.mark.parametrize("change", [{"version": 99}, {"kind": "charz-run"}])
def test_a_profile_of_another_version_or_kind_is_refused_naming_it(written: dict[str, Path], change: dict,
                                                                   pytester: pytest.Pytester) -> None:
    text = _restamp(written["profile"], **change)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--charz-profile={written['profile']}",
                                          f"--charz-out={pytester.path / 'again.json'}",
                                          f"--charz-baselines={pytester.path / 'baselines'}")
    assert result.ret != 0
    assert str(written["profile"].name) in (result.stdout.str() + result.stderr.str())
    assert written["profile"].read_text() == text


@pytest.mark.parametrize("which", ["baseline", "calibration"])
@pytest.mark.parametrize("change", [{"version": 99}, {"kind": "charz-profile"}])
def test_a_baseline_or_calibration_of_another_version_or_kind_is_refused_naming_it(
        written: dict[str, Path], change: dict, which: str, pytester: pytest.Pytester) -> None:
    baseline = next(path for key, path in written.items() if key.startswith("baseline:"))
    if which == "calibration":  # where the judge looks for this target's calibration
        calibrated = baseline.parent / "calibration-composite.json"
        calibrated.write_text(written["calibration"].read_text())
        baseline = calibrated
    text = _restamp(baseline, **change)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--charz-out={pytester.path / 'again.json'}",
                                          f"--charz-baselines={pytester.path / 'baselines'}")
    assert result.ret != 0
    assert baseline.name in result.stdout.str() + result.stderr.str()
    assert baseline.read_text() == text
