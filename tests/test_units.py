"""Figures as text: the verdict's messages and the reports share these formatters."""
from __future__ import annotations

import math

import pytest

from pytest_charz.report import units as report_units
from pytest_charz.units import format_bandwidth, format_bytes, format_flops, format_time


@pytest.mark.parametrize("seconds, text", [
    (1.5, "1.5 s"), (0.0123, "12.3 ms"), (4.56e-6, "4.56 us"), (7e-9, "7 ns"), (0.0, "0 ns"),
    (0.99996, "1 s"), (9.9996e-4, "1 ms"),   # the unit follows the rounded text, never "1e+03 ms"
    (None, "-"), (math.nan, "-"), (math.inf, "-"),
])
def test_time_takes_the_largest_unit_that_keeps_it_at_least_one(seconds, text):
    assert format_time(seconds) == text


def test_time_digits_are_significant_digits():
    assert format_time(1.23456e-3, 4) == "1.235 ms" and format_time(1.23456e-3) == "1.23 ms"


def test_rates_and_sizes_use_decimal_rates_and_binary_sizes():
    assert format_flops(2.5e12) == "2.5 TFLOP/s" and format_flops(512.0) == "512 FLOP/s"
    assert format_bandwidth(1.08e12) == "1.08 TB/s" and format_bandwidth(54.4e9) == "54.4 GB/s"
    assert format_bytes(48 * 1024) == "48 KiB" and format_bytes(2.27 * 2**20) == "2.27 MiB"


def test_the_report_layer_prints_with_the_same_functions():
    assert report_units.format_time is format_time and report_units.format_bytes is format_bytes


def test_report_quantities_by_unit():
    from pytest_charz.report.units import format_number, format_quantity, format_si

    assert format_si(0.08874, "J") == "88.74 mJ" and format_si(700.0, "W") == "700 W" and format_si(None, "J") == "-"
    assert format_si(0.9999996, "s") == "1 s"                # the prefix follows the rounded text
    assert format_quantity(3e11, "B/s") == "300 GB/s" and format_quantity(1.2e-7, "s") == "120 ns"
    assert format_quantity(1.5, "x") == "1.5x" and format_quantity(0.123, "fraction") == "12.3%"
    assert format_quantity(0.6506, "s/s") == "0.651 s/s"       # a share of time, not 651 ms/s
    assert format_quantity(2.5e4, "op") == "25 kop" and format_quantity(math.nan, "B") == "-"
    assert format_number(0.25) == "0.25" and format_number(1234.0) == "1234" and format_number(45000.0) == "45k"


def test_binary_ticks_are_whole_powers_of_two_and_few():
    from pytest_charz.report.units import binary_ticks

    ticks = binary_ticks(16 * 1024, 256 * 2**20)
    assert len(ticks) <= 8 and all(math.log2(t).is_integer() for t in ticks)
    assert ticks[0] >= 16 * 1024 and ticks[-1] <= 256 * 2**20 and binary_ticks(10.0, 5.0) == []


def test_a_humanized_axis_prints_units_and_never_an_exponent():
    pytest.importorskip("matplotlib")
    from pytest_charz.report.plots import new_figure
    from pytest_charz.report.units import humanize_axis

    figure = new_figure()
    axes = figure.add_subplot()
    axes.plot([16 * 1024, 2**30], [3e11, 5e10])
    axes.set(xscale="log", yscale="log")
    humanize_axis(axes, "x", "B")
    humanize_axis(axes, "y", "B/s")
    figure.canvas.draw()
    xs = [t.get_text() for t in axes.get_xticklabels() if t.get_text()]
    ys = [t.get_text() for t in axes.get_yticklabels() if t.get_text()]
    assert xs and all(t.endswith(("KiB", "MiB", "GiB")) for t in xs)
    assert len(ys) >= 3 and all(t.endswith(("GB/s", "TB/s")) for t in ys)   # 1-2-5 ticks on a short log axis
    assert not [t for t in xs + ys if "e+" in t or "^" in t or "$" in t]


def test_labels_are_placed_apart_and_off_the_points():
    from pytest_charz.report.sweep_plots import place_labels

    anchors = [(100.0, 100.0)] * 3 + [(104.0, 102.0), (300.0, 50.0)]
    sizes = [(40.0, 10.0)] * len(anchors)
    offsets = place_labels(anchors, sizes)
    boxes = []
    for (x, y), (w, h), offset in zip(anchors, sizes, offsets):
        assert offset is not None
        left = x + offset[0] if offset[0] >= 0 else x + offset[0] - w
        boxes.append((left, y + offset[1], left + w, y + offset[1] + h))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3])
        assert not any(a[0] < px < a[2] and a[1] < py < a[3] for px, py in anchors)
