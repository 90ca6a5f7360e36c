"""Sweep speed: 1000 configurations of a Llama-2-7B decode step (batch 1, context 2048, all 32
layers, bf16) on a simulated H100 SXM, memory bandwidth x compute units x dispatch overhead
(10 x 10 x 10), run as ``charz sweep`` runs it: in worker processes, one per CPU.

Acceptance: the median wall time of the sweep (graph built once, grid, evaluation, Pareto front
and sensitivity; the report files are not written) under 60 s on a 2-core machine.
Run: ``.venv/bin/python benchmarks/bench_sweep.py [REPEATS]``
"""
from __future__ import annotations

import os
import statistics
import sys
import time


def sweep_once(jobs: int) -> tuple[float, object]:
    from pytest_charz.sim import PARAMETERS, Machine
    from pytest_charz.sim.sweep import GraphEvaluator, SweepResult, grid, parse_axis
    from pytest_charz.sim.sweep_run import run_configs
    from pytest_charz.targets.catalogue import resolve
    from pytest_charz.workloads.builders import build

    start = time.perf_counter()
    graph = build("llama-2-7b", "decode", batch=1, context=2048)
    machine = Machine.from_spec(resolve("h100-sxm"))
    axes = [parse_axis("memory_bandwidth=1.5e12:6e12:10", PARAMETERS),
            parse_axis("compute_units=66:264:10", PARAMETERS),
            parse_axis("dispatch_overhead=1e-6:2e-5:10:log", PARAMETERS)]
    evaluate = GraphEvaluator(machine, graph)
    points = run_configs(grid(axes), evaluate, jobs=jobs)
    result = SweepResult.of({"name": graph.name, "phase": graph.phase}, "h100-sxm", str(machine.id), axes, points,
                            evaluate({}))
    return time.perf_counter() - start, result


def main(repeats: int = 3) -> int:
    jobs = os.cpu_count() or 1
    times_s = []
    result = None
    for _ in range(repeats):
        elapsed_s, result = sweep_once(jobs)
        times_s.append(elapsed_s)
    median_s = statistics.median(times_s)
    assert result is not None
    print(f"{len(result.points)} configurations of a llama-2-7b decode step on {jobs} worker(s): median "
          f"{median_s:.1f} s of {repeats} ({', '.join(f'{t:.1f}' for t in times_s)}); "
          f"{1e3 * median_s / len(result.points):.1f} ms per configuration")
    print(f"most sensitive: {result.ranking[0].parameter} (swing {100 * result.ranking[0].swing:.0f}%); "
          f"{len(result.front)} on the Pareto front")
    ok = median_s < 60
    print("PASS" if ok else "FAIL: over 60 s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
