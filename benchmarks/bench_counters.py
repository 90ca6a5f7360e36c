"""Counter overhead: the same cases sampled with and without counters and energy, side by side.

For each workload (an empty call, a 64 KiB NumPy sum, a 256^3 float64 matrix product) the
sampler measures it on the host CPU device plainly ("off") and through the evidence wrapper
("on": perf_event_open counters of every thread read around each batch, and the energy counter
where the machine has one), in ABBA rounds (off, on, on, off) so a drift of the machine moves
both. Printed per workload: the median over measurements of the per-call median, off and on, the
median and quartiles of the per-round ratios on/off, the samples taken, and "inconclusive" when
the off measurements themselves spread more than 5% (a loaded machine: the ratio then says
nothing); then the cost of one counter read (all threads, all groups) and what was counted and
missing here.

    python benchmarks/bench_counters.py [--repeats 7] [--max-time 0.5]
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import numpy as np

from pytest_charz.devices.cpu import CpuDevice
from pytest_charz.evidence.collect import CaseEvidence
from pytest_charz.measure.sampler import SamplerSettings, sample


def workloads() -> dict[str, Callable[[], Any]]:
    small = np.random.default_rng(0).random(8192)
    a = np.random.default_rng(1).random((256, 256))
    b = np.random.default_rng(2).random((256, 256))
    return {"empty call": lambda: None, "sum 64 KiB": small.sum, "matmul 256^3 f64": lambda: a @ b}


def read_cost_us(evidence: CaseEvidence, device: CpuDevice, reads: int = 2000) -> float | None:
    wrapped = evidence.wrap(device)
    counters = wrapped._counters
    if counters is None:
        return None
    start = time.perf_counter_ns()
    for _ in range(reads):
        counters.read()
    cost = (time.perf_counter_ns() - start) / reads / 1e3
    counters.stop()
    return cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--max-time", type=float, default=0.5, help="sampler budget per measurement (s)")
    args = parser.parse_args()
    device = CpuDevice()
    evidence = CaseEvidence("cpu", "auto")
    settings = SamplerSettings(max_time_s=args.max_time, noise_target=0.005)
    print(f"{'workload':<18} {'off median':>12} {'on median':>12} {'on/off (q1-q3)':>22} {'samples':>9} verdict")
    for name, fn in workloads().items():
        off: list[float] = []
        on: list[float] = []
        ratios: list[float] = []
        samples_off: list[int] = []
        samples_on: list[int] = []

        def measure(counted: bool) -> float:
            if not counted:
                plain = sample(device, fn, settings)
                samples_off.append(len(plain.samples_s))
                return plain.median_s or float("nan")
            wrapped = evidence.wrap(device)
            measurement = sample(wrapped, fn, settings)
            evidence.finish(wrapped)
            samples_on.append(len(measurement.samples_s))
            return measurement.median_s or float("nan")

        for _ in range(args.repeats):
            a_off, a_on, b_on, b_off = measure(False), measure(True), measure(True), measure(False)
            off += [a_off, b_off]
            on += [a_on, b_on]
            ratios.append((a_on + b_on) / (a_off + b_off))
        off_s, on_s = statistics.median(off), statistics.median(on)
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
        spread = (max(off) - min(off)) / off_s
        verdict = "inconclusive (off spreads {:.0f}%)".format(100 * spread) if spread > 0.05 else "ok"
        taken = f"{statistics.median(samples_off):.0f}/{statistics.median(samples_on):.0f}"
        print(f"{name:<18} {off_s * 1e6:10.3f}us {on_s * 1e6:10.3f}us "
              f"{statistics.median(ratios):7.3f} ({q1:.3f}-{q3:.3f}) {taken:>9} {verdict}")
    cost = read_cost_us(evidence, device)
    wrapped = evidence.wrap(device)
    sample(wrapped, lambda: None, settings.updated(max_time_s=0.05))
    counters, energy = evidence.finish(wrapped)
    print(f"one counter read (all threads, all groups): {cost:.2f} us" if cost is not None else
          "no in-process counters here")
    if counters is not None:
        print(f"counted ({counters.source}): {', '.join(sorted(counters.values))}")
        for missing, why in sorted(counters.missing.items()):
            print(f"  missing {missing}: {why}")
    print(f"energy ({energy.source}): {energy.joules_per_call} J/call" if energy.missing is None else
          f"energy ({energy.source}) missing: {energy.missing}")
    evidence.close()


if __name__ == "__main__":
    main()
