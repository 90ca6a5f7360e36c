"""Cause attribution: which recorded fact could explain a change in a case's time.

A drift is *explained* when the run recorded something that is known to move timings: CPU time
stolen by the hypervisor, other processes busy on the host or the device, a changed CPU clock,
throttling, or a different driver, library, kernel or CPU than the reference was measured with.
Everything here is pure: mappings in, a sentence out, so the cause a verdict names is exactly the
evidence in the run file.

Two summaries make runs comparable with the references stored long before them:
:func:`conditions_summary` (the figures of a case's interval, plus the CPU governor and clock)
and :func:`provenance_summary` (versions, hardware names and the suite commit).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

# Interval flags that mean the measurement itself was disturbed.
DISTURBANCE_FLAGS = ("steal", "other-load", "throttled", "cpu-clock-changed", "device-shared")

# Mean CPU clocks of the reference and this run differing by more than this are a cause.
CPU_CLOCK_CHANGE_SUSPICIOUS = 0.05

_INTERVAL_KEYS = ("steal_fraction", "other_cpu_s_per_s", "top_other_processes", "cpu_freq_change",
                  "throttle_reasons", "device_processes")


def _mean(values: Any) -> float | None:
    numbers = [float(v) for v in values or () if isinstance(v, (int, float)) and v > 0]
    return sum(numbers) / len(numbers) if numbers else None


def conditions_summary(conditions: Mapping[str, Any]) -> dict[str, Any]:
    """The comparable part of a case's conditions.

    Accepts the case record's ``conditions`` (``{"before", "after", "interval"}``), a bare
    Interval JSON, or a summary made earlier (the result is the same summary).
    """
    interval = conditions.get("interval", conditions)
    before = conditions.get("before") or {}
    summary: dict[str, Any] = {"flags": [str(f) for f in interval.get("flags") or ()]}
    for key in _INTERVAL_KEYS:
        value = interval.get(key)
        if key in ("top_other_processes", "throttle_reasons"):
            value = [dict(v) if isinstance(v, Mapping) else v for v in value or ()]
        summary[key] = value
    summary["governor"] = before.get("governor", conditions.get("governor"))
    # The measured core clock where there is one (no cpufreq: virtual machines), else cpufreq's.
    measured = before.get("core_clock_mhz") if before else None
    freq = measured if isinstance(measured, (int, float)) and measured > 0 else (
        _mean(before.get("cpu_freq_mhz")) if before else None)
    summary["cpu_freq_mhz"] = freq if freq is not None else conditions.get("cpu_freq_mhz")
    return summary


def _get(data: Mapping[str, Any], key: str, inner: str) -> Any:
    value = data.get(key)
    if isinstance(value, Mapping):
        return value.get(inner)
    return value


def provenance_summary(provenance: Mapping[str, Any], created: str | None = None) -> dict[str, Any]:
    """The short provenance a reference keeps: versions, hardware names, suite commit, creation.

    Accepts a run's provenance (optionally with the run's device record under ``"device"``) or a
    summary made earlier. Missing parts are left out or None, never guessed.
    """
    device = provenance.get("device")
    device_versions = provenance.get("device_versions")
    if device_versions is None and isinstance(device, Mapping):
        device_versions = device.get("versions")
    device_name = provenance.get("device_name")
    if device_name is None and isinstance(device, Mapping):
        device_name = device.get("name")
    commit = provenance.get("commit", _get(provenance, "suite_git", "commit"))
    summary = {
        "host": provenance.get("host"),
        "cpu": _get(provenance, "cpu", "model"),
        "kernel": provenance.get("kernel", _get(provenance, "os", "release")),
        "python": _get(provenance, "python", "version"),
        "libraries": {str(k): str(v) for k, v in (provenance.get("libraries") or {}).items()},
        "device_name": device_name,
        "device_versions": {str(k): str(v) for k, v in (device_versions or {}).items()},
        "commit": commit,
        "created": created if created is not None else provenance.get("created"),
    }
    return summary


def _processes(processes: Any, limit: int = 2) -> str:
    named = [f"{p.get('name', '?')} (pid {p.get('pid', '?')})" for p in processes or () if isinstance(p, Mapping)]
    return ", ".join(named[:limit])


@dataclass(frozen=True)
class Cause:
    """A recorded fact that moves timings: which way (``slower``, ``faster`` or ``either``) and
    by how much at most (a relative change; None when it cannot be bounded)."""

    text: str
    direction: str = "either"
    magnitude: float | None = None

    def can_explain(self, ratio: float | None, threshold: float) -> bool:
        """Whether a change of time by ``ratio`` (now / then) is one this cause could make: the
        right direction, and no bigger than its magnitude plus the drift threshold."""
        if ratio is None:
            return True
        if self.direction == "slower" and ratio < 1.0 or self.direction == "faster" and ratio > 1.0:
            return False
        return self.magnitude is None or abs(ratio - 1.0) <= self.magnitude + threshold


def _interval_causes(interval: Mapping[str, Any]) -> list[Cause]:
    flags = set(interval.get("flags") or ())
    causes: list[Cause] = []
    if "steal" in flags:
        steal = interval.get("steal_fraction")
        if isinstance(steal, (int, float)) and 0 <= steal < 1:
            causes.append(Cause(f"steal: {steal:.1%} of CPU time stolen by the hypervisor", "slower",
                                steal / (1.0 - steal)))
        else:
            causes.append(Cause("steal: CPU time stolen by the hypervisor", "slower"))
    if "other-load" in flags:
        rate = interval.get("other_cpu_s_per_s")
        figure = f"{rate:.1f} CPU-s/s" if isinstance(rate, (int, float)) else "CPU time"
        who = _processes(interval.get("top_other_processes"))
        # Another process can take a shared resource (memory bandwidth, caches) far beyond its
        # CPU share, so its effect is not bounded; it can only make this run slower.
        causes.append(Cause(f"other-load: {figure} by {who}" if who else f"other-load: {figure} by other processes",
                            "slower"))
    if "cpu-clock-changed" in flags:
        change = interval.get("cpu_freq_change")
        if isinstance(change, (int, float)):
            causes.append(Cause(f"cpu-clock-changed: CPU clock {change:+.0%} during the case", "either", abs(change)))
        else:
            causes.append(Cause("cpu-clock-changed: CPU clock changed during the case"))
    if "throttled" in flags:
        reasons = [str(r) for r in interval.get("throttle_reasons") or ()]
        causes.append(Cause(f"throttled: {', '.join(reasons)}" if reasons else "throttled", "slower"))
    if "device-shared" in flags:
        count = interval.get("device_processes")
        figure = f"{count} other process(es)" if isinstance(count, int) else "other processes"
        causes.append(Cause(f"device-shared: {figure} on the device", "slower"))
    return causes


def interval_causes(interval: Mapping[str, Any]) -> list[str]:
    """Disturbances recorded in this case's own interval, each with its figures."""
    return [cause.text for cause in _interval_causes(interval)]


