"""Which counter source a backend gets in process, and why not when it gets none."""
from __future__ import annotations

from typing import Callable, Mapping

from .counters import CounterSource

ROCM_NEEDS_ROCPROF = ("AMD GPU counters are not collected in process: re-run the case with "
                      "python -m pytest_charz.evidence.rocprof NODEID --out FILE")


def open_counters(backend: str) -> tuple[Callable[[], CounterSource] | None, Mapping[str, str], str]:
    """(a factory of the backend's counter source or None, the reasons of what is missing when
    there is none, the source's name)."""
    if backend == "cpu":
        from .perf_events import PerfEventSource

        try:
            source = PerfEventSource()
        except OSError as exc:
            return None, {"perf_event_open": f"cannot be called here: {exc}"}, "perf_event_open"
        counted, missing = source.available()
        if not counted:
            return None, missing, "perf_event_open"
        return (lambda: source), missing, "perf_event_open"
    if backend == "cuda":
        from .cupti import CuptiKernelSource, load_cupti, missing_without_cupti

        cupti = load_cupti()
        if cupti is None:
            return None, missing_without_cupti(), "cupti"
        kernels = CuptiKernelSource(cupti)
        return (lambda: kernels), {}, "cupti"
    if backend == "rocm":
        from .rocprof import COUNTERS

        return None, {name: ROCM_NEEDS_ROCPROF for name, _ in COUNTERS.values()}, "rocprofv3"
    return None, {"counters": f"the {backend!r} backend has no counter source (counters exist for cpu, cuda, "
                              "rocm)"}, "none"
