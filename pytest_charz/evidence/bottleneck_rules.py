"""The rules behind a bottleneck verdict: which kind a model term is, what a case achieved against
the ceiling of that term, what the counters and the conditions say, and how sure that makes us.

Everything here is pure: typed records and :class:`~pytest_charz.models.ceilings.Ceilings` in,
:class:`Evidence` and plain values out. :mod:`.bottleneck` combines them into a verdict.

Confidence (:func:`confidence_of`):

* ``high``: counters of what actually executed give the same dominant term as the model, and
  the counted rate is near that term's ceiling;
* ``medium``: the model's term alone, dominant by :data:`CLEAR_MARGIN` over the runner-up, with
  the achieved rate near that ceiling (:data:`NEAR_CEILING` to :data:`BEYOND_CEILING` of it);
* ``low``: terms within the margin of each other, a rate far from its ceiling, or no prediction.

A disturbed measurement (other load, steal, a clock change, throttling, a shared device) lowers
the confidence by one step; counters that were not recorded keep it at medium at best, and the
evidence says why they are absent.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..models.ceilings import Ceilings
from ..units import format_bandwidth, format_flops, format_time
from ..work import MEMORY_LEVELS, Work

#: The dominant term must exceed the runner-up by this factor for more than ``low`` confidence.
CLEAR_MARGIN = 1.5
#: An achieved rate from this fraction of its ceiling up to BEYOND_CEILING counts as "near" it.
NEAR_CEILING = 0.6
#: Beyond this fraction the ceiling (or the counted work) is off, not the bound proven.
BEYOND_CEILING = 1.25
#: When the largest term explains less than this share of the measured time, the limit is not in
#: the model: the verdict is ``unknown`` (or ``interference`` when the conditions were disturbed).
UNEXPLAINED = 0.25
#: A contended case slower than its alone medians by this factor is bound by interference.
INTERFERENCE_SLOWDOWN = 1.10
CONFIDENCES = ("low", "medium", "high")
#: Case flags that say the measurement shared the machine (``measure.conditions.compare``).
DISTURBANCE_FLAGS = ("other-load", "steal", "cpu-clock-changed", "throttled", "device-shared")
#: Transfer kinds that are copies inside one memory (their bound is that memory, not a link).
COPY_KINDS = ("host", "d2d")
COUNTERS_KIND, COUNTERS_VERSION = "charz-counters", 1
#: Counter names read as a Work quantity: the project's own (``flops:<dtype>``, ``bytes:<level>``,
#: ``accesses``) and those the counter sources write (``evidence.ncu``: DRAM bytes read and
#: written, FP instructions per thread, an FMA counting two FLOPs; ``evidence.perf_events``:
#: ``dram-bytes`` where an uncore PMU gives it). name -> (quantity, FLOPs or bytes per count).
COUNTED_AS = {"dram-read-bytes": ("bytes:dram", 1.0), "dram-write-bytes": ("bytes:dram", 1.0),
              "dram-bytes": ("bytes:dram", 1.0),
              **{f"{dtype}-{op}-thread-inst": (f"flops:{dtype}", 2.0 if op == "fma" else 1.0)
                 for dtype in ("fp32", "fp64") for op in ("fma", "add", "mul")}}


@dataclass(frozen=True)
class Evidence:
    """One cited fact: ``what`` was found, its ``value`` in ``unit``, the ceiling or reference it
    is held ``against`` (name, value, unit as text), ``value``'s ``fraction`` of that, and the
    ``source`` the value comes from (a case and its statistic, a profile, the counters)."""

    what: str
    value: float | None = None
    unit: str = ""
    against: str = ""
    fraction: float | None = None
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "value": self.value, "unit": self.unit, "against": self.against,
                "fraction": self.fraction, "source": self.source}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Evidence":
        def number(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        return cls(str(data["what"]), number("value"), str(data.get("unit") or ""), str(data.get("against") or ""),
                   number("fraction"), str(data.get("source") or ""))


@dataclass(frozen=True, order=True)
class Candidate:
    """A model term as a bottleneck candidate: its time (s), kind and term name."""

    seconds: float
    kind: str = field(compare=False)
    term: str = field(compare=False)


def lower(confidence: str, steps: int = 1) -> str:
    """``confidence`` lowered by ``steps`` (never below ``low``)."""
    return CONFIDENCES[max(0, CONFIDENCES.index(confidence) - steps)]


def copy_level(copied_bytes: float, ceilings: Ceilings | None) -> str:
    """The memory level a copy of ``copied_bytes`` runs from: the innermost level whose capacity
    holds source and destination, ``dram`` when none does or capacities are unknown."""
    for level in MEMORY_LEVELS[:-1]:
        capacity = ceilings.capacity(level) if ceilings is not None else None
        if capacity is not None and 2 * copied_bytes <= capacity:
            return level
    return "dram"


def kind_of_term(term: str, work: Work, ceilings: Ceilings | None) -> str:
    """The bottleneck kind of a model term: ``compute:fp64`` -> ``compute``, ``memory:l2`` ->
    ``memory:l2``, ``launch`` -> ``launch`` (``dispatch`` for a host dispatch case: framework
    dispatch of one op, no kernel), ``link:h2d``
    and ``collective:*`` -> ``communication``, a copy inside one memory -> that memory level."""
    quantity, _, key = term.partition(":")
    if quantity == "compute":
        return "compute"
    if quantity in ("memory", "latency"):
        return f"{quantity}:{key}"
    if quantity == "launch":
        return "dispatch" if work.op == "dispatch" else "launch"
    if quantity == "dispatch":
        return "dispatch"
    if quantity == "link" and key in COPY_KINDS:
        return f"memory:{copy_level(work.transfers.get(key, 0.0), ceilings)}"
    return "communication"


def candidates(breakdown: Mapping[str, float], work: Work, ceilings: Ceilings | None) -> list[Candidate]:
    """The terms of a prediction as candidates, largest first: the compute terms of all dtypes
    summed (one pipeline runs them, as the models count them), the link and collective terms
    summed into ``communication``, every other term on its own; one candidate per kind."""
    by_kind: dict[str, list[tuple[str, float]]] = {}
    for term, seconds in breakdown.items():
        by_kind.setdefault(kind_of_term(term, work, ceilings), []).append((term, float(seconds)))
    found = []
    for kind, terms in by_kind.items():
        summed = kind in ("compute", "communication")
        term, largest = max(terms, key=lambda item: item[1])
        found.append(Candidate(sum(s for _, s in terms) if summed else largest, kind, term))
    return sorted(found, reverse=True)


def _ceiling_text(name: str, value: float, unit: str) -> str:
    if unit == "FLOP/s":
        return f"{name} {format_flops(value)}"
    return f"{name} {format_bandwidth(value) if unit == 'B/s' else format_time(value)}"


def thread_share(work: Work, ceilings: Ceilings | None) -> float:
    """The share of the chip a case ran on: ``shape["threads"]`` of the ceilings' compute units
    (1 when either is unknown or the case used them all). A peak or a per-core level's bandwidth
    is held to that share: one thread of a two-core chip reaches half of its FMA peak."""
    threads = work.shape.get("threads")
    units = ceilings.units() if ceilings is not None else None
    if isinstance(threads, (int, float)) and not isinstance(threads, bool) and units and 0 < threads < units:
        return float(threads) / units
    return 1.0


#: Levels private to a core, whose bandwidth scales with the cores a case runs on.
PER_CORE_LEVELS = ("l1", "l2")


def rate_evidence(term: str, work: Work, median_s: float, ceilings: Ceilings | None, source: str,
                  counted: str = "") -> Evidence | None:
    """What the case achieved in the quantity of ``term`` against that term's ceiling; None when
    the ceilings lack it or the work has none of it. ``counted`` names the counters when the
    amounts are counted rather than the Work's."""
    if ceilings is None or not median_s > 0:
        return None
    quantity, _, key = term.partition(":")
    what = "counted " if counted else "achieved "
    share = thread_share(work, ceilings)
    of_threads = f" x {work.shape.get('threads')}/{ceilings.units()} threads" if share < 1 else ""
    if quantity == "compute":
        peak = ceilings.peak(key, work.op)
        flops = work.flops.get(key, 0.0)
        if peak and flops:
            return Evidence(f"{what}{key} FLOP rate", flops / median_s, "FLOP/s",
                            _ceiling_text(f"flops:{key}", peak, "FLOP/s") + of_threads,
                            flops / median_s / (peak * share), source)
    elif quantity == "memory":
        bandwidth = ceilings.bandwidth(key)
        moved = work.bytes.get(key, 0.0)
        if bandwidth and moved:
            scale, note = (share, of_threads) if key in PER_CORE_LEVELS else (1.0, "")
            return Evidence(f"{what}{key} bandwidth", moved / median_s, "B/s",
                            _ceiling_text(f"bandwidth:{key}", bandwidth, "B/s") + note,
                            moved / median_s / (bandwidth * scale), source)
    elif quantity == "latency":
        latency = ceilings.latency(key)
        if latency and work.accesses:
            per_access = median_s / work.accesses
            return Evidence(f"{what}time per dependent access", per_access, "s",
                            _ceiling_text(f"latency:{key}", latency, "s"), latency / per_access, source)
    elif quantity == "launch":
        overhead = ceilings.launch_overhead()
        if overhead and work.launches:
            per_launch = median_s / work.launches
            return Evidence(f"{what}time per launch", per_launch, "s", _ceiling_text("launch", overhead, "s"),
                            overhead / per_launch, source)
    elif quantity == "link":
        bandwidth = ceilings.link_bandwidth(key)
        moved = work.transfers.get(key, 0.0)
        if bandwidth and moved:
            return Evidence(f"{what}{key} transfer bandwidth", moved / median_s, "B/s",
                            _ceiling_text(f"transfer:{key}", bandwidth, "B/s"), moved / median_s / bandwidth, source)
    elif quantity == "collective":
        figure = ceilings.collective(key)
        moved = sum(c.bytes for c in work.collectives if c.op == key)
        if figure and moved:
            latency_s, bandwidth, ranks = figure
            return Evidence(f"{what}{key} algorithm bandwidth", moved / median_s, "B/s",
                            _ceiling_text(f"collective:{key} at {ranks} ranks", bandwidth, "B/s"),
                            moved / median_s / bandwidth, source)
    return None


