"""Golden files: a recorded run gives the same profile, calibration and validation JSON.

``data/runs/amd-epyc-zen5-kvm-2vcpu.run.json.gz`` is a full CPU suite run (format version 1)
recorded on an AMD EPYC Zen 5 guest; ``data/golden/`` holds what ``charz profile``, ``charz
calibrate`` and ``charz validate`` wrote from it. Every byte must match, except the top-level
``created`` time stamp of each output. A change that alters an output on purpose regenerates
them with ``python tests/test_golden.py`` and says why in its commit.
"""
from __future__ import annotations

import gzip
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from pytest_charz import cli

DATA = Path(__file__).parent / "data"
RUN = DATA / "runs" / "amd-epyc-zen5-kvm-2vcpu.run.json.gz"
GOLDEN = DATA / "golden"
OUTPUTS = {
    "profile.json": "golden.run.profile.json",
    "profile.md": "golden.run.profile.md",
    "calibration.json": "calibration.json",
    "validation.json": "validation.json",
}
_CREATED = re.compile(r'^ "created": "[^"]*",$', re.MULTILINE)


def normalize(text: str) -> str:
    """The output with its own top-level time stamp blanked (the run's stays as recorded)."""
    return _CREATED.sub(' "created": "<created>",', text)


def write_outputs(directory: Path) -> dict[str, str]:
    """Run the three commands on the golden run in ``directory``; their normalized outputs."""
    with gzip.open(RUN, "rb") as packed, open(directory / "golden.run.json", "wb") as unpacked:
        shutil.copyfileobj(packed, unpacked)
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        assert cli.main(["profile", "golden.run.json", "-o", "out"]) == 0
        assert cli.main(["calibrate", "golden.run.json", "--out", "out/calibration.json"]) == 0
        assert cli.main(["validate", "golden.run.json", "-o", "out"]) == 0
    finally:
        os.chdir(cwd)
    return {name: normalize((directory / "out" / produced).read_text(encoding="utf-8"))
            for name, produced in OUTPUTS.items()}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_outputs(tmp_path_factory.mktemp("golden"))


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_output_matches_golden(outputs: dict[str, str], name: str) -> None:
    expected = (GOLDEN / name).read_text(encoding="utf-8")
    produced = outputs[name]
    if produced != expected:
        lines = [(i, a, b) for i, (a, b) in enumerate(zip(expected.splitlines(), produced.splitlines()), 1) if a != b]
        first = lines[0] if lines else (None, "(lengths differ)", "")
        pytest.fail(f"{name} differs from the golden file: {len(lines)} line(s), first at line {first[0]}:\n"
                    f"  golden:   {first[1][:200]}\n  produced: {first[2][:200]}")


def test_normalize_blanks_only_the_top_level_time_stamp() -> None:
    text = '{\n "created": "2026-12-01T08:31:35+00:00",\n "runs": [\n  {\n   "created": "2026-11-30"\n  }\n ]\n}\n'
    assert normalize(text) == text.replace("2026-12-01T08:31:35+00:00", "<created>")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        for name, text in write_outputs(Path(scratch)).items():
            (GOLDEN / name).write_text(text, encoding="utf-8")
            print(f"wrote {GOLDEN / name}", file=sys.stderr)
