"""The ``charz`` command: targets, profiles and validation reports from run files."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .errors import CharzError, run_command
from .models.registry import DEFAULT_MODEL


def _targets(args: argparse.Namespace) -> int:
    from .targets.catalogue import catalogue, resolve
    from .targets.show import format_catalogue, format_spec

    if args.action == "show":
        if not args.name:
            raise CharzError("usage: charz targets show NAME")
        print(format_spec(resolve(args.name)))
    else:
        # The host CPU is a target too: its spec is derived from this machine, not read from a file.
        print(format_catalogue([resolve("cpu"), *catalogue().values()]))
    return 0


def _version() -> str:
    """The installed distribution's version (what ``pip show pytest-charz`` says)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pytest-charz")
    except PackageNotFoundError:
        from . import __version__

        return __version__


def _profile(args: argparse.Namespace) -> int:
    from .report.profile_command import profile_command

    return profile_command(args)


def _compare(args: argparse.Namespace) -> int:
    from .report.compare_command import compare_command

    return compare_command(args)


def _history(args: argparse.Namespace) -> int:
    from .report.history_command import history_command

    return history_command(args)


def _validate(args: argparse.Namespace) -> int:
    from .report.validation_command import validate_command

    return validate_command(args)


def _calibrate(args: argparse.Namespace) -> int:
    from .report.calibration_command import calibrate_command

    return calibrate_command(args)


def _workload(args: argparse.Namespace) -> int:
    from .report.workload_command import workload_command

    return workload_command(args)


def _bottleneck(args: argparse.Namespace) -> int:
    from .report.bottleneck_command import bottleneck_command

    return bottleneck_command(args)


def _export(args: argparse.Namespace) -> int:
    from .report.export_command import export_command

    return export_command(args)


def _sim(args: argparse.Namespace) -> int:
    from .report.sim_command import sim_command

    return sim_command(args)


def _sweep(args: argparse.Namespace) -> int:
    from .report.sweep_command import sweep_command

    return sweep_command(args)


def _init(args: argparse.Namespace) -> int:
    from .init_project import init_command

    return init_command(args)