def near(fraction: float | None) -> bool:
    return fraction is not None and NEAR_CEILING <= fraction <= BEYOND_CEILING


def figure_evidence(term: str, work: Work, median_s: float, figures: Mapping[str, tuple[float, str]],
                    source: str) -> Evidence | None:
    """The rate against a profile ceiling the models do not read on its own: a GEMM's FLOP rate
    against ``gemm:<dtype>`` (what the BLAS reached at its best), and the time per launch of an
    overhead case against that op's ceiling (``dispatch``, ``wakeup``)."""
    quantity, _, key = term.partition(":")
    if quantity == "compute" and work.op == "gemm" and f"gemm:{key}" in figures and work.flops.get(key):
        value, cited = figures[f"gemm:{key}"]
        rate = work.flops[key] / median_s
        return Evidence(f"achieved {key} FLOP rate against the best GEMM", rate, "FLOP/s",
                        f"{_ceiling_text(f'gemm:{key}', value, 'FLOP/s')}, {cited}", rate / value, source)
    name = overhead_figure_name(work, figures)
    if quantity == "launch" and work.launches and name in figures:
        value, cited = figures[name]
        per_launch = median_s / work.launches
        return Evidence("achieved time per launch", per_launch, "s", f"{_ceiling_text(name, value, 's')}, {cited}",
                        value / per_launch, source)
    return None


