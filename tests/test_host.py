"""Host CPU spec derivation from recorded /proc and /sys texts."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_charz.errors import UsageError
from pytest_charz.targets import host
from pytest_charz.targets.host import (
    FMA_UNITS_ENV,
    HostTexts,
    derive_host_spec,
    parse_cpu_list,
    parse_cpuinfo,
    parse_meminfo,
    parse_size,
)
from pytest_charz.targets.show import format_spec

RECORDED = Path(__file__).parent / "data" / "host" / "xeon-amx-2core"


def recorded_texts(**changes: object) -> HostTexts:
    """The texts recorded on a 2-core KVM guest of an AMX-capable Xeon (no cpufreq)."""
    indexes = []
    for path in sorted(RECORDED.glob("cache-index*")):
        indexes.append(dict(line.split("=", 1) for line in path.read_text().splitlines()))
    texts = HostTexts(cpuinfo=(RECORDED / "cpuinfo").read_text(),
                      meminfo=(RECORDED / "meminfo").read_text(),
                      cache_indexes=tuple(indexes), machine="x86_64")
    return dataclasses.replace(texts, **changes)  # type: ignore[arg-type]


def cpuinfo_text(vendor: str, model_name: str, family: int, model: int, flags: str,
                 sockets: int = 1, cores: int = 2, threads: int = 1, mhz: float = 3000.0,
                 stepping: int | None = None) -> str:
    blocks = []
    stepping_line = f"stepping\t: {stepping}\n" if stepping is not None else ""
    processor = 0
    for socket in range(sockets):
        for core in range(cores):
            for _ in range(threads):
                blocks.append(
                    f"processor\t: {processor}\nvendor_id\t: {vendor}\ncpu family\t: {family}\n"
                    f"model\t\t: {model}\nmodel name\t: {model_name}\n{stepping_line}cpu MHz\t\t: {mhz}\n"
                    f"physical id\t: {socket}\ncore id\t\t: {core}\nflags\t\t: {flags}\n")
                processor += 1
    return "\n".join(blocks)


GHZ = 2.599998  # the recorded 'cpu MHz'


def test_the_recorded_xeon_gives_avx512_peaks_with_two_fma_units() -> None:
    spec = derive_host_spec(recorded_texts())
    assert spec.id == "cpu"
    assert spec.identity.name == "Intel(R) Xeon(R) Processor"
    assert spec.identity.vendor == "intel"
    assert spec.compute.units.value == 2
    assert spec.compute.clock_boost_mhz is not None
    assert spec.compute.clock_boost_mhz.value == pytest.approx(2599.998)
    # 2 cores x 8 fp64 lanes x 2 FMA units x 2 FLOP x 2.6 GHz
    assert spec.peak("fp64") == pytest.approx(2 * 8 * 2 * 2 * GHZ * 1e9)
    assert spec.peak("fp32") == pytest.approx(2 * 16 * 2 * 2 * GHZ * 1e9)
    assert spec.peak("fp16") == pytest.approx(2 * 32 * 2 * 2 * GHZ * 1e9)
    # AMX sets the matrix peaks; the AVX-512 BF16/VNNI ones are kept as vector peaks.
    assert spec.peak("bf16") == pytest.approx(2 * 1024 * GHZ * 1e9)
    assert spec.peak("int8") == pytest.approx(2 * 2048 * GHZ * 1e9)
    assert spec.compute.vector_peak_flops["bf16"].value == pytest.approx(2 * 32 * 2 * 2 * GHZ * 1e9)
    assert spec.compute.vector_peak_flops["int8"].value == pytest.approx(2 * 64 * 2 * 2 * GHZ * 1e9)
    assert spec.compute.peak_flops["fp64"].source == (
        "derived: 2 cores x 8 fp64 lanes (avx512f) x 2 FMA units x 2 FLOP x 2.600 GHz "
        "(/proc/cpuinfo 'cpu MHz')")
    assert "Intel AMX" in spec.compute.peak_flops["bf16"].source


def test_the_recorded_caches_and_memory() -> None:
    spec = derive_host_spec(recorded_texts())
    levels = {level.name: level for level in spec.memory}
    assert list(levels) == ["l1", "l2", "l3", "dram"]
    assert levels["l1"].label == "L1d"            # the instruction cache is skipped
    assert levels["l1"].capacity_bytes.value == 48 * 1024  # type: ignore[union-attr]
    assert levels["l2"].capacity_bytes.value == 2048 * 1024  # type: ignore[union-attr]
    assert levels["l3"].capacity_bytes.value == 491520 * 1024  # type: ignore[union-attr]
    assert [levels[name].scope for name in ("l1", "l2", "l3")] == ["unit", "unit", "socket"]
    assert levels["dram"].capacity_bytes.value == 24683656 * 1024  # type: ignore[union-attr]
    assert all(level.bandwidth_bytes_per_s is None for level in spec.memory)


def test_cpufreq_maximum_wins_over_cpu_mhz() -> None:
    spec = derive_host_spec(recorded_texts(cpufreq_max_khz="3500000\n"))
    assert spec.compute.clock_boost_mhz is not None
    assert spec.compute.clock_boost_mhz.value == pytest.approx(3500.0)
    assert spec.peak("fp64") == pytest.approx(2 * 8 * 2 * 2 * 3.5e9)
    assert "cpuinfo_max_freq" in spec.compute.peak_flops["fp64"].source


def test_a_measured_clock_above_the_nominal_one_is_used_and_said() -> None:
    spec = derive_host_spec(recorded_texts(measured_clock_mhz=3848.0))
    assert spec.peak("fp64") == pytest.approx(2 * 8 * 2 * 2 * 3.848e9)
    assert "measured: dependent-add chain" in spec.compute.peak_flops["fp64"].source
    assert "2600 MHz" in spec.compute.clock_boost_mhz.source  # type: ignore[union-attr]
    # a probe slower than the nominal clock (a busy machine) does not lower the peak
    slow = derive_host_spec(recorded_texts(measured_clock_mhz=2000.0))
    assert slow.peak("fp64") == pytest.approx(2 * 8 * 2 * 2 * GHZ * 1e9)
    # cpufreq's maximum, where readable, wins over the probe
    both = derive_host_spec(recorded_texts(measured_clock_mhz=3848.0, cpufreq_max_khz="3500000"))
    assert both.compute.clock_boost_mhz.value == pytest.approx(3500.0)  # type: ignore[union-attr]


def test_peaks_use_the_clock_measured_with_the_fma_pipes_full() -> None:
    spec = derive_host_spec(recorded_texts(measured_clock_mhz=3800.0, measured_vector_clock_mhz=3100.0))
    assert spec.compute.clock_boost_mhz.value == pytest.approx(3800.0)  # type: ignore[union-attr]
    assert spec.peak("fp64") == pytest.approx(2 * 8 * 2 * 2 * 3.1e9)
    assert "FMA pipe(s) kept full" in spec.compute.peak_flops["fp64"].source


def test_the_clock_override_wins_and_a_bad_one_is_a_usage_error() -> None:
    spec = derive_host_spec(recorded_texts(measured_clock_mhz=3848.0, clock_override_mhz="3000"))
    assert spec.peak("fp64") == pytest.approx(2 * 8 * 2 * 2 * 3.0e9)
    assert "CHARZ_CPU_MHZ=3000" in spec.compute.peak_flops["fp64"].source
    with pytest.raises(UsageError, match="CHARZ_CPU_MHZ"):
        derive_host_spec(recorded_texts(clock_override_mhz="fast"))


def test_the_clock_probe_measures_a_plausible_clock() -> None:
    from pytest_charz.kernels.clock_probe import measure_core_clock_mhz

    # one add per cycle: any real core is between 0.5 and 7 GHz, however busy the machine is
    assert 500.0 < measure_core_clock_mhz(adds=2_000_000, repeats=5) < 7000.0
    assert 500.0 < measure_core_clock_mhz(adds=2_000_000, repeats=5, threads=2, fma_pipes=2) < 7000.0


def test_the_fma_override_is_used_and_named() -> None:
    one = derive_host_spec(recorded_texts(), fma_units_override="1")
    assert one.peak("fp64") == pytest.approx(2 * 8 * 2 * 1 * GHZ * 1e9)
    assert f"{FMA_UNITS_ENV}=1" in " ".join(one.notes)


@pytest.mark.parametrize("bad", ["0", "-2", "two"])
def test_a_bad_fma_override_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError, match=f"{FMA_UNITS_ENV}.*{bad!r}"):
        derive_host_spec(recorded_texts(), fma_units_override=bad)


def test_host_spec_reads_the_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FMA_UNITS_ENV, "3")
    assert f"{FMA_UNITS_ENV}=3" in " ".join(host.host_spec().notes)
    monkeypatch.delenv(FMA_UNITS_ENV)
    assert FMA_UNITS_ENV not in " ".join(host.host_spec().notes)


@pytest.mark.parametrize(("vendor", "name", "family", "model", "flags", "lanes64", "units"), [
    ("AuthenticAMD", "AMD EPYC 7763 64-Core Processor", 25, 1, "sse2 avx avx2 fma", 4, 2),
    ("AuthenticAMD", "AMD EPYC 7601 32-Core Processor", 23, 1, "sse2 avx avx2 fma", 4, 1),
    ("AuthenticAMD", "AMD EPYC 9654 96-Core Processor", 25, 17, "avx2 fma avx512f", 8, 1),
    ("AuthenticAMD", "AMD EPYC 9755 128-Core Processor", 26, 2, "avx2 fma avx512f", 8, 2),
    ("GenuineIntel", "11th Gen Intel(R) Core(TM) i7-1165G7", 6, 140, "avx2 fma avx512f", 8, 1),
    ("GenuineIntel", "Intel(R) Xeon(R) CPU E5-2670 0", 6, 45, "sse2 avx", 4, 1),
    ("GenuineIntel", "Intel(R) Xeon(R) CPU E5-2680 v3", 6, 63, "sse2 avx avx2 fma", 4, 2),
    ("GenuineIntel", "Intel(R) Pentium(R) 4", 15, 2, "sse sse2", 2, 1),
])
def test_isa_width_and_fma_rules(vendor: str, name: str, family: int, model: int, flags: str,
                                 lanes64: int, units: int) -> None:
    text = cpuinfo_text(vendor, name, family, model, flags, mhz=2000.0)
    spec = derive_host_spec(HostTexts(cpuinfo=text, machine="x86_64"))
    assert spec.peak("fp64") == pytest.approx(2 * lanes64 * 2 * units * 2.0e9)
    assert spec.peak("fp32") == pytest.approx(2 * spec.peak("fp64"))  # type: ignore[operator]
    assert f"FMA units per core: {units} " in " ".join(spec.notes)


def test_smt_and_sockets_count_physical_cores_and_unit_scope() -> None:
    text = cpuinfo_text("AuthenticAMD", "AMD EPYC 7763 64-Core Processor", 25, 1,
                        "avx2 fma", sockets=2, cores=2, threads=2, mhz=2450.0)
    caches = ({"level": "1", "type": "Data", "size": "32K", "shared_cpu_list": "0,4"},
              {"level": "3", "type": "Unified", "size": "32768K", "shared_cpu_list": "0-3"})
    spec = derive_host_spec(HostTexts(cpuinfo=text, cache_indexes=caches))
    assert spec.compute.units.value == 4
    assert "8 logical CPUs" in spec.compute.units.source
    assert [level.scope for level in spec.memory[:2]] == ["unit", "socket"]
    assert spec.peak("fp64") == pytest.approx(4 * 4 * 2 * 2 * 2.45e9)


def test_arm_neon_without_core_ids_or_model_name() -> None:
    block = ("processor\t: {n}\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm aes crc32\n"
             "CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n")
    text = "\n".join(block.format(n=n) for n in range(4))
    spec = derive_host_spec(HostTexts(cpuinfo=text, cpufreq_max_khz="3000000",
                                      machine="aarch64"))
    assert spec.identity.vendor == "arm"
    assert "0xd0c" in spec.identity.name
    assert spec.compute.units.value == 4
    assert spec.peak("fp64") == pytest.approx(4 * 2 * 2 * 2 * 3.0e9)
    assert "128-bit" in spec.identity.architecture


def test_no_clock_means_no_peaks_and_a_note_saying_why() -> None:
    text = cpuinfo_text("GenuineIntel", "Intel(R) Xeon(R) Gold 6248", 6, 85, "avx2 fma avx512f")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("cpu MHz"))
    spec = derive_host_spec(HostTexts(cpuinfo=text))
    assert spec.compute.peak_flops == {}
    assert spec.compute.clock_boost_mhz is None
    assert any("peaks are not derived" in note for note in spec.notes)


def test_empty_texts_fall_back_to_platform_values() -> None:
    spec = derive_host_spec(HostTexts(platform_name="Apple M5 Max", cpu_count=6))
    assert spec.identity.name == "Apple M5 Max"
    assert spec.compute.units.value == 6
    dram = spec.level("dram")
    assert dram is not None and dram.capacity_bytes is None


def test_parsers() -> None:
    assert parse_size("48K") == 49152
    assert parse_size("2M") == 2 * 2**20
    assert parse_size("491520K") == 503316480
    with pytest.raises(ValueError):
        parse_size("lots")
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("") == []
    assert parse_meminfo("MemTotal:       24683656 kB\nMemFree: 1 kB\n") == 24683656 * 1024
    assert parse_meminfo("MemFree: 1 kB\n") is None
    info = parse_cpuinfo((RECORDED / "cpuinfo").read_text())
    assert (info.logical_cpus, info.physical_cores, info.family, info.model) == (2, 2, 6, 167)
    assert {"avx512f", "amx_bf16", "avx512_vnni"} <= info.flags


@given(cores=st.integers(1, 256), mhz=st.floats(400.0, 6000.0), units=st.integers(1, 4))
def test_fp64_peak_is_cores_lanes_fma_clock(cores: int, mhz: float, units: int) -> None:
    text = cpuinfo_text("GenuineIntel", "Intel(R) Xeon(R) Platinum 8480+", 6, 143,
                        "avx2 fma avx512f", cores=cores, mhz=mhz)
    spec = derive_host_spec(HostTexts(cpuinfo=text), fma_units_override=str(units))
    assert spec.peak("fp64") == pytest.approx(cores * 8 * 2 * units * mhz * 1e6)


def test_the_host_spec_formats_with_every_derivation() -> None:
    spec = derive_host_spec(recorded_texts())
    text = format_spec(spec)
    assert "Intel(R) Xeon(R) Processor (cpu)" in text
    assert "166.4 GFLOP/s  [derived: 2 cores x 8 fp64 lanes (avx512f)" in text
    assert "480 MiB  [derived: sysfs cache index (level 3, Unified)" in text


def test_the_cpu_device_sizes_its_cache_flush_with_the_same_parser(tmp_path: Path) -> None:
    """``devices.cpu.last_level_cache_bytes`` reads sysfs with :func:`parse_size`: the highest
    data or unified level wins, instruction caches and unreadable sizes are skipped."""
    from pytest_charz.devices.cpu import last_level_cache_bytes

    def index(n: int, level: str, kind: str, size: str) -> None:
        directory = tmp_path / f"index{n}"
        directory.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (directory / name).write_text(text + "\n")

    index(0, "1", "Data", "48K")
    index(1, "1", "Instruction", "32K")
    index(2, "2", "Unified", "2048K")
    assert last_level_cache_bytes(str(tmp_path)) == 2048 * 1024
    index(3, "3", "Unified", "lots")            # not a size: skipped, L2 stays the answer
    assert last_level_cache_bytes(str(tmp_path)) == 2048 * 1024
    index(4, "4", "Instruction", "1G")          # instruction caches never count
    index(5, "3", "Unified", "105M")
    assert last_level_cache_bytes(str(tmp_path)) == 105 * 2**20
    assert last_level_cache_bytes(str(tmp_path / "absent")) is None


def test_the_recorded_xeon_is_identified_by_cpuid_features_caches_and_cores() -> None:
    cpu = derive_host_spec(recorded_texts()).identity.cpu
    assert cpu is not None
    assert (cpu.vendor, cpu.family, cpu.model, cpu.stepping) == ("intel", 6, 167, 1)
    assert cpu.model_name == "Intel(R) Xeon(R) Processor"
    # the result-changing flags of the recorded text, none of its others (sse4_2, aes, ...)
    assert cpu.features == ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni",
                            "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")
    assert cpu.native_dtypes == ("bf16", "fp16", "int8")
    assert dict(cpu.cache_bytes) == {"l1": 48 * 1024, "l2": 2048 * 1024, "l3": 491520 * 1024}
    assert (cpu.cores, cpu.logical_cpus) == (2, 2)
    assert host.host_identity(recorded_texts()) == cpu


def test_an_avx2_cpu_has_no_native_reduced_precision() -> None:
    text = cpuinfo_text("AuthenticAMD", "AMD EPYC 7763 64-Core Processor", 25, 1, "sse2 avx avx2 fma f16c",
                        stepping=1, cores=4, threads=2)
    cpu = derive_host_spec(HostTexts(cpuinfo=text, machine="x86_64")).identity.cpu
    assert cpu is not None
    assert (cpu.family, cpu.model, cpu.stepping) == (25, 1, 1)
    assert cpu.features == ("avx", "avx2", "fma", "f16c") and cpu.native_dtypes == ()
    assert (cpu.cores, cpu.logical_cpus) == (4, 8) and dict(cpu.cache_bytes) == {}


def test_an_arm_cpu_is_identified_by_architecture_part_and_revision() -> None:
    block = ("processor\t: {n}\nFeatures\t: fp asimd asimdhp asimddp bf16 i8mm sve\nCPU implementer\t: 0x41\n"
             "CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\nCPU revision\t: 1\n")
    text = "\n".join(block.format(n=n) for n in range(2))
    cpu = host.host_identity(HostTexts(cpuinfo=text, machine="aarch64"))
    assert (cpu.vendor, cpu.family, cpu.model, cpu.stepping) == ("arm", 8, 0xD40, 1)
    assert cpu.features == ("asimd", "asimdhp", "asimddp", "i8mm", "bf16", "sve")
    assert cpu.native_dtypes == ("bf16", "fp16", "int8")
