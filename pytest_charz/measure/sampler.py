"""The sampler: warm-up, inner-loop sizing, hot or cold samples, adaptive stopping.

Hot samples time a batch of ``inner`` back-to-back calls and divide; cold samples time one call
after the device's caches are flushed (the flush is not timed). Sampling stops when the
distribution-free CI of the median is within the noise target (after a minimum of samples and of
measured time), when the case's time budget ends, or at a sample cap. Samples the device rejects
(throttled clocks) are discarded, counted by reason, and followed by a growing recovery pause.

The budget holds: the first call tells what one call costs here, and a case whose one call takes
longer than its whole budget is not measured (:class:`OverBudget`, after that one call); any
other case ends within its budget plus one batch, or, while it has fewer samples than a CI of
the median needs at its level (6 at 95%), within twice its budget. A measurement left with
fewer has an unknown CI (``ci_s`` and ``rel_ci_halfwidth`` None) and never meets its noise
target; one that runs out of budget says in its notes how far its target was and what would
reach it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import CharzError, UsageError, check_choice, check_positive
from ..units import format_time
from ..work import Work
from . import clock, stats
from .pace import Pace, PaceProbe, pace_due
from .turns import TURN_SLICE_S

if TYPE_CHECKING:
    from ..devices.base import Device  # the protocol the sampler drives; devices read measure/, not the reverse

MODES = ("hot", "cold")


@dataclass(frozen=True)
class SamplerSettings:
    """How to sample one case. Times in seconds; ``noise_target`` is the relative half-width of
    the ``ci_level`` confidence interval of the median that ends sampling early."""

    noise_target: float = 0.01
    ci_level: float = 0.95
    mode: str = "hot"
    min_samples: int = 10
    max_samples: int = 20_000
    min_time_s: float = 0.05        # time spent in measured samples before the noise check may stop
    max_time_s: float = 2.0         # budget for the whole case: warm-up, inner-loop sizing and samples
    warmup_s: float = 0.05
    min_batch_s: float = 1e-4       # a hot batch lasts at least this, and 200 timer ticks
    recovery_s: float = 0.05        # pause after a discarded sample; doubles on each in a row

    def __post_init__(self) -> None:
        check_positive("noise_target", self.noise_target)
        if not 0.5 <= self.ci_level < 1.0:
            raise UsageError(f"ci_level must be in [0.5, 1), got {self.ci_level!r}")
        check_choice("mode", self.mode, MODES)
        if not isinstance(self.min_samples, int) or self.min_samples < 1:
            raise UsageError(f"min_samples must be a positive int, got {self.min_samples!r}")
        if not isinstance(self.max_samples, int) or self.max_samples < self.min_samples:
            raise UsageError(f"max_samples must be an int >= min_samples, got {self.max_samples!r}")
        check_positive("max_time_s", self.max_time_s)
        for name in ("min_time_s", "warmup_s", "min_batch_s", "recovery_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise UsageError(f"{name} must be a non-negative number, got {value!r}")

    def updated(self, **changes: Any) -> "SamplerSettings":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


QUICK = dict(min_samples=6, min_time_s=0.005, max_time_s=0.08, warmup_s=0.005)


class OverBudget(CharzError):
    """One call of the case takes longer than its whole time budget on this machine, so the
    case is not measured (the sampler stops after that first call). ``call_s`` is the first
    call's wall time and ``budget_s`` the budget, in seconds; the message says both, e.g.
    ``one call 48 s: over the 2 s budget``. The suites skip such a case with this reason, to which
    they add the cause when the host tells it (no native bf16, ...)."""

    def __init__(self, call_s: float, budget_s: float) -> None:
        self.call_s = float(call_s)
        self.budget_s = float(budget_s)
        super().__init__(f"one call {format_time(call_s)}: over the {format_time(budget_s)} budget")


@dataclass(frozen=True)
class Measurement:
    """The samples of one case and their summary. Sample times are per call, in seconds."""

    samples_s: tuple[float, ...]
    inner_loops: int
    mode: str
    discarded: Mapping[str, int]
    warmup_calls: int
    stop_reason: str                     # "noise-target", "time-budget", "max-samples", "all-discarded"
    elapsed_s: float
    noise_target: float
    ci_level: float
    median_s: float | None
    ci_s: tuple[float, float] | None
    iqr_s: tuple[float, float] | None
    rel_ci_halfwidth: float | None
    outliers: int
    timer_resolution_s: float
    notes: tuple[str, ...] = field(default=())
    sampling_s: float = 0.0              # time in the sampling loop (after warm-up and inner-loop sizing)
    # The reference kernel timed between this case's batches (None where the device has none).
    pace: Pace | None = None

    @property
    def normalised_median(self) -> float | None:
        """The median in units of the reference kernel's median time (None without a pace)."""
        pace_s = self.pace.median_s if self.pace is not None else None
        return self.median_s / pace_s if self.median_s is not None and pace_s else None

    @property
    def ci_known(self) -> bool:
        """Whether the measurement has a CI of the median at its level: enough kept samples
        (:func:`stats.ci_min_samples`, 6 at 95%). Runs recorded before this rule gave one
        sample a zero-width CI; it is not known either."""
        return (self.ci_s is not None and self.rel_ci_halfwidth is not None
                and len(self.samples_s) >= stats.ci_min_samples(self.ci_level))

    @property
    def noise_met(self) -> bool:
        """Whether the CI of the median is known and within the noise target."""
        return self.ci_known and self.rel_ci_halfwidth is not None and self.rel_ci_halfwidth <= self.noise_target

    @property
    def discarded_total(self) -> int:
        return sum(self.discarded.values())

    def to_json(self) -> dict[str, Any]:
        from ..formats import MEASUREMENT

        return {
            **MEASUREMENT.stamp(),
            "samples_s": list(self.samples_s),
            "inner_loops": self.inner_loops,
            "mode": self.mode,
            "taken": len(self.samples_s) + self.discarded_total,
            "kept": len(self.samples_s),
            "discarded": dict(self.discarded),
            "warmup_calls": self.warmup_calls,
            "stop_reason": self.stop_reason,
            "elapsed_s": self.elapsed_s,
            "noise_target": self.noise_target,
            "noise_met": self.noise_met,
            "ci_level": self.ci_level,
            "median_s": self.median_s,
            "ci_s": list(self.ci_s) if self.ci_s else None,
            "iqr_s": list(self.iqr_s) if self.iqr_s else None,
            "rel_ci_halfwidth": self.rel_ci_halfwidth,
            "outliers": self.outliers,
            "timer_resolution_s": self.timer_resolution_s,
            "notes": list(self.notes),
            "sampling_s": self.sampling_s,
            **({"pace": self.pace.to_json()} if self.pace is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Measurement":
        from ..formats import MEASUREMENT

        data = MEASUREMENT.check_nested(data, "a case's measurement")
        return cls(
            samples_s=tuple(data["samples_s"]),
            inner_loops=int(data["inner_loops"]),
            mode=data["mode"],
            discarded=dict(data.get("discarded") or {}),
            warmup_calls=int(data.get("warmup_calls", 0)),
            stop_reason=data["stop_reason"],
            elapsed_s=float(data["elapsed_s"]),
            noise_target=float(data["noise_target"]),
            ci_level=float(data["ci_level"]),
            median_s=data.get("median_s"),
            ci_s=tuple(data["ci_s"]) if data.get("ci_s") else None,  # type: ignore[arg-type]
            iqr_s=tuple(data["iqr_s"]) if data.get("iqr_s") else None,  # type: ignore[arg-type]
            rel_ci_halfwidth=data.get("rel_ci_halfwidth"),
            outliers=int(data.get("outliers", 0)),
            timer_resolution_s=float(data.get("timer_resolution_s", 0.0)),
            notes=tuple(data.get("notes") or ()),
            sampling_s=float(data.get("sampling_s", 0.0)),
            pace=Pace.from_json(data.get("pace")),
        )


def summarize(
    samples_s: list[float], settings: SamplerSettings
) -> tuple[float | None, tuple[float, float] | None, tuple[float, float] | None, float | None, int]:
    """Median, CI, IQR, relative CI half-width and outlier count of per-call sample times.

    The CI and its half-width are None when there are too few samples for a CI of the median
    at ``settings.ci_level`` (:func:`stats.ci_min_samples`): unknown, never a zero width."""
    if not samples_s:
        return None, None, None, None, 0
    med = stats.median(samples_s)
    ci = stats.known_median_ci(samples_s, settings.ci_level)
    rel = stats.relative_halfwidth(ci, med) if ci is not None else None
    return med, ci, stats.iqr(samples_s), rel, stats.tukey_outliers(samples_s)


def _next_check(n: int) -> int:
    # Check the stopping rule at geometrically spaced sample counts so its cost stays small.
    return n + max(1, n // 8)


def noise_note(samples: int, rel_halfwidth: float | None, sampling_s: float, settings: SamplerSettings) -> str | None:
    """Why a measurement that ran out of budget missed its noise target, and what would reach
    it: ``samples`` kept in ``sampling_s`` seconds of sampling with this relative CI half-width
    (None: too few samples for a CI). None when the target was met."""
    needed = stats.ci_min_samples(settings.ci_level)
    if rel_halfwidth is None:
        if samples == 0:
            return None
        return (f"CI unknown: {samples} sample(s) kept in the {format_time(settings.max_time_s)} budget; "
                f"a {settings.ci_level:.0%} CI of the median needs at least {needed}")
    if rel_halfwidth <= settings.noise_target:
        return None
    if not math.isfinite(rel_halfwidth) or samples <= 0:
        return f"noise target +-{settings.noise_target:.1%} not reached: CI of the median +-{rel_halfwidth}"
    wanted = stats.samples_for_halfwidth(rel_halfwidth, samples, settings.noise_target)
    wanted_s = sampling_s * wanted / samples
    return (f"noise target +-{settings.noise_target:.1%} out of reach in the {format_time(settings.max_time_s)} "
            f"budget here: +-{rel_halfwidth:.1%} after {samples} samples; about {wanted} samples "
            f"({format_time(wanted_s, 2)} of sampling) would reach it")


def sample(device: "Device", fn: Callable[[], Any], settings: SamplerSettings,
           work: Work | None = None, pace: PaceProbe | None = None,
           take_turn: Callable[[], None] | None = None) -> Measurement:
    """Measure ``fn`` on ``device`` as ``settings`` say. Never raises for noise: a case that runs
    out of budget returns its samples with ``stop_reason="time-budget"``.

    Raises :class:`OverBudget` after the first call when that one call took longer than the
    whole budget (``settings.max_time_s``): the case cannot be measured here within it.

    ``work`` is what one call of ``fn`` does; every batch hands it to the device with ``fn``
    (``Device.time_batch``), so a simulated device can time work it does not execute. None is
    an empty Work.

    ``pace`` is a fixed reference kernel (:mod:`pytest_charz.measure.pace`): timed between the
    batches (at least ``PACE_MIN_SAMPLES`` times, then within ``PACE_SHARE`` of the measured
    time, never inside a timed batch), its runs are the measurement's ``pace``.

    ``take_turn`` blocks until this process may measure (:mod:`pytest_charz.measure.turns`): it
    is called before the warm-up and then after each ``TURN_SLICE_S`` of sampling, each time
    followed by one untimed batch (the sibling's turn left the caches its own). The time it
    blocks counts against no budget: ``elapsed_s`` is this process's own.
    """
    if work is None:
        work = Work()
    start_ns = clock.now_ns()
    budget_ns = settings.max_time_s * 1e9
    resolution_s = device.timer_resolution_s()
    notes: list[str] = []
    waited_ns = 0

    def elapsed_ns() -> int:
        return clock.now_ns() - start_ns - waited_ns

    def turn() -> None:
        nonlocal waited_ns
        if take_turn is not None:
            wait_start_ns = clock.now_ns()
            take_turn()
            waited_ns += clock.now_ns() - wait_start_ns

    turn()

    # Warm-up: at least one call (first-call costs: page faults, JIT, caches), then until warmup_s.
    # The first call's wall time is what one call costs here: longer than the whole budget, and
    # the case is not measured (a second call would only run the budget over further).
    warmup_calls = 0
    last_call_s = 0.0
    while True:
        if settings.mode == "cold":
            device.flush_caches()
        call_start_ns = clock.now_ns()
        last_call_s = device.time_batch(fn, 1, work)
        warmup_calls += 1
        if warmup_calls == 1:
            first_wall_s = (clock.now_ns() - call_start_ns) / 1e9
            if first_wall_s > settings.max_time_s:
                raise OverBudget(first_wall_s, settings.max_time_s)
        if elapsed_ns() >= settings.warmup_s * 1e9 or elapsed_ns() >= budget_ns / 4:
            break

    # Inner-loop sizing (hot mode): grow the batch until it lasts min_batch_s and 200 ticks; a
    # warm-up call that already lasts that long sets inner = 1 without another call.
    inner = 1
    target_batch_s = max(settings.min_batch_s, 200 * resolution_s)
    if settings.mode == "hot":
        batch_s = last_call_s
        while inner < 1 << 30:
            if batch_s >= target_batch_s or elapsed_ns() >= budget_ns / 2:
                break
            grow = 2.0 if batch_s <= 0 else min(10.0, max(1.5, 1.2 * target_batch_s / batch_s))
            inner = int(math.ceil(inner * grow))
            batch_s = device.time_batch(fn, inner, work)
    elif 200 * resolution_s > settings.min_batch_s:
        notes.append("cold samples are single calls; calls shorter than 200 timer ticks are imprecise")

    sampling_start_ns = clock.now_ns()
    waited_before_sampling_ns = waited_ns
    samples: list[float] = []
    discarded: dict[str, int] = {}
    measured_s = 0.0
    recovery_s = settings.recovery_s
    # No CI of the median exists below ci_min_samples: the noise check waits for them, and the
    # budget may stretch to twice itself to take them (never further: a call too long for that
    # leaves the CI unknown).
    ci_samples = stats.ci_min_samples(settings.ci_level)
    next_check = max(settings.min_samples, ci_samples)
    stop_reason = "time-budget"
    pace_samples: list[float] = []
    pace_s = 0.0
    slice_start_ns = clock.now_ns()
    while True:
        if take_turn is not None and clock.now_ns() - slice_start_ns >= TURN_SLICE_S * 1e9:
            turn()
            if settings.mode == "cold":
                device.flush_caches()
            device.time_batch(fn, inner, work)       # untimed: back to this case's own caches
            slice_start_ns = clock.now_ns()
        if pace is not None and pace_due(pace_s, measured_s, len(pace_samples)):
            pace_start_ns = clock.now_ns()
            pace.run_once()
            pace_samples.append((clock.now_ns() - pace_start_ns) / 1e9)
            pace_s += pace_samples[-1]
        batch_start_ns = clock.now_ns()
        if settings.mode == "cold":
            device.flush_caches()
        batch_s = device.time_batch(fn, inner, work)
        reason = device.check_sample()
        if reason is not None:
            discarded[reason] = discarded.get(reason, 0) + 1
            if elapsed_ns() + recovery_s * 1e9 >= budget_ns:
                break
            clock.sleep(recovery_s)
            recovery_s *= 2.0
            continue
        recovery_s = settings.recovery_s
        samples.append(batch_s / inner)
        measured_s += batch_s
        n = len(samples)
        if n >= next_check and measured_s >= settings.min_time_s:
            center = stats.median(samples)
            if stats.relative_halfwidth(stats.median_ci(samples, settings.ci_level), center) <= settings.noise_target:
                stop_reason = "noise-target"
                break
            next_check = _next_check(n)
        if n >= settings.max_samples:
            stop_reason = "max-samples"
            break
        if elapsed_ns() >= budget_ns and (
                n >= ci_samples or elapsed_ns() + (clock.now_ns() - batch_start_ns) > 2 * budget_ns):
            break
    sampling_s = (clock.now_ns() - sampling_start_ns - (waited_ns - waited_before_sampling_ns)) / 1e9
    if not samples:
        stop_reason = "all-discarded"
    med, ci, quartiles, rel, outliers = summarize(samples, settings)
    if stop_reason != "noise-target":
        note = noise_note(len(samples), rel, sampling_s, settings)
        if note:
            notes.append(note)
    return Measurement(
        samples_s=tuple(samples),
        inner_loops=inner,
        mode=settings.mode,
        discarded=discarded,
        warmup_calls=warmup_calls,
        stop_reason=stop_reason,
        elapsed_s=elapsed_ns() / 1e9,
        noise_target=settings.noise_target,
        ci_level=settings.ci_level,
        median_s=med,
        ci_s=ci,
        iqr_s=quartiles,
        rel_ci_halfwidth=rel,
        outliers=outliers,
        timer_resolution_s=resolution_s,
        notes=tuple(notes),
        sampling_s=sampling_s,
        pace=Pace(pace.kind, tuple(pace_samples), pace.units, pace.unit) if pace is not None else None,
    )
