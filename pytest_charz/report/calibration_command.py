"""``charz calibrate``: fit a model on run files, write the calibration file, say what was fitted."""
from __future__ import annotations

import argparse
import os

from ..calibration.file import Calibration, calibrate
from ..calibration.observations import load_runs
from ..errors import CharzError
from ..formats import atomic_write_json, check_output_file
from ..records import Run
from ..store import run_target_key


def default_calibration_path(calfile: Calibration, run: Run) -> str:
    """``baselines/<target key>/calibration-<model>.json`` of the run's target (the host CPU's key
    carries its fingerprint), where the plugin's judge looks."""
    return os.path.join("baselines", run_target_key(run), f"calibration-{calfile.model}.json")


def band_lines(calfile: Calibration) -> list[str]:
    """One line per regime: the band (relative error, %), how it was made, held-out coverage."""
    lines = []
    for regime, band in calfile.bands.items():
        coverage = "-" if band["coverage"] is None else f"{100 * band['coverage']:.0f}%"
        lines.append(f"  {regime:<9} band {100 * band['lo']:+.1f}% .. {100 * band['hi']:+.1f}%  "
                     f"({band['method']}, n={band['n']}, held-out coverage {coverage})")
    return lines


def calibrate_command(args: argparse.Namespace) -> int:
    """``charz calibrate RUN... [--model M] [--out PATH]``: fit and write the calibration file
    (``--out``, when given, is checked to be a file path before any run is read)."""
    if args.out:
        check_output_file(args.out, "--out")
    from .progress import Progress

    with Progress("charz calibrate", total=2) as progress:
        progress.step("reading the runs")
        runs = load_runs(list(args.runs))
        progress.step(f"fitting {args.model} and its bands on held-out cases")
        calfile = calibrate(runs, model=args.model, target=getattr(args, "target", None),
                            level=getattr(args, "level", 0.9), calibrate_on=getattr(args, "calibrate_on", None),
                            holdout=None if getattr(args, "no_holdout", False) else "alternate")
    measured = next(run for run in runs if run.target.id == calfile.target)
    out = args.out or default_calibration_path(calfile, measured)
    try:
        atomic_write_json(out, calfile.to_json())
    except OSError as exc:
        raise CharzError(f"cannot write the calibration file {out!r}: {exc}") from exc
    print(f"calibrated {calfile.model} on {len(calfile.fitted_on['cases'])} case(s) of {calfile.target}, "
          f"{len(calfile.held_out)} held out -> {out}")
    for line in band_lines(calfile):
        print(line)
    return 0