def _reference_condition_causes(now: Mapping[str, Any], reference: Mapping[str, Any]) -> list[Cause]:
    """Conditions that differed between the reference's measurement and this one."""
    causes: list[Cause] = []
    now_flags = set(now.get("flags") or ())
    for flag in DISTURBANCE_FLAGS:
        if flag in set(reference.get("flags") or ()) and flag not in now_flags:
            detail = interval_causes({**reference, "flags": [flag]})
            # a disturbed reference is slow: it explains this run being faster
            causes.append(Cause(f"reference was disturbed ({detail[0]}); this run was not", "faster"))
    gov_then, gov_now = reference.get("governor"), now.get("governor")
    if gov_then and gov_now and gov_then != gov_now:
        causes.append(Cause(f"cpu governor {gov_then} -> {gov_now}"))
    freq_then, freq_now = reference.get("cpu_freq_mhz"), now.get("cpu_freq_mhz")
    if isinstance(freq_then, (int, float)) and isinstance(freq_now, (int, float)) and freq_then > 0 and freq_now > 0:
        change = freq_now / freq_then - 1.0
        if abs(change) > CPU_CLOCK_CHANGE_SUSPICIOUS:
            # time scales at most with 1 / clock: a slower clock explains a slower run, by that much
            causes.append(Cause(f"mean CPU clock {freq_then:.0f} -> {freq_now:.0f} MHz ({change:+.0%}) since the reference",
                                "slower" if change < 0 else "faster", abs(freq_then / freq_now - 1.0)))
    return causes


