"""The hard transfer, end to end, in one command: calibrate on microbenchmarks, test on workloads.

Runs the op-class microbenchmarks (``suites/test_opclasses.py``) and the runtime suite's dispatch
and fresh-page cases (the calibration), then the 18 held-out workloads (``suites/test_heldout.py``)
and, with ``--workloads``, the workload suite's models (``suites/test_workloads.py``, per-op
timings), all into one run file per round (``--rounds``, 3 by default, each a fresh process); then
calibrates each model on the microbenchmark cases alone (``charz calibrate``'s file, every case
at the median of its rounds) and scores with that file passed by its path, as a user predicts,
and prints, for the workload ops and the workloads end to end, the acceptance figures: median and
P90 |measured / predicted - 1|, the share within 2x, and the coverage of the 90% intervals (with
the P90 of each row's distance from its prediction in units of its interval's half on that side,
1.0 for calibrated intervals: ``validation.workloads.summary``); the error per op class; each
multi-op workload end to end split into its ops timed alone and the rest, measured against
predicted (``WorkloadValidation.splits``: which half an end to end misses in); and every op or
workload beyond 2x or outside its interval.

    python benchmarks/heldout_workloads.py                      # quick sizes, PyTorch's threads
    python benchmarks/heldout_workloads.py --threads 1 --full   # one thread, full sampling budgets
    python benchmarks/heldout_workloads.py --run R1.json --run R2.json   # score recorded rounds

Why rounds: on a shared 2-vCPU guest a case now and then runs in a slow state for seconds (a
PyTorch op's dispatch 1.1 us in most processes, 1.8-2.0 us in one of three, a NumPy op's beside
it unmoved), so one round's figures swing with whichever cases it caught there (the held-out ops'
median |error| 14% in one round, 32% in the next, with nothing changed). The median of three
rounds is what the calibration and the scoring use, as asv's rounds do.

After each round the runtime suite's dispatch cases run once more (``RUN.probe.json``): when
their median over the rounds moved more than 10% from the calibration's median over the rounds,
the host's speed changed during the measurement and the acceptance is reported inconclusive
instead of met or not met.

On a shared machine measure with ``--threads 1`` (a neighbour descheduling one thread of a
parallel region stalls the op by a time slice); calibration and held-out cases always run with
the same threads, in the same session.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import replace
from typing import Any, Mapping, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CALIBRATION_SUITES = ["suites/test_opclasses.py", "suites/test_runtime.py::test_dispatch_cpu",
                      "suites/test_runtime.py::test_module_dispatch_cpu", "suites/test_runtime.py::test_fresh_pages_cpu"]
HELDOUT_SUITES = ["suites/test_heldout.py"]
#: The acceptance of the op-class models (issue 21): held-out ops and workloads at a median
#: |error| of 8% or less, every one within 2x, 90% intervals covering 80-95% of them; the
#: workload suite's replayed ops at a median of 20% or less; ``sim:cpu`` end to end at 15% or less.
ACCEPTANCE = {"median_abs": 0.08, "within_2x": 1.0, "coverage": (0.80, 0.95)}
REPLAYED_MEDIAN = 0.20
SIM_END_TO_END_MEDIAN = 0.15


def round_paths(out_path: str, rounds: int) -> list[str]:
    """The run file of each round: ``out_path`` itself for one round, ``<root>.r<i>.json`` for more."""
    if rounds <= 1:
        return [out_path]
    root = out_path[:-5] if out_path.endswith(".json") else out_path
    return [f"{root}.r{i}.json" for i in range(1, rounds + 1)]


def measure(out_path: str, threads: int | None, quick: bool, workloads: bool) -> None:
    """Run the calibration and held-out suites into ``out_path`` (one session, one run file).
    Their baselines go to a store of their own beside it: the rounds are not the repository's
    reference sessions."""
    env = dict(os.environ)
    if threads:
        env["CHARZ_TORCH_THREADS"] = str(threads)
    suites = CALIBRATION_SUITES + HELDOUT_SUITES + (["suites/test_workloads.py"] if workloads else [])
    store = os.path.join(os.path.dirname(os.path.abspath(out_path)), "heldout-baselines")
    command = [sys.executable, "-m", "pytest", *suites, "-q", "-p", "no:cacheprovider", "--charz-out", out_path,
               "--charz-baselines", store]
    if quick:
        command.append("--charz-quick")
    print("$ " + " ".join(command), flush=True)
    subprocess.run(command, cwd=ROOT, env=env, check=False)
    if not os.path.exists(out_path):
        raise SystemExit(f"the suites wrote no run file at {out_path}")
    # The dispatch cases once more, after everything: a host whose speed moved between the
    # calibration (measured first) and the end makes the comparison of the two meaningless.
    probe = [sys.executable, "-m", "pytest", PROBE_CASES, "-q", "-p", "no:cacheprovider", "--charz-quick",
             "--charz-out", probe_path(out_path), "--charz-baselines", store]
    print("$ " + " ".join(probe), flush=True)
    subprocess.run(probe, cwd=ROOT, env=env, check=False)


#: The host-speed probe: the runtime suite's dispatch cases, run again after the measurement.
PROBE_CASES = "suites/test_runtime.py::test_dispatch_cpu"
#: The probe's cases: plain dispatch of NumPy and PyTorch. The scalar-operand case is left out:
#: it alone took 3.8-4.1 us in two of five fresh processes against 2.6 us in the others, with
#: the plain cases unmoved (a property of the process, not of the host's speed).
PROBE_KINDS = ("numpy-add", "torch-add")
#: How far the probe may move between the calibration and the end before the figures are
#: inconclusive: a host running 1.7x slower during the calibration than during the held-out cases
#: was seen on a 2-vCPU guest, its cases unflagged.
PROBE_TOLERANCE = 0.10


def probe_path(out_path: str) -> str:
    return out_path[:-5] + ".probe.json" if out_path.endswith(".json") else out_path + ".probe.json"


def _dispatch_medians(path: str) -> dict[str, float]:
    from pytest_charz.run import load_run

    return {case.id.rsplit("::", 1)[-1]: case.median_s for case in load_run(path).cases
            if case.work.op == "dispatch" and case.median_s and str(case.work.shape.get("kind")) in PROBE_KINDS}


def host_speed_change(runs: Sequence[str]) -> tuple[float, str] | None:
    """The largest relative change of a dispatch case between the calibration and the probes
    after it, each at the median of the rounds that have a probe (the figures are scored at the
    median of their rounds too); None when no round has a probe run (rounds scored with ``--run``)."""
    import statistics

    probed = [run for run in runs if os.path.exists(probe_path(run))]
    if not probed:
        return None
    before = [_dispatch_medians(run) for run in probed]
    after = [_dispatch_medians(probe_path(run)) for run in probed]
    changes = []
    for case in set().union(*before) & set().union(*after):
        calibrated = statistics.median(b[case] for b in before if case in b)
        probe = statistics.median(a[case] for a in after if case in a)
        changes.append((abs(probe / calibrated - 1.0), case))
    return max(changes) if changes else None


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _row(name: str, s: Mapping[str, Any]) -> str:
    score = s.get("interval_score_p90")
    return (f"  {name:<24} n={s['n']:<4} median {_pct(s['median_abs']):>7}  P90 {_pct(s['p90_abs']):>7}  "
            f"within 2x {_pct(s['within_2x']):>7}  coverage {_pct(s['coverage']):>7}  "
            f"interval score P90 {'-' if score is None else f'{score:.2f}':>5}")


def verdict(s: Mapping[str, Any]) -> str:
    """Which acceptance figures ``s`` meets."""
    if not s["n"]:
        return "no case"
    low, high = ACCEPTANCE["coverage"]
    checks = [(f"median |error| <= {100 * ACCEPTANCE['median_abs']:.0f}%", s["median_abs"] <= ACCEPTANCE["median_abs"]),
              (f"{100 * ACCEPTANCE['within_2x']:.0f}% within 2x", s["within_2x"] >= ACCEPTANCE["within_2x"]),
              ("coverage 80-95%", low <= s["coverage"] <= high)]
    return ", ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in checks)


def calibration_file(runs: Sequence[str], model: str, out_root: str) -> str:
    """``charz calibrate`` of the runs' microbenchmark cases (every one fits: the workloads are the
    test), written as a file beside the runs; its path."""
    from pytest_charz.calibration.file import calibrate
    from pytest_charz.formats import atomic_write_json

    path = f"{out_root}.calibration-{model}.json"
    atomic_write_json(path, calibrate(list(runs), model=model, holdout=None).to_json())
    return path


def report(runs: Sequence[str], models: Sequence[str], calibration: str | None = None,
           calibration_dir: str | None = None) -> int:
    """Score ``runs`` with each of ``models``; the calibrations fitted for them are written beside
    the first run, or in ``calibration_dir`` (a recorded run's folder is not written to)."""
    sys.path.insert(0, ROOT)
    from pytest_charz.units import format_time
    from pytest_charz.validation.workloads import validate_workloads

    found = False
    for run in runs:
        single = host_speed_change([run])
        if single is not None:
            print(f"host speed: the dispatch cases moved {100 * single[0]:.1f}% ({single[1]}) between the calibration "
                  f"and the end of {os.path.basename(run)}")
    # every case is scored at the median of its rounds, and so is the host's speed
    moved = host_speed_change(runs)
    if moved is None:
        print("host speed: no probe run beside the run files, not checked")
    else:
        print(f"host speed, median of the rounds: moved {100 * moved[0]:.1f}% ({moved[1]}), tolerance "
              f"{100 * PROBE_TOLERANCE:.0f}%")
    inconclusive = moved is not None and moved[0] > PROBE_TOLERANCE
    root = runs[0][:-5] if runs[0].endswith(".json") else runs[0]
    if calibration_dir is not None:
        os.makedirs(calibration_dir, exist_ok=True)
        root = os.path.join(calibration_dir, os.path.basename(root))
    sim_calibration: str | None = None
    for model in models:
        # scored as a user predicts: the calibration file passed by its path to the one core
        path = calibration or calibration_file(runs, model, root)
        sim_calibration = sim_calibration or path      # the simulator is priced by the first model's core
        for result in validate_workloads(list(runs), model, calibration=path):
            found = True
            data = result.to_json()
            print(f"\n{model} on {result.target}: calibration {path} (microbenchmark cases only), "
                  "tested on workload ops and workloads end to end")
            for part in ("ops", "workloads", "all"):
                print(_row(part, data[part]))
            for source, parts in data["by_source"].items():
                print(f"  {source} times:")
                for part in ("ops", "workloads", "all"):
                    print(_row(part, parts[part]))
                if source == "replayed":
                    median = parts["ops"]["median_abs"]
                    judged = (f"replayed ops median |error| <= {100 * REPLAYED_MEDIAN:.0f}%: "
                              f"{'met' if median is not None and median <= REPLAYED_MEDIAN else 'NOT met'}")
                else:
                    judged = verdict(parts["all"])
                if inconclusive:
                    judged = "inconclusive: the host's speed moved during the measurement; measure again on a quiet machine"
                print(f"  acceptance ({source} ops and workloads): {judged}")
                print(f"  per op class ({source}):")
                for name, s in parts["by_class"].items():
                    print(_row(name, s))
            if data["end_to_end_split"]:
                print("  end to end, split: its ops each timed alone | the rest (model code, and what the ops "
                      "lose in the workload's order)")
                for row in data["end_to_end_split"]:
                    print(f"    {row['case'][-48:]:<48} error {100 * row['error']:+6.1f}%"
                          f"  ops alone {format_time(row['kernels_measured_s']):>9} against "
                          f"{format_time(row['kernels_predicted_s']):>9}  rest {format_time(row['rest_measured_s']):>9} "
                          f"against {format_time(row['rest_predicted_s']):>9}")
            print("  beyond 2x or outside the interval:")
            for case in data["stops_transferring"][:25]:
                extrapolated = any(n.startswith("extrapolated") for n in case["notes"])
                print(f"    {case['level']:<8} {case['name'][-48:]:<48} {case['op_class']:<14} "
                      f"error {100 * case['error']:+7.1f}%{'  (extrapolated)' if extrapolated else ''}")
            for gap in data["not_covered"][:10]:
                print(f"  not covered: {gap['case']} {gap['op']}: {gap['reason']}")
    if not found:
        print("no run holds both microbenchmark and workload cases of one target")
        return 1
    sim_end_to_end(runs, sim_calibration)
    return 0


def sim_end_to_end(runs: Sequence[str], calibration: str | None = None) -> None:
    """``sim:cpu`` from the runs' own profile, end to end on their workload cases (the workload
    suite's and the multi-op held-out ones), as ``charz validate --sim`` scores it, its ops priced
    by the same calibration as the op-class scoring (``--sim-calibration``): one core."""
    import statistics

    from pytest_charz.profile.build import build_profile
    from pytest_charz.run import load_run
    from pytest_charz.sim.validate import score_runs

    loaded = [load_run(path) for path in runs]
    # the first round's graphs simulated (every round's are the same), each case's measured time
    # the median over the rounds, as the op-class scoring takes it (one round's outlier, a ViT
    # forward of 1.45 ms against 0.85-0.94 in every other round of three measurements, read
    # -42.5% when the first round's time alone was scored)
    measured: dict[str, list[float]] = {}
    for run in loaded:
        for case in run.cases:
            if case.median_s:
                measured.setdefault(case.id, []).append(float(case.median_s))
    scores = [replace(s, measured_s=statistics.median(measured[s.id]))
              for s in score_runs(loaded[:1], build_profile(loaded, list(runs)), calibration) if s.kind == "end-to-end"]
    if not scores:
        print("\nsim:cpu: no workload case with timed ops in the runs")
        return
    median = statistics.median(abs(s.error or 0.0) for s in scores)
    priced = f"calibration {os.path.basename(calibration)}" if calibration else "uncalibrated"
    print(f"\nsim:cpu end to end (profile of these runs, {priced}; simulated / measured - 1), each case's median over "
          f"{len(loaded)} round(s): n={len(scores)} "
          f"median |error| {_pct(median)}: {'met' if median <= SIM_END_TO_END_MEDIAN else 'NOT met'} "
          f"(<= {100 * SIM_END_TO_END_MEDIAN:.0f}%)")
    for score in scores:
        print(f"    {score.id[-60:]:<60} error {_pct(score.error):>8}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", default=[], help="score this run file instead of measuring")
    parser.add_argument("--out", default=os.path.join(ROOT, ".charz", "heldout.run.json"),
                        help="run file to write when measuring (its folder also takes the calibrations of a --run)")
    parser.add_argument("--threads", type=int, default=None, help="PyTorch intra-op threads (default: its own)")
    parser.add_argument("--full", action="store_true", help="full sampling budgets (default: --charz-quick)")
    parser.add_argument("--workloads", action="store_true", help="also run the workload suite's models")
    parser.add_argument("--models", default=None,
                        help="models to score (comma-separated; default: the default model, then composite)")
    parser.add_argument("--calibration", default=None,
                        help="score with this calibration file (default: calibrate the runs' microbenchmarks)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds to measure, each a fresh process (default 3)")
    args = parser.parse_args(argv)
    runs = list(args.run)
    if not runs:
        runs = round_paths(args.out, args.rounds)
        for path in runs:
            measure(path, args.threads, not args.full, args.workloads)
    sys.path.insert(0, ROOT)
    from pytest_charz.models.registry import DEFAULT_MODEL

    models = args.models or ",".join(dict.fromkeys([DEFAULT_MODEL, "composite"]))
    # a given run is scored with its calibrations written where measured runs go, not beside it
    return report(runs, [m.strip() for m in models.split(",") if m.strip()], args.calibration,
                  os.path.dirname(args.out) if args.run else None)


if __name__ == "__main__":
    raise SystemExit(main())
