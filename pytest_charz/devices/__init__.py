"""Devices: backends bound to one physical or simulated device (cpu, cuda, rocm, sim)."""
from __future__ import annotations

from .base import Device, DeviceInfo, VisibleDevice

__all__ = ["Device", "DeviceInfo", "VisibleDevice"]
