"""Roofline models and the compute, memory and latency terms every model builds on.

* ``spec-roofline`` / ``empirical-roofline`` (:class:`Roofline`): time = max(sum over dtypes of
  FLOPs / peak, DRAM bytes / DRAM bandwidth). The same class serves both; the name says whether
  it was fed datasheet ceilings (``Ceilings.from_spec``) or measured ones (``from_profile``).
* ``hierarchical-roofline`` (:class:`HierarchicalRoofline`): the max over compute, every memory
  level's bytes / that level's bandwidth, and the latency term; the bound names the level.

Latency term: ``work.accesses`` dependent loads (a pointer chase) each wait the latency of the
level the working set (``work.shape["working_set_bytes"]``) fits in: the innermost level whose
capacity holds it, DRAM when none does. A level without a capacity figure is skipped (the working
set is taken to spill past it), and the latency used is the largest of the levels up to the chosen
one, so noisy measured latencies cannot make a larger working set look faster.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..work import MEMORY_LEVELS, Work
from .base import Prediction, Uncovered, guarded, overlapped
from .ceilings import Ceilings


def target_label(ceilings: Ceilings) -> str:
    return ceilings.target_id or "this target"


def compute_terms(work: Work, ceilings: Ceilings) -> dict[str, float]:
    """Seconds per dtype at peak: ``{"compute:<dtype>": flops / peak}``."""
    terms: dict[str, float] = {}
    for dtype, flops in work.flops.items():
        peak = ceilings.peak(dtype, work.op)
        if peak is None:
            raise Uncovered(f"no peak FLOP/s for {dtype} on {target_label(ceilings)}")
        terms[f"compute:{dtype}"] = flops / peak
    return terms


def memory_terms(work: Work, ceilings: Ceilings, levels: Iterable[str] = MEMORY_LEVELS) -> dict[str, float]:
    """Seconds per memory level at full bandwidth: ``{"memory:<level>": bytes / bandwidth}``."""
    terms: dict[str, float] = {}
    for level in levels:
        moved = work.bytes.get(level, 0.0)
        if not moved:
            continue
        bandwidth = ceilings.bandwidth(level)
        if bandwidth is None:
            raise Uncovered(f"no {level} bandwidth on {target_label(ceilings)} for {moved:.6g} bytes")
        terms[f"memory:{level}"] = moved / bandwidth
    return terms


def latency_level(working_set_bytes: float, ceilings: Ceilings) -> tuple[str, float]:
    """The level a working set fits in and the load latency (s) charged for it."""
    charged = 0.0
    for level in MEMORY_LEVELS:
        latency = ceilings.latency(level)
        if latency is not None:
            charged = max(charged, latency)
        capacity = ceilings.capacity(level)
        if level == "dram" or (capacity is not None and working_set_bytes <= capacity):
            if latency is None:
                raise Uncovered(
                    f"no {level} latency on {target_label(ceilings)}, where a working set of "
                    f"{working_set_bytes:.6g} bytes falls"
                )
            return level, charged
    raise AssertionError("MEMORY_LEVELS ends with dram")  # pragma: no cover


def latency_terms(work: Work, ceilings: Ceilings) -> dict[str, float]:
    """``{"latency:<level>": accesses * latency}`` for dependent loads; empty when there are none."""
    if not work.accesses:
        return {}
    working_set = work.shape.get("working_set_bytes")
    if working_set is None:
        raise Uncovered(
            f"work has {work.accesses} dependent accesses but no shape['working_set_bytes'] "
            "to tell which memory level serves them"
        )
    level, latency = latency_level(float(working_set), ceilings)
    return {f"latency:{level}": work.accesses * latency}


def roofline_terms(work: Work, ceilings: Ceilings) -> dict[str, float]:
    """The classic roofline's terms: compute per dtype and DRAM."""
    return {**compute_terms(work, ceilings), **memory_terms(work, ceilings, ("dram",))}


#: The cache levels, innermost first, a working set may be resident in.
CACHE_LEVELS = ("l1", "l2", "l3")


