"""Simulator speed: one Llama-2-70B TP8 decode step (batch 1, context 4096) on h100-sxm, and one
what-if configuration of a sweep (a machine with changed parameters, then the same step).

Acceptance: the step's median under 0.1 s; a configuration's median small enough that 1000 of
them run in under 60 s on 2 cores (under 0.12 s each).
Run: ``.venv/bin/python benchmarks/bench_sim.py``
"""
from __future__ import annotations

import statistics
import sys
import time
from typing import Any


def main(repeats: int = 21) -> int:
    from pytest_charz.sim import Machine, simulate_graph
    from pytest_charz.targets.catalogue import resolve
    from pytest_charz.workloads.builders import build

    start = time.perf_counter()
    graph = build("llama-2-70b", "decode", batch=1, context=4096, tp=8)
    machine = Machine.from_spec(resolve("h100-sxm"))
    print(f"graph ({len(graph.ops)} ops) and machine built in {time.perf_counter() - start:.3f} s (once)")
    simulate_graph(graph, machine)                      # prepares the graph once
    step_s, step_cpu_s = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        result = simulate_graph(graph, machine)
        step_s.append(time.perf_counter() - start)
        step_cpu_s.append(time.process_time() - cpu)
    config_s = []
    for index in range(repeats):
        start = time.perf_counter()
        what_if = machine.with_params({"memory_bandwidth": 2e12 + 2e11 * index, "link_bandwidth": 2e10 + 1e9 * index,
                                       "dispatch_overhead": 1e-6 * (1 + index % 10)})
        simulate_graph(graph, what_if)
        config_s.append(time.perf_counter() - start)
    step, config = statistics.median(step_s), statistics.median(config_s)
    sweep_s = 1000 * config / 2
    print(f"decode step: {result.latency_s * 1e3:.3f} ms simulated, {result.bottleneck}-bound; median "
          f"{step * 1e3:.1f} ms of {repeats} runs (min {min(step_s) * 1e3:.1f}, max {max(step_s) * 1e3:.1f}; "
          f"median CPU time {statistics.median(step_cpu_s) * 1e3:.1f} ms)")
    print(f"one configuration: median {config * 1e3:.1f} ms of {repeats}; 1000 configurations on 2 cores: "
          f"{sweep_s:.1f} s")
    compare_simpy(len(graph.ops), repeats)
    ok = step < 0.1 and sweep_s < 60
    print("PASS" if ok else "FAIL: a step over 0.1 s or a 1000-configuration sweep over 60 s")
    return 0 if ok else 1


def compare_simpy(n: int, repeats: int) -> None:
    """The event core against SimPy on the same chain of ``n`` ops (a host that dispatches each op
    in 10 us, a device that runs it), when SimPy is installed."""
    from pytest_charz.sim.hardware import OpCost
    from pytest_charz.sim.runtime import run_schedule

    durations = [12.5e-6 if i % 3 else 2.5e-6 for i in range(n)]
    costs = [OpCost(((0, d - 2.5e-6),) if d > 2.5e-6 else (), 0.0, "memory:dram", 0.0, False, ()) for d in durations]
    own = []
    for _ in range(repeats):
        start = time.perf_counter()
        run_schedule([0] * n, [(i - 1,) if i else () for i in range(n)], costs, [2.5e-6] * n, [10e-6] * n,
                     [False] * n, 1024, 2, 1)
        own.append(time.perf_counter() - start)
    try:
        import simpy
    except ImportError:
        print(f"event core, {n}-op host/device chain: median {statistics.median(own) * 1e3:.1f} ms "
              "(SimPy not installed: no comparison)")
        return

    def chain() -> None:
        env = simpy.Environment()
        queue = simpy.Store(env, capacity=1024)

        def host() -> Any:
            for index in range(n):
                yield env.timeout(10e-6)
                yield queue.put(index)

        def device() -> Any:
            for _ in range(n):
                index = yield queue.get()
                yield env.timeout(durations[index])

        env.process(host())
        env.process(device())
        env.run()

    theirs = []
    for _ in range(repeats):
        start = time.perf_counter()
        chain()
        theirs.append(time.perf_counter() - start)
    print(f"{n}-op host/device chain: event core median {statistics.median(own) * 1e3:.1f} ms, "
          f"SimPy {simpy.__version__} median {statistics.median(theirs) * 1e3:.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
