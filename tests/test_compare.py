"""``charz compare``: two synthetic profiles whose ratios, winners and caveats are known by hand."""
from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from test_profile import run_dict, synthetic_cases

from pytest_charz import cli
from pytest_charz.formats import COMPARISON, atomic_write_json
from pytest_charz.profile import build_profile
from pytest_charz.records import Run
from pytest_charz.report.compare import (
    better_direction,
    compare_profiles,
    workload_class,
)


def _run(fma_fp64: float, target_id: str, *, numpy: str = "2.0", latency_scale: float = 1.0,
         drop: str | None = None) -> Run:
    cases = synthetic_cases(fma_fp64=fma_fp64)
    if drop:
        cases = [c for c in cases if c["work"]["op"] != drop]
    for case in cases:
        if case["work"]["op"] == "chase":
            m = case["measurement"]
            m["median_s"] *= latency_scale
            m["samples_s"] = [s * latency_scale for s in m["samples_s"]]
            m["ci_s"] = [s * latency_scale for s in m["ci_s"]]
            m["iqr_s"] = [s * latency_scale for s in m["iqr_s"]]
    data = run_dict(cases, target_id)
    data["provenance"]["libraries"]["numpy"] = numpy
    return Run.from_json(data, "test run")


@pytest.fixture(scope="module")
def profiles() -> list[dict[str, Any]]:
    # A: two stable runs (fp64 FMA 0.90 and 0.92 TFLOP/s, median 0.91).
    a = build_profile([_run(0.90e12, "boxa"), _run(0.92e12, "boxa")], ["a1.json", "a2.json"])
    # B: fp64 FMA 1.8 and 2.0 TFLOP/s (median 1.9, unstable: 10.5% apart), latencies doubled,
    # no dispatch case, another numpy.
    b = build_profile([_run(1.8e12, "boxb", numpy="2.1", latency_scale=2.0, drop="dispatch"),
                       _run(2.0e12, "boxb", numpy="2.1", latency_scale=2.0, drop="dispatch")], ["b1.json", "b2.json"])
    return [a, b]


@pytest.fixture(scope="module")
def comparison(profiles) -> dict[str, Any]:
    return compare_profiles(profiles, ["a.profile.json", "b.profile.json"])


def row(comparison: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in comparison["ceilings"] if r["name"] == name)


def test_directions_and_classes():
    assert better_direction("flops:fp64") == "higher" and better_direction("bandwidth:dram") == "higher"
    assert better_direction("latency:l1") == "lower" and better_direction("launch") == "lower"
    assert better_direction("slowdown:stream-vs-gemm") == "lower" and better_direction("capacity:l2") is None
    assert workload_class("gemm:fp64") == "compute" and workload_class("wakeup") == "runtime"
    assert workload_class("collective:all_reduce") == "movement" and workload_class("slowdown:x") is None


def test_ratio_interval_and_winner_by_hand(comparison):
    assert comparison["kind"] == "charz-comparison" and comparison["version"] == 1
    assert [t["label"] for t in comparison["targets"]] == ["boxa", "boxb"]
    fp64 = row(comparison, "flops:fp64")
    assert fp64["values"] == pytest.approx([0.91e12, 1.9e12])
    assert fp64["ratios"][1] == pytest.approx(1.9 / 0.91)
    assert fp64["intervals"][1] == pytest.approx([1.8 / 0.92, 2.0 / 0.90])
    assert fp64["winner"] == 1 and fp64["margin"] == pytest.approx(1.9 / 0.91)
    assert fp64["unstable"] == [False, True]
    gemm = row(comparison, "gemm:fp64")
    assert gemm["ratios"][1] == pytest.approx(1.0) and gemm["winner"] is None and gemm["margin"] == 1.0
    dram = row(comparison, "latency:dram")  # lower is better: A's half-as-long latency wins by 2x
    assert dram["ratios"][1] == pytest.approx(2.0, rel=1e-3)
    assert dram["winner"] == 0 and dram["margin"] == pytest.approx(2.0, rel=1e-3)
    assert row(comparison, "capacity:l2")["winner"] is None  # no better side


def test_missing_ceiling_has_no_ratio(comparison):
    dispatch = row(comparison, "dispatch")
    assert dispatch["values"][1] is None and dispatch["ratios"][1] is None
    assert dispatch["interval_notes"][1] == "missing" and dispatch["winner"] is None


def test_class_winners_are_geometric_means_of_common_ceilings(comparison):
    classes = {c["class"]: c for c in comparison["classes"]}
    compute = classes["compute"]
    assert compute["ceilings"] == ["flops:fp64", "flops:fp32", "gemm:fp64"]
    assert compute["scores"] == pytest.approx([1.0, (1.9 / 0.91) ** (1 / 3)])
    assert compute["winner"] == 1
    latency = classes["latency"]
    assert latency["scores"][1] == pytest.approx(0.5, rel=1e-3)
    assert latency["winner"] == 0 and latency["margin"] == pytest.approx(2.0, rel=1e-3)
    runtime = classes["runtime"]
    assert "dispatch" not in runtime["ceilings"] and runtime["winner"] is None  # equal launch and wakeup
    assert classes["memory"]["winner"] is None


def test_caveats_name_versions_unstable_and_missing(comparison):
    caveats = "\n".join(comparison["caveats"])
    assert "software versions differ: library numpy is 2.0 (boxa), 2.1 (boxb)" in caveats
    assert "flops:fp64 is unstable in boxb" in caveats
    assert "dispatch is missing from boxb" in caveats
    assert "single run" not in caveats and "different kinds" not in caveats