def fits_level(working_set_bytes: float, ceilings: Ceilings) -> str:
    """The innermost level whose capacity holds ``working_set_bytes`` (``dram`` when none does).

    Capacities are as the ceilings give them (a private level's per core): the suites declare
    their bytes at the level this names, so calibration and prediction agree on residency.
    """
    for level in CACHE_LEVELS:
        capacity = ceilings.capacity(level)
        if capacity is not None and working_set_bytes <= capacity:
            return level
    return "dram"


def residency(work: Work, ceilings: Ceilings) -> str:
    """The level ``dram``-counted bytes are charged at: the level holding the working set
    (``shape["working_set_bytes"]``, else the total bytes), or the next outer one with a
    bandwidth figure when it has none."""
    working_set = float(work.shape.get("working_set_bytes") or work.total_bytes)
    levels = (*CACHE_LEVELS, "dram")
    start = levels.index(fits_level(working_set, ceilings))
    return next((lv for lv in levels[start:] if ceilings.bandwidth(lv) is not None), "dram")


def roofline_floor_s(work: Work, ceilings: Ceilings) -> float:
    """The roofline bound in seconds (0 when the work has no FLOPs or bytes): its FLOPs at the
    peaks, and its ``dram``-counted bytes at the bandwidth of their :func:`residency`, the level
    the models that price them charge them at (a graph's op counts its bytes at ``dram``).
    Bytes named at a cache level are not bounded by it.

    A calibrated prediction may not go below this floor, so a floor of DRAM bandwidth under an op
    the model charges at the L2 would price one op two ways: a 393 KiB add counted at ``dram``
    took 3.6 us on a Xeon core, as the same add counted at the L2 was priced, and was priced at
    its 14.5 us DRAM floor.

    Raises :class:`Uncovered` when the work needs a peak or bandwidth the ceilings lack.
    """
    terms = compute_terms(work, ceilings)
    moved = work.bytes.get("dram", 0.0)
    if moved:
        home = residency(work, ceilings)
        bandwidth = ceilings.bandwidth(home)
        if bandwidth is None:
            raise Uncovered(f"no {home} bandwidth on {target_label(ceilings)} for {moved:.6g} bytes")
        terms[f"memory:{home}"] = moved / bandwidth
    return overlapped(terms)[0]


def roofline_floor_or_zero_s(work: Work, ceilings: Ceilings) -> float:
    """The roofline bound in seconds, 0 when the ceilings lack a figure the work needs.

    The floor a calibrated prediction may not go below: a work the roofline cannot bound (a
    missing peak or bandwidth) is left unbounded rather than uncovered, since the model that
    predicted it may use other figures.
    """
    try:
        return roofline_floor_s(work, ceilings)
    except Uncovered:
        return 0.0


def predict_overlapped(model: str, terms: dict[str, float], what: str) -> Prediction:
    """A prediction whose terms all overlap (compute dtypes and transfers summed in their groups)."""
    if not terms:
        raise Uncovered(f"the work has no {what} for this model to count")
    time_s, bound = overlapped(terms)
    return Prediction.of_terms(model, time_s, bound, terms)


@dataclass(frozen=True)
class Roofline:
    """max(FLOPs / peak per dtype summed, DRAM bytes / DRAM bandwidth)."""

    name: str = "spec-roofline"

    def predict(self, work: Work, ceilings: Ceilings) -> Prediction:
        return guarded(self.name, lambda: predict_overlapped(
            self.name, roofline_terms(work, ceilings), "FLOPs or DRAM bytes"))


@dataclass(frozen=True)
class HierarchicalRoofline:
    """max over compute, each memory level's bytes / bandwidth, and dependent-load latency."""

    name: str = "hierarchical-roofline"

    def predict(self, work: Work, ceilings: Ceilings) -> Prediction:
        def build() -> Prediction:
            terms = {**compute_terms(work, ceilings), **memory_terms(work, ceilings),
                     **latency_terms(work, ceilings)}
            return predict_overlapped(self.name, terms, "FLOPs, bytes or dependent accesses")

        return guarded(self.name, build)
