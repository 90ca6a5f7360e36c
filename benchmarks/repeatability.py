"""Run-to-run agreement on this machine: two back-to-back runs of the suites, compared.

Prints the median over cases of |median_2 / median_1 - 1| (with the cases flagged noisy in
either run counted), and for the two capability profiles each ceiling's relative difference,
marking those beyond 5%.

    python benchmarks/repeatability.py [--quick] [-k EXPR] [--keep DIR] [--runs-per-profile K]

With ``--runs-per-profile K`` each profile is built from K runs (the median of each ceiling over
them): how far apart profiles of K runs each are, for machines where one run is not enough.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(workdir: str, name: str, extra: list[str], runs: int = 1) -> str:
    """``runs`` suite runs one after the other, their profile named ``name``; returns the path of
    the first run file (the case comparison uses it)."""
    outs = []
    for index in range(runs):
        out = os.path.join(workdir, f"{name}.json" if runs == 1 else f"{name}-{index + 1}.json")
        subprocess.run([sys.executable, "-m", "pytest", os.path.join(ROOT, "suites"), "-q", "-p", "no:cacheprovider",
                        f"--charz-out={out}", f"--charz-baselines={workdir}/baselines", "--charz-no-save", *extra],
                       capture_output=True, cwd=ROOT)
        outs.append(out)
    subprocess.run([sys.executable, "-m", "pytest_charz.cli", "profile", *outs, "-o", workdir, "--name", f"{name}.profile"],
                   capture_output=True, cwd=ROOT, check=True)
    return outs[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="compare two --charz-quick runs")
    parser.add_argument("-k", default=None, help="only the cases pytest's -k selects")
    parser.add_argument("--keep", default=None, metavar="DIR")
    parser.add_argument("--runs-per-profile", type=int, default=1, metavar="K",
                        help="build each of the two profiles from K runs (the median per ceiling)")
    args = parser.parse_args()
    extra = (["--charz-quick"] if args.quick else []) + (["-k", args.k] if args.k else [])
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory()) as workdir:
        paths = [run(workdir, f"run{i}", extra, args.runs_per_profile) for i in (1, 2)]
        runs = [{c["id"]: c for c in json.load(open(p))["cases"]} for p in paths]
        ratios = {}
        for case_id, first in runs[0].items():
            second = runs[1].get(case_id)
            m1, m2 = first["measurement"]["median_s"], second and second["measurement"]["median_s"]
            if m1 and m2:
                ratios[case_id] = m2 / m1 - 1.0
        noisy = sum(1 for r in runs for c in r.values() if "noisy" in c["flags"])
        deviations = sorted(abs(v) for v in ratios.values())
        print(f"cases compared: {len(ratios)}; flagged noisy (both runs together): {noisy}")
        print(f"median |ratio - 1|: {100 * statistics.median(deviations):.2f}%; "
              f"P90: {100 * deviations[int(0.9 * (len(deviations) - 1))]:.1f}%")
        profiles = []
        for stem in ("run1", "run2"):
            with open(os.path.join(workdir, f"{stem}.profile.json")) as handle:
                profiles.append({c["name"]: c for c in json.load(handle)["ceilings"]})
        worst = 0.0
        print(f"{'ceiling':<24} {'run 1':>12} {'run 2':>12} {'diff':>8}")
        for name, first in profiles[0].items():
            second = profiles[1].get(name)
            if not second or not first.get("value") or not second.get("value"):
                continue
            diff = second["value"] / first["value"] - 1.0
            worst = max(worst, abs(diff))
            mark = "  > 5%" if abs(diff) > 0.05 else ""
            print(f"{name:<24} {first['value']:>12.4g} {second['value']:>12.4g} {100 * diff:>7.1f}%{mark}")
        print(f"largest ceiling difference: {100 * worst:.1f}%")


if __name__ == "__main__":
    main()
