"""Binding a target to the devices that are really visible."""
from __future__ import annotations

import pytest

from pytest_charz.devices.base import VisibleDevice
from pytest_charz.devices.detect import select_target
from pytest_charz.errors import UsageError

CPU = VisibleDevice("cpu", 0, "Some CPU")
H100S = [VisibleDevice("cuda", i, "NVIDIA H100 80GB HBM3") for i in range(4)]


def test_xdist_workers_spread_over_the_matching_devices() -> None:
    visible = [CPU, *H100S]
    picked = [select_target("h100", visible, worker)[1].index for worker in range(6)]
    assert picked == [0, 1, 2, 3, 0, 1]
    spec, device = select_target(None, visible, 2)         # the default target too
    assert spec.id == "h100-sxm" and device.index == 2


def test_a_target_that_is_not_among_the_visible_devices_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"'h200'.*not visible.*cuda:0 \(NVIDIA H100 80GB HBM3\)"):
        select_target("h200", [CPU, *H100S])


def test_without_an_accelerator_the_default_is_the_host_cpu() -> None:
    spec, device = select_target(None, [CPU])
    assert spec.id == "cpu" and device is CPU
