"""The gate's power and false-alarm rate on this machine, measured.

1. Reference runs save baselines for the cases in ``benchmarks/drift_suite`` (a reference settles
   after three clean sessions; drift is judged from then on).
2. ``--runs`` unchanged runs: every verdict counted (drift or model-error here is a false alarm).
3. ``--runs`` runs where every case silently does 10% more work (``CHARZ_EXTRA_WORK=1.10``):
   the fraction judged ``drift`` is the gate's power.
4. ``--hog-runs`` unchanged runs while another process saturates memory bandwidth: these should be
   ``explained`` (interference seen in the conditions), never ``drift``.
5. The A/B mode (``charz ab``; ``--no-ab`` skips it): ``--runs`` sessions with A and B identical
   (a ``slower`` is a false alarm), ``--runs`` with 10% more work on B (the fraction ``slower`` is
   its power) and ``--hog-runs`` identical sessions under the hog; each round runs one process
   per side at once, the two taking turns slice by slice of each case's samples, until every
   case is decided (at most ``--ab-max-rounds``).

    python benchmarks/drift_power.py [--runs 20] [--hog-runs 5] [--no-ab]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import functools
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


# What the default mode's verdicts said of each case over the runs after the references: the
# smallest change each could detect and the basis judged on; and the core clock the probe read.
DETECTABLE: dict[str, list[float]] = collections.defaultdict(list)
BASIS: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
CLOCK_MHZ: list[float] = []


def note_power(cases: list[dict]) -> None:
    for case in cases:
        name = case["id"].split("::")[-1]
        verdict = case.get("verdict") or {}
        if verdict.get("detectable_change") is not None:
            DETECTABLE[name].append(verdict["detectable_change"])
        BASIS[name][verdict.get("basis") or "raw"] += 1
        clock_mhz = (case["conditions"].get("before") or {}).get("core_clock_mhz")
        if clock_mhz:
            CLOCK_MHZ.append(clock_mhz)


def power_summary() -> str:
    parts = []
    for name in sorted(DETECTABLE):
        values = sorted(DETECTABLE[name])
        parts.append(f"{name} {values[len(values) // 2]:.1%} ({values[0]:.1%}-{values[-1]:.1%};"
                     f" judged {', '.join(f'{b} {n}' for b, n in sorted(BASIS[name].items()))})")
    clock = f"; core clock {min(CLOCK_MHZ):.0f}-{max(CLOCK_MHZ):.0f} MHz over all runs" if CLOCK_MHZ else ""
    return "default mode, smallest change detectable per case (median, range): " + ("; ".join(parts) or "none") + clock


def run_suite(workdir: str, name: str, extra: float = 1.0, causes: collections.Counter[str] | None = None) -> list[str]:
    out = os.path.join(workdir, f"{name}.json")
    env = {**os.environ, "CHARZ_EXTRA_WORK": str(extra)}
    subprocess.run([sys.executable, "-m", "pytest", os.path.join(HERE, "drift_suite"), "-q", "-p", "no:cacheprovider",
                    "--target=cpu", f"--charz-out={out}", f"--charz-baselines={workdir}/baselines"],
                   env=env, capture_output=True, cwd=HERE)
    with open(out) as handle:
        cases = json.load(handle)["cases"]
    if causes is not None:
        note_power(cases)
        for case in cases:
            cause = (case.get("verdict") or {}).get("cause")
            if cause:
                causes.update(part.split(":")[0].split(" (")[0] for part in cause.split("; "))
    # A case whose judging stopped has no verdict: counted as such, never as a pass.
    return [(case.get("verdict") or {}).get("outcome", "not judged") for case in cases]


def run_ab_session(workdir: str, name: str, extra_b: float, max_time_s: float, max_rounds: int) -> dict:
    """One ``charz ab`` session on the drift suite, B doing ``extra_b`` times the work; its JSON."""
    out = os.path.join(workdir, f"{name}.json")
    done = subprocess.run([sys.executable, "-m", "pytest_charz.cli", "ab", "drift_suite",
                           "--a-env", "CHARZ_EXTRA_WORK=1.0", "--b-env", f"CHARZ_EXTRA_WORK={extra_b}",
                           f"--max-time={max_time_s}", f"--max-rounds={max_rounds}", "--pytest-args=--target=cpu",
                           f"--json={out}"], capture_output=True, cwd=HERE)
    if not os.path.exists(out):
        raise SystemExit(f"charz ab wrote no comparison ({name}):\n{done.stderr.decode(errors='replace')[-2000:]}")
    with open(out) as handle:
        return json.load(handle)


def ab_line(label: str, sessions: list[dict], counted: str) -> str:
    outcomes = collections.Counter(case["outcome"] for s in sessions for case in s["cases"])
    total = sum(outcomes.values())
    rounds = sorted(s["rounds"] for s in sessions)
    minutes = sum(s["elapsed_s"] for s in sessions) / 60.0
    modes = sorted({s.get("mode", "one after the other") for s in sessions})
    return (f"A/B ({', '.join(modes)}), {label}, {len(sessions)} sessions: {dict(outcomes)}; {counted} in {outcomes['slower']} of {total}"
            f" case runs; rounds per session {rounds[0] if rounds else 0}-{rounds[-1] if rounds else 0}"
            f" (median {rounds[len(rounds) // 2] if rounds else 0}), {minutes:.1f} min in all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--hog-runs", type=int, default=5)
    parser.add_argument("--keep", default=None, metavar="DIR", help="keep the run files and baselines in DIR")
    parser.add_argument("--ab", action=argparse.BooleanOptionalAction, default=True,
                        help="also measure the A/B mode, charz ab (default: on)")
    parser.add_argument("--ab-max-time", type=float, default=0.3, help="time budget of one case per A/B process")
    parser.add_argument("--ab-max-rounds", type=int, default=30, help="most rounds of one A/B session")
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
        print(power_summary(), flush=True)
        if args.ab:
            ab = functools.partial(run_ab_session, workdir, max_time_s=args.ab_max_time, max_rounds=args.ab_max_rounds)
            same = [ab(f"ab-same-{index}", 1.0) for index in range(args.runs)]
            print(ab_line("A and B identical", same, "slower (false alarms)"), flush=True)
            more = [ab(f"ab-extra-{index}", 1.10) for index in range(args.runs)]
            print(ab_line("10% more work on B", more, "slower (caught)"), flush=True)
            hogged_ab = []
            for index in range(args.hog_runs):
                hog = subprocess.Popen([sys.executable, "-c", HOG, "86400"])
                try:
                    hogged_ab.append(ab(f"ab-hog-{index}", 1.0))
                finally:
                    hog.kill()
                    hog.wait()
            print(ab_line("identical under a memory-bandwidth hog", hogged_ab, "slower (false alarms)"))


if __name__ == "__main__":
    main()
