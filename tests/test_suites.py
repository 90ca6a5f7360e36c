"""The suites' own logic, without timing anything: sweep sizes from a target's caches, the byte
and level accounting cases declare, the references kernels are checked against, and which cases
a quick run collects."""
from __future__ import annotations

import importlib
import math
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from charz_factories import load_suite_module

from pytest_charz.targets.catalogue import resolve
from pytest_charz.targets.host import HostTexts, derive_host_spec

SUITES = Path(__file__).resolve().parent.parent / "suites"
KIB, MIB, GIB = 1024, 1024**2, 1024**3


@pytest.fixture
def suite(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import a module of ``suites/`` by name (they import their helpers as ``_sizes``); the
    modules are dropped from ``sys.modules`` afterwards, so a later test that copies the suites
    elsewhere imports its own copies."""
    import sys

    monkeypatch.syspath_prepend(str(SUITES))

    def load(name: str) -> ModuleType:
        return importlib.import_module(name)

    yield load
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", "") or "").startswith(str(SUITES)):
            del sys.modules[name]


def host_spec(l3: str = "491520K", cores: int = 2) -> Any:
    """A host like a two-core VM with 48 KiB L1d, 2 MiB L2 per core and a shared L3."""
    cpuinfo = "\n\n".join(
        f"processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
        f"physical id\t: 0\ncore id\t: {n}\ncpu MHz\t: 2600.0\nflags\t: avx avx2 fma avx512f"
        for n in range(cores))
    everyone = f"0-{cores - 1}"
    caches = tuple(
        {"level": str(level), "type": kind, "size": size, "shared_cpu_list": shared}
        for level, kind, size, shared in ((1, "Data", "48K", "0"), (1, "Instruction", "64K", "0"),
                                          (2, "Unified", "2048K", "0"), (3, "Unified", l3, everyone)))
    return derive_host_spec(HostTexts(cpuinfo=cpuinfo, meminfo="MemTotal: 24000000 kB\n", cache_indexes=caches,
                                      machine="x86_64"))


# ---------------------------------------------------------------- sizes from the target


def test_host_sweep_spans_l1_to_past_four_llc(suite: Any) -> None:
    sizes = suite("_sizes")
    plan = sizes.make_plan(host_spec(), "cpu", 2, available_bytes=22 * GIB)
    assert [level.name for level in plan.caches] == ["l1", "l2", "l3"]
    assert [level.per_unit for level in plan.caches] == [True, True, False]
    assert plan.llc_bytes == 480 * MIB and plan.unit_cache_bytes == 2 * MIB
    sweep = sizes.sweep_sizes(plan)
    assert sweep[0] == 16 * KIB < 48 * KIB
    assert sweep[-1] > 4 * plan.llc_bytes and sweep[-2] <= 4 * plan.llc_bytes
    assert sweep[-1] <= plan.cap_bytes
    dense = [size for size in sweep if size <= 2 * plan.llc_bytes]
    ratios = [b / a for a, b in zip(dense, dense[1:])]
    assert all(1.3 < r < 1.55 for r in ratios)                  # two points per octave up to 2x the LLC
    octaves = math.log2(dense[-1] / dense[0])
    assert len(dense) == pytest.approx(2 * octaves + 1, abs=1)
    beyond = sweep[len(dense) - 1:]
    assert all(1.3 < b / a <= 2.0 for a, b in zip(beyond, beyond[1:]))     # then one per octave
    assert len(beyond) <= math.log2(sweep[-1] / dense[-1]) + 2
    assert all(size % (4 * KIB) == 0 for size in sweep)


def test_sweep_and_stream_arrays_are_capped_by_memory(suite: Any) -> None:
    sizes = suite("_sizes")
    plan = sizes.make_plan(host_spec(), "cpu", 2, available_bytes=3 * GIB)
    assert plan.cap_bytes == GIB // 2
    sweep = sizes.sweep_sizes(plan)
    assert max(sweep) <= GIB // 2 and max(sweep) > GIB // 4
    assert sizes.stream_array_bytes(plan) == GIB // 2     # wanted 1 GiB, capped


def test_stream_arrays_put_copy_past_four_llc(suite: Any) -> None:
    sizes = suite("_sizes")
    memory = suite("test_memory")
    for l3, cores in (("491520K", 2), ("32768K", 8), ("16384K", 4)):
        plan = sizes.make_plan(host_spec(l3, cores), "cpu", cores, available_bytes=64 * GIB)
        array = sizes.stream_array_bytes(plan)
        smallest_working_set = min(memory.STREAM_ARRAYS.values()) * array
        assert smallest_working_set > sizes.LLC_MULTIPLE * plan.llc_bytes
        assert array & (array - 1) == 0 and array <= 2 * sizes.LLC_MULTIPLE * plan.llc_bytes


def test_gpu_plan_follows_the_catalogue_l2(suite: Any) -> None:
    sizes = suite("_sizes")
    plan = sizes.make_plan(resolve("h200"), "cuda", 64, available_bytes=None)
    assert plan.threads == 1 and plan.llc_bytes == 50 * MIB
    assert plan.cap_bytes == 2 * GIB
    sweep = sizes.sweep_sizes(plan)
    assert sweep[-1] == 256 * MIB                            # first point past 4 x 50 MiB
    assert sizes.stream_array_bytes(plan) == 128 * MIB
    assert sizes.memory_level(plan, 128 * KIB) == "l1"
    assert sizes.memory_level(plan, 40 * MIB) == "l2"
    assert sizes.memory_level(plan, 384 * MIB) == "dram"


def test_no_cache_sizes_gives_a_bounded_sweep(suite: Any) -> None:
    sizes = suite("_sizes")
    spec = derive_host_spec(HostTexts(cpuinfo="processor\t: 0\nflags\t: avx2 fma\n", machine="x86_64"))
    plan = sizes.make_plan(spec, "cpu", 1, available_bytes=8 * GIB)
    assert plan.llc_bytes is None
    assert sizes.sweep_sizes(plan)[-1] == sizes.UNKNOWN_LLC_STOP_BYTES
    assert sizes.memory_level(plan, 16 * KIB) == "dram"


def test_memory_level_splits_per_core_caches_over_threads(suite: Any) -> None:
    sizes = suite("_sizes")
    plan = sizes.make_plan(host_spec(), "cpu", 2, available_bytes=22 * GIB)
    assert sizes.memory_level(plan, 64 * KIB, threads=2) == "l1"       # 32 KiB per core
    assert sizes.memory_level(plan, 64 * KIB, threads=1) == "l2"
    assert sizes.memory_level(plan, 4 * MIB, threads=2) == "l2"        # 2 MiB per core
    assert sizes.memory_level(plan, 4 * MIB, threads=1) == "l3"
    assert sizes.memory_level(plan, GIB, threads=2) == "dram"


def test_quick_points_are_octaves_up_to_the_quick_limit(suite: Any) -> None:
    sizes = suite("_sizes")
    plan = sizes.make_plan(host_spec(), "cpu", 2, available_bytes=22 * GIB)
    params = sizes.size_params(sizes.sweep_sizes(plan), 2, max_time_s=0.3, large_max_time_s=1.5)
    quick = [p.values[0] for p in params if not any(m.name == "charz_slow" for m in p.marks)]
    assert quick == [16 * KIB * 4**k for k in range(7)]               # 16 KiB, 64 KiB .. 64 MiB
    budgets = {p.values[0]: [m.kwargs["max_time"] for m in p.marks if m.name == "charz"] for p in params}
    assert all(budget == ([1.5] if size >= sizes.LARGE_BYTES else [0.3]) for size, budget in budgets.items())
    assert not any(m.name == "charz" for p in sizes.size_params([16 * KIB, GIB], 2) for m in p.marks)
    ids = [p.id for p in params]
    assert len(set(ids)) == len(ids) and ids[0] == "16KiB" and ids[-1] == "2GiB"


@pytest.mark.parametrize("size, text", [(16 * KIB, "16KiB"), (24 * KIB, "24KiB"), (MIB, "1MiB"),
                                        (1448 * KIB, "1.41MiB"), (2 * GIB, "2GiB"), (100, "100B")])
def test_size_ids(suite: Any, size: int, text: str) -> None:
    assert suite("_sizes").format_bytes_id(size) == text


def test_count_for_duration_scales_a_short_trial(suite: Any) -> None:
    sizes = suite("_sizes")
    tried: list[int] = []

    def cost_s(count: int) -> float:
        tried.append(count)
        return 2e-9 * count + 1e-6          # a fixed cost plus a per-step cost

    steps = sizes.count_for_duration(cost_s, start_count=10, target_s=1e-3)
    assert tried[:5] == [10, 100, 1000, 10_000, 100_000]     # grown tenfold while too short
    assert cost_s(steps) == pytest.approx(1e-3, rel=0.05)
    assert sizes.count_for_duration(lambda count: 0.0, 5, 1e-3, max_count=1000) == 1000


def test_count_for_duration_is_not_set_by_a_slow_first_call(suite: Any) -> None:
    sizes = suite("_sizes")
    calls = [0]

    def cold_then_warm_s(count: int) -> float:
        calls[0] += 1
        per_step_s = 4e-6 if calls[0] == 1 else 5e-7      # the first walk pays for cold caches
        return per_step_s * count

    steps = sizes.count_for_duration(cold_then_warm_s, start_count=10_000, target_s=1.5e-3)
    assert 5e-7 * steps == pytest.approx(1.5e-3, rel=0.05)


def test_geometric_sizes_rejects_a_bad_range(suite: Any) -> None:
    with pytest.raises(ValueError):
        suite("_sizes").geometric_sizes(64 * KIB, 16 * KIB, 2)


# ---------------------------------------------------------------- accounting and references


def test_stream_working_sets_match_the_kernels_byte_counts(suite: Any) -> None:
    from pytest_charz.kernels import cpu, gpu

    memory = suite("test_memory")
    n = 1000
    for kernel, arrays in memory.STREAM_ARRAYS.items():
        assert cpu.stream_bytes(kernel, n) == pytest.approx(arrays * 8 * n)
        assert gpu.stream_bytes(kernel, n) == arrays * 8 * n


def test_stream_expected_is_mccalpins_kernels(suite: Any) -> None:
    memory = suite("test_memory")
    a, b, c = np.array([1.0, 2.0]), np.array([3.0, 5.0]), np.array([7.0, 11.0])
    s = memory.STREAM_SCALAR
    expected = {"copy": ("c", a), "scale": ("b", s * c), "add": ("c", a + b), "triad": ("a", b + s * c)}
    for kernel, (array, values) in expected.items():
        written, got = memory.stream_expected(kernel, a, b, c)
        assert written == array
        np.testing.assert_array_equal(got, values)


def test_chase_checks_reject_a_broken_cycle(suite: Any) -> None:
    from pytest_charz.kernels import cpu

    memory = suite("test_memory")
    buffer = cpu.chase_build(64, 64, seed=5)
    memory.check_chase_buffer(buffer, 64)
    words = 8
    assert cpu.chase(buffer, 100) == memory.chase_reference(buffer, 100)
    broken = buffer.copy()
    broken[0] = broken[words]          # two lines now link to the same line
    with pytest.raises(AssertionError):
        memory.check_chase_buffer(broken, 64)


def test_gpu_chase_table_is_one_cycle_with_known_positions(suite: Any) -> None:
    memory = suite("test_memory")
    slots, stride = 50, 32
    table, order = memory.gpu_chase_table(slots, stride, np.random.default_rng(3))
    assert table.dtype == np.uint32 and len(table) == slots * stride
    index, seen = int(order[0]), set()
    for step in range(1, 2 * slots + 1):
        index = int(table[index])
        seen.add(index)
        assert index == int(order[step % slots])
    assert len(seen) == slots


def test_gemm_row_check_accepts_a_product_and_rejects_an_error(suite: Any) -> None:
    compute = suite("test_compute")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    c = a @ b
    rows = np.arange(8)
    compute.check_gemm_rows(a, b, c, rows, compute.GEMM_TOLERANCE["fp32"])
    c[3, 5] *= 1.001
    with pytest.raises(AssertionError, match="GEMM row check failed"):
        compute.check_gemm_rows(a, b, c, rows, compute.GEMM_TOLERANCE["fp32"])


@pytest.mark.parametrize("dtype", ["fp64", "fp32", "bf16", "fp16", "fp8"])
def test_gpu_gemm_operands_and_check_run_on_torch_cpu(suite: Any, dtype: str) -> None:
    # The GPU GEMM case's operands, product (torch._scaled_mm for fp8) and row check, on the CPU
    # build of PyTorch: the same calls a CUDA device gets, minus the device.
    torch = pytest.importorskip("torch")
    compute = suite("test_compute")
    rng = np.random.default_rng(7)
    n = 96
    a, b, output, product = compute._gpu_gemm_operands(torch, "cpu", dtype, n, rng)
    product()
    rows = rng.choice(n, size=compute.GEMM_CHECK_ROWS, replace=False)
    assert compute.gpu_gemm_excess(torch, a, b, output(), rows, dtype) <= 0.0
    wrong = output().clone()
    wrong[rows[0], 3] += 0.05 * float(wrong.float().abs().max()) + 1.0
    assert compute.gpu_gemm_excess(torch, a, b, wrong, rows, dtype) > 0.0


@pytest.mark.parametrize("dtype", ["fp64", "fp32"])
def test_gpu_fma_reference_matches_a_step_by_step_iteration(suite: Any, dtype: str) -> None:
    from pytest_charz.kernels.gpu import fma_chains

    compute = suite("test_compute")
    mul, add, iters, threads = 0.995, 0.004, 300, 70
    float_type = np.float64 if dtype == "fp64" else np.float32
    tid = np.arange(threads)[:, None] + np.arange(fma_chains())[None, :]
    acc = (tid & 1023).astype(float_type) * float_type(1e-3)
    for _ in range(iters):
        acc = acc * float_type(mul) + float_type(add)
    expected = acc.astype(np.float64).sum(axis=1)
    got = compute.gpu_fma_reference(dtype, threads, iters, mul, add)
    np.testing.assert_allclose(got, expected, rtol=1e-12 if dtype == "fp64" else 1e-4)


def test_gpu_fma_reference_in_half_precision_converges_and_differs_per_thread(suite: Any) -> None:
    from pytest_charz.kernels.gpu import fma_chains

    compute = suite("test_compute")
    mul, add = 0.99, 0.005
    early = compute.gpu_fma_reference("fp16", 4, 1, mul, add)
    seeds = (np.arange(4)[:, None] + np.arange(fma_chains())[None, :]) * 1e-3
    np.testing.assert_allclose(early, (seeds * mul + add).sum(axis=1), rtol=5e-3)
    late = compute.gpu_fma_reference("fp16", 4, 2000, mul, add)
    fixed = fma_chains() * add / (1 - mul)
    np.testing.assert_allclose(late, fixed, rtol=2e-2)           # the chains reach b / (1 - a)


def test_random_bytes_have_an_odd_period(suite: Any) -> None:
    movement = suite("test_movement")
    data = movement.random_bytes(np.random.default_rng(0), 3 * movement.PATTERN_BYTES + 5)
    assert len(data) == 3 * movement.PATTERN_BYTES + 5 and data.dtype == np.uint8
    period = movement.PATTERN_BYTES
    assert np.array_equal(data[:period], data[period : 2 * period])
    assert not np.array_equal(data[: 1 << 20], data[1 << 20 : 2 << 20])


def test_copy_sizes_and_quick_copies(suite: Any) -> None:
    movement = suite("test_movement")
    sizes = movement.copy_sizes(cap_bytes=2 * GIB)
    assert sizes[0] == 4 * KIB and sizes[-1] == GIB and all(b == 4 * a for a, b in zip(sizes, sizes[1:]))
    assert [s for s in sizes if movement.in_quick_copies(s)] == [4 * KIB, 64 * KIB, MIB, 16 * MIB]
    assert movement.copy_sizes(cap_bytes=100 * MIB)[-1] == 64 * MIB


def test_contention_splits_cores_and_sizes_the_aggressor(suite: Any) -> None:
    sizes = suite("_sizes")
    contention = suite("test_contention")
    assert contention.split_threads(2) == (1, 1)
    assert contention.split_threads(3) == (1, 2)
    assert contention.split_threads(16) == (8, 8)
    plan = sizes.make_plan(host_spec(), "cpu", 2, available_bytes=22 * GIB)
    assert contention.aggressor_bytes(plan, quick=False) == 960 * MIB        # twice the LLC
    assert contention.aggressor_bytes(plan, quick=True) == contention.QUICK_AGGRESSOR_BYTES


# ---------------------------------------------------------------- collection


def _collected(pytester: pytest.Pytester, *args: str) -> list[str]:
    result = pytester.runpytest_subprocess(str(SUITES), "--collect-only", "-q", "-p", "no:cacheprovider", *args)
    assert result.ret == 0, result.stdout.str()
    return [line for line in result.outlines if "::" in line]


def _size_of(node_id: str) -> int | None:
    match = re.search(r"(\d+(?:\.\d+)?)(KiB|MiB|GiB)\]", node_id)
    if not match:
        return None
    return int(float(match.group(1)) * {"KiB": KIB, "MiB": MIB, "GiB": GIB}[match.group(2)])


def test_quick_collection_keeps_small_sweeps_and_every_suite(pytester: pytest.Pytester) -> None:
    full = _collected(pytester)
    quick = _collected(pytester, "--charz-quick")
    assert set(quick) < set(full)
    modules = {node.split("::")[0].rsplit("/", 1)[-1] for node in quick}
    assert modules == {"test_compute.py", "test_memory.py", "test_movement.py", "test_runtime.py",
                       "test_contention.py", "test_workloads.py", "test_collectives.py", "test_opclasses.py",
                       "test_heldout.py"}
    sweeps = [node for node in quick if "test_read_cpu[" in node or "test_chase_cpu[" in node]
    assert sweeps and all((_size_of(node) or 0) <= 64 * MIB for node in sweeps)
    full_chase = [_size_of(node) or 0 for node in full if "test_chase_cpu[" in node]
    from pytest_charz.targets.host import host_spec as this_host

    llcs = [level.capacity_bytes.value for level in this_host().memory
            if level.name != "dram" and level.capacity_bytes is not None]
    if llcs:
        assert max(full_chase) > min(4 * max(llcs), 2 * GIB) * 0.99 or max(full_chase) >= GIB
    # Cases for other backends collect as one skipped item each, not one per size.
    assert sum("test_chase_gpu" in node for node in full) == 1


def test_parameter_budgets_reach_the_sampler(pytester: pytest.Pytester) -> None:
    """A budget a parameter carries is the one the case samples under (the test's own marker
    must not override it), and quick runs still use the marker's quick budget."""
    from pytest_charz.measure.sampler import SamplerSettings
    from pytest_charz.markers import marker_settings

    items, _ = pytester.inline_genitems(str(SUITES / "test_memory.py"), "-p", "no:cacheprovider")
    reads = {item.callspec.id: item for item in items if item.originalname == "test_read_cpu"}
    small = reads["threads2-16KiB"] if "threads2-16KiB" in reads else next(iter(reads.values()))
    large = [item for item in reads.values() if item.callspec.params["read_case"][1] >= 128 * MIB]
    memory = small.module
    base = SamplerSettings()
    assert marker_settings(small, base, quick=False).max_time_s == pytest.approx(memory.READ_MAX_TIME_S)
    assert marker_settings(small, base, quick=True).max_time_s == pytest.approx(0.08)
    for item in large:
        assert marker_settings(item, base, quick=False).max_time_s == pytest.approx(memory.READ_LARGE_MAX_TIME_S)


DUMP_SETTINGS = """
import json
from pytest_charz.markers import marker_settings, marker_verdict_settings
from pytest_charz.measure.sampler import SamplerSettings
from pytest_charz.options import DEFAULT_THRESHOLD


def pytest_collection_finish(session):
    rows = []
    for item in session.items:
        if "charz" not in getattr(item, "fixturenames", ()):
            continue
        for quick in (False, True):
            rows.append([item.nodeid, getattr(item, "originalname", item.name), quick,
                         marker_settings(item, SamplerSettings(), quick=quick).noise_target,
                         marker_verdict_settings(item).get("threshold", DEFAULT_THRESHOLD)])
    with open("settings.json", "w") as out:
        json.dump(rows, out)
"""


def test_every_case_can_be_decided_when_it_meets_its_noise_target(pytester: pytest.Pytester) -> None:
    """A case decides drift only when its CI is within half its threshold: every collected case's
    noise target is at most that, so a measurement that meets its target is never too noisy."""
    import json

    pytester.makepyfile(dump_settings=DUMP_SETTINGS)
    result = pytester.runpytest_subprocess(str(SUITES), "--collect-only", "-q", "-p", "no:cacheprovider",
                                           "-p", "dump_settings")
    assert result.ret == 0, result.stdout.str()
    rows = json.loads((pytester.path / "settings.json").read_text())
    assert len(rows) > 200
    loose = {(nodeid, quick): (noise, threshold) for nodeid, _, quick, noise, threshold in rows
             if noise > threshold / 2 + 1e-12}
    assert loose == {}
    collectives = [row for row in rows if row[1] == "test_collective"]
    assert collectives and all(threshold == 0.10 and noise == 0.05 for _, _, _, noise, threshold in collectives)


def test_collective_sweep_on_a_cpu_keeps_seven_sizes_with_budgets() -> None:
    collectives = load_suite_module("test_collectives")
    assert collectives.cpu_message_sizes(2 * GIB) == [16, KIB, 64 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB]
    assert collectives.cpu_message_sizes(8 * MIB) == [16, KIB, 64 * KIB, MIB, 4 * MIB]
    budgets = {size: collectives.cpu_case_marks(size)[0].kwargs["max_time"] for size in collectives.CPU_SIZES}
    assert budgets[16] == 0.5 and budgets[16 * MIB] == 1.0 and budgets[64 * MIB] == 1.5
    assert collectives.message_sizes(2 * GIB)[-1] == 256 * MIB        # GPUs keep the x4 sweep to 256 MiB


def test_copy_sweep_ends_past_twice_the_llc(suite: Any) -> None:
    movement = suite("test_movement")
    assert movement.copy_sizes(2 * GIB, llc_bytes=32 * MIB)[-1] == 64 * MIB
    assert movement.copy_sizes(2 * GIB, llc_bytes=300 * MIB)[-1] == GIB
    assert movement.copy_sizes(2 * GIB)[-1] == GIB
