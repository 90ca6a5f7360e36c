"""Which CPU a spec describes: the facts that tell two CPUs apart for results, and a fingerprint.

Every host CPU has the target id ``cpu``, and its model name alone is not enough to tell CPUs
apart (a virtual machine may call Zen 3, Zen 4 and Zen 5 parts all "AMD EPYC"). A spec derived at
run time carries a :class:`~pytest_charz.targets.spec.CpuIdentity`; its fingerprint is the first
8 hex digits of the SHA-256 of the canonical JSON of vendor, family, model, stepping, the
result-changing ISA features (:data:`RESULT_FEATURES`), cache sizes per level and physical cores.

A spec recorded before CpuIdentity existed still gets a fingerprint, of what it recorded: vendor,
model name, the vector ISA of its ``architecture``, cache capacities per level and core count,
hashed under another scheme name (so the two kinds of fingerprint never coincide by design).

Identity documents (:func:`identity_document`) are the JSON form used by provenance, profiles
and comparisons; :func:`identity_differences` says what differs between two of them, using only
what both sides know.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..errors import UsageError

if TYPE_CHECKING:
    from .spec import CpuIdentity, TargetSpec

#: ISA features whose presence changes what a benchmark measures (the widest vector unit, fused
#: multiply-add, native reduced-precision and integer dot products, matrix engines), in the order
#: identity documents list them: x86 (Linux /proc/cpuinfo flag names), then Arm.
RESULT_FEATURES = (
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni",
    "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
    "asimd", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2",
)
#: A dtype is native when one of these features computes it without conversion to fp32.
NATIVE_DTYPE_FEATURES: dict[str, tuple[str, ...]] = {
    "bf16": ("avx512_bf16", "amx_bf16", "bf16"),
    "fp16": ("avx512_fp16", "amx_fp16", "asimdhp"),
    "int8": ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm"),
}
NATIVE_DTYPES = tuple(NATIVE_DTYPE_FEATURES)
#: Vector ISAs from the widest down (the one a spec's peaks are derived with).
VECTOR_ISAS = ("avx512f", "sve2", "sve", "avx2", "avx", "asimd", "sse2")
CACHE_LEVELS = ("l1", "l2", "l3")
FINGERPRINT_HEX = 8
_FINGERPRINT = re.compile(rf"[0-9a-f]{{{FINGERPRINT_HEX}}}")
_LABEL = re.compile(rf"^(?P<name>.*) \[(?P<fingerprint>[0-9a-f]{{{FINGERPRINT_HEX}}})\]$")
_ARCHITECTURE_ISA = re.compile(r"\(([a-z0-9_]+)")


def result_features(flags: Iterable[str]) -> tuple[str, ...]:
    """The flags of :data:`RESULT_FEATURES` among ``flags``, in that order."""
    present = set(flags)
    return tuple(flag for flag in RESULT_FEATURES if flag in present)


def native_dtypes(features: Iterable[str]) -> tuple[str, ...]:
    """The dtypes of :data:`NATIVE_DTYPES` some feature in ``features`` computes natively."""
    present = set(features)
    return tuple(dtype for dtype, needs in NATIVE_DTYPE_FEATURES.items() if present.intersection(needs))


def vector_isa(features: Iterable[str]) -> str | None:
    """The widest vector ISA of :data:`VECTOR_ISAS` in ``features``, None when there is none."""
    present = set(features)
    return next((isa for isa in VECTOR_ISAS if isa in present), None)


def _digest(payload: Mapping[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:FINGERPRINT_HEX]


def fingerprint_of(cpu: "CpuIdentity") -> str:
    """The 8-hex fingerprint of a CpuIdentity (vendor, family, model, stepping, features,
    caches, cores); the same identity always gives the same fingerprint."""
    return _digest({"scheme": "cpu-identity-1", "vendor": cpu.vendor, "family": cpu.family, "model": cpu.model,
                    "stepping": cpu.stepping, "features": sorted(cpu.features),
                    "cache_bytes": {k: int(v) for k, v in sorted(cpu.cache_bytes.items())}, "cores": int(cpu.cores)})


def _recorded_caches(spec: "TargetSpec") -> dict[str, int]:
    caches: dict[str, int] = {}
    for level in spec.memory:
        if level.name in CACHE_LEVELS and level.capacity_bytes is not None:
            caches[level.name] = int(level.capacity_bytes.value)
    return caches


def _recorded_isa(spec: "TargetSpec") -> str | None:
    found = _ARCHITECTURE_ISA.search(spec.identity.architecture or "")
    return found.group(1) if found else None


def _recorded_cores(spec: "TargetSpec") -> int:
    return int(spec.compute.units.value)


def cpu_fingerprint(spec: "TargetSpec") -> str:
    """The fingerprint of the CPU ``spec`` describes: of its CpuIdentity, or for a spec recorded
    before it existed, of what the spec recorded (vendor, name, vector ISA, caches, cores)."""
    if spec.identity.cpu is not None:
        return fingerprint_of(spec.identity.cpu)
    return _digest({"scheme": "recorded-spec-1", "vendor": spec.identity.vendor, "name": spec.identity.name,
                    "vector_isa": _recorded_isa(spec), "cache_bytes": _recorded_caches(spec),
                    "cores": _recorded_cores(spec)})


def check_fingerprint(fingerprint: str) -> str:
    """``fingerprint`` when it is 8 lower-case hex digits (or empty); UsageError otherwise."""
    if fingerprint and not _FINGERPRINT.fullmatch(fingerprint):
        raise UsageError(f"a CPU fingerprint is {FINGERPRINT_HEX} lower-case hex digits, got {fingerprint!r}")
    return fingerprint


def cpu_label(spec: "TargetSpec") -> str:
    """The readable, fingerprinted name of the CPU of ``spec``: ``"AMD EPYC [1a2b3c4d]"``."""
    return f"{spec.identity.name} [{cpu_fingerprint(spec)}]"


def split_cpu_label(label: str) -> tuple[str, str | None]:
    """``(name, fingerprint)`` of a :func:`cpu_label`; ``(label, None)`` for a bare name (as files
    written before the fingerprint hold)."""
    found = _LABEL.match(label)
    return (found.group("name"), found.group("fingerprint")) if found else (label, None)


def cpu_identity_document(cpu: "CpuIdentity") -> dict[str, Any]:
    """The JSON of a CpuIdentity with its fingerprint and vector ISA (``source`` "cpu identity")."""
    return {"source": "cpu identity", "model_name": cpu.model_name, "vendor": cpu.vendor, "family": cpu.family,
            "model": cpu.model, "stepping": cpu.stepping, "features": list(cpu.features),
            "vector_isa": vector_isa(cpu.features), "native_dtypes": list(cpu.native_dtypes),
            "cache_bytes": dict(cpu.cache_bytes), "cores": cpu.cores, "logical_cpus": cpu.logical_cpus,
            "fingerprint": fingerprint_of(cpu)}


def identity_document(spec: "TargetSpec") -> dict[str, Any]:
    """What is known of the CPU of ``spec`` as JSON: its CpuIdentity's document, or for a spec
    recorded before it (``source`` "recorded spec") the name, vendor, vector ISA, native dtypes
    (those with a peak; None without peaks), caches and cores; unknown fields are null."""
    if spec.identity.cpu is not None:
        return cpu_identity_document(spec.identity.cpu)
    peaks = {**spec.compute.vector_peak_flops, **spec.compute.peak_flops}
    return {"source": "recorded spec", "model_name": spec.identity.name, "vendor": spec.identity.vendor,
            "family": None, "model": None, "stepping": None, "features": None, "vector_isa": _recorded_isa(spec),
            "native_dtypes": [d for d in NATIVE_DTYPES if d in peaks] if peaks else None,
            "cache_bytes": _recorded_caches(spec), "cores": _recorded_cores(spec), "logical_cpus": None,
            "fingerprint": cpu_fingerprint(spec)}


def _size_text(size: float) -> str:
    for unit, scale in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size:g} B"


def _cpuid_text(doc: Mapping[str, Any]) -> str:
    return ", ".join(f"{key} {doc[key]}" for key in ("family", "model", "stepping") if doc.get(key) is not None)


def describe_identity(doc: Mapping[str, Any]) -> str:
    """One line naming a CPU from its identity document: name, cpuid, ISA, caches, cores."""
    parts = [str(doc.get("model_name") or "unknown CPU")]
    details = [text for text in (_cpuid_text(doc),) if text]
    if doc.get("features"):
        details.append(" ".join(doc["features"]))
    elif doc.get("vector_isa"):
        details.append(str(doc["vector_isa"]))
    caches = doc.get("cache_bytes") or {}
    if caches:
        details.append(", ".join(f"{level.upper()} {_size_text(caches[level])}" for level in sorted(caches)))
    if doc.get("cores"):
        details.append(f"{doc['cores']:g} cores")
    if details:
        parts.append(f"({'; '.join(details)})")
    return " ".join(parts)


def is_native(doc: Mapping[str, Any] | None, dtype: str) -> bool | None:
    """Whether the CPU of an identity document computes ``dtype`` natively: from its
    ``native_dtypes`` list, else its ``native_by_dtype`` mapping; None when it does not say."""
    if doc is None:
        return None
    if doc.get("native_dtypes") is not None:
        return dtype in doc["native_dtypes"]
    found = (doc.get("native_by_dtype") or {}).get(dtype)
    return None if found is None else bool(found)


def identity_differences(first: Mapping[str, Any], second: Mapping[str, Any],
                         names: Sequence[str] = ("first", "second")) -> list[tuple[str, str]]:
    """What differs between two identity documents, as ``(what, detail)`` pairs: ``what`` is one
    of "model name", "vendor", "family/model", "stepping", "features", "vector ISA", "native
    dtypes", "caches", "cores", "fingerprint"; ``detail`` names each side by ``names``. A field
    unknown (null) on either side is not compared; fingerprints are compared only between two
    documents of one source, and only when nothing else tells the CPUs apart."""
    a, b = names[0], names[1]
    found: list[tuple[str, str]] = []

    def both(key: str) -> bool:
        return first.get(key) not in (None, "") and second.get(key) not in (None, "")

    for key, what in (("model_name", "model name"), ("vendor", "vendor")):
        if both(key) and first[key] != second[key]:
            found.append((what, f"{first[key]!r} ({a}), {second[key]!r} ({b})"))
    cpuid = [k for k in ("family", "model") if both(k)]
    if cpuid and any(first[k] != second[k] for k in cpuid):
        found.append(("family/model", f"{_cpuid_text(first)} ({a}), {_cpuid_text(second)} ({b})"))
    elif both("stepping") and first["stepping"] != second["stepping"]:
        found.append(("stepping", f"{first['stepping']} ({a}), {second['stepping']} ({b})"))
    if first.get("features") is not None and second.get("features") is not None:
        only_a = [f for f in first["features"] if f not in second["features"]]
        only_b = [f for f in second["features"] if f not in first["features"]]
        if only_a or only_b:
            said = [f"{' '.join(only)} only in {name}" for only, name in ((only_a, a), (only_b, b)) if only]
            found.append(("features", "; ".join(said)))
    elif both("vector_isa") and first["vector_isa"] != second["vector_isa"]:
        found.append(("vector ISA", f"{first['vector_isa']} ({a}), {second['vector_isa']} ({b})"))
    natives = {d: (is_native(first, d), is_native(second, d)) for d in NATIVE_DTYPES}
    moved = [d for d, (x, y) in natives.items() if x is not None and y is not None and x != y]
    if moved:
        found.append(("native dtypes", "; ".join(
            f"{d} native in {a if natives[d][0] else b} only" for d in moved)))
    caches_a, caches_b = first.get("cache_bytes") or {}, second.get("cache_bytes") or {}
    levels = [lv for lv in CACHE_LEVELS if lv in caches_a and lv in caches_b and caches_a[lv] != caches_b[lv]]
    if levels:
        found.append(("caches", ", ".join(f"{lv.upper()} {_size_text(caches_a[lv])} ({a}), "
                                          f"{_size_text(caches_b[lv])} ({b})" for lv in levels)))
    if both("cores") and float(first["cores"]) != float(second["cores"]):
        found.append(("cores", f"{first['cores']:g} ({a}), {second['cores']:g} ({b})"))
    if (not found and both("fingerprint") and first.get("source") == second.get("source")
            and first["fingerprint"] != second["fingerprint"]):
        found.append(("fingerprint", f"{first['fingerprint']} ({a}), {second['fingerprint']} ({b})"))
    return found


__all__ = ["CACHE_LEVELS", "NATIVE_DTYPES", "NATIVE_DTYPE_FEATURES", "RESULT_FEATURES", "VECTOR_ISAS",
           "check_fingerprint", "cpu_fingerprint", "cpu_identity_document", "cpu_label", "describe_identity",
           "fingerprint_of", "identity_differences", "identity_document", "is_native", "native_dtypes", "result_features",
           "split_cpu_label", "vector_isa"]
