"""Parsing the Linux texts a host CPU is described by: /proc/cpuinfo, /proc/meminfo and the sizes
and CPU lists of sysfs. Pure functions of the texts (``host.py`` reads the files)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says of a CPU (see :func:`parse_cpuinfo`)."""

    model_name: str
    vendor: str                  # "intel", "amd", "arm", or the raw vendor id lower-cased
    family: int | None           # cpuid family (x86), "CPU architecture" (Arm)
    model: int | None            # cpuid model (x86), "CPU part" (Arm)
    logical_cpus: int
    physical_cores: int
    cores_how: str               # how physical_cores was counted
    flags: frozenset[str] = field(default_factory=frozenset)
    max_mhz: float | None = None  # highest 'cpu MHz' over processors
    stepping: int | None = None  # cpuid stepping (x86), "CPU revision" (Arm)


def _fields(block: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return out


def parse_int(text: str | None, base: int = 10) -> int | None:
    """``text`` as an integer in ``base`` (a ``0x`` prefix allowed in base 16), None when it is
    absent or not one."""
    try:
        return int(text, base) if text is not None else None
    except ValueError:
        return None


def parse_cpuinfo(text: str, fallback_name: str = "", fallback_cpus: int = 0) -> CpuInfo:
    """Model, vendor, family/model/stepping, core counts, ISA flags and clock from a
    /proc/cpuinfo text (an Arm text's CPU architecture, part and revision stand for family,
    model and stepping)."""
    blocks = [_fields(block) for block in re.split(r"\n\s*\n", text) if block.strip()]
    processors = [block for block in blocks if "processor" in block]
    first = processors[0] if processors else (blocks[0] if blocks else {})
    vendor_id = first.get("vendor_id", "")
    implementer = first.get("CPU implementer", "")
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(vendor_id, vendor_id.lower())
    if not vendor and implementer:
        vendor = "arm" if implementer.lower() == "0x41" else f"implementer {implementer}"
    name = first.get("model name") or first.get("Hardware") or fallback_name
    if not name and implementer:
        name = f"CPU implementer {implementer} part {first.get('CPU part', '?')}"
    flags = frozenset((first.get("flags") or first.get("Features") or "").split())
    logical = len(processors) or fallback_cpus or 1
    pairs = {(p.get("physical id"), p.get("core id")) for p in processors if "core id" in p}
    if pairs:
        physical, how = len(pairs), "unique (physical id, core id) pairs in /proc/cpuinfo"
    else:
        physical, how = logical, "logical CPUs (no core ids in /proc/cpuinfo)"
    mhz = [float(p["cpu MHz"]) for p in processors if _is_number(p.get("cpu MHz"))]
    family = parse_int(first.get("cpu family"))
    model = parse_int(first.get("model"))
    stepping = parse_int(first.get("stepping"))
    if implementer and vendor_id == "":
        family = parse_int(first.get("CPU architecture"))
        model = parse_int(first.get("CPU part"), 16)
        stepping = parse_int(first.get("CPU revision"))
    return CpuInfo(model_name=name or "unknown CPU", vendor=vendor or "unknown", family=family, model=model,
                   logical_cpus=logical, physical_cores=physical, cores_how=how, flags=flags,
                   max_mhz=max(mhz) if mhz else None, stepping=stepping)


def _is_number(text: str | None) -> bool:
    try:
        float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def parse_size(text: str) -> int:
    """Bytes from a sysfs cache size such as ``48K``, ``2048K`` or ``1M``."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"not a cache size: {text!r}")
    scale = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[match.group(2).upper()]
    return int(match.group(1)) * scale


def parse_cpu_list(text: str) -> list[int]:
    """CPU numbers from a list such as ``0-3,8,10-11``."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def parse_meminfo(text: str) -> int | None:
    """MemTotal in bytes from a /proc/meminfo text, or None."""
    match = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


__all__ = ["CpuInfo", "parse_cpu_list", "parse_cpuinfo", "parse_int", "parse_meminfo", "parse_size"]
