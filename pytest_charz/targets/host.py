"""The host CPU's TargetSpec, derived at run time from /proc and /sys.

The parsing is pure: ``derive_host_spec(HostTexts)`` takes the file texts, so tests feed recorded
ones; ``host_spec()`` reads this machine's files. Every derived figure's ``source`` says exactly
how it was derived.

Peak FLOP/s per dtype = physical cores x SIMD lanes x 2 (FMA) x FMA units per core x GHz, where
the lanes come from the widest vector ISA in the CPU flags (avx512f: 512-bit, avx2/avx: 256-bit,
else 128-bit) and the FMA units per core follow :func:`fma_units_per_core`. Matrix engines
(Intel AMX) use Intel's published per-core rates instead.

The spec's ``identity.cpu`` (:func:`host_identity`) is what tells this CPU from another: vendor,
family/model/stepping, the full model name, the ISA features that change results, cache sizes per
level and core counts; its fingerprint (``targets/identity.py``) keys the host's baselines.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import UsageError
from .cpuinfo import CpuInfo, parse_cpu_list, parse_cpuinfo, parse_int, parse_meminfo, parse_size
from .identity import native_dtypes, result_features
from .spec import Compute, CpuIdentity, Figure, Identity, MemoryLevel, Priors, TargetSpec

FMA_UNITS_ENV = "CHARZ_CPU_FMA_UNITS"
CLOCK_ENV = "CHARZ_CPU_MHZ"
# Intel AMX TMUL throughput per core and cycle: 1024 BF16 FLOP and 2048 INT8 OP.
AMX_BF16_FLOP_PER_CYCLE = 1024
AMX_INT8_OP_PER_CYCLE = 2048
# Spec-only priors of the host (targets/priors.py): the OS tells neither the DRAM's type nor its
# channels inside a virtual machine, so DRAM bandwidth is a per-logical-CPU figure, capped.
DRAM_BYTES_PER_S_PER_CPU = 27.2e9
DRAM_BYTES_PER_S_CAP = 780e9
DISPATCH_US = 10.0
SOURCES = {
    "prior-host-dram": "pytest-charz design notes, 'Levels from both curves', 2026, docs/design-notes.md "
                       "(bandwidth:dram 54.4 GB/s measured by the memory suite's STREAM case on a 2-vCPU "
                       "Zen 5 guest: 27.2 GB/s per logical CPU), capped at 780 GB/s, the top of the STREAM "
                       "Triad range Microsoft gives for its HBv4 DDR5 HPC virtual machines (650-780 GB/s; "
                       "'Running your first benchmark using STREAM', Microsoft Learn, undated, "
                       "https://learn.microsoft.com/en-us/azure/high-performance-computing/"
                       "performance-benchmarking/stream-benchmark, Expected results by VM family)",
    "prior-host-dispatch": "\"From PyTorch op to kernel launch\", J. Lin, GPU kernel serving lessons, lesson "
                           "18, undated, https://jiahuanglin.xyz/all_lessons/gpu_kernel_serving/"
                           "18_pytorch_to_kernel.html (5-25 us of host work per PyTorch eager op: Python, "
                           "binding, dispatcher, backend; 10 us taken per dispatched op)",
    "procfs": "/proc/cpuinfo and /proc/meminfo of the running Linux kernel",
    "sysfs": "/sys/devices/system/cpu/cpu0/cache/index*/ and cpufreq of the running Linux kernel",
    "intel-amx": "Intel 64 and IA-32 Architectures Optimization Reference Manual, Intel, 2023, "
                 "https://www.intel.com/content/www/us/en/developer/articles/technical/"
                 "intel-sdm.html (AMX chapter: TMUL peak 1024 BF16 FLOP and 2048 INT8 OP per "
                 "cycle per core)",
}


@dataclass(frozen=True)
class HostTexts:
    """The raw texts a host spec is derived from (empty where a file does not exist)."""

    cpuinfo: str = ""
    meminfo: str = ""
    # One mapping per /sys/devices/system/cpu/cpu0/cache/indexN: level, type, size, shared_cpu_list.
    cache_indexes: tuple[Mapping[str, str], ...] = ()
    cpufreq_max_khz: str = ""
    platform_name: str = ""      # fallback model name where /proc/cpuinfo has none
    cpu_count: int = 0           # fallback logical CPU count
    machine: str = ""            # platform.machine(): "x86_64", "aarch64"...
    measured_clock_mhz: float | None = None         # kernels.clock_probe, all cores busy
    measured_vector_clock_mhz: float | None = None  # the same with the FMA pipes kept full
    clock_override_mhz: str = ""              # CHARZ_CPU_MHZ


def simd_width_bits(flags: frozenset[str], machine: str = "") -> tuple[int, str]:
    """Widest vector width for floating point and the flag that shows it."""
    for flag, bits in (("avx512f", 512), ("avx2", 256), ("avx", 256), ("asimd", 128),
                       ("sse2", 128)):
        if flag in flags:
            return bits, flag
    return 128, f"assumed 128-bit ({machine or 'unknown ISA'}, no vector flag recognised)"


def fma_units_per_core(info: CpuInfo, width_bits: int, machine: str = "",
                       override: str | None = None) -> tuple[int, str]:
    """FMA pipes per core at ``width_bits`` and the rule that gave the number.

    Rules, first match wins (``CHARZ_CPU_FMA_UNITS`` overrides them all):
    - AVX-512 on an Intel Xeon: 2 (Skylake-SP Gold/Platinum and later server cores have two
      512-bit FMA ports; some Xeon Silver/Bronze parts have one, set the override there);
    - AVX-512 on another Intel part: 1 (client cores fuse ports 0 and 1 for 512-bit FMA);
    - AVX-512 on AMD: 1 on family 25 (Zen 4 runs 512-bit FMA as two halves on 256-bit pipes),
      2 on family 26 and later (Zen 5 server/desktop; mobile Zen 5 parts need the override);
    - AVX2 with FMA: 2 (Intel Haswell onwards, AMD Zen 2 onwards), except AMD family 23 models
      below 0x30 (Zen, Zen+: 128-bit pipes, one 256-bit FMA per cycle): 1;
    - 128-bit Arm NEON (asimd): 2 (Neoverse N1/N2 and Cortex-A76 onwards have two FP pipes);
    - anything else: 1 (one multiply and one add per cycle, counted as one FMA).
    """
    if override is not None and override.strip():
        try:
            units = int(override)
        except ValueError:
            units = 0
        if units < 1:
            raise UsageError(f"{FMA_UNITS_ENV} must be a positive integer, got {override!r}")
        return units, f"{FMA_UNITS_ENV}={units}"
    xeon = "xeon" in info.model_name.lower()
    if width_bits == 512 and info.vendor == "intel":
        return (2, "Intel Xeon with AVX-512: two 512-bit FMA ports") if xeon else \
            (1, "Intel client core with AVX-512: one fused 512-bit FMA port")
    if width_bits == 512 and info.vendor == "amd":
        if (info.family or 0) >= 26:
            return 2, "AMD family 26 (Zen 5) with AVX-512: two 512-bit FMA pipes"
        return 1, "AMD Zen 4 AVX-512: 512-bit FMA as two halves on 256-bit pipes"
    if width_bits == 256 and "fma" in info.flags:
        if info.vendor == "amd" and info.family == 23 and (info.model or 0) < 0x30:
            return 1, "AMD Zen/Zen+ (family 23, model < 0x30): 128-bit FMA pipes"
        return 2, "AVX2 with FMA: two 256-bit FMA pipes"
    if "asimd" in info.flags or machine in ("aarch64", "arm64"):
        return 2, "Arm NEON: two 128-bit FP pipes"
    return 1, "no FMA rule matched: one multiply and one add per cycle assumed"


def _cache_levels(indexes: Sequence[Mapping[str, str]],
                  threads_per_core: int) -> list[MemoryLevel]:
    levels: dict[str, MemoryLevel] = {}
    for index in indexes:
        level = parse_int(index.get("level"))
        kind = index.get("type", "").strip()
        if level not in (1, 2, 3) or kind == "Instruction" or not index.get("size"):
            continue
        size = parse_size(index["size"])
        shared = parse_cpu_list(index.get("shared_cpu_list", ""))
        scope = "unit" if len(shared) <= threads_per_core else "socket"
        name = f"l{level}"
        source = (f"derived: sysfs cache index (level {level}, {kind}): "
                  f"size {index['size'].strip()} per instance, "
                  f"shared by CPUs {index.get('shared_cpu_list', '?').strip()}")
        levels.setdefault(name, MemoryLevel(
            name=name, label=f"L{level}d" if kind == "Data" else f"L{level}", scope=scope,
            capacity_bytes=Figure(float(size), source), bandwidth_bytes_per_s=None))
    return [levels[name] for name in sorted(levels)]


def _cpu_identity(info: CpuInfo, caches: Sequence[MemoryLevel]) -> CpuIdentity:
    features = result_features(info.flags)
    return CpuIdentity(
        model_name=info.model_name, vendor=info.vendor, family=info.family, model=info.model,
        stepping=info.stepping, features=features, native_dtypes=native_dtypes(features),
        cache_bytes={level.name: int(level.capacity_bytes.value) for level in caches
                     if level.capacity_bytes is not None},
        cores=info.physical_cores, logical_cpus=info.logical_cpus)


def host_identity(texts: HostTexts) -> CpuIdentity:
    """The identity of the CPU of recorded texts (pure; the same as ``derive_host_spec(texts)
    .identity.cpu``): vendor, family/model/stepping, full model name, result-changing features,
    native dtypes, data cache sizes per level (per instance) and core counts."""
    info = parse_cpuinfo(texts.cpuinfo, texts.platform_name, texts.cpu_count)
    threads_per_core = max(1, info.logical_cpus // max(1, info.physical_cores))
    return _cpu_identity(info, _cache_levels(texts.cache_indexes, threads_per_core))


def derive_host_spec(texts: HostTexts, fma_units_override: str | None = None) -> TargetSpec:
    """The host CPU spec from recorded texts (pure: reads no files, no environment); its
    ``identity.cpu`` is :func:`host_identity` of the same texts."""
    info = parse_cpuinfo(texts.cpuinfo, texts.platform_name, texts.cpu_count)
    width, width_flag = simd_width_bits(info.flags, texts.machine)
    fma_units, fma_rule = fma_units_per_core(info, width, texts.machine, fma_units_override)
    cores = info.physical_cores
    notes = [f"logical CPUs: {info.logical_cpus}; physical cores: {cores} ({info.cores_how})",
             f"FMA units per core: {fma_units} ({fma_rule})",
             "cache capacities are per instance; scope 'unit' is one core, 'socket' is shared"]

    clock: Figure | None = None
    peak_clock: Figure | None = None     # the clock peaks are derived at, when not `clock`
    max_khz = texts.cpufreq_max_khz.strip()
    if texts.clock_override_mhz.strip():
        try:
            override = float(texts.clock_override_mhz)
        except ValueError:
            override = 0.0
        if not override > 0:
            raise UsageError(f"{CLOCK_ENV} must be a positive number of MHz, got {texts.clock_override_mhz!r}")
        clock = Figure(override, f"{CLOCK_ENV}={texts.clock_override_mhz.strip()} (set by the user)")
    elif max_khz.isdigit() and int(max_khz) > 0:
        clock = Figure(int(max_khz) / 1000.0, "sysfs cpufreq cpuinfo_max_freq")
    elif texts.measured_clock_mhz and texts.measured_clock_mhz > (info.max_mhz or 0.0):
        # Virtual machines have no cpufreq and report the nominal clock as 'cpu MHz'; the cores
        # run faster (turbo), and wide-vector code may run slower than scalar code (frequency
        # licences, power limits): the peaks use the clock measured with the FMA pipes full.
        nominal = f"{info.max_mhz:.0f} MHz" if info.max_mhz else "nothing"
        clock = Figure(round(texts.measured_clock_mhz, 1),
                       f"measured: dependent-add chain at one add per cycle on every core at once, best of 5 "
                       f"(no cpufreq maximum readable; /proc/cpuinfo 'cpu MHz' says {nominal})")
        if texts.measured_vector_clock_mhz and texts.measured_vector_clock_mhz > (info.max_mhz or 0.0):
            peak_clock = Figure(round(texts.measured_vector_clock_mhz, 1),
                                f"measured: dependent-add chain with {fma_units} FMA pipe(s) kept full of "
                                f"{width}-bit FMAs on every core, best of 5; scalar clock "
                                f"{texts.measured_clock_mhz:.0f} MHz")
    elif info.max_mhz:
        clock = Figure(info.max_mhz, "/proc/cpuinfo 'cpu MHz' (clock at detection, highest over "
                                     "processors; no cpufreq maximum readable)")
    peaks: dict[str, Figure] = {}
    vector: dict[str, Figure] = {}
    if clock is None:
        notes.append("no clock readable (no cpufreq, no 'cpu MHz'): peaks are not derived")
    else:
        at = peak_clock or clock
        ghz = at.value / 1000.0
        where = at.source.split(" (")[0].split("; scalar")[0]

        def simd(bits: int, element_bits: int, flag: str, what: str) -> Figure:
            lanes = bits // element_bits
            value = cores * lanes * 2 * fma_units * ghz * 1e9
            return Figure(value, f"derived: {cores} cores x {lanes} {what} lanes ({flag}) x "
                                 f"{fma_units} FMA units x 2 FLOP x {ghz:.3f} GHz ({where})")

        def amx(per_cycle: int, what: str) -> Figure:
            return Figure(cores * per_cycle * ghz * 1e9,
                          f"derived: {cores} cores x {per_cycle} {what} per cycle (Intel AMX, "
                          f"source intel-amx) x {ghz:.3f} GHz ({where})")

        peaks["fp64"] = simd(width, 64, width_flag, "fp64")
        peaks["fp32"] = simd(width, 32, width_flag, "fp32")
        if "avx512_fp16" in info.flags and width == 512:
            peaks["fp16"] = simd(512, 16, "avx512_fp16", "fp16")
        if "avx512_bf16" in info.flags and width == 512:
            # VDPBF16PS: one bf16 pair product and sum per 16-bit lane, on the FMA ports.
            vector["bf16"] = simd(512, 16, "avx512_bf16", "bf16")
        if "avx512_vnni" in info.flags and width == 512:
            vector["int8"] = simd(512, 8, "avx512_vnni", "int8")
        elif "avx_vnni" in info.flags and width >= 256:
            vector["int8"] = simd(256, 8, "avx_vnni", "int8")
        if "amx_bf16" in info.flags:
            peaks["bf16"] = amx(AMX_BF16_FLOP_PER_CYCLE, "BF16 FLOP")
        elif "bf16" in vector:
            peaks["bf16"] = vector.pop("bf16")
        if "amx_int8" in info.flags:
            peaks["int8"] = amx(AMX_INT8_OP_PER_CYCLE, "INT8 OP")
        elif "int8" in vector:
            peaks["int8"] = vector.pop("int8")

    threads_per_core = max(1, info.logical_cpus // max(1, cores))
    memory = _cache_levels(texts.cache_indexes, threads_per_core)
    cpu = _cpu_identity(info, memory)
    mem_total = parse_meminfo(texts.meminfo)
    memory.append(MemoryLevel(
        name="dram", label="DRAM", scope="system",
        capacity_bytes=Figure(float(mem_total), "derived: /proc/meminfo MemTotal")
        if mem_total else None,
        bandwidth_bytes_per_s=None))
    isa = f"{texts.machine or 'cpu'} {width}-bit ({width_flag.split(' ')[0]})"
    dram_prior = min(info.logical_cpus * DRAM_BYTES_PER_S_PER_CPU, DRAM_BYTES_PER_S_CAP)
    priors = Priors(launch_us=Figure(DISPATCH_US, "prior-host-dispatch"),
                    bandwidth_bytes_per_s={"dram": Figure(dram_prior, "prior-host-dram")}
                    if info.logical_cpus else {})
    return TargetSpec(
        identity=Identity(id="cpu", name=info.model_name, vendor=info.vendor, kind="cpu",
                          backend="cpu", aliases=("host",), architecture=isa, cpu=cpu),
        compute=Compute(
            units=Figure(float(cores), f"derived: {cores} physical cores ({info.cores_how}); "
                                       f"{info.logical_cpus} logical CPUs"),
            unit_name="core", clock_base_mhz=None, clock_boost_mhz=clock,
            peak_flops=peaks, vector_peak_flops=vector),
        memory=tuple(memory), host_link=None, peer_links=(), power=None,
        sources=dict(SOURCES), origin="derived at run time", notes=tuple(notes), priors=priors)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def read_host_texts(root: str | Path = "/") -> HostTexts:
    """Read this machine's /proc and /sys texts (missing files read as empty)."""
    root = Path(root)
    cpu0 = root / "sys/devices/system/cpu/cpu0"
    indexes = []
    for index_dir in sorted((cpu0 / "cache").glob("index*")):
        indexes.append({name: _read(index_dir / name).strip()
                        for name in ("level", "type", "size", "shared_cpu_list")})
    return HostTexts(
        cpuinfo=_read(root / "proc/cpuinfo"), meminfo=_read(root / "proc/meminfo"),
        cache_indexes=tuple(indexes),
        cpufreq_max_khz=_read(cpu0 / "cpufreq/cpuinfo_max_freq").strip(),
        platform_name=platform.processor(), cpu_count=os.cpu_count() or 1,
        machine=platform.machine(), clock_override_mhz=os.environ.get(CLOCK_ENV, ""))


