"""Harness overhead: pytest-charz against pytest-benchmark on a near-empty function.

Runs ``benchmarks/test_overhead.py`` several times (both harnesses in each session, so they are
measured side by side under the same conditions) and prints, per harness, the median over
sessions of the reported per-call median, and their ratio (charz / pytest-benchmark; <= 1 means
pytest-charz adds no more overhead). Also prints pytest-charz's own bookkeeping per sample:
(sampling-loop time - time inside timed batches) / samples taken.

    python benchmarks/bench_overhead.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def one_session(workdir: str, index: int) -> tuple[float, float, float]:
    bench_json = os.path.join(workdir, f"bench-{index}.json")
    run_json = os.path.join(workdir, f"run-{index}.json")
    subprocess.run(
        [sys.executable, "-m", "pytest", os.path.join(HERE, "test_overhead.py"), "-q", "-p", "no:cacheprovider",
         "--target=cpu", f"--charz-out={run_json}", f"--benchmark-json={bench_json}", "--benchmark-max-time=1.0"],
        check=True, capture_output=True, cwd=HERE)
    with open(bench_json) as handle:
        bench = json.load(handle)["benchmarks"][0]["stats"]
    with open(run_json) as handle:
        case = json.load(handle)["cases"][0]
    m = case["measurement"]
    batch_time = sum(m["samples_s"]) * m["inner_loops"]
    bookkeeping = (m["sampling_s"] - batch_time) / max(m["taken"], 1)
    return bench["median"], m["median_s"], bookkeeping


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for index in range(args.repeats):
            rows.append(one_session(workdir, index))
    bench = statistics.median(r[0] for r in rows)
    ours = statistics.median(r[1] for r in rows)
    bookkeeping = statistics.median(r[2] for r in rows)
    print(f"sessions: {args.repeats}")
    print(f"pytest-benchmark per-call median (median over sessions): {bench * 1e9:8.1f} ns "
          f"(min {min(r[0] for r in rows) * 1e9:.1f}, max {max(r[0] for r in rows) * 1e9:.1f})")
    print(f"pytest-charz     per-call median (median over sessions): {ours * 1e9:8.1f} ns "
          f"(min {min(r[1] for r in rows) * 1e9:.1f}, max {max(r[1] for r in rows) * 1e9:.1f})")
    print(f"ratio charz / pytest-benchmark: {ours / bench:.3f}")
    print(f"pytest-charz bookkeeping per sample (sampling-loop time outside the timed batches): "
          f"{bookkeeping * 1e6:.2f} us")


if __name__ == "__main__":
    main()
