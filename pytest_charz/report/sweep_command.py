"""``charz sweep``: a workload simulated over a grid of architecture parameters; writes the table,
the Pareto front and the sensitivity ranking as JSON, Markdown and HTML with plots."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

from ..errors import CharzError, MissingExtraError, UsageError
from ..formats import atomic_write_json, atomic_write_text, check_output_directory, dumps_json
from ..sim.sweep import MAX_CONFIGS

#: Below this many configurations a sweep runs in this process: starting workers costs more.
PARALLEL_FROM = 64


def add_sweep_options(parser: Any) -> None:
    """``charz sweep``'s options after the graph's (``workload_command.add_graph_options``)."""
    parser.add_argument("--target", required=True, help="target id or alias of the simulated machine (charz targets)")
    parser.add_argument("--profile", default=None,
                        help="capability profile JSON: simulate the measured machine instead of the spec's figures")
    parser.add_argument("--vary", action="append", default=[], metavar="PARAM=LO:HI:N",
                        help="a swept parameter: N values from LO to HI (PARAM=LO:HI:N:log for geometric steps, "
                             "PARAM=V1,V2,... for a list); repeat for more axes")
    parser.add_argument("-o", "--out-dir", default=".charz/sweeps", help="where to write the report (default: .charz/sweeps)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes (default: the CPUs; 1 runs in this process)")
    parser.add_argument("--dask-scheduler", default=None, metavar="ADDRESS",
                        help="run the sweep on this Dask cluster (tcp://host:8786; needs the sweep extra)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--max-configs", type=int, default=MAX_CONFIGS, metavar="N",
                        help=f"refuse a grid of more configurations than this (default: {MAX_CONFIGS}); "
                             "the refusal says how long the sweep would take")


def machine_of(target: str, profile_path: str | None) -> tuple[Any, Any]:
    """The target's spec and the simulated machine (from the profile when one is given)."""
    from ..sim import Machine
    from ..targets.catalogue import resolve

    spec = resolve(target)
    if profile_path:
        from ..formats import PROFILE

        return spec, Machine.from_profile(PROFILE.load(profile_path), spec)
    return spec, Machine.from_spec(spec)


def check_axis_values(machine: Any, axes: Any) -> None:
    """Every value of every axis checked alone: a NaN, a negative bandwidth or a zero unit count
    is a UsageError before any configuration is simulated. Each value is range-checked; the
    smallest and largest of an axis are also applied to the machine (the figures in between
    apply as they do)."""
    from ..sim.parameters import check_parameter_value

    for axis in axes:
        try:
            for value in axis.values:
                check_parameter_value(axis.name, value)
            for value in {min(axis.values), max(axis.values)}:
                machine.with_params({axis.name: value})
        except UsageError as exc:
            raise UsageError(f"--vary {axis.name}: {exc}") from None


def duration_text(seconds: float) -> str:
    """A wall-clock estimate for a person: ``40 s``, ``12 min``, ``3.5 h``, ``2.1 days``."""
    if seconds < 90:
        return f"{max(seconds, 1.0):.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def sweep_estimate_s(count: int, per_config_s: float, jobs: int) -> float:
    """Roughly how long ``count`` configurations take at ``per_config_s`` each on ``jobs`` workers."""
    return count * per_config_s / max(1, min(jobs, count))


def check_grid_cap(axes: Any, count: int, cap: int, per_config_s: float, jobs: int) -> None:
    """UsageError when the grid of ``count`` configurations is over ``cap``, with the axes' sizes,
    the time one configuration took and how long the whole sweep would take."""
    if count <= cap:
        return
    sizes = " x ".join(f"{len(axis.values)} values of {axis.name}" for axis in axes)
    raise UsageError(f"the sweep has {count} configurations ({sizes}), more than the cap of {cap}: at about "
                     f"{per_config_s * 1e3:.3g} ms each on {jobs} worker(s) it would take about "
                     f"{duration_text(sweep_estimate_s(count, per_config_s, jobs))}; use fewer values, or "
                     f"--max-configs {count} to run it anyway")


