"""The ``charz`` command's target views and its error handling."""
from __future__ import annotations

import pytest

from pytest_charz import cli


def test_targets_lists_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["targets"]) == 0
    out = capsys.readouterr().out
    for target_id in ("h100-sxm", "h100-pcie", "h200", "a100-sxm-80gb", "l4", "mi300x", "mi250x", "tpu-v5e"):
        assert target_id in out


def test_targets_show_resolves_an_alias_and_cites_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["targets", "show", "mi300"]) == 0
    out = capsys.readouterr().out
    assert "AMD Instinct MI300X (mi300x)" in out
    assert "dense peak bf16" in out and "[rocm-mi300]" in out


def test_an_unknown_target_is_an_error_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["targets", "show", "h100-sxn"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("charz: error: unknown target 'h100-sxn'") and "did you mean 'h100-sxm'?" in err
    assert "Traceback" not in err


def test_show_without_a_name_is_a_usage_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["targets", "show"]) == 2
    assert "usage: charz targets show NAME" in capsys.readouterr().err
