"""Physical sanity of the profile's ceilings: a figure that contradicts what the hardware can do
is flagged with its evidence, kept out of the ceiling and named in the bottom line.

**Twins** (one run's cases, :func:`twin_flags`). A case run on more threads never does less per
second than its twin on fewer (the same op, dtype and shape but for the threads and the loop
sizing): the extra threads bring their own pipes and bandwidth. A case below its twin by more
than ``TWIN_TOLERANCE`` did not run as measured (its threads did not run at once, or its samples
were too short to fill the pipes): it is flagged and no ceiling rests on it.

**Bounds** (the profile's ceilings, :func:`check_ceilings`): pairs where the first is never below
the second.

- ``flops:<d>`` >= ``gemm:<d>`` where the spec gives ``d`` one peak for FMA chains and GEMMs (no
  matrix units of their own, a CPU without AMX): a GEMM runs on the same FMA pipes, loads besides;
- ``flops:<a>`` >= ``flops:<b>`` where the spec's peak of ``a`` is at least that of ``b`` (fp32
  against fp64 on SIMD lanes: the same pipes do at least as many of the narrower FLOPs); this
  order rests on the spec, so not where ``flops:<b>`` is above its spec peak by ``ABOVE_SPEC``;
- ``bandwidth:<near>`` >= ``bandwidth:<far>`` in the order of the spec's memory levels (what a
  farther level delivers passes through the nearer ones), ``bandwidth:dram`` from STREAM included;
- ``latency:<far>`` >= ``latency:<near>`` (a load a farther level serves missed the nearer first).

A ceiling below its bound takes the bound's measured figure; ``measured`` keeps its own. The
rule chosen, and why: a measured figure proves the hardware does at least that much, so the
ceiling is the highest figure a case of this run reached (for ``flops:<d>`` below ``gemm:<d>``,
the GEMM's rate, a lower bound on the peak). The spec's derived peak is not taken instead: no
case reached it (an all-core clock below the one-core clock would make it a promise the machine
does not keep), and the profile's ceilings are measurements with the spec beside them (``spec``,
``fraction_of_spec``). Beyond ``BOUND_TOLERANCE`` this is a flag (a measurement that did not fill
the pipes, a disturbed or misread level); within it a note (two measurements of one limit differ
by that much).

**Far below the peak** (:func:`check_ceilings`): a FLOP/s or bandwidth ceiling under
``FAR_BELOW`` of what the spec allows. The causes the profile can name lower that allowance or
excuse the figure: no native arithmetic for the dtype (a spec derived from the CPU's ISA with an
fp32 peak and none for bf16, fp16 or fp8: the library converts to fp32, so the fp32 peak bounds
it, and the caveat says "no native bf16"), library kernels narrower than the vectors
(:mod:`.blas`), and recorded conditions (throttling, other load, heavy steal: their own caveats
stand). With a named cause the figure stays, flagged with the cause (it is what the library does
here); without one it is flagged and dropped (``value`` null, ``measured`` kept: models fall back
to the spec's figure).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from ..units import format_bandwidth, format_bytes, format_flops, format_time
from ..work import MEMORY_LEVELS
from .blas import hardware_vector_bits
from .figures import Case, SpecView, shape, time_s

#: A case on more threads is flagged when it does less than this fraction below its twin's rate.
TWIN_TOLERANCE = 0.10
#: Two measurements of one limit differ by this much; a bound missed by more is a flag.
BOUND_TOLERANCE = 0.05
#: A figure above this multiple of its spec peak shows the spec does not describe its pipes.
ABOVE_SPEC = 1.05
#: A rate under this fraction of what the spec allows, with no cause, is not a ceiling.
FAR_BELOW = 0.15
#: Shape keys that follow from the thread count or the loop sizing, not from what is measured.
PER_THREAD_KEYS = frozenset({"threads", "iters", "reps", "bytes_per_thread"})
#: Float dtypes narrower than fp32 that a CPU without native arithmetic for them computes as fp32.
CONVERTED_DTYPES = ("bf16", "fp16", "fp8")
#: Flag rules, the most telling first (the bottom line quotes the first a ceiling has).
RULES = ("below-bound", "far-below-peak", "slower-than-twin")
_CASE_CONDITIONS = ("other-load", "steal", "throttled", "cpu-clock-changed")


def format_figure(value: float, unit: str) -> str:
    """A figure in human units: FLOP/s, B/s, seconds and bytes scaled, others with their unit."""
    formats: dict[str, Callable[[float], str]] = {"FLOP/s": format_flops, "B/s": format_bandwidth,
                                                  "s": format_time, "B": format_bytes}
    return formats[unit](value) if unit in formats else f"{value:.4g} {unit}"


def case_threads(case: Case) -> int | None:
    """The case's ``shape.threads`` when it is a positive integer, else None."""
    threads = shape(case).get("threads")
    return threads if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0 else None