def measure_clocks(texts: HostTexts, fma_units_override: str | None = None) -> HostTexts:
    """``texts`` with the clock probe's readings (scalar, and with the FMA pipes full), one
    thread per physical core; unchanged where the probe cannot be built or run."""
    from ..errors import CharzError
    from ..kernels.clock_probe import measure_core_clock_mhz

    info = parse_cpuinfo(texts.cpuinfo, texts.platform_name, texts.cpu_count)
    width, _ = simd_width_bits(info.flags, texts.machine)
    units, _ = fma_units_per_core(info, width, texts.machine, fma_units_override)
    threads = max(1, info.physical_cores)
    try:
        scalar = measure_core_clock_mhz(threads=threads)
        vector = measure_core_clock_mhz(threads=threads, fma_pipes=units)
    except (CharzError, OSError):
        return texts
    return dataclasses.replace(texts, measured_clock_mhz=scalar, measured_vector_clock_mhz=vector)


def read_host_identity() -> CpuIdentity:
    """This machine's CPU identity (reads /proc and /sys only: no clock probe, no build)."""
    return host_identity(read_host_texts())


@functools.lru_cache(maxsize=4)
def _cached_host_spec(fma_units_override: str | None, clock_override: str | None) -> TargetSpec:
    # clock_override is part of the cache key only: read_host_texts reads it from the environment.
    texts = read_host_texts()
    if not texts.cpufreq_max_khz and not texts.clock_override_mhz:
        texts = measure_clocks(texts, fma_units_override)
    return derive_host_spec(texts, fma_units_override)


def host_spec() -> TargetSpec:
    """This machine's CPU spec (``id`` ``cpu``), honouring ``CHARZ_CPU_FMA_UNITS`` and
    ``CHARZ_CPU_MHZ``."""
    return _cached_host_spec(os.environ.get(FMA_UNITS_ENV), os.environ.get(CLOCK_ENV))