def _ab(args: argparse.Namespace) -> int:
    from .report.ab_command import ab_command

    return ab_command(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="charz", description="pytest-charz: targets, profiles, model validation")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    targets = sub.add_parser("targets", help="list the target catalogue, or show one target")
    targets.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    targets.add_argument("name", nargs="?", help="target id or alias (with 'show')")
    targets.set_defaults(func=_targets)

    init = sub.add_parser("init", help="lay out the suites, their conftest.py and the reference baselines "
                                       "in a directory (then: pytest suites/)")
    init.add_argument("directory", nargs="?", default=".", help="where (default: the current directory)")
    init.add_argument("--force", action="store_true", help="overwrite files that exist")
    init.set_defaults(func=_init)

    profile = sub.add_parser("profile", help="capability profile (JSON, Markdown, HTML) from run files")
    profile.add_argument("runs", nargs="+", help="run files (.json) to build the profile from")
    profile.add_argument("-o", "--out-dir", default=None, help="where to write (default: next to the first run file)")
    profile.add_argument("--name", default=None, help="base name of the profile files (default: <run>.profile)")
    profile.set_defaults(func=_profile)

    compare = sub.add_parser("compare", help="targets side by side from profiles (ratios, winners, caveats), or runs "
                                             "case by case (medians, ratios with intervals, changes)")
    compare.add_argument("profiles", nargs="+", help="profile files (.profile.json), or run files (.json, .json.gz); "
                                                     "the first is the baseline")
    compare.add_argument("-o", "--out-dir", default=None, help="where to write (default: next to the first profile; "
                                                               "runs: written only with -o or --name)")
    compare.add_argument("--name", default=None, help="base name of the comparison files (default: comparison)")

    from .report.runs_compare_command import add_run_compare_options

    add_run_compare_options(compare)
    compare.set_defaults(func=_compare)

    from .report.history_command import add_history_options

    history = sub.add_parser("history", help="each case's trend across runs or a baseline store: steps and the "
                                             "commits between them (text, HTML)")
    add_history_options(history)
    history.set_defaults(func=_history)

    validate = sub.add_parser("validate", help="model error by regime, interval coverage and transfer")
    validate.add_argument("runs", nargs="+", help="run files (.json)")
    validate.add_argument("-o", "--out-dir", default=None, help="where to write the report")
    validate.add_argument("--models", default=None, help="comma-separated model names (default: all)")
    validate.add_argument("--calibrate-on", default=None,
                          help="glob of case ids used for calibration (the rest is held out)")
    validate.add_argument("--sim", action="store_true",
                          help="also score the simulator: the runs' workload cases end to end and per op, and "
                               "the committed table of published GPU figures (validation-sim.json, .md)")
    validate.add_argument("--sim-profile", default=None, metavar="PATH",
                          help="with --sim: simulate the runs' target from this capability profile (sim:cpu "
                               "from the host's own profile) instead of its spec")
    validate.add_argument("--sim-calibration", default=None, metavar="PATH",
                          help="with --sim: price the simulated ops with this calibration file (charz calibrate), "
                               "as charz sim --calibration does")
    validate.set_defaults(func=_validate)

    calibrate = sub.add_parser("calibrate", help="fit a model's efficiency and error bands on run files")
    calibrate.add_argument("runs", nargs="+", help="run files (.json) of one target")
    calibrate.add_argument("--model", default=DEFAULT_MODEL, help=f"model name (default: {DEFAULT_MODEL})")
    calibrate.add_argument("--out", default=None,
                           help="calibration file (default: baselines/<target-id>/calibration-<model>.json)")
    calibrate.add_argument("--target", default=None, help="target id, when the runs are of several")
    calibrate.add_argument("--calibrate-on", default=None,
                           help="glob of case ids used for calibration (the rest is held out)")
    calibrate.add_argument("--no-holdout", action="store_true",
                           help="fit on every case (no held-out coverage is measured)")
    calibrate.set_defaults(func=_calibrate)

    export = sub.add_parser("export", help="a run as pytest-benchmark JSON, or one row per case as CSV or Parquet")
    export.add_argument("run", help="run file (.json, .json.gz or the session's .partial.jsonl journal)")
    export.add_argument("--format", required=True, choices=["pytest-benchmark", "csv", "parquet"],
                        help="pytest-benchmark: its JSON (pytest-benchmark compare, CI trackers); "
                             "csv; parquet (extra 'export')")
    export.add_argument("-o", "--out", default=None,
                        help="file to write (default: next to the run, <run>.benchmark.json / .cases.csv / "
                             ".cases.parquet)")
    export.set_defaults(func=_export)

    from .report.bottleneck_command import add_bottleneck_options

    bottleneck = sub.add_parser("bottleneck", help="what limits each case (and each workload op), with the evidence")
    add_bottleneck_options(bottleneck)
    bottleneck.set_defaults(func=_bottleneck)

    from .report.workload_command import add_graph_options

    workload = sub.add_parser("workload", help="AI models as op graphs: list them, show one, predict one")
    actions = workload.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="the known models")
    show = actions.add_parser("show", help="a model's op graph: FLOPs, bytes, intensity per op and op class")
    add_graph_options(show)
    predict = actions.add_parser("predict", help="a model's latency on a target, op by op and end to end")
    add_graph_options(predict)
    predict.add_argument("--target", required=True, help="target id or alias (charz targets)")
    predict.add_argument("--profile", default=None, help="capability profile JSON of the target (measured ceilings)")
    predict.add_argument("--calibration", default=None,
                         help="calibration file of the model on the target (charz calibrate)")
    predict.add_argument("--model", default=None,
                         help=f"model name (default: the calibration's, else {DEFAULT_MODEL})")
    predict.add_argument("--host-dispatch-us", type=float, default=None,
                         help="host time to dispatch one op, in us (default: the profile's launch figure "
                              "or a PyTorch-eager constant)")
    workload.set_defaults(func=_workload)

    from .report.sim_command import add_sim_options

    sim = sub.add_parser("sim", help="a workload simulated on a target: latency, energy, bottleneck, trace")
    add_graph_options(sim)
    add_sim_options(sim)
    sim.set_defaults(func=_sim)

    from .report.sweep_command import add_sweep_options

    sweep = sub.add_parser("sweep", help="what-if: a workload simulated over architecture parameters "
                                         "(table, Pareto front of latency against energy, sensitivity)")
    add_graph_options(sweep)
    add_sweep_options(sweep)
    sweep.set_defaults(func=_sweep)

    from .report.ab_command import add_ab_options

    ab = sub.add_parser("ab", help="A/B in one session: two revisions or environments measured interleaved, "
                                   "round by round; exit 1 when B is slower beyond the threshold")
    add_ab_options(ab)
    ab.set_defaults(func=_ab)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``charz`` with ``argv`` (default: the process's arguments) and return its exit status.

    A bad option exits 2 through argparse; everything else goes through
    :func:`pytest_charz.errors.run_command`, the one mapping of errors to statuses: a usage or
    file error is one ``charz: error:`` line and 2, Ctrl-C ``charz: interrupted`` and 130, a
    reader closing the pipe (``charz sim ... | head``) a quiet 141.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_command("charz", lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
