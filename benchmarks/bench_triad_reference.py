"""Compare the Python STREAM triad kernel with a standalone compiled OpenMP triad, side by side.

    python benchmarks/bench_triad_reference.py [--n N] [--threads T] [--rounds R] [--reps K]

Each round runs ``omp_triad`` (``benchmarks/omp_triad.c``, compiled with the same compiler and
flags as the kernels) for K timed triads, then K timed calls of
:func:`pytest_charz.kernels.cpu.stream_triad` on arrays of the same size with the same thread
count; the rounds interleave so drifting machine conditions hit both alike. Both count 24 bytes
per element (STREAM's convention, write-allocate not counted). Prints the per-round medians,
the median over rounds and the ratio kernel / reference.

By default each array is four times the last-level cache (STREAM's rule), capped so the two
processes' six arrays fit in half of the available memory.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from pytest_charz.errors import CharzError  # noqa: E402
from pytest_charz.kernels import build, cpu  # noqa: E402
from pytest_charz.measure import clock  # noqa: E402

REFERENCE_SOURCE = Path(__file__).with_name("omp_triad.c")


def last_level_cache_bytes() -> int:
    """Largest cache size sysfs lists for cpu0 (0 when unknown)."""
    largest = 0
    for size_file in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = size_file.read_text().strip()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            largest = max(largest, int(digits) * scale)
    return largest


def available_memory_bytes() -> int:
    with open("/proc/meminfo", encoding="ascii") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 8 << 30


def default_n() -> int:
    per_array = 4 * (last_level_cache_bytes() or (64 << 20))
    cap = available_memory_bytes() // 2 // 6
    return max(1 << 20, min(per_array, cap) // 8)


def reference_round(program: Path, n: int, reps: int, threads: int) -> tuple[float, float]:
    done = subprocess.run(
        [str(program), str(n), str(reps), str(threads)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise CharzError(f"{program.name} failed (exit {done.returncode}): {done.stderr.strip()}")
    fields = dict(item.split("=", 1) for item in done.stdout.split())
    return float(fields["best_bytes_per_s"]), float(fields["median_bytes_per_s"])


def kernel_round(arrays: tuple[np.ndarray, np.ndarray, np.ndarray], n: int, reps: int, threads: int) -> tuple[float, float]:
    a, b, c = arrays
    cpu.stream_triad(a, b, c, 3.0, threads=threads)  # warm-up, like the reference
    rates = []
    for _ in range(reps):
        start_ns = clock.now_ns()
        cpu.stream_triad(a, b, c, 3.0, threads=threads)
        elapsed_s = (clock.now_ns() - start_ns) / 1e9
        rates.append(cpu.stream_bytes("triad", n) / elapsed_s)
    return max(rates), statistics.median(rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=None, help="doubles per array (default: 4x LLC)")
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads (default: all cores)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--reps", type=int, default=10, help="timed triads per round and side (default 10)")
    options = parser.parse_args(argv)

    n = options.n or default_n()
    threads = options.threads or cpu.available_threads()
    reference = build.build(REFERENCE_SOURCE, shared=False)
    if not reference.openmp:
        raise CharzError(f"{REFERENCE_SOURCE.name} needs OpenMP, and the compiler could not build with -fopenmp")
    kernels = cpu.kernel_build()
    print(f"compiler: {kernels.artifact.compiler.version}; flags: {' '.join(kernels.artifact.flags)}")
    print(f"n={n} doubles per array ({3 * n * 8 / 2**30:.2f} GiB in all), threads={threads}, "
          f"rounds={options.rounds}, reps={options.reps}")
    arrays = cpu.stream_arrays(n, seed=1, threads=threads)

    reference_medians, kernel_medians = [], []
    print(f"{'round':>5}  {'omp_triad median GB/s':>22}  {'stream_triad median GB/s':>25}  {'ratio':>6}")
    for round_index in range(options.rounds):
        _, reference_median = reference_round(reference.path, n, options.reps, threads)
        _, kernel_median = kernel_round(arrays, n, options.reps, threads)
        reference_medians.append(reference_median)
        kernel_medians.append(kernel_median)
        print(f"{round_index:>5}  {reference_median / 1e9:>22.2f}  {kernel_median / 1e9:>25.2f}  "
              f"{kernel_median / reference_median:>6.3f}")
    reference_overall = statistics.median(reference_medians)
    kernel_overall = statistics.median(kernel_medians)
    print(f"median over rounds: omp_triad {reference_overall / 1e9:.2f} GB/s, "
          f"stream_triad {kernel_overall / 1e9:.2f} GB/s, ratio {kernel_overall / reference_overall:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
