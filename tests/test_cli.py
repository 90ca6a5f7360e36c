"""The ``charz`` command's target views and its error handling."""
from __future__ import annotations

import pytest

from pytest_charz import cli


def test_targets_lists_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["targets"]) == 0
    out = capsys.readouterr().out
    for target_id in ("h100-sxm", "h100-pcie", "h200", "a100-sxm-80gb", "l4", "mi300x", "mi250x", "tpu-v5e"):
        assert target_id in out


def test_targets_lists_the_host_cpu_first_class(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_charz.targets.catalogue import resolve

    assert cli.main(["targets"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    host = resolve("cpu")
    assert "cpu" in rows and host.identity.name.split()[0] in rows["cpu"] and " cpu " in rows["cpu"]


def test_targets_show_of_a_name_like_none_suggests_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["targets", "show", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown target 'nope'" in err and "did you mean" not in err and "tpu-v5e'" not in err


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


def test_workload_predict_names_batch_and_context_in_its_header(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["workload", "predict", "llama-2-7b", "--target", "h100", "--phase", "decode",
                     "--batch", "4", "--context", "4096"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("llama-2-7b decode on h100-sxm")
    assert "batch 4" in header and "context 4096" in header and "tp 1" in header


def test_sim_echoes_each_what_if_figure_beside_the_machines_own(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sim", "llama-2-7b", "--target", "h100", "--phase", "decode",
                     "--set", "memory_bandwidth=4.8e12", "--set", "compute_units=100", "--host-dispatch-us", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    (whatif,) = [line for line in lines if line.startswith("what-if:")]
    assert "memory_bandwidth 4.8 TB/s (was " in whatif and "compute_units 100 units (was 132 units)" in whatif
    assert "host dispatch 2 us per op" in whatif
    assert lines.index(whatif) == 1


def test_sim_without_what_if_figures_prints_no_what_if_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sim", "llama-2-7b", "--target", "h100", "--phase", "decode"]) == 0
    assert not any(line.startswith("what-if:") for line in capsys.readouterr().out.splitlines())


def test_a_whole_number_parameter_takes_whole_steps() -> None:
    from pytest_charz.errors import UsageError
    from pytest_charz.sim import PARAMETERS
    from pytest_charz.sim.sweep import parse_axis

    assert parse_axis("compute_units=66:264:5", PARAMETERS).values == (66.0, 116.0, 165.0, 215.0, 264.0)
    assert parse_axis("compute_units=66:264:4", PARAMETERS).values == (66.0, 132.0, 198.0, 264.0)
    assert parse_axis("link_count=1:8:4:log", PARAMETERS).values == (1.0, 2.0, 4.0, 8.0)
    # a figure of any size keeps its exact steps
    assert parse_axis("memory_bandwidth=2e12:3e12:3", PARAMETERS).values == pytest.approx((2e12, 2.5e12, 3e12))
    with pytest.raises(UsageError, match=r"would repeat a value; use at most 3"):
        parse_axis("compute_units=1:3:5", PARAMETERS)
    with pytest.raises(UsageError, match=r"takes whole numbers; LO and HI must be whole, got 1.5 and 3"):
        parse_axis("compute_units=1.5:3:2", PARAMETERS)


def test_sweep_echoes_the_values_it_varied(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sweep", "llama-2-7b", "--phase", "decode", "--target", "h100-sxm", "--no-progress",
                     "--vary", "compute_units=66:264:4", "--vary", "memory_bandwidth=2e12,3e12",
                     "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "varied compute_units: 66 units, 132 units, 198 units, 264 units (machine: 132 units)" in out
    assert "varied memory_bandwidth: 2 TB/s, 3 TB/s (machine: " in out