def test_single_run_and_different_kinds(profiles):
    single = build_profile([_run(0.9e12, "boxc")], ["c.json"])
    gpu = {"kind": "charz-profile", "version": 1, "target": {"id": "gpu1", "kind": "gpu"}, "runs": [{"path": "g"}],
           "provenance": {"python": "3.11.2", "libraries": {"numpy": "2.0"}}, "curves": {},
           "ceilings": [{"name": "flops:fp64", "value": 9.0e12, "unit": "FLOP/s", "evidence": {"values": [9.0e12]}}]}
    done = compare_profiles([profiles[0], single, gpu])
    fp64 = row(done, "flops:fp64")
    assert fp64["intervals"][1:] == [None, None] and fp64["interval_notes"][1:] == ["single run", "single run"]
    assert fp64["ratios"][2] == pytest.approx(9.0 / 0.91) and fp64["winner"] == 2
    caveats = "\n".join(done["caveats"])
    assert "boxc is a single run" in caveats and "gpu1 is a single run" in caveats
    assert "targets of different kinds (boxa: cpu, boxc: cpu, gpu1: gpu)" in caveats
    assert "latency:dram is missing from gpu1" in caveats


def test_two_profiles_of_one_target_are_told_apart_by_file(profiles):
    done = compare_profiles([profiles[0], profiles[0]], ["x/before.json", "x/after.json"])
    assert [t["label"] for t in done["targets"]] == ["boxa (before.json)", "boxa (after.json)"]
    assert all(r["winner"] is None for r in done["ceilings"])


def _write(tmp_path, profiles) -> list[str]:
    paths = [str(tmp_path / "a.profile.json"), str(tmp_path / "b.profile.json")]
    for path, profile in zip(paths, profiles):
        atomic_write_json(path, profile)
    return paths


def test_command_writes_json_markdown_and_self_contained_html(tmp_path, profiles, capsys):
    pytest.importorskip("matplotlib")
    paths = _write(tmp_path, profiles)
    assert cli.main(["compare", *paths, "-o", str(tmp_path / "out"), "--name", "ab"]) == 0
    out = capsys.readouterr().out
    written = COMPARISON.load(tmp_path / "out" / "ab.json")
    assert written["targets"][1]["path"] == paths[1]
    markdown = (tmp_path / "out" / "ab.md").read_text()
    assert "| flops:fp64 |" in markdown and "boxb by 2.09x" in markdown and "## Caveats" in markdown
    page = (tmp_path / "out" / "ab.html").read_text()
    assert 'src="http' not in page and "<script" not in page and "<link" not in page
    assert page.count("<svg") == 4 and "Roofline overlay" in page and "Latency curves" in page
    # top-down: the ratio chart is the first plot, and every plot comes before the tables
    assert page.index("Ratio to the baseline") < page.index("Roofline overlay") < page.index("<table")
    assert "flops:fp64" in out and "2.09x [1.96, 2.22]" in out and "compute" in out
    for suffix in ("json", "md", "html"):
        assert f"ab.{suffix}" in out


def test_command_defaults_and_without_matplotlib(tmp_path, profiles, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    paths = _write(tmp_path, profiles)
    assert cli.main(["compare", *paths]) == 0
    assert (tmp_path / "comparison.json").is_file() and (tmp_path / "comparison.md").is_file()
    assert not (tmp_path / "comparison.html").exists()
    assert "HTML comparison not written" in capsys.readouterr().err


@pytest.mark.parametrize("change", [{"kind": "charz-run"}, {"version": 99}])
def test_an_unreadable_profile_is_refused_naming_it_and_nothing_is_written(tmp_path, profiles, capsys, change):
    paths = _write(tmp_path, profiles)
    with open(paths[1]) as handle:
        data = json.load(handle)
    data.update(change)
    with open(paths[1], "w") as handle:
        json.dump(data, handle)
    assert cli.main(["compare", *paths, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("charz: error: ") and paths[1] in err
    assert not (tmp_path / "out").exists()


def test_one_profile_is_not_a_comparison(tmp_path, profiles, capsys):
    paths = _write(tmp_path, profiles)
    assert cli.main(["compare", paths[0]]) == 2
    assert "at least two profiles" in capsys.readouterr().err


def test_the_ratio_chart_draws_each_interval_and_colours_the_better_side(profiles):
    pytest.importorskip("matplotlib")
    from pytest_charz.report.compare_plots import plot_ratio_chart

    done = compare_profiles(profiles[:2], ["a.json", "b.json"])
    figure = plot_ratio_chart(done)
    axes = figure.axes[0]
    names = [t.get_text() for t in axes.get_yticklabels()]
    rows = {r["name"]: r for r in done["ceilings"]}
    assert names == [r["name"] for r in done["ceilings"] if any(x for x in r["ratios"][1:])]
    bars = [line for line in axes.get_lines() if len(line.get_xdata()) == 2 and line.get_linestyle() == "-"
            and list(line.get_ydata())[0] == list(line.get_ydata())[1] and line.get_label().startswith("_")]
    with_interval = [r for r in rows.values() if r["intervals"][1]]
    assert with_interval and len(bars) == len(with_interval)
    spans = sorted(tuple(round(x, 9) for x in bar.get_xdata()) for bar in bars)
    assert spans == sorted(tuple(round(x, 9) for x in r["intervals"][1]) for r in with_interval)
    fp64 = next(line for line in axes.get_lines() if list(line.get_xdata()) == [rows["flops:fp64"]["ratios"][1]])
    assert fp64.get_color() == "#2ca02c"                    # boxb is 2.09x faster: green
