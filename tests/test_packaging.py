"""The package as pip installs it: a wheel built offline from a copy of the sources carries the
metadata (licence, classifiers, URLs, readme), the suites, their conftest and the reference
baselines; ``charz init`` from the unpacked wheel lays them out; ``charz --version`` says the
version."""
from __future__ import annotations

import ast
import email
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pytest_charz import __version__, cli
from pytest_charz.init_project import BUNDLED, bundled_files, init_project, summary_lines

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "conftest.py",
           "pytest_charz", "suites", "baselines")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of the project built offline (no index, no build isolation) from a copy of its
    sources, so the build writes nothing in the working tree."""
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                             "--disable-pip-version-check", "-q", "-w", str(out), str(source)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("pytest_charz-*.whl")
    return built


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_string(archive.read(name).decode("utf-8"))


def test_the_wheel_declares_licence_classifiers_urls_and_readme(wheel: Path) -> None:
    metadata = _metadata(wheel)
    assert metadata["Name"] == "pytest-charz" and metadata["Version"] == __version__
    assert metadata["License-Expression"] == "Apache-2.0"
    classifiers = metadata.get_all("Classifier") or []
    assert "Framework :: Pytest" in classifiers and any(c.startswith("Programming Language :: Python :: 3")
                                                        for c in classifiers)
    assert metadata.get_all("Project-URL")
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert "# pytest-charz" in (metadata.get_payload() or "")


def test_the_wheel_carries_the_licence_text(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        licence = next(n for n in archive.namelist() if n.endswith("dist-info/licenses/LICENSE"))
        text = archive.read(licence).decode("utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert text == (ROOT / "LICENSE").read_text(encoding="utf-8")


def test_the_wheel_carries_the_suites_conftest_and_baselines(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    bundled = {name.removeprefix("pytest_charz/bundled/") for name in names if name.startswith("pytest_charz/bundled/")}
    assert bundled == set(bundled_files(ROOT))
    assert {"conftest.py", "suites/_sizes.py", "suites/test_memory.py", "baselines/README.md"} <= bundled
    assert any(name.startswith("baselines/sim-h100-sxm/") and name.endswith(".json") for name in bundled)
    # the package data the plugin reads at run time
    assert any(name.startswith("pytest_charz/targets/catalogue/") and name.endswith(".toml") for name in names)
    assert "pytest_charz/py.typed" in names
    assert not any("__pycache__" in name or name.endswith(".so") for name in names)


def test_charz_init_from_the_installed_wheel_lays_out_the_suites(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    project = tmp_path / "project"
    code = ("import sys, pytest_charz.init_project as init; from pytest_charz import cli; "
            "print(init.bundled_root()); sys.exit(cli.main(['init', sys.argv[1]]))")
    result = subprocess.run([sys.executable, "-c", code, str(project)], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == str(site / "pytest_charz" / "bundled")
    assert (project / "conftest.py").read_text() == (ROOT / "conftest.py").read_text()
    assert (project / "suites" / "test_compute.py").is_file() and (project / "baselines" / "README.md").is_file()
    assert "next: cd" in result.stdout and "pytest suites/" in result.stdout


def test_init_keeps_files_that_exist_unless_forced(tmp_path: Path) -> None:
    first = init_project(tmp_path, source=ROOT)
    assert "suites/test_memory.py" in first.written and not first.kept
    (tmp_path / "suites" / "test_memory.py").write_text("# mine\n")
    again = init_project(tmp_path, source=ROOT)
    assert not again.written and "suites/test_memory.py" in again.kept
    assert (tmp_path / "suites" / "test_memory.py").read_text() == "# mine\n"
    assert any("--force overwrites them" in line for line in summary_lines(again))
    forced = init_project(tmp_path, force=True, source=ROOT)
    assert "suites/test_memory.py" in forced.written
    assert (tmp_path / "suites" / "test_memory.py").read_text() == (ROOT / "suites" / "test_memory.py").read_text()


def test_init_refuses_a_file_and_the_source_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a-file").write_text("")
    assert cli.main(["init", str(tmp_path / "a-file")]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    assert cli.main(["init", str(ROOT)]) == 2
    assert "already is where the suites come from" in capsys.readouterr().err


def test_the_build_step_and_init_bundle_the_same_files() -> None:
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    (value,) = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "BUNDLED"]
    assert tuple(ast.literal_eval(value)) == BUNDLED


def test_charz_version_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.strip() == f"charz {__version__}"
