"""Build step of pytest-charz beyond what pyproject.toml declares: the wheel carries the
characterization suites, their conftest.py and the reference baselines under
``pytest_charz/bundled/``, so that ``charz init`` can lay them out in a new directory after a
plain ``pip install pytest-charz``. Everything else is declared in pyproject.toml."""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
#: What ``charz init`` copies, relative to the repository root, as glob patterns.
BUNDLED = ("conftest.py", "suites/*.py", "baselines/README.md", "baselines/*/*.json")


class BuildWithSuites(build_py):
    """``build_py`` that also copies :data:`BUNDLED` into the built package."""

    def run(self) -> None:
        super().run()
        bundle = Path(self.build_lib) / "pytest_charz" / "bundled"
        for pattern in BUNDLED:
            for source in sorted(ROOT.glob(pattern)):
                target = bundle / source.relative_to(ROOT)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)


setup(cmdclass={"build_py": BuildWithSuites})