def overhead_figure_name(work: Work, figures: Mapping[str, tuple[float, str]]) -> str:
    """The profile ceiling an overhead case is held against: its framework's dispatch figure
    (``dispatch:torch`` for a ``torch-add`` dispatch case) where the profile has one, else the
    figure of its op (``dispatch``, ``wakeup``)."""
    framework = str(work.shape.get("kind") or "").split("-", 1)[0]
    if work.op == "dispatch" and framework and f"dispatch:{framework}" in figures:
        return f"dispatch:{framework}"
    return work.op


def matching_latency_level(per_access_s: float, ceilings: Ceilings | None) -> tuple[str, float] | None:
    """The memory level whose latency is nearest a measured time per access (and near it: see
    :func:`near`), with the latency's fraction of that time; None when no level's is near."""
    best: tuple[str, float] | None = None
    for level in MEMORY_LEVELS:
        latency = ceilings.latency(level) if ceilings is not None else None
        if latency and near(latency / per_access_s):
            fraction = latency / per_access_s
            if best is None or abs(math.log(fraction)) < abs(math.log(best[1])):
                best = (level, fraction)
    return best


# -- counters -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Counters:
    """Profiler counters of one case (the run's ``counters`` record): ``values`` by name, per
    ``per`` (``call``: one call of the measured function), and ``missing`` names with the reason."""

    source: str
    per: str
    values: Mapping[str, float]
    missing: Mapping[str, str]


