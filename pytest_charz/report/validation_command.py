"""``charz validate``: validate models on run files and write the report (JSON, Markdown, HTML)."""
from __future__ import annotations

import argparse
import os

from ..validation.models import validate
from ..errors import CharzError, MissingExtraError
from ..formats import atomic_write_json, atomic_write_text, check_output_directory
from .markdown import render_table
from .progress import Progress
from .published_report import write_published_report
from .validation import render_html, render_markdown, summary_rows, workload_rows


def model_names(option: str | None) -> list[str] | None:
    """The ``--models`` option as names (None: every registered model)."""
    return [m.strip() for m in option.split(",") if m.strip()] if option else None


def validate_command(args: argparse.Namespace) -> int:
    """``charz validate RUN... [-o DIR] [--models A,B] [--calibrate-on GLOB]``: the output
    directory is checked (a directory, or one that can be made) before any run is read; every
    file is written atomically."""
    if args.out_dir:
        check_output_directory(args.out_dir, "-o/--out-dir")
    sim = getattr(args, "sim", False)
    with Progress("charz validate", total=4) as progress:
        progress.step("calibrating and scoring the models")
        report = validate(list(args.runs), models=model_names(args.models), calibrate_on=args.calibrate_on).to_json()
        out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.runs[0]))
        try:
            os.makedirs(out_dir, exist_ok=True)
            progress.step("writing JSON and Markdown")
            atomic_write_json(os.path.join(out_dir, "validation.json"), report)
            atomic_write_text(os.path.join(out_dir, "validation.md"), render_markdown(report))
            progress.step("drawing the HTML page")
            try:
                page = render_html(report)
            except MissingExtraError as exc:
                page = render_html(report, plots=False)
                print(f"charz: plots left out of validation.html: {exc}")
            atomic_write_text(os.path.join(out_dir, "validation.html"), page)
            progress.step("scoring the published measurements")
            published = write_published_report(out_dir)   # the published-measurements section
        except OSError as exc:
            raise CharzError(f"cannot write the validation report in {out_dir!r}: {exc}") from exc
    headers, rows = summary_rows(report)
    print(f"held-out error by model and regime ({report['split']}):")
    print(render_table(headers, rows, markdown=False))
    if report.get("workloads"):
        headers, rows = workload_rows(report)
        print("workloads, calibrated on microbenchmarks only (error = measured / predicted - 1):")
        print(render_table(headers, rows, markdown=False))
    for model, reason in report["skipped"].items():
        print(f"skipped {model}: {reason}")
    print(published)
    print(f"validation report: {os.path.join(out_dir, 'validation.html')} (.json, .md; published.md)")
    if sim:
        from ..sim.validate import print_sim_summary, validate_sim_command

        with Progress("charz validate --sim", total=1) as progress:
            progress.step("simulating the workload cases")
            document = validate_sim_command(list(args.runs), args.sim_profile, out_dir, quiet=True,
                                            calibration_path=getattr(args, "sim_calibration", None))
        print_sim_summary(document, out_dir)
    return 0
