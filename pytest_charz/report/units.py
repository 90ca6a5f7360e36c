"""Human units for times and rates, as the reports use them (defined in :mod:`pytest_charz.units`)."""
from __future__ import annotations

from ..units import format_bandwidth, format_bytes, format_flops, format_time

__all__ = ["format_bandwidth", "format_bytes", "format_flops", "format_time"]