def _test_name(case_id: str) -> str:
    return case_id.split("::", 1)[-1]


def twin_flags(cases: list[Case], rate_of: Callable[[Case], float], unit: str,
               peak_of: Callable[[Case], float | None] | None = None,
               consequence: str = "no ceiling rests on it") -> dict[str, dict[str, Any]]:
    """The flag of each case slower than its twin on fewer threads, by case id.

    Twins share the op, the dtypes and every shape key but :data:`PER_THREAD_KEYS`; a case is
    flagged when its ``rate_of`` (``unit``) is more than ``TWIN_TOLERANCE`` below the best twin's
    on fewer threads. ``peak_of`` gives the spec's peak for the case, quoted when known;
    ``consequence`` ends the text (what the profile does with the case). A flag
    is ``{"rule": "slower-than-twin", "text", "case", "threads", "rate", "twin", "twin_threads",
    "twin_rate"}``."""
    groups: dict[tuple[Any, ...], list[tuple[int, float, Case]]] = {}
    for case in cases:
        threads = case_threads(case)
        if threads is None:
            continue
        rest = tuple(sorted((k, repr(v)) for k, v in shape(case).items() if k not in PER_THREAD_KEYS))
        groups.setdefault((case.work.op, tuple(sorted(case.work.flops)), rest), []).append(
            (threads, rate_of(case), case))
    flags: dict[str, dict[str, Any]] = {}
    for members in groups.values():
        for threads, rate, case in members:
            fewer = [member for member in members if member[0] < threads]
            if not fewer:
                continue
            twin_threads, twin_rate, twin = max(fewer, key=lambda member: member[1])
            if rate >= (1 - TWIN_TOLERANCE) * twin_rate:
                continue
            peak = peak_of(case) if peak_of is not None else None
            share = f" ({100 * rate / peak:.0f}% of the peak)" if peak else ""
            seen = [flag for flag in case.flags if flag in _CASE_CONDITIONS]
            recorded = f"; recorded: {', '.join(seen)}" if seen else ""
            text = (f"{_test_name(case.id)} on {threads} threads measured {format_figure(rate, unit)}{share}, "
                    f"below its {twin_threads}-thread twin {_test_name(twin.id)} ({format_figure(twin_rate, unit)}): "
                    f"more threads never do less per second, so that measurement did not run as intended (its "
                    f"threads did not run at once or did not fill the pipes; samples of {format_time(time_s(case))} "
                    f"against the twin's {format_time(time_s(twin))}{recorded}); {consequence}")
            flags[case.id] = {"rule": "slower-than-twin", "text": text, "case": case.id, "threads": threads,
                              "rate": rate, "twin": twin.id, "twin_threads": twin_threads, "twin_rate": twin_rate}
    return flags


# -- bounds between ceilings ----------------------------------------------------------------------
def _same_pipes(spec: SpecView, dtype: str) -> bool:
    """Whether the spec gives ``dtype`` one peak for FMA chains and GEMMs (no matrix units)."""
    vector, _ = spec.flops(dtype, vector=True)
    matrix, _ = spec.flops(dtype, vector=False)
    return vector is not None and matrix is not None and math.isclose(vector, matrix)