def read_counters(record: Any) -> tuple[Counters | None, str]:
    """The counters of a case record (an attribute ``counters``, a typed record with ``to_json``
    or the JSON mapping itself), or None with the reason they cannot be read."""
    raw = getattr(record, "counters", None)
    if raw is None and isinstance(record, Mapping):
        raw = record.get("counters")
    if raw is None:
        return None, "the run recorded none for this case"
    if not isinstance(raw, Mapping) and hasattr(raw, "to_json"):
        raw = raw.to_json()
    if not isinstance(raw, Mapping) or raw.get("kind") != COUNTERS_KIND:
        return None, f"not a {COUNTERS_KIND} record"
    if raw.get("version") != COUNTERS_VERSION:
        return None, f"{COUNTERS_KIND} version {raw.get('version')!r} is not read here (version {COUNTERS_VERSION})"
    values = {str(k): float(v) for k, v in (raw.get("values") or {}).items()
              if isinstance(v, (int, float)) and not isinstance(v, bool)}
    missing = {str(k): str(v) for k, v in (raw.get("missing") or {}).items()}
    counters = Counters(str(raw.get("source") or "counters"), str(raw.get("per") or "call"), values, missing)
    if counters.per != "call":
        return None, f"counted per {counters.per!r}, not per call"
    if not values:
        reasons = "; ".join(f"{k}: {v}" for k, v in missing.items()) or "no values"
        return None, reasons
    return counters, ""


def counted_amounts(values: Mapping[str, float]) -> tuple[dict[str, float], list[str]]:
    """The Work quantities the counters count (``flops:<dtype>``, ``bytes:<level>``,
    ``accesses``), summed over the counters of each, and the counter names used."""
    amounts: dict[str, float] = {}
    used: list[str] = []
    for name, value in values.items():
        quantity, scale = COUNTED_AS.get(name, (name, 1.0))
        kind, _, key = quantity.partition(":")
        if (kind == "flops" and key) or (kind == "bytes" and key in MEMORY_LEVELS) or quantity == "accesses":
            amounts[quantity] = amounts.get(quantity, 0.0) + value * scale
            used.append(name)
    return amounts, used


def counted_work(work: Work, counters: Counters) -> tuple[Work | None, list[str]]:
    """``work`` with the amounts the counters counted (:func:`counted_amounts`) in place of the
    Work's; None when they count none of them. Also returns the counter names used."""
    amounts, used = counted_amounts(counters.values)
    if not used:
        return None, used
    flops, moved = dict(work.flops), dict(work.bytes)
    accesses = work.accesses
    for quantity, amount in amounts.items():
        kind, _, key = quantity.partition(":")
        if kind == "flops":
            flops[key] = amount
        elif kind == "bytes":
            moved[key] = amount
        else:
            accesses = int(amount)
    return Work({k: v for k, v in flops.items() if v}, {k: v for k, v in moved.items() if v},
                launches=work.launches, transfers=dict(work.transfers), collectives=work.collectives, op=work.op,
                shape=dict(work.shape), accesses=accesses), used


# -- conditions ---------------------------------------------------------------------------------
def disturbance_evidence(flags: tuple[str, ...], interval: Any, source: str) -> list[Evidence]:
    """One Evidence per disturbance flag of a measurement, with the figure behind it."""
    found = []
    for flag in flags:
        if flag not in DISTURBANCE_FLAGS:
            continue
        if flag == "steal" and interval.steal_fraction is not None:
            found.append(Evidence("CPU steal time while measuring", interval.steal_fraction, "fraction",
                                  "suspicious above 2%", None, source))
        elif flag == "other-load" and interval.other_cpu_s_per_s is not None:
            names = ", ".join(str(p.get("name")) for p in interval.top_other_processes[:3])
            found.append(Evidence(f"other processes' CPU use while measuring ({names or 'unnamed'})",
                                  interval.other_cpu_s_per_s, "CPUs", "suspicious above 0.25 CPUs", None, source))
        elif flag == "cpu-clock-changed" and interval.cpu_freq_change is not None:
            found.append(Evidence("CPU clock change over the case", interval.cpu_freq_change, "fraction",
                                  "suspicious beyond 5%", None, source))
        elif flag == "throttled":
            found.append(Evidence(f"device throttled: {', '.join(interval.throttle_reasons) or 'reason unread'}",
                                  source=source))
        else:
            found.append(Evidence(f"conditions flag {flag}", source=source))
    return found


def confidence_of(margin: float, rate_fraction: float | None, counted_agrees: bool | None,
                  counted_fraction: float | None, disturbed: bool) -> str:
    """The confidence rule of the module docstring. ``counted_agrees`` is None without counters."""
    if counted_agrees and near(counted_fraction):
        confidence = "high"
    elif counted_agrees is False:
        confidence = "medium" if near(counted_fraction) else "low"
    elif margin >= CLEAR_MARGIN and near(rate_fraction):
        confidence = "medium"
    else:
        confidence = "low"
    return lower(confidence) if disturbed else confidence