def _changed(kind: str, then: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    return [f"{kind}{name} {then[name]} -> {now[name]}"
            for name in sorted(set(then) & set(now)) if str(then[name]) != str(now[name])]


def version_causes(provenance: Mapping[str, Any], reference_provenance: Mapping[str, Any]) -> list[str]:
    """Driver, runtime, library, kernel, Python and CPU changes since the reference."""
    now = provenance_summary(provenance)
    then = provenance_summary(reference_provenance)
    causes = _changed("device ", then["device_versions"], now["device_versions"])
    causes += _changed("library ", then["libraries"], now["libraries"])
    for key, label in (("kernel", "kernel"), ("python", "python"), ("cpu", "cpu model"), ("device_name", "device")):
        if then[key] and now[key] and str(then[key]) != str(now[key]):
            causes.append(f"{label} {then[key]} -> {now[key]}")
    return causes


def _simulated(provenance: Mapping[str, Any]) -> bool:
    """Whether the provenance is of a run on a simulated device (``--target=sim:...``)."""
    device = provenance.get("device")
    return isinstance(device, Mapping) and device.get("backend") == "sim"


def find_cause(interval: Mapping[str, Any], reference_conditions: Mapping[str, Any] | None,
               provenance: Mapping[str, Any], reference_provenance: Mapping[str, Any] | None,
               ratio: float | None = None, threshold: float = 0.0) -> str | None:
    """A sentence naming the recorded causes that could explain a change of this case, or None.

    ``interval`` is the case's Interval JSON or its :func:`conditions_summary`;
    ``reference_conditions`` and ``reference_provenance`` are the reference's summaries (None
    when there is no reference, and then only this interval's disturbances count). Causes are
    joined with ``"; "`` in a fixed order: this interval's disturbances, conditions that differ
    from the reference's, then version changes. Suite commits are not a cause: they change on
    every commit, and would excuse every regression.

    With ``ratio`` (this time / the reference's), a cause counts only if it could make that
    change: in its direction (load makes runs slower, never faster) and, where its size is known
    (steal fraction, clock change), no bigger than that size plus ``threshold``: a 3% clock
    drop does not explain a run 20% slower. Version changes are never bounded.

    On a simulated device (``provenance["device"]["backend"] == "sim"``) nothing recorded is a
    cause: the simulated time is a function of the work and the simulator.
    """
    if _simulated(provenance):
        # The simulator's time depends on its inputs and its code only: neither the host's
        # conditions nor its software versions can explain a change, and the simulator's own
        # code is what the references gate (like suite commits, it is never a cause).
        return None
    causes = _interval_causes(interval)
    if reference_conditions is not None:
        causes += _reference_condition_causes(conditions_summary(interval), reference_conditions)
    if reference_provenance is not None:
        causes += [Cause(text) for text in version_causes(provenance, reference_provenance)]
    kept = [cause.text for cause in causes if cause.can_explain(ratio, threshold)]
    return "; ".join(kept) if kept else None


__all__ = ["DISTURBANCE_FLAGS", "conditions_summary", "find_cause", "interval_causes",
           "provenance_summary", "version_causes"]
