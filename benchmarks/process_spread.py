"""How far apart fresh processes measure the same kernel on this machine, without the harness.

Two back-to-back runs of the suites are two processes some minutes apart; their profiles cannot
agree more closely than plain, separately started programs timing the same operation do. This
script starts ``--processes`` fresh Python processes one after the other for each probe; each
times its operation ``--calls`` times after a warm-up and prints the median. It reports, per
probe, the medians' minimum, median and maximum and the spread max/min - 1: the floor under
run-to-run agreement that the machine itself sets (clock, neighbours, physical page placement,
hash and address randomisation). The operations are plain NumPy and PyTorch calls, and the
suite's own page-local pointer chase (its C kernel, called directly) for DRAM latency.

    python benchmarks/process_spread.py [--processes 8] [--calls 15] [--probe NAME ...]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

# Each probe: a setup and one call, run in a fresh interpreter; the rate printed is per call.
PROBES = {
    "gemm-fp64-2048": ("import numpy as np; r = np.random.default_rng(); n = 2048; "
                       "a, b = r.random((n, n)), r.random((n, n)); c = np.empty((n, n))",
                       "np.matmul(a, b, out=c)", "2 * 2048**3 / t / 1e9", "GFLOP/s"),
    "gemm-fp32-2048": ("import numpy as np; r = np.random.default_rng(); n = 2048; "
                       "a, b = (r.random((n, n)).astype(np.float32) for _ in range(2)); "
                       "c = np.empty((n, n), np.float32)",
                       "np.matmul(a, b, out=c)", "2 * 2048**3 / t / 1e9", "GFLOP/s"),
    "gemm-bf16-2048": ("import torch; n = 2048; a, b = (torch.randn(n, n, dtype=torch.bfloat16) for _ in range(2)); "
                       "c = torch.empty(n, n, dtype=torch.bfloat16)",
                       "torch.matmul(a, b, out=c)", "2 * 2048**3 / t / 1e12", "TFLOP/s"),
    "numpy-add-1": ("import numpy as np; a, b, c = np.ones(1), np.ones(1), np.empty(1)",
                    "[np.add(a, b, out=c) for _ in range(1000)]", "t / 1000 * 1e9", "ns per add"),
    "chase-256MiB": ("from pytest_charz.kernels import cpu; "
                     "buf = cpu.chase_build((256 << 20) // 64, 64, seed=3, hugepages=True, pattern='page-local'); "
                     "pos = [cpu.chase(buf, 1 << 22)]",
                     "pos.append(cpu.chase(buf, 20000, pos[-1]))", "t / 20000 * 1e9", "ns per load"),
    "copy-256MiB": ("import numpy as np; a = np.random.default_rng().random(1 << 25); b = np.empty_like(a)",
                    "np.copyto(b, a)", "2 * a.nbytes / t / 1e9", "GB/s (read + write)"),
}

CHILD = """
import statistics, time
{setup}
for _ in range(3):
    {call}
times = []
for _ in range({calls}):
    start = time.perf_counter()
    {call}
    times.append(time.perf_counter() - start)
t = statistics.median(times)
print({rate})
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--probe", action="append", choices=sorted(PROBES), help="default: every probe")
    args = parser.parse_args()
    print(f"{'probe':<16} {'unit':<20} {'min':>9} {'median':>9} {'max':>9} {'max/min-1':>10}")
    for name in args.probe or list(PROBES):
        setup, call, rate, unit = PROBES[name]
        code = CHILD.format(setup=setup, call=call, calls=args.calls, rate=rate)
        values = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout) for _ in range(args.processes)]
        spread = max(values) / min(values) - 1.0
        print(f"{name:<16} {unit:<20} {min(values):>9.4g} {statistics.median(values):>9.4g} {max(values):>9.4g} "
              f"{100 * spread:>9.1f}%", flush=True)


if __name__ == "__main__":
    main()
