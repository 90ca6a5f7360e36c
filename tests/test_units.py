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
