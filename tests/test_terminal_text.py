"""Text that fits the terminal: tables narrow to the width with the case id's end kept, and
``charz bottleneck``'s text of a recorded run no wider than the terminal it prints to."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_charz.report.text import fitted_table

RUN = Path(__file__).parent / "data" / "runs" / "amd-epyc-zen3-kvm-2vcpu.run.json.gz"


def test_a_table_narrows_to_the_width_keeping_each_row_on_one_line():
    rows = [["suites/test_collectives.py::test_collective[all-reduce-16B]", "communication", "x" * 90]]
    text = fitted_table(["case", "bottleneck", "evidence"], rows, 100, shrink=(2, 0), keep_end=(0,))
    lines = text.splitlines()
    assert len(lines) == 3 and max(len(line) for line in lines) <= 100
    assert lines[2].startswith("suites/test_collectives.py::test_collective[all-reduce-16B]")
    assert lines[2].rstrip().endswith("x\u2026")
    narrow = fitted_table(["case", "bottleneck", "evidence"], rows, 50, shrink=(2, 0), keep_end=(0,)).splitlines()
    assert max(len(line) for line in narrow) <= 50
    assert narrow[2].startswith("\u2026") and "[all-reduce-16B]" in narrow[2]


def test_a_table_that_fits_is_left_alone():
    text = fitted_table(["a", "b"], [["1", "2"]], 80)
    assert text.splitlines() == ["a  b", "-  -", "1  2"]


@pytest.mark.parametrize("columns", [80, 120])
def test_bottleneck_text_fits_the_terminal(columns, monkeypatch, capsys):
    from pytest_charz import cli

    monkeypatch.setenv("COLUMNS", str(columns))
    assert cli.main(["bottleneck", str(RUN)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert "suites/test_collectives.py::test_collective[all-reduce-16B]" in lines   # an id whole on its line
    import gzip
    import json

    ids = [case["id"] for case in json.loads(gzip.decompress(RUN.read_bytes()))["cases"]]
    assert set(ids) <= set(lines)                                                      # a record per case
