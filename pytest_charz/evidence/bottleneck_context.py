"""The context of a run's bottleneck attribution: its contention pairs, the ceilings (a capability
profile's, filled from the target's spec, or the spec's alone), and the host dispatch and device
launch figures workload ops are held against, each with where it comes from."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from ..models.ceilings import Ceilings
#: The model whose terms a bottleneck is attributed by: the roofline terms per resource of
#: ``composite`` (compute per dtype, bytes per memory level, launch, links), which the rules of
#: :mod:`.bottleneck_rules` name; the default prediction model's terms are per op class.
ATTRIBUTION_MODEL = "composite"
from ..workloads.predict import ASYNCHRONOUS_KINDS, DEFAULT_HOST_DISPATCH_S, DEFAULT_LAUNCH_OVERHEAD_S

if TYPE_CHECKING:
    from ..records import CaseRecord, Run

DEFAULT_DISPATCH_SOURCE = "DEFAULT_HOST_DISPATCH_S (PyTorch eager: 5-25 us of host work per op)"
DEFAULT_LAUNCH_SOURCE = "DEFAULT_LAUNCH_OVERHEAD_S (cudaLaunchKernel 1-3 us)"
#: Overhead ceilings of a profile by the op of the cases that measure them (``profile.cases``).
FIGURE_NAMES = ("dispatch", "wakeup", "launch")


@dataclass(frozen=True)
class ContentionPair:
    """One contention pair of a run: the kernel's alone medians (before and after), its contended
    median (s), the aggressor, and the case ids of each side."""

    pair: str
    aggressor: str
    alone_s: tuple[float, ...]
    contended_s: float
    alone_cases: tuple[str, ...]
    contended_cases: tuple[str, ...]

    @property
    def slowdown(self) -> float:
        return self.contended_s / statistics.median(self.alone_s)

    @property
    def alone_spread(self) -> float:
        """How far the alone medians differ (largest / smallest - 1)."""
        return max(self.alone_s) / min(self.alone_s) - 1.0


@dataclass(frozen=True)
class BottleneckContext:
    """What attribution reads beside a case: the ceilings (a profile's, filled from the spec, or
    the spec's; None: none known) and where they come from, the model, the run's contention
    pairs, the host's dispatch time per op and a device launch overhead (s) with their sources,
    and whether the device runs asynchronously to its host."""

    ceilings: Ceilings | None = None
    ceilings_origin: str = ""
    model: str = ATTRIBUTION_MODEL
    pairs: tuple[ContentionPair, ...] = ()
    dispatch_s: float = DEFAULT_HOST_DISPATCH_S
    dispatch_source: str = DEFAULT_DISPATCH_SOURCE
    launch_s: float = DEFAULT_LAUNCH_OVERHEAD_S
    launch_source: str = DEFAULT_LAUNCH_SOURCE
    asynchronous: bool = False
    figures: Mapping[str, tuple[float, str]] = field(default_factory=dict)

    def figure(self, name: str) -> tuple[float, str] | None:
        """A profile ceiling the models do not read (``gemm:<dtype>`` on its own, ``dispatch``,
        ``wakeup``): its value and where it comes from; None when the profile lacks it."""
        return self.figures.get(name)


def contention_pairs(cases: "tuple[CaseRecord, ...] | list[CaseRecord]") -> tuple[ContentionPair, ...]:
    """The contention pairs of a run's cases (``op == "contention"``, ``shape`` pair and role)."""
    roles: dict[str, dict[str, list["CaseRecord"]]] = {}
    for case in cases:
        if case.work.op == "contention" and case.median_s is not None:
            shape = case.work.shape
            roles.setdefault(str(shape.get("pair")), {}).setdefault(str(shape.get("role")), []).append(case)
    pairs = []
    for pair, sides in roles.items():
        alone, contended = sides.get("alone") or [], sides.get("contended") or []
        if alone and contended:
            pairs.append(ContentionPair(
                pair, str(contended[0].work.shape.get("aggressor") or ""), tuple(c.median_s or 0.0 for c in alone),
                statistics.median(c.median_s or 0.0 for c in contended), tuple(c.id for c in alone),
                tuple(c.id for c in contended)))
    return tuple(pairs)


def _dispatch_figure(run: "Run", profile: Mapping[str, Any] | None) -> tuple[float, str] | None:
    """The host time per eager PyTorch op: the run's own torch dispatch case, else the profile's
    torch dispatch point, else its ``dispatch:torch`` or ``dispatch`` ceiling."""
    for case in run.cases:
        kind = str(case.work.shape.get("kind") or "")
        if case.work.op == "dispatch" and kind == "torch-add" and case.median_s and case.work.launches:
            return case.median_s / case.work.launches, f"case {case.id} median"
    if profile is None:
        return None
    points = (((profile.get("curves") or {}).get("overhead") or {}).get("points")) or ()
    for point in points:
        if point.get("op") == "dispatch" and str(point.get("kind") or "") == "torch-add":
            return float(point["time_s"]), f"the profile's dispatch point {point.get('case')}"
    ceilings = {str(c.get("name")): c.get("value") for c in profile.get("ceilings") or ()}
    for name in ("dispatch:torch", "dispatch"):
        if ceilings.get(name):
            return float(ceilings[name]), f"the profile's {name} ceiling"
    return None


def context_for(run: "Run", profile: Mapping[str, Any] | None = None, model: str = ATTRIBUTION_MODEL) -> BottleneckContext:
    """The context of ``run``'s cases: its contention pairs, the ceilings of ``profile`` (a
    capability profile mapping, filled from the run's spec) or of the run's spec alone."""
    spec = run.target.spec
    ceilings: Ceilings | None = None
    origin = ""
    if profile is not None:
        ceilings = Ceilings.from_profile(profile)
        origin = f"the capability profile of {ceilings.target_id or run.target.id}"
        if spec is not None:
            ceilings = ceilings.filled_from(Ceilings.from_spec(spec))
            origin += f" (gaps filled from the spec of {spec.id})"
    elif spec is not None:
        ceilings, origin = Ceilings.from_spec(spec), f"the spec of {spec.id} (no capability profile)"
    kind = run.target.kind or (spec.identity.kind if spec is not None else "")
    launch = ceilings.launch_overhead_s if ceilings is not None else None
    launch_s, launch_source = ((launch.value, launch.source or origin) if launch is not None
                               else (DEFAULT_LAUNCH_OVERHEAD_S, DEFAULT_LAUNCH_SOURCE))
    dispatch = _dispatch_figure(run, profile)
    if dispatch is None and launch is not None:
        dispatch = (launch_s, f"the ceilings' launch figure ({launch_source})")
    dispatch_s, dispatch_source = dispatch or (DEFAULT_HOST_DISPATCH_S, DEFAULT_DISPATCH_SOURCE)
    return BottleneckContext(ceilings, origin, model, contention_pairs(run.cases), dispatch_s, dispatch_source,
                             launch_s, launch_source, kind in ASYNCHRONOUS_KINDS, profile_figures(profile))


def profile_figures(profile: Mapping[str, Any] | None) -> dict[str, tuple[float, str]]:
    """The profile's GEMM and overhead ceilings by name, each with the cases it rests on."""
    figures: dict[str, tuple[float, str]] = {}
    for ceiling in (profile or {}).get("ceilings") or ():
        name, value = str(ceiling.get("name") or ""), ceiling.get("value")
        if isinstance(value, (int, float)) and value > 0 and (name.startswith(("gemm:", "dispatch:"))
                                                              or name in FIGURE_NAMES):
            cases = ((ceiling.get("evidence") or {}).get("cases")) or []
            figures[name] = (float(value), f"profile ceiling {name}" + (f" (cases {', '.join(cases[:3])}"
                                                                         + (", ...)" if len(cases) > 3 else ")")
                                                                         if cases else ""))
    return figures
