"""Alpha-beta links: a link's latency and bandwidth from transfer times over sizes.

- :func:`fit_alpha_beta` fits ``time = alpha + bytes / beta`` to transfer times over sizes.
- :func:`link_figures` turns transfer times over sizes into a link's latency and bandwidth
  (the profile's ``transfer:<kind>`` and the calibration's measured links both use it).

Pure functions over sequences (no pytest, no I/O).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import UsageError

# A link's bandwidth is read from the transfers within this factor of the largest size.
LARGE_TRANSFER_SPAN = 16
# ... whose time is at least this many times the fitted latency: below it, time less latency is
# a small difference of two close numbers. An H200's 16 MiB device-to-device copy took 7.1 us
# against a fitted latency of 5.65 us (11.6 TB/s less the latency), its 256 MiB copy 138 us
# (2.0 TB/s); the median of the two read 6.8 TB/s, 2.8x the DRAM's half.
BANDWIDTH_LATENCY_MULTIPLE = 4


@dataclass(frozen=True)
class AlphaBetaFit:
    """``time_s = latency_s + bytes / bandwidth_bytes_per_s`` with its goodness of fit.

    ``bandwidth_bytes_per_s`` is None when the times do not grow with the size (the data cannot
    tell a bandwidth). ``r2`` is the coefficient of determination of the relative-error fit.
    """

    latency_s: float
    bandwidth_bytes_per_s: float | None
    r2: float
    points: int

    def predict_s(self, size_bytes: float) -> float:
        """Time the fit predicts for one transfer of ``size_bytes``."""
        per_byte = 1.0 / self.bandwidth_bytes_per_s if self.bandwidth_bytes_per_s else 0.0
        return self.latency_s + size_bytes * per_byte


def fit_alpha_beta(sizes_bytes: Sequence[float], times_s: Sequence[float]) -> AlphaBetaFit:
    """Least-squares fit of ``time = alpha + bytes / beta`` weighted by relative error.

    Each point's residual is divided by its measured time, so microsecond transfers (which set
    ``alpha``) weigh as much as gigabyte transfers (which set ``beta``). A negative intercept is
    not physical: the fit is then redone through the origin (``alpha = 0``).

    Parameters
    ----------
    sizes_bytes : sequence of float
        Bytes moved by each transfer (non-negative; at least two distinct sizes).
    times_s : sequence of float
        Time of each transfer, in seconds (positive).

    Returns
    -------
    AlphaBetaFit
        ``latency_s`` (alpha), ``bandwidth_bytes_per_s`` (beta, None when times do not grow with
        size), ``r2`` of the weighted fit and the number of points.
    """
    b = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if b.ndim != 1 or b.shape != t.shape:
        raise UsageError(f"fit_alpha_beta: sizes and times must be 1-D of equal length, got {b.shape} and {t.shape}")
    if not (np.all(np.isfinite(b)) and np.all(b >= 0) and np.all(np.isfinite(t)) and np.all(t > 0)):
        raise UsageError("fit_alpha_beta: sizes must be finite and >= 0, times finite and > 0")
    if np.unique(b).size < 2:
        raise UsageError(f"fit_alpha_beta: needs at least two distinct sizes, got {np.unique(b).tolist()}")
    weights = 1.0 / t
    design = np.column_stack([np.ones_like(b), b]) * weights[:, None]
    (alpha, per_byte), *_ = np.linalg.lstsq(design, t * weights, rcond=None)
    if alpha < 0:
        alpha = 0.0
        per_byte = float(np.sum(b * weights * weights * t) / np.sum((b * weights) ** 2))
    if per_byte <= 0:
        alpha = float(np.exp(np.mean(np.log(t))))
        per_byte = 0.0
    predicted = alpha + per_byte * b
    residual = (t - predicted) * weights
    weighted_mean = float(np.sum(weights * weights * t) / np.sum(weights * weights))
    total = float(np.sum(((t - weighted_mean) * weights) ** 2))
    r2 = 1.0 - float(np.sum(residual**2)) / total if total > 0 else 1.0
    return AlphaBetaFit(
        latency_s=float(alpha),
        bandwidth_bytes_per_s=float(1.0 / per_byte) if per_byte > 0 else None,
        r2=r2,
        points=int(b.size),
    )


@dataclass(frozen=True)
class LinkFigures:
    """A link's latency and bandwidth from transfer times over sizes, and how they were read."""

    latency_s: float | None               # the fit's intercept; None with one size only
    bandwidth_bytes_per_s: float | None   # None when times do not grow with size
    fit: AlphaBetaFit | None              # the alpha-beta fit over every size (two sizes or more)
    large_transfers: int                  # transfers the bandwidth is the median over (0: from the fit)
    large_from_bytes: float               # the smallest size counted as large


def link_figures(sizes_bytes: Sequence[float], times_s: Sequence[float],
                 large_span: float = LARGE_TRANSFER_SPAN) -> LinkFigures:
    """Latency from the alpha-beta fit over every size; bandwidth the median of
    size / (time - latency) over the transfers within ``large_span`` of the largest size that
    take at least ``BANDWIDTH_LATENCY_MULTIPLE`` latencies (else the fit's bandwidth).

    One line through every size is right for a PCIe link but is pulled by the small transfers
    wherever the curve is not one alpha-beta (host memory copies run from cache when small and
    from DRAM when large); the large transfers are what a bandwidth is quoted for. With one size
    only: no latency, the bandwidth of that size.
    """
    sizes = [float(s) for s in sizes_bytes]
    times = [float(t) for t in times_s]
    largest = max(sizes) if sizes else 0.0
    try:
        fit = fit_alpha_beta(sizes, times)
    except UsageError:
        if not sizes or not all(t > 0 for t in times):
            raise
        return LinkFigures(None, max(s / t for s, t in zip(sizes, times)), None, 0, largest)
    if fit.bandwidth_bytes_per_s is None:
        return LinkFigures(fit.latency_s, None, fit, 0, largest)
    threshold = largest / large_span
    floor_s = BANDWIDTH_LATENCY_MULTIPLE * fit.latency_s
    # (times are positive, so a transfer of at least the floor takes longer than the latency)
    rates = [s / (t - fit.latency_s) for s, t in zip(sizes, times) if s >= threshold and t >= floor_s]
    if not rates:
        return LinkFigures(fit.latency_s, fit.bandwidth_bytes_per_s, fit, 0, threshold)
    return LinkFigures(fit.latency_s, float(np.median(rates)), fit, len(rates), threshold)