def _level_order(spec: SpecView) -> list[str]:
    caches = [name for name, _ in spec.cache_levels()]
    return [*caches, "dram"] if caches else list(MEMORY_LEVELS)


def bound_relations(values: Mapping[str, float], peaks: Mapping[str, float],
                    spec: SpecView) -> list[tuple[str, str, str]]:
    """The bounds that hold between the ceilings of ``values`` (name: measured figure):
    ``(bounded, bound, why)``, the first never below the second. ``peaks`` are the spec's
    figures of the ceilings; the order of two dtypes rests on them, so it is left out where the
    bound's figure is above its own spec peak (the spec does not describe that machine's pipes)."""
    names = set(values)
    relations: list[tuple[str, str, str]] = []
    for name in sorted(names):
        quantity, _, dtype = name.partition(":")
        if quantity == "gemm" and f"flops:{dtype}" in names and _same_pipes(spec, dtype):
            relations.append((f"flops:{dtype}", name,
                              f"a GEMM of {dtype} runs on the same FMA pipes (the spec gives {dtype} one peak, no matrix "
                              f"units of its own), so the FMA chains' rate bounds it: the FMA measurement did not "
                              f"fill the pipes"))
    fma = sorted((peaks[n], n) for n in names if n.startswith("flops:") and peaks.get(n))
    for peak_a, a in fma:
        for peak_b, b in fma:
            if a != b and peak_a >= peak_b and values[b] <= ABOVE_SPEC * peak_b:
                relations.append((a, b, f"the spec's {a[6:]} peak ({format_flops(peak_a)}) is at least its {b[6:]} "
                                        f"peak ({format_flops(peak_b)}): the same pipes do at least as many {a[6:]} "
                                        f"FLOPs, so that FMA measurement did not fill them"))
    order = _level_order(spec)
    for i, near in enumerate(order):
        for far in order[i + 1:]:
            if {f"bandwidth:{near}", f"bandwidth:{far}"} <= names:
                relations.append((f"bandwidth:{near}", f"bandwidth:{far}",
                                  f"what {far} delivers passes through {near}, so {near} sustains at least that: a "
                                  f"disturbed measurement or a misread level"))
            if {f"latency:{near}", f"latency:{far}"} <= names:
                relations.append((f"latency:{far}", f"latency:{near}",
                                  f"a load {far} serves missed {near} first, so it takes at least {near}'s latency: a "
                                  f"disturbed measurement or a misread level"))
    return relations


def _raise_to_bounds(values: dict[str, float], relations: list[tuple[str, str, str]]
                     ) -> tuple[dict[str, float], dict[str, str]]:
    """Each figure raised to every figure that bounds it, to a fixed point (values only rise),
    and for each the ceiling whose measured figure it now has (itself where none bounds it)."""
    raised = dict(values)
    origin = {name: name for name in values}
    changed = True
    while changed:
        changed = False
        for bounded, bound, _ in relations:
            if raised[bounded] < raised[bound]:
                raised[bounded], origin[bounded] = raised[bound], origin[bound]
                changed = True
    return raised, origin


def _bound_texts(name: str, measured: float, unit: str, final: float, source: str,
                 missed: list[tuple[str, float, str]], ceiling: Mapping[str, Any]) -> str:
    """The caveat of a ceiling below its bounds: each bound missed and why it holds, then the rule."""
    parts = [f"{bound} ({format_figure(value, unit)}): {why}" for bound, value, why in missed]
    spec = ceiling.get("spec")
    if name.startswith("latency:"):
        taken = f"the ceiling takes {source}'s {format_figure(final, unit)}, the least it can be"
    else:
        what = "derived peak" if str(ceiling.get("spec_source") or "").startswith("derived:") else "figure"
        peak = f"; the spec's {what} ({format_figure(spec, unit)}) is not taken, as no case reached it" \
            if spec and final < spec else ""
        taken = (f"the ceiling is {source}'s measured {format_figure(final, unit)}, the highest this run reached "
                 f"(a measured rate proves at least that much){peak}")
    return f"{name} measured {format_figure(measured, unit)}, below " + "; below ".join(parts) + f". Rule: {taken}"


