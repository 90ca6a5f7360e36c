"""The gate's power and false-alarm rate on this machine, measured.

1. Reference runs save baselines for the cases in ``benchmarks/drift_suite`` (a reference settles
   after three clean sessions; drift is judged from then on).
2. ``--runs`` unchanged runs: every verdict counted (drift or model-error here is a false alarm).
3. ``--runs`` runs where every case silently does 10% more work (``CHARZ_EXTRA_WORK=1.10``):
   the fraction judged ``drift`` is the gate's power.
4. ``--hog-runs`` unchanged runs while another process saturates memory bandwidth: these should be
   ``explained`` (interference seen in the conditions), never ``drift``.

    python benchmarks/drift_power.py [--runs 20] [--hog-runs 5]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

HOG = """
import numpy as np, time, sys
a = np.ones(64 << 20 >> 3); b = np.empty_like(a)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    np.copyto(b, a); np.copyto(a, b)
"""


def run_suite(workdir: str, name: str, extra: float = 1.0, causes: collections.Counter[str] | None = None) -> list[str]:
    out = os.path.join(workdir, f"{name}.json")
    env = {**os.environ, "CHARZ_EXTRA_WORK": str(extra)}
    subprocess.run([sys.executable, "-m", "pytest", os.path.join(HERE, "drift_suite"), "-q", "-p", "no:cacheprovider",
                    "--target=cpu", f"--charz-out={out}", f"--charz-baselines={workdir}/baselines"],
                   env=env, capture_output=True, cwd=HERE)
    with open(out) as handle:
        cases = json.load(handle)["cases"]
    if causes is not None:
        for case in cases:
            cause = case["verdict"].get("cause")
            if cause:
                causes.update(part.split(":")[0].split(" (")[0] for part in cause.split("; "))
    return [case["verdict"]["outcome"] for case in cases]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--hog-runs", type=int, default=5)
    parser.add_argument("--keep", default=None, metavar="DIR", help="keep the run files and baselines in DIR")
    args = parser.parse_args()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory()) as workdir:
        for index in range(3):
            print(f"reference session {index + 1}:", dict(collections.Counter(run_suite(workdir, f"reference-{index}"))))
        causes: collections.Counter[str] = collections.Counter()
        unchanged: collections.Counter[str] = collections.Counter()
        runs_with_alarm = 0
        for index in range(args.runs):
            outcomes = run_suite(workdir, f"same-{index}", causes=causes)
            unchanged.update(outcomes)
            runs_with_alarm += any(o in ("drift", "model-error") for o in outcomes)
        print(f"unchanged, {args.runs} runs: {dict(unchanged)}; runs with drift or model-error: {runs_with_alarm}")
        runs_caught = 0
        slower: collections.Counter[str] = collections.Counter()
        caught = 0
        per_case_total = 0
        for index in range(args.runs):
            outcomes = run_suite(workdir, f"extra-{index}", extra=1.10, causes=causes)
            slower.update(outcomes)
            caught += sum(o == "drift" for o in outcomes)
            runs_caught += any(o == "drift" for o in outcomes)
            per_case_total += len(outcomes)
        print(f"10% more work, {args.runs} runs: {dict(slower)}; drift in {caught} of {per_case_total} case runs; "
              f"runs with at least one drift: {runs_caught} of {args.runs}")
        hogged: collections.Counter[str] = collections.Counter()
        for index in range(args.hog_runs):
            hog = subprocess.Popen([sys.executable, "-c", HOG, "30"])
            try:
                hogged.update(run_suite(workdir, f"hog-{index}", causes=causes))
            finally:
                hog.kill()
                hog.wait()
        print(f"unchanged under a memory-bandwidth hog, {args.hog_runs} runs: {dict(hogged)}")
        print(f"causes named by explained verdicts: {dict(causes)}")


if __name__ == "__main__":
    main()
