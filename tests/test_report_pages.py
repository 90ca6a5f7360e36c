"""The HTML pages' structure without a browser: caveats said once with their counts, long tables
folded, sweep titles short and every spot of a sweep's Pareto plot labelled."""
from __future__ import annotations

import pytest

from pytest_charz.report.html import caveat_list, folded_table, group_caveats, split_subject


def test_caveats_are_grouped_once_each_with_their_count_and_subjects():
    groups = group_caveats([("a", "single run"), ("b", "single run"), ("b", "single run"), (None, "other"),
                            ("c", "single run")])
    assert groups == [("single run", ["a", "b", "c"], 4), ("other", [], 1)]
    text = caveat_list(groups, names=2)
    assert text.count("single run") == 1 and "4x" in text and "(a, b and 1 more)" in text


def test_a_caveat_that_names_a_ceiling_is_grouped_by_what_it_says():
    names = ["latency:dram", "latency:dram:x", "bandwidth:dram"]
    assert split_subject("latency:dram is unstable in B: moved", names) == ("latency:dram", "is unstable in B: moved")
    assert split_subject("latency:dram:x is missing", names) == ("latency:dram:x", "is missing")
    assert split_subject("different CPUs: A and B", names) == (None, "different CPUs: A and B")


def test_a_long_table_shows_its_first_rows_and_folds_the_whole():
    rows = [[str(i), "x"] for i in range(40)]
    text = folded_table(["n", "v"], rows, shown=10)
    head, folded = text.split("<details>", 1)
    assert head.count("<tr>") == 11 and folded.count("<tr>") == 41 and "All 40 rows (30 more)" in folded
    assert "<details>" not in folded_table(["n", "v"], rows[:5], shown=10)


def _sweep(tmp_path):
    from pytest_charz import cli
    from pytest_charz.sim.sweep import SweepResult
    from pytest_charz.formats import read_json

    assert cli.main(["sweep", "llama-2-7b", "--phase", "decode", "--context", "256", "--num-layers", "2",
                     "--target", "h100-sxm", "-o", str(tmp_path), "--no-progress",
                     "--vary", "memory_bandwidth=2e12:4e12:4", "--vary", "compute_units=66:132:3"]) == 0
    return SweepResult.from_json(read_json(str(tmp_path / "sweep.json"), "sweep"))


def test_the_sweep_page_has_a_short_title_and_its_parameters_apart(tmp_path):
    from pytest_charz.sim.sweep_report import render_html, subtitle, title

    result = _sweep(tmp_path)
    assert title(result) == "Sweep: llama-2-7b decode on h100-sxm"
    assert "context 256" in subtitle(result) and "12 configurations varying memory_bandwidth" in subtitle(result)
    page = render_html(result)
    assert "<h1>Sweep: llama-2-7b decode on h100-sxm</h1>" in page and "Every workload parameter" in page


def test_every_spot_of_the_pareto_plot_is_labelled_with_its_configurations(tmp_path):
    pytest.importorskip("matplotlib")
    from pytest_charz.report.sweep_plots import plot_pareto

    result = _sweep(tmp_path)
    figure = plot_pareto(result)
    labels = [t.get_text() for t in figure.axes[0].texts]
    # compute_units does not move a memory-bound decode: three configurations share each spot
    assert len(labels) == 4 and all(label.count("#") == 3 for label in labels)
    named = sorted(int(n) for label in labels for n in label.replace("#", "").split(","))
    assert named == list(range(len(result.points)))
    figure.canvas.draw()
    boxes = [t.get_window_extent() for t in figure.axes[0].texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def _ceiling(name: str, value: float, unit: str) -> dict:
    return {"name": name, "value": value, "unit": unit, "caveats": []}


def test_the_roofline_has_a_roof_per_measured_level_and_its_legend_beside_the_axes():
    pytest.importorskip("matplotlib")
    from pytest_charz.report.plots import plot_roofline

    profile = {"ceilings": [_ceiling("flops:fp32", 1e12, "FLOP/s"), _ceiling("bandwidth:l1", 2e12, "B/s"),
                            _ceiling("bandwidth:l3", 4e11, "B/s"), _ceiling("bandwidth:dram", 5e10, "B/s")],
               "curves": {"flops": {"points": [{"op": "gemm", "dtype": "fp32", "flop_per_s": 4e11,
                                                "intensity_flop_per_byte": 50.0, "case": "g"}]}}}
    figure = plot_roofline(profile)
    axes = figure.axes[0]
    labels = [line.get_label() for line in axes.get_lines()]
    assert [label.split(":")[0] for label in labels if " roof" in label] == ["L1 roof", "L3 roof", "DRAM roof"]
    dram = next(line for line in axes.get_lines() if line.get_label().startswith("DRAM roof"))
    x, y = dram.get_xdata()[0], dram.get_ydata()[0]
    assert y == pytest.approx(x * 5e10)                      # the slope is the level's bandwidth
    assert "gemm fp32 cases (1)" in labels
    figure.canvas.draw()
    legend = axes.get_legend().get_window_extent()
    assert legend.x0 >= axes.get_window_extent().x1         # beside the axes: it covers no data


def test_a_curve_over_several_runs_draws_its_range():
    pytest.importorskip("matplotlib")
    from pytest_charz.report.plots import plot_levels

    points = [{"working_set_bytes": size, "value": value, "run": run, "case": "c"}
              for run, scale in ((0, 1.0), (1, 1.2)) for size, value in ((16384.0, 1e12), (2**20, 4e11))
              for value in [value * scale]]
    figure = plot_levels({"curves": {"bandwidth": {"points": points}}}, "bandwidth", "bandwidth", "B/s")
    axes = figure.axes[0]
    band = axes.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == pytest.approx(4e11) and band[:, 1].max() == pytest.approx(1.2e12)
    assert "range over 2 runs" in [c.get_label() for c in axes.collections]
