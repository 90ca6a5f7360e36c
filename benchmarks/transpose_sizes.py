"""Where a transposed copy's rate per element changes with size, on this CPU.

The op-class suite calibrates ``transpose`` on square fp32 sizes 64-2048, and its efficiency
curve interpolates between them; the held-out transpose of 1536 x 1536 floats reads 29-45% faster
than predicted on every guest measured so far. This sweep times ``a.t().contiguous()`` (what the
suite and the held-out case run) at sizes between and beyond the suite's, so that whether the
rate changes in steps of size (a cache the working set leaves) or at power-of-two strides (cache
sets aliased by the row stride) is measured, not guessed.

Each size is checked against NumPy's transpose of the same fresh random input first. Sizes are
timed in rounds (every size once per round, the order the same), so a slow stretch of a shared
host lands on every size alike; each size's time is its median over the rounds, each round's
figure the held-out suite's timer (:func:`pytest_charz.workloads.optimer.replayed_s`: one untimed
call, then a batch of at least three), so the matrices are as warm as a cache that holds them
leaves them, as in a suite case (timed right after the other sizes, cold, a 1536 x 1536 transpose
took 1.5-1.8 ns per element on a Xeon guest against 0.9 warm). The minor page faults of one more
call are printed beside: an output that glibc maps fresh each call pays its pages too. One
thread, as the held-out benchmark measures with ``--threads 1``.

    python benchmarks/transpose_sizes.py                 # the default sizes, 7 rounds
    python benchmarks/transpose_sizes.py 1024,1536,2048 --rounds 11

Printed per size: the median time, ns per element, GB/s of the minimal traffic (read the matrix,
write its transpose: 8 bytes per fp32 element), the rate per element against the previous size,
the minor page faults per call, and whether the row stride is a multiple of 4 KiB (the alias
period of the L1 data caches of the x86 cores seen here: 48 KiB 12-way and 32 KiB 8-way, 4 KiB
per way).
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys

DEFAULT_SIZES = (256, 384, 512, 640, 768, 1000, 1024, 1152, 1280, 1536, 1792, 2000, 2048, 2304, 2560, 3072, 4096)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", nargs="?", default=",".join(map(str, DEFAULT_SIZES)),
                        help="comma-separated square sizes (fp32)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import numpy as np
    import torch

    from pytest_charz.workloads.optimer import replayed_s

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    mats = {n: torch.rand(n, n, generator=generator) for n in sizes}
    for n, a in mats.items():
        if not np.array_equal(a.t().contiguous().numpy(), a.numpy().T):
            raise SystemExit(f"transpose of {n} x {n} differs from NumPy's")
    times: dict[int, list[float]] = {n: [] for n in sizes}
    faults: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(args.rounds):
        for n, a in mats.items():
            times[n].append(replayed_s(lambda a=a: a.t().contiguous()))
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            a.t().contiguous()
            faults[n].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)

    print(f"{'n':>6} {'stride':>8} {'4KiB-aliased':>12} {'MiB moved':>9} {'median':>11} {'ns/elem':>8} {'GB/s':>7} "
          f"{'vs prev':>8} {'faults/call':>11}")
    previous = None
    for n in sizes:
        seconds = statistics.median(times[n])
        per_element = seconds / (n * n)
        ratio = f"x{per_element / previous:.2f}" if previous else ""
        print(f"{n:>6} {4 * n:>7}B {'yes' if (4 * n) % 4096 == 0 else 'no':>12} {8 * n * n / 2 ** 20:>9.1f} "
              f"{seconds * 1e6:>9.1f}us {per_element * 1e9:>8.3f} {8 * n * n / seconds / 1e9:>7.2f} {ratio:>8} "
              f"{statistics.median(faults[n]):>11.0f}")
        previous = per_element
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
