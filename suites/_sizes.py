"""Sizes for the suites' sweeps, derived from the target's memory levels.

Everything here is pure (a TargetSpec and a few numbers in, sizes out) except :func:`plan_for`,
which binds the session's target at collection time so parameter lists follow the hardware that
is really there: a working-set sweep runs from 16 KiB to past ``LLC_MULTIPLE`` times the
last-level cache, whatever that cache is on the machine at hand.

Sweeps take two points per octave up to twice the last-level cache, where the levels' edges
are, and one per octave beyond (main memory: flat, and every point there costs a large buffer),
ending past ``LLC_MULTIPLE`` times the LLC. Quick runs (``--charz-quick``) keep a subset of every
sweep: one point every two octaves (16 KiB, 64 KiB, 256 KiB...) up to ``QUICK_MAX_BYTES``; the
other points carry the ``charz_slow`` mark.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pytest

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

SWEEP_START_BYTES = 16 * KIB
#: Main-memory cases need a working set this many times the last-level cache (the profile reads
#: STREAM cases beyond it as DRAM bandwidth; ``pytest_charz.profile.cases.LLC_MULTIPLE``).
LLC_MULTIPLE = 4
#: Largest working set a quick run keeps in a sweep.
QUICK_MAX_BYTES = 64 * MIB
#: No single buffer of a case is larger than this, however large the caches.
ABSOLUTE_CAP_BYTES = 2 * GIB
#: Sweeps end here when the target does not say how large its caches are.
UNKNOWN_LLC_STOP_BYTES = 256 * MIB
#: Working sets at or above this size may get a longer per-case budget (one call takes long).
LARGE_BYTES = 128 * MIB


@dataclass(frozen=True)
class CacheLevel:
    """One cache level of the target: its Work name, capacity, and whether the capacity is per
    compute unit (a core's L1/L2, an SM's L1) or shared by the whole device or socket."""

    name: str
    capacity_bytes: int
    per_unit: bool


@dataclass(frozen=True)
class SizePlan:
    """What sizing needs to know about the bound target."""

    backend: str                       # "cpu", "cuda", "rocm", "sim"
    threads: int                       # CPU threads a case may use (1 on a GPU)
    caches: tuple[CacheLevel, ...]     # smallest first
    cap_bytes: int                     # the largest buffer one case may allocate

    @property
    def llc_bytes(self) -> int | None:
        """The largest cache (the last level), or None when the spec gives no capacities."""
        return max((level.capacity_bytes for level in self.caches), default=None)

    @property
    def unit_cache_bytes(self) -> int | None:
        """The largest cache private to one compute unit (a core's L2), or None."""
        return max((level.capacity_bytes for level in self.caches if level.per_unit), default=None)


def cache_levels(spec: Any) -> tuple[CacheLevel, ...]:
    """The cache levels of a TargetSpec that state a capacity, smallest first (``dram`` excluded)."""
    levels = []
    for level in spec.memory:
        if level.name == "dram" or level.capacity_bytes is None or level.capacity_bytes.value <= 0:
            continue
        levels.append(CacheLevel(level.name, int(level.capacity_bytes.value), level.scope == "unit"))
    return tuple(sorted(levels, key=lambda level: level.capacity_bytes))


def host_cap_bytes(available_bytes: int | None) -> int:
    """Largest buffer a CPU case allocates: a sixth of available memory (a case holds at most
    three such buffers), and never over ``ABSOLUTE_CAP_BYTES``."""
    if not available_bytes:
        return 256 * MIB
    return int(min(available_bytes // 6, ABSOLUTE_CAP_BYTES))


def device_cap_bytes(spec: Any) -> int:
    """Largest buffer a GPU case allocates: 1/16 of device memory, at most ``ABSOLUTE_CAP_BYTES``."""
    dram = spec.level("dram")
    if dram is None or dram.capacity_bytes is None:
        return 256 * MIB
    return int(min(dram.capacity_bytes.value // 16, ABSOLUTE_CAP_BYTES))


def make_plan(spec: Any, backend: str, threads: int, available_bytes: int | None) -> SizePlan:
    """The sizing plan of ``spec`` on ``backend`` (pure)."""
    cap = host_cap_bytes(available_bytes) if backend == "cpu" else device_cap_bytes(spec)
    return SizePlan(backend=backend, threads=max(1, threads) if backend == "cpu" else 1,
                    caches=cache_levels(spec), cap_bytes=cap)


def geometric_sizes(start_bytes: int, stop_bytes: int, per_octave: int, align_bytes: int = 4 * KIB) -> list[int]:
    """Sizes from ``start_bytes`` growing by ``2 ** (1 / per_octave)``, each rounded to a
    multiple of ``align_bytes``, up to the first one >= ``stop_bytes`` (included)."""
    if start_bytes < align_bytes or stop_bytes < start_bytes or per_octave < 1:
        raise ValueError(f"bad sweep: start {start_bytes}, stop {stop_bytes}, per octave {per_octave}")
    sizes: list[int] = []
    step = 0
    while True:
        size = int(round(start_bytes * 2.0 ** (step / per_octave) / align_bytes)) * align_bytes
        if not sizes or size > sizes[-1]:
            sizes.append(size)
        if size >= stop_bytes:
            return sizes
        step += 1


def beyond_llc_bytes(plan: SizePlan) -> int:
    """The working set a sweep must pass: just over ``LLC_MULTIPLE`` x the last-level cache,
    or ``UNKNOWN_LLC_STOP_BYTES`` without cache sizes; never over the plan's buffer cap."""
    llc = plan.llc_bytes
    wanted = LLC_MULTIPLE * llc + 1 if llc else UNKNOWN_LLC_STOP_BYTES
    return min(wanted, plan.cap_bytes)


#: Past this multiple of the LLC a sweep keeps one point per octave (the start's power-of-two multiples).
DENSE_LLC_MULTIPLE = 2


def _on_octave(size_bytes: int, every: int = 1) -> bool:
    """Whether ``size_bytes`` is the sweep start times a power of two whose exponent ``every`` divides."""
    ratio = size_bytes / SWEEP_START_BYTES
    octave = math.log2(ratio) if ratio > 0 else -1.0
    return abs(octave - round(octave)) < 1e-9 and round(octave) % every == 0


def sweep_sizes(plan: SizePlan, per_octave: int = 2, stop_bytes: int | None = None) -> list[int]:
    """The working-set sweep: 16 KiB to past 4x the LLC (or ``stop_bytes``), capped by the plan;
    ``per_octave`` points per octave up to ``DENSE_LLC_MULTIPLE`` x the LLC, one per octave
    beyond it, and the last point kept."""
    stop = beyond_llc_bytes(plan) if stop_bytes is None else min(stop_bytes, plan.cap_bytes)
    sizes = geometric_sizes(SWEEP_START_BYTES, max(stop, SWEEP_START_BYTES), per_octave)
    sizes = [size for size in sizes if size <= plan.cap_bytes] or [SWEEP_START_BYTES]
    llc = plan.llc_bytes
    if llc:
        dense_until = DENSE_LLC_MULTIPLE * llc
        sizes = [size for i, size in enumerate(sizes)
                 if size <= dense_until or _on_octave(size) or i == len(sizes) - 1]
    return sizes


def in_quick_sweep(size_bytes: int, per_octave: int) -> bool:
    """Whether a sweep point stays in quick runs: the start times a power of four (16 KiB,
    64 KiB, 256 KiB, ...), and no larger than ``QUICK_MAX_BYTES``."""
    return size_bytes <= QUICK_MAX_BYTES and _on_octave(size_bytes, every=2)


def format_bytes_id(size_bytes: int) -> str:
    """A short, exact-enough test id for a size: ``16KiB``, ``1.41MiB``, ``2GiB``."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB)):
        if size_bytes >= scale:
            value = size_bytes / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{size_bytes / KIB:.0f}KiB" if size_bytes % KIB == 0 else f"{size_bytes}B"


def size_params(sizes: Sequence[int], per_octave: int, quick: Callable[[int], bool] | None = None,
                max_time_s: float | None = None, large_max_time_s: float | None = None) -> list[Any]:
    """``pytest.param`` per size with a readable id; points left out of quick runs are marked
    ``charz_slow``. With ``max_time_s`` each point gets its own budget (``large_max_time_s`` from
    ``LARGE_BYTES`` up, where one call takes long). A budget set per parameter must not also be
    set by the test's own ``charz`` marker: the function's marker is applied after the
    parameter's and would win (its ``quick={...}`` still applies in quick runs, as intended)."""
    keep = quick if quick is not None else (lambda size: in_quick_sweep(size, per_octave))
    params = []
    for size in sizes:
        marks: list[Any] = []
        if not keep(size):
            marks.append(pytest.mark.charz_slow)
        budget = large_max_time_s if (large_max_time_s is not None and size >= LARGE_BYTES) else max_time_s
        if budget is not None:
            marks.append(pytest.mark.charz(max_time=budget))
        params.append(pytest.param(size, id=format_bytes_id(size), marks=marks))
    return params


def memory_level(plan: SizePlan, total_bytes: float, threads: int = 1) -> str:
    """The Work memory level a working set of ``total_bytes`` split over ``threads`` fits in:
    a per-unit cache holds one thread's share, a shared cache the whole set; else ``dram``."""
    share = total_bytes / max(1, threads)
    for level in plan.caches:
        if (share if level.per_unit else total_bytes) <= level.capacity_bytes:
            return level.name
    return "dram"


def stream_array_bytes(plan: SizePlan) -> int:
    """Bytes of each STREAM array for the main-memory case: the two arrays of copy and scale
    together exceed ``LLC_MULTIPLE`` x the LLC (a power of two above twice the LLC); at most
    the plan's buffer cap. Without cache sizes: ``UNKNOWN_LLC_STOP_BYTES``."""
    llc = plan.llc_bytes
    if not llc:
        wanted = UNKNOWN_LLC_STOP_BYTES
    else:
        wanted = 1 << int(math.floor(math.log2(LLC_MULTIPLE * llc / 2)) + 1)
    return int(min(wanted, plan.cap_bytes))


def count_for_duration(time_count_s: Callable[[int], float], start_count: int, target_s: float,
                       max_count: int = 1 << 40, refine: int = 2) -> int:
    """A repetition count whose call lasts about ``target_s``.

    Times ``start_count`` (growing it tenfold while a call is under 5% of the target, too short
    to scale from), scales the count to the target, then re-times the scaled count up to
    ``refine`` times and rescales while it is off by more than a factor of two: a first call
    slowed by cold caches or page-table walks does not set the count alone.
    """
    count = max(1, int(start_count))
    while True:
        elapsed_s = time_count_s(count)
        if elapsed_s >= target_s / 20 or count >= max_count:
            break
        count = min(max_count, count * 10)

    def scaled(measured_count: int, measured_s: float) -> int:
        return int(max(1, min(max_count, math.ceil(measured_count * target_s / measured_s))))

    for _ in range(refine):
        if elapsed_s <= 0 or target_s / 2 <= elapsed_s <= 2 * target_s:
            break
        count = scaled(count, elapsed_s)
        elapsed_s = time_count_s(count)
    return scaled(count, elapsed_s) if elapsed_s > 0 else count


# ---------------------------------------------------------------- binding at collection time

_PLAN_KEY = pytest.StashKey[SizePlan]()


def plan_for(config: pytest.Config) -> SizePlan:
    """The sizing plan of the session's bound target (binds it at first use, once)."""
    plan = config.stash.get(_PLAN_KEY, None)
    if plan is None:
        from pytest_charz.session import session_for

        binding = session_for(config).bind()
        backend = binding.device.backend
        threads = 1
        available = None
        if backend == "cpu":
            from pytest_charz.kernels.cpu import available_threads

            threads = available_threads()
            available = _available_memory_bytes()
        plan = make_plan(binding.spec, backend, threads, available)
        config.stash[_PLAN_KEY] = plan
    return plan


def _available_memory_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


def simulated_call() -> None:
    """The callable of a case on the ``sim`` backend, which times the case's Work and never calls it."""
    raise AssertionError("a simulated device times the case's Work; it never calls the case")


def not_this_backend(reason: str) -> list[Any]:
    """The one parameter a test gets when it does not apply to the bound backend: it skips."""
    return [pytest.param(None, id="n/a", marks=pytest.mark.skip(reason=reason))]


#: ``CHARZ_TORCH_THREADS=N`` runs the PyTorch ops of the op-class and held-out suites on N intra-op
#: threads (default: PyTorch's own choice). One thread keeps a shared machine's neighbours from
#: stalling a parallel region by a scheduler time slice (on a 2-vCPU VM shared with other jobs,
#: 2-thread ops of 64 KiB and up took 7.9 or 15.9 ms instead of microseconds); calibration and
#: held-out runs must use the same.
TORCH_THREADS_ENV = "CHARZ_TORCH_THREADS"


def set_torch_threads(torch: Any) -> None:
    """Apply ``CHARZ_TORCH_THREADS`` to ``torch`` when it is set."""
    wanted = os.environ.get(TORCH_THREADS_ENV, "").strip()
    if wanted:
        torch.set_num_threads(int(wanted))