# -- far below the peak ---------------------------------------------------------------------------
def _explaining_conditions(conditions: Mapping[str, Any]) -> list[str]:
    found = []
    if conditions.get("throttle_reasons"):
        found.append("throttling")
    if conditions.get("other_load_seen"):
        found.append("other load")
    if (conditions.get("max_steal_fraction") or 0.0) >= 0.5:
        found.append("steal time")
    return found


def _no_native(ceiling: Mapping[str, Any], spec: SpecView, kind: str) -> tuple[float, str] | None:
    """The fp32 peak and the "no native" text where a CPU's derived spec lacks the dtype."""
    quantity, _, dtype = str(ceiling["name"]).partition(":")
    if ceiling.get("spec") or kind != "cpu" or dtype not in CONVERTED_DTYPES or spec.spec is None:
        return None
    fp32, source = spec.flops("fp32", vector=quantity == "flops")
    if not fp32 or not (source or "").startswith("derived:"):
        return None
    isa = spec.spec.identity.architecture or "its ISA"
    return fp32, (f"no native {dtype}: the spec derived from this CPU's ISA ({isa}) has an fp32 peak and no {dtype} "
                  f"peak (no {dtype} vector or matrix instructions), so {dtype} is converted and computed as fp32 "
                  f"at best")


def far_below_flag(ceiling: dict[str, Any], spec: SpecView, kind: str,
                   by_name: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The flag of a FLOP/s or bandwidth ceiling under ``FAR_BELOW`` of what the spec allows
    (the module docstring says which causes count); None when it is not, or when recorded
    conditions may explain it. Without a named cause the flag's ``cause`` is None (the caller
    drops the figure)."""
    name, value, unit = str(ceiling["name"]), ceiling.get("value"), str(ceiling.get("unit") or "")
    if not name.startswith(("flops:", "gemm:", "bandwidth:")) or not isinstance(value, (int, float)) or value <= 0:
        return None
    native = _no_native(ceiling, spec, kind)
    allowed = native[0] if native else ceiling.get("spec")
    if not allowed:
        return None
    what = "the fp32 peak" if native else ("the derived peak" if str(ceiling.get("spec_source") or "").startswith(
        "derived:") else "the spec's figure")
    allowance = f"{what} ({format_figure(allowed, unit)})"
    blas = ceiling.get("blas") or {}
    bits, widest = blas.get("vector_bits"), hardware_vector_bits(spec)
    if isinstance(bits, int) and widest and bits < widest:
        allowed *= bits / widest
        allowance += f", {format_figure(allowed, unit)} for the library's {bits}-bit kernels"
    fraction = value / allowed
    if fraction >= FAR_BELOW or _explaining_conditions((ceiling.get("evidence") or {}).get("conditions") or {}):
        return None
    if native:
        dtype = name.partition(":")[2]
        fp32 = (by_name.get(f"{name.partition(':')[0]}:fp32") or {}).get("value")
        beside = f" and {100 * value / fp32:.2g}% of {name.partition(':')[0]}:fp32" if fp32 else ""
        faster = f", and fp32 is {fp32 / value:.3g}x faster here" if fp32 and fp32 > value else ""
        library = ", ".join(str(blas[k]) for k in ("library", "core") if blas.get(k))
        text = (f"{native[1]}; at {format_figure(value, unit)} this is {100 * fraction:.2g}% of {allowance}{beside}: "
                f"the library's {dtype} path{f' ({library})' if library else ''} is an emulation far short even of "
                f"that{faster}. The figure stays: it is what {dtype} gets on this machine")
        return {"rule": "far-below-peak", "text": text, "cause": f"no native {dtype}", "fraction": fraction,
                "allowed": allowed}
    text = (f"{name} measured {format_figure(value, unit)}, {100 * fraction:.2g}% of {allowance}, with no recorded "
            f"cause (no throttling, other load or heavy steal, no missing native dtype): a measurement that did not "
            f"fill the pipes or the memory system. Not used as the ceiling: models fall back to the spec's figure")
    return {"rule": "far-below-peak", "text": text, "cause": None, "fraction": fraction, "allowed": allowed}


# -- the whole check ------------------------------------------------------------------------------
def _set_value(ceiling: dict[str, Any], value: float | None) -> None:
    ceiling.setdefault("measured", ceiling.get("value"))
    ceiling["value"] = value
    spec = ceiling.get("spec")
    ceiling["fraction_of_spec"] = value / spec if value is not None and spec else None


def _add_flag(ceiling: dict[str, Any], flag: dict[str, Any]) -> None:
    ceiling.setdefault("flags", []).append(flag)
    ceiling.setdefault("caveats", []).append(flag["text"])


def check_ceilings(ceilings: list[dict[str, Any]], spec: SpecView, kind: str) -> list[str]:
    """Hold the profile's ceilings to the bounds and the far-below rule of the module docstring,
    in place: a contradicted figure moves to ``measured``, ``value`` and ``fraction_of_spec``
    follow the rule, ``flags`` and ``caveats`` say why. Returns the profile-level notes."""
    by_name = {str(c["name"]): c for c in ceilings if isinstance(c.get("value"), (int, float))}
    peaks = {name: float(c["spec"]) for name, c in by_name.items() if c.get("spec")}
    measured = {name: float(c["value"]) for name, c in by_name.items()}
    relations = bound_relations(measured, peaks, spec)
    final, origin = _raise_to_bounds(measured, relations)
    for name, ceiling in by_name.items():
        if final[name] <= measured[name]:
            continue
        missed = [(bound, measured[bound], why) for bounded, bound, why in relations
                  if bounded == name and measured[bound] > measured[name]]
        unit = str(ceiling.get("unit") or "")
        source = origin[name]
        text = _bound_texts(name, measured[name], unit, final[name], source, missed, ceiling)
        _set_value(ceiling, final[name])
        if final[name] > measured[name] * (1 + BOUND_TOLERANCE):
            _add_flag(ceiling, {"rule": "below-bound", "text": text, "bounds": [b for b, _, _ in missed],
                                "taken_from": source})
        else:
            ceiling.setdefault("caveats", []).append(
                f"{name} measured {format_figure(measured[name], unit)}, within {100 * BOUND_TOLERANCE:.0f}% below "
                f"{', '.join(b for b, _, _ in missed)}, which bound it (one limit measured twice): the ceiling is "
                f"{source}'s {format_figure(final[name], unit)}")
    for ceiling in by_name.values():
        flag = far_below_flag(ceiling, spec, kind, by_name)
        native = _no_native(ceiling, spec, kind)
        if flag is not None:
            _add_flag(ceiling, flag)
            if flag["cause"] is None:
                _set_value(ceiling, None)
        elif native is not None and ceiling.get("value"):
            ceiling.setdefault("caveats", []).append(
                f"{native[1]}: the fp32 peak ({format_flops(native[0])}) bounds it; at "
                f"{100 * ceiling['value'] / native[0]:.2g}% of it")
    for ceiling in ceilings:
        if ceiling.get("flags"):
            ceiling["flags"].sort(key=lambda flag: RULES.index(flag["rule"]) if flag["rule"] in RULES else len(RULES))
    flagged = [str(c["name"]) for c in ceilings if c.get("flags")]
    if not flagged:
        return []
    return [f"flagged ceilings (each one's flags give the evidence; the bottom line names them): {', '.join(flagged)}"]
