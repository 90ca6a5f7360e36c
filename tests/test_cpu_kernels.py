"""The CPU kernels against numpy references, and the compile-at-first-use cache.

Sizes are small so the file runs in seconds; nothing here asserts on measured time.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_charz.errors import CharzError, UsageError
from pytest_charz.kernels import build, cpu, cpu_library, traffic

THREAD_COUNTS = sorted({1, 2, cpu.available_threads()})


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


@pytest.fixture(params=THREAD_COUNTS, ids=lambda t: f"threads{t}")
def threads(request: pytest.FixtureRequest) -> int:
    count: int = request.param
    if count > 1 and not cpu.kernel_build().openmp:
        pytest.skip("the kernels were built without OpenMP (one thread only)")
    return count


# ---------------------------------------------------------------- FMA


@pytest.mark.parametrize("dtype", ["fp64", "fp32"])
def test_fma_chains_match_the_closed_form(dtype: str, threads: int) -> None:
    init, a, b = cpu.fma_inputs(dtype)
    assert np.all(init != 0)
    iters = 3000
    checksum = cpu.fma_chains(init, a, b, iters, threads=threads)
    tolerance = 1e-10 if dtype == "fp64" else 1e-3
    assert checksum == pytest.approx(cpu.fma_reference(init, a, b, iters, threads), rel=tolerance)


def test_fma_chains_match_a_numpy_iteration(rng: np.random.Generator) -> None:
    init = rng.uniform(0.5, 1.5, cpu.fma_accumulators("fp64"))
    a, b = float(rng.uniform(0.9, 0.99)), float(rng.uniform(0.01, 0.1))
    values = init.copy()
    for _ in range(57):
        values = values * a + b
    assert cpu.fma_chains(init, a, b, 57, threads=1) == pytest.approx(values.sum(), rel=1e-12)


def test_fma_checksum_depends_on_every_thread_and_iteration(threads: int) -> None:
    init, a, b = cpu.fma_inputs("fp64", seed=3)
    one = cpu.fma_chains(init, a, b, 100, threads=1)
    assert cpu.fma_chains(init, a, b, 100, threads=threads) == pytest.approx(threads * one, rel=1e-12)
    assert cpu.fma_chains(init, a, b, 101, threads=1) != pytest.approx(one, rel=1e-9)


def test_fma_flops_and_accumulators_follow_the_vector_width() -> None:
    build_facts = cpu.kernel_build()
    assert cpu.fma_accumulators("fp64") == build_facts.fma_chains * build_facts.vector_bytes // 8
    assert cpu.fma_accumulators("fp32") == 2 * cpu.fma_accumulators("fp64")
    assert cpu.fma_flops("fp64", 10, 3) == pytest.approx(2 * 10 * 3 * cpu.fma_accumulators("fp64"))


def test_fma_rejects_a_wrong_init_length() -> None:
    with pytest.raises(UsageError, match="fma_accumulators"):
        cpu.fma_chains(np.ones(3), 0.99, 0.01, 10)


# ---------------------------------------------------------------- STREAM


def test_stream_kernels_match_numpy(threads: int, rng: np.random.Generator) -> None:
    n = 10_007
    a, b, c = (cpu.aligned_empty(n) for _ in range(3))
    cpu.stream_init(a, b, c, seed=int(rng.integers(1 << 30)), threads=threads)
    for array in (a, b, c):
        assert np.all((array >= 1.0) & (array < 2.0))
    a[:], b[:], c[:] = rng.uniform(0.5, 2.0, (3, n))
    scalar = float(rng.uniform(1.5, 3.5))

    cpu.stream_copy(c, a, threads=threads)
    np.testing.assert_array_equal(c, a)
    c[:] = rng.uniform(0.5, 2.0, n)
    cpu.stream_scale(b, c, scalar, reps=2, threads=threads)
    np.testing.assert_allclose(b, scalar * c, rtol=1e-15)
    cpu.stream_add(c, a, b, threads=threads)
    np.testing.assert_allclose(c, a + b, rtol=1e-15)
    cpu.stream_triad(a, b, c, scalar, reps=3, threads=threads)
    np.testing.assert_allclose(a, b + scalar * c, rtol=1e-15)


def test_stream_arrays_are_page_aligned_distinct_and_non_zero() -> None:
    a, b, c = cpu.stream_arrays(4099, seed=5)
    for array in (a, b, c):
        assert array.ctypes.data % 4096 == 0
        assert np.all(array >= 1.0)
    assert not np.array_equal(a, b) and not np.array_equal(b, c)
    again = cpu.stream_arrays(4099, seed=5, threads=1)
    np.testing.assert_array_equal(again[0], a)


def test_stream_byte_weights_with_and_without_write_allocate() -> None:
    n = 1000
    assert cpu.stream_bytes("copy", n) == 16 * n
    assert cpu.stream_bytes("copy", n, write_allocate=True) == 24 * n
    assert cpu.stream_bytes("scale", n) == 16 * n
    assert cpu.stream_bytes("add", n) == 24 * n
    assert cpu.stream_bytes("triad", n) == 24 * n
    assert cpu.stream_bytes("triad", n, write_allocate=True) == 32 * n
    assert [cpu.stream_flops(op, n) for op in cpu.STREAM_OPS] == [0, n, n, 2 * n]


def test_stream_rejects_mismatched_or_wrong_arrays() -> None:
    with pytest.raises(UsageError, match="same length"):
        cpu.stream_copy(np.ones(5), np.ones(6))
    with pytest.raises(UsageError, match="float64"):
        cpu.stream_copy(np.ones(5, dtype=np.float32), np.ones(5, dtype=np.float32))
    with pytest.raises(UsageError, match="threads"):
        cpu.stream_copy(np.ones(5), np.ones(5), threads=0)


# ---------------------------------------------------------------- read bandwidth


@pytest.mark.parametrize("n", [1, 63, 4096 + 13, 50_001])
def test_read_sum_matches_numpy(n: int, threads: int, rng: np.random.Generator) -> None:
    buffer = rng.uniform(0.5, 1.5, n)
    assert cpu.read_sum(buffer, reps=3, threads=threads) == pytest.approx(3 * buffer.sum(), rel=1e-12)


def test_read_buffer_is_filled_and_summed() -> None:
    buffer = cpu.read_buffer(64 * 1024 + 24, seed=11)
    assert len(buffer) == (64 * 1024 + 24) // 8
    assert np.all((buffer >= 1.0) & (buffer < 2.0))
    assert cpu.read_sum(buffer, reps=2) == pytest.approx(2 * buffer.sum(), rel=1e-12)
    assert cpu.read_bytes(buffer, reps=2) == 2 * buffer.nbytes


# ---------------------------------------------------------------- pointer chase


def _python_walk(buffer: np.ndarray, words: int) -> list[int]:
    lines, index = [], 0
    for _ in range(len(buffer) // words):
        lines.append(index // words)
        index = int(buffer[index])
    assert index == 0, "the chain must come back to line 0 after one lap"
    return lines


@pytest.mark.parametrize("line_bytes", [64, 128])
@pytest.mark.parametrize("n_lines", [2, 3, 1000, 4099])
def test_chase_permutation_is_one_cycle_over_every_line(n_lines: int, line_bytes: int, rng: np.random.Generator) -> None:
    buffer = cpu.chase_build(n_lines, line_bytes, seed=int(rng.integers(1 << 62)))
    words = line_bytes // 8
    assert sorted(_python_walk(buffer, words)) == list(range(n_lines))
    assert cpu.chase_cycle_length(buffer, line_bytes) == n_lines


def test_chase_follows_the_links() -> None:
    buffer = cpu.chase_build(777, seed=9)
    index = 0
    for _ in range(1234):
        index = int(buffer[index])
    assert cpu.chase(buffer, 1234) == index
    assert cpu.chase(buffer, 777) == 0
    assert cpu.chase(buffer, 0, start=8 * 5) == 8 * 5


def test_chase_order_depends_on_the_seed() -> None:
    first, again, other = (cpu.chase_build(500, seed=s) for s in (1, 1, 2))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert sorted(_python_walk(first, 8)) != _python_walk(first, 8)  # not the sequential order


def test_chase_cycle_check_catches_broken_chains() -> None:
    buffer = cpu.chase_build(64, seed=4)
    assert cpu.chase_cycle_length(buffer, 64) == 64
    # Cut line x out of the lap and make it a cycle of its own: the lap through 0 is 63 lines.
    x = int(buffer[0])
    buffer[0], buffer[x] = buffer[x], x
    assert cpu.chase_cycle_length(buffer, 64) == 63
    buffer[0] = 10**9  # a link out of the buffer
    assert cpu.chase_cycle_length(buffer, 64) == -1
    buffer[0] = 3  # a link into the middle of a line
    assert cpu.chase_cycle_length(buffer, 64) == -1


@pytest.mark.parametrize("window_bytes", [128, 1024, 64 * 1024])
@pytest.mark.parametrize("n_lines", [2, 3, 1000, 4099])
def test_page_local_chase_is_one_cycle_over_every_line(n_lines: int, window_bytes: int,
                                                       rng: np.random.Generator) -> None:
    buffer = cpu.chase_build(n_lines, 64, seed=int(rng.integers(1 << 62)), pattern="page-local",
                             window_bytes=window_bytes)
    assert sorted(_python_walk(buffer, 8)) == list(range(n_lines))
    assert cpu.chase_cycle_length(buffer, 64) == n_lines


def test_page_local_chase_walks_one_window_at_a_time_even_lines_first() -> None:
    window_lines = 16                                   # 1 KiB windows of 64-byte lines
    n_lines = 40 * window_lines + 6                     # a last, partial window
    buffer = cpu.chase_build(n_lines, 64, seed=11, pattern="page-local", window_bytes=window_lines * 64)
    walk = _python_walk(buffer, 8)
    # The lap through line 0 starts at an even line: rotate it to the start of the odd half-lap
    # so that both halves are contiguous runs of the list.
    first_odd = next(i for i, line in enumerate(walk) if line % 2)
    halves = walk[first_odd:] + walk[:first_odd]
    odd, even = halves[: n_lines // 2], halves[n_lines // 2 :]
    assert all(line % 2 for line in odd) and not any(line % 2 for line in even)
    for half in (even, odd):
        windows = [line // window_lines for line in half]
        # Each window is visited in one stretch: the window sequence changes only between windows.
        runs = [w for i, w in enumerate(windows) if i == 0 or w != windows[i - 1]]
        assert len(runs) == len(set(runs)) == 41
        assert runs != sorted(runs)                     # windows in a random order
        inside = [line for line in half if line // window_lines == runs[1]]
        assert inside != sorted(inside)                 # lines in a random order inside a window


def test_chase_rejects_an_unknown_pattern() -> None:
    with pytest.raises(UsageError, match="page-local"):
        cpu.chase_build(100, pattern="strided")


def test_chase_with_hugepage_hint_is_still_one_cycle() -> None:
    try:
        buffer = cpu.chase_build(40_000, seed=3, hugepages=True)
    except CharzError:
        pytest.skip("this kernel refuses madvise(MADV_HUGEPAGE)")
    assert buffer.ctypes.data % (2 << 20) == 0
    assert cpu.chase_cycle_length(buffer) == 40_000


# ---------------------------------------------------------------- memcpy and background traffic


@pytest.mark.parametrize("nbytes", [1, 63, 4096 * 3 + 7, 300_001])
def test_memcpy_copies_every_byte(nbytes: int, threads: int, rng: np.random.Generator) -> None:
    src = rng.integers(1, 256, nbytes, dtype=np.uint8)
    dst = np.zeros(nbytes, dtype=np.uint8)
    cpu.memcpy(dst, src, threads=threads)
    np.testing.assert_array_equal(dst, src)
    assert cpu.memcpy_bytes(nbytes) == 2 * nbytes


def test_memcpy_rejects_size_mismatch() -> None:
    with pytest.raises(UsageError, match="same size"):
        cpu.memcpy(np.zeros(4), np.zeros(5))


def test_spin_read_stopped_at_once_reads_one_chunk_per_thread(threads: int, rng: np.random.Generator) -> None:
    chunk_words = traffic.spin_chunk_bytes() // 8
    share = 4 * chunk_words
    buffer = rng.uniform(0.5, 1.5, share * threads)
    stop_flag = np.ones(1, dtype=np.int32)
    result = traffic.spin(buffer, duration_s=3600.0, mode="read", threads=threads, stop_flag=stop_flag)
    assert result.bytes_moved == threads * traffic.spin_chunk_bytes()
    first_chunks = sum(buffer[t * share : t * share + chunk_words].sum() for t in range(threads))
    assert result.checksum == pytest.approx(first_chunks, rel=1e-12)


def test_spin_copy_with_no_time_left_copies_one_chunk(rng: np.random.Generator) -> None:
    chunk_words = traffic.spin_chunk_bytes() // 8
    buffer = rng.uniform(0.5, 1.5, 4 * chunk_words)
    source = buffer[:chunk_words].copy()
    result = traffic.spin(buffer, duration_s=0.0, mode="copy", threads=1)
    np.testing.assert_array_equal(buffer[2 * chunk_words : 3 * chunk_words], source)
    assert result.bytes_moved == 2 * traffic.spin_chunk_bytes()
    assert result.mode == "copy" and result.threads == 1


def test_background_traffic_runs_until_stopped() -> None:
    load = traffic.BackgroundTraffic(1 << 20, mode="read")
    with pytest.raises(UsageError):
        load.stop()
    with load:
        cpu.read_sum(cpu.read_buffer(1 << 20), reps=4, threads=1)
    result = load.result
    assert result.bytes_moved >= traffic.spin_chunk_bytes()
    assert result.bytes_moved % traffic.spin_chunk_bytes() == 0
    assert result.elapsed_s > 0 and result.bytes_per_s > 0
    with pytest.raises(UsageError, match="already started"):
        load.start()


# ---------------------------------------------------------------- fork/join


def test_fork_join_opens_every_region(threads: int) -> None:
    assert cpu.fork_join(25, threads=threads) == 25
    assert cpu.fork_join(0, threads=threads) == 0


# ---------------------------------------------------------------- alignment


@pytest.mark.parametrize("alignment", [64, 4096, 2 << 20])
def test_aligned_empty_is_aligned(alignment: int) -> None:
    array = cpu.aligned_empty(1001, np.float32, alignment)
    assert array.ctypes.data % alignment == 0
    assert array.shape == (1001,) and array.dtype == np.float32
    with pytest.raises(UsageError, match="power of two"):
        cpu.aligned_empty(10, alignment=48)


# ---------------------------------------------------------------- build cache


SMALL_SOURCE = """
#include <stdint.h>
int64_t charz_test_answer(int64_t x) { return 3 * x + %d; }
"""


def _small_library(tmp_path: Path, offset: int) -> Path:
    source = tmp_path / "answer.c"
    source.write_text(SMALL_SOURCE % offset)
    return source


def _answer(artifact: build.BuiltArtifact, x: int) -> int:
    function = ctypes.CDLL(str(artifact.path)).charz_test_answer
    function.restype, function.argtypes = ctypes.c_int64, [ctypes.c_int64]
    return int(function(x))


def test_build_cache_reuses_the_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = _small_library(tmp_path, 7)
    first = build.build(source)
    assert first.compiled_now and first.openmp == ("-fopenmp" in first.flags)
    assert first.path.parent == tmp_path / "cache" / "pytest-charz" / "kernels"
    modified = first.path.stat().st_mtime_ns
    second = build.build(source)
    assert not second.compiled_now
    assert second.path == first.path and second.path.stat().st_mtime_ns == modified
    assert _answer(second, 5) == 22
    assert [p.name for p in first.path.parent.iterdir()] == [first.path.name]  # no temporaries left


def test_changed_source_builds_a_new_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = build.build(_small_library(tmp_path, 1))
    second = build.build(_small_library(tmp_path, 2))
    assert second.compiled_now and second.path != first.path
    assert _answer(second, 1) == 5


def test_missing_compiler_says_to_install_gcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    with pytest.raises(CharzError, match="gcc"):
        build.build(_small_library(tmp_path, 0))
    with pytest.raises(CharzError, match="gcc"):
        build.load(cpu.SOURCE)


@pytest.mark.skipif(sys.platform == "win32", reason="a shell-script compiler wrapper")
def test_compiler_without_openmp_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = build.find_compiler().command
    wrapper = tmp_path / "cc-without-openmp"
    wrapper.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do [ "$arg" = "-fopenmp" ] && { echo "no OpenMP here" >&2; exit 1; }; done\n'
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(wrapper))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    artifact = build.build(_small_library(tmp_path, 4))
    assert not artifact.openmp and "-fopenmp" not in artifact.flags
    assert _answer(artifact, 2) == 10
    again = build.build(_small_library(tmp_path, 4))
    assert again.path == artifact.path and not again.compiled_now


def test_kernel_library_describes_its_build() -> None:
    facts = cpu.kernel_build()
    assert facts.artifact.path.exists() and os.access(facts.artifact.path, os.R_OK)
    assert facts.vector_bytes in (16, 32, 64)
    assert facts.fma_chains >= 12
    assert ("-fopenmp" in facts.artifact.flags) == facts.openmp


def test_threads_beyond_one_need_openmp(monkeypatch: pytest.MonkeyPatch) -> None:
    without_openmp = dataclasses.replace(cpu.kernel_build(), openmp_version=0)
    monkeypatch.setattr(cpu_library, "kernel_build", lambda: without_openmp)
    with pytest.raises(CharzError, match="OpenMP"):
        cpu.fork_join(1, threads=2)
    assert cpu.fork_join(3) == 3  # the default falls back to one thread
