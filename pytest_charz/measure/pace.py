"""The pace of the machine while a case runs: a short fixed reference kernel timed between the
case's batches, in the same process.

A case's time moves between processes on a shared or virtual machine (another core clock,
another neighbour) while the case itself is unchanged. Timed interleaved with the case's
samples, a fixed workload of the case's kind slows down and speeds up with it, so the ratio
case time / reference-kernel time travels between sessions where the raw time does not. The
kernels are the device's (:mod:`pytest_charz.kernels.pace` for the CPU); this module holds what
the sampler and the verdict need of them: the probe's protocol, when to run it, and its record.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from ..errors import FormatError
from . import stats

# The reference kernel takes at most this share of the time spent in measured samples (and at
# least PACE_MIN_SAMPLES runs, so its median has a CI): the case pays about a tenth more time.
PACE_SHARE = 0.1
PACE_MIN_SAMPLES = 8
# The reference kernel's median of the first and the second half of a case differing by more than
# this is a clock (or neighbour) change during the case, as the snapshots' clock check flags it.
PACE_CHANGE_SUSPICIOUS = 0.05


class PaceProbe(Protocol):
    """A fixed reference workload: ``kind`` (``core-clock``, ``memory``) names what it exercises,
    ``units`` what one run does (dependent adds, bytes copied), ``unit`` their name;
    ``run_once()`` runs it once (the sampler times it on the one clock)."""

    @property
    def kind(self) -> str: ...
    @property
    def units(self) -> float: ...
    @property
    def unit(self) -> str: ...

    def run_once(self) -> None: ...


def pace_due(pace_time_s: float, measured_s: float, runs: int) -> bool:
    """Whether the reference kernel runs before the next batch: until it has PACE_MIN_SAMPLES
    runs, then while its time stays within PACE_SHARE of the measured time."""
    return runs < PACE_MIN_SAMPLES or pace_time_s <= PACE_SHARE * measured_s


@dataclass(frozen=True)
class Pace:
    """The reference kernel's runs during one case: ``samples_s`` in the order taken, seconds."""

    kind: str
    samples_s: tuple[float, ...]
    units: float = 0.0
    unit: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples_s", tuple(float(v) for v in self.samples_s))

    @property
    def median_s(self) -> float | None:
        kept = [v for v in self.samples_s if v > 0 and math.isfinite(v)]
        return stats.median(kept) if kept else None

    @property
    def rel_ci_halfwidth(self) -> float | None:
        """Relative half-width of the 95% CI of the median (None below the six runs it needs)."""
        kept = [v for v in self.samples_s if v > 0 and math.isfinite(v)]
        ci = stats.known_median_ci(kept, 0.95)
        median = self.median_s
        return stats.relative_halfwidth(ci, median) if ci is not None and median else None

    @property
    def rate_per_s(self) -> float | None:
        """Units per second at the median (adds per second: the core clock in Hz)."""
        median = self.median_s
        return self.units / median if median and self.units > 0 else None

    def change_within(self) -> float | None:
        """Median of the second half of the runs / median of the first half, minus 1: how much
        the machine's pace moved during the case (None with too few runs)."""
        return pace_change(self.samples_s)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "samples_s": list(self.samples_s), "median_s": self.median_s,
                "units": self.units, "unit": self.unit}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> "Pace | None":
        if data is None:
            return None
        try:
            return cls(str(data["kind"]), tuple(float(v) for v in data["samples_s"]), float(data.get("units") or 0.0),
                       str(data.get("unit") or ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"a measurement's pace record is malformed ({type(exc).__name__}: {exc})") from None


def pace_change(samples_s: Sequence[float]) -> float | None:
    """Relative change of the median from the first half of ``samples_s`` to the second."""
    kept = [v for v in samples_s if v > 0 and math.isfinite(v)]
    if len(kept) < PACE_MIN_SAMPLES:
        return None
    half = len(kept) // 2
    first, second = stats.median(kept[:half]), stats.median(kept[half:])
    return second / first - 1.0 if first > 0 else None


__all__ = ["PACE_CHANGE_SUSPICIOUS", "PACE_MIN_SAMPLES", "PACE_SHARE", "Pace", "PaceProbe", "pace_change", "pace_due"]