def progress_bar(total: int, enabled: bool) -> tuple[Callable[[int], None], Callable[[], None]]:
    """A progress callback (configurations done) and its close; tqdm on stderr when installed,
    else a line per tenth of the sweep."""
    if not enabled:
        return (lambda done: None), (lambda: None)
    try:
        from tqdm import tqdm
    except ImportError:
        marks = {max(1, total * k // 10) for k in range(1, 11)}

        def report(done: int) -> None:
            if done in marks or done == total:
                print(f"charz sweep: {done}/{total} configurations", file=sys.stderr)
        return report, (lambda: None)
    bar = tqdm(total=total, unit="config", desc="charz sweep", file=sys.stderr, leave=False)
    state = {"done": 0}

    def update(done: int) -> None:
        bar.update(done - state["done"])
        state["done"] = done
    return update, bar.close


def sweep_plots(result: Any) -> list[tuple[str, str]]:
    """The Pareto front and the sensitivity ranking as inline SVG (needs matplotlib: extra ``report``)."""
    from .sweep_plots import sweep_svgs

    return sweep_svgs(result)


def sweep_command(args: argparse.Namespace) -> int:
    """``charz sweep WORKLOAD --target T --vary PARAM=LO:HI:N ... [-o DIR]``.

    Everything is checked before the sweep starts: the axes, the output directory, every value
    on the machine, and the grid's size against ``--max-configs`` (refused with an estimate of
    the time it would take, from the time its first configuration took). A sweep that starts
    says how many configurations it runs and about how long that takes."""
    from ..measure.clock import now_ns
    from ..sim import PARAMETERS
    from ..sim.sweep import GraphEvaluator, SweepResult, grid, grid_size, parse_axis
    from ..sim.sweep_run import run_configs
    from ..sim.sweep_report import headline, sensitivity_table
    from .markdown import render_table
    from .workload_command import graph_from_args

    if not args.vary:
        raise UsageError(f"charz sweep needs at least one --vary PARAM=LO:HI:N; parameters: {', '.join(sorted(PARAMETERS))}")
    cap = getattr(args, "max_configs", MAX_CONFIGS)
    if not isinstance(cap, int) or cap < 1:
        raise UsageError(f"--max-configs must be a positive integer, got {cap!r}")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be a positive integer, got {args.jobs}")
    check_output_directory(args.out_dir, "-o/--out-dir")
    axes = [parse_axis(text, PARAMETERS) for text in args.vary]
    count = grid_size(axes)
    graph = graph_from_args(args)
    spec, machine = machine_of(args.target, args.profile)
    check_axis_values(machine, axes)
    evaluate = GraphEvaluator(machine, graph)
    baseline = evaluate({})          # a workload that does not fit fails here, saying what it needs
    # The estimate is timed on the grid's first configuration, after the baseline paid the cold start.
    first = {axis.name: axis.values[0] for axis in axes}
    started_ns = now_ns()
    evaluate(first)
    per_config_s = (now_ns() - started_ns) * 1e-9
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if args.jobs is None and count < PARALLEL_FROM:
        jobs = 1
    check_grid_cap(axes, count, cap, per_config_s, jobs)
    configs = grid(axes, max_configs=cap)
    print(f"charz sweep: {count} configurations, about {duration_text(sweep_estimate_s(count, per_config_s, jobs))} "
          f"on {jobs} worker(s)", file=sys.stderr)
    update, close = progress_bar(len(configs), not args.no_progress)
    try:
        points = run_configs(configs, evaluate, jobs=jobs, progress=update, scheduler=args.dask_scheduler)
    finally:
        close()
    parameters = {axis.name: {"unit": PARAMETERS[axis.name].unit, "description": PARAMETERS[axis.name].description,
                              "base": machine.param(axis.name)} for axis in axes}
    result = SweepResult.of({"name": graph.name, "phase": graph.phase, "params": dict(graph.params)}, spec.id,
                            str(machine.id), axes, points, baseline, parameters)
    write_report(result, args.out_dir)
    if getattr(args, "json", False):
        print(dumps_json(result.to_json(), "charz sweep --json"))
        return 0
    for line in headline(result):
        print(line)
    for line in axis_lines(axes, machine):
        print(line)
    print(render_table(*sensitivity_table(result), markdown=False))
    print(f"sweep report: {os.path.join(args.out_dir, 'sweep.html')} (.json, .md)")
    return 0


def axis_lines(axes: Any, machine: Any) -> list[str]:
    """One line per ``--vary`` axis: the values swept, in human units, beside the machine's own
    figure (``varied compute_units: 66, 132, 198, 264 units (machine: 132 units)``)."""
    from ..sim.parameters import format_parameter

    lines = []
    for axis in axes:
        shown = [format_parameter(axis.name, value) for value in axis.values]
        if len(shown) > 8:
            shown = [*shown[:3], f"... ({len(shown) - 6} more)", *shown[-3:]]
        lines.append(f"varied {axis.name}: {', '.join(shown)} "
                     f"(machine: {format_parameter(axis.name, machine.param(axis.name))})")
    return lines


def write_report(result: Any, out_dir: str) -> None:
    """``sweep.json``, ``sweep.md`` and ``sweep.html`` in ``out_dir``."""
    from ..sim.sweep_report import render_html, render_markdown

    try:
        os.makedirs(out_dir, exist_ok=True)
        atomic_write_json(os.path.join(out_dir, "sweep.json"), result.to_json())
        atomic_write_text(os.path.join(out_dir, "sweep.md"), render_markdown(result))
        try:
            page = render_html(result, sweep_plots(result))
        except MissingExtraError as exc:
            page = render_html(result)
            print(f"charz: plots left out of sweep.html: {exc}")
        atomic_write_text(os.path.join(out_dir, "sweep.html"), page)
    except OSError as exc:
        raise CharzError(f"cannot write the sweep report in {out_dir!r}: {exc}") from exc
