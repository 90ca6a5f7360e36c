"""``charz sweep``: a workload simulated over a grid of architecture parameters; writes the table,
the Pareto front and the sensitivity ranking as JSON, Markdown and HTML with plots."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

from ..errors import CharzError, MissingExtraError, UsageError
from ..formats import atomic_write_json, atomic_write_text

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
    """Every value of every axis applied alone: a negative bandwidth or a zero unit count is a
    UsageError before any configuration is simulated."""
    for axis in axes:
        for value in axis.values:
            try:
                machine.with_params({axis.name: value})
            except UsageError as exc:
                raise UsageError(f"--vary {axis.name}: {exc}") from None


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
    from .plots import new_figure, svg_text

    plots = []
    figure = new_figure()
    axes = figure.add_subplot(1, 1, 1)
    axes.scatter([p.latency_s * 1e3 for p in result.points], [p.energy_j for p in result.points], s=8,
                 color="#999999", label="configurations")
    front = [result.points[i] for i in result.front]
    axes.plot([p.latency_s * 1e3 for p in front], [p.energy_j for p in front], "o-", color="#c0392b", markersize=4,
              label="Pareto front")
    if result.baseline is not None:
        axes.scatter([result.baseline.latency_s * 1e3], [result.baseline.energy_j], marker="*", s=120,
                     color="#2c3e50", label="unchanged machine", zorder=3)
    axes.set_xlabel("latency (ms)")
    axes.set_ylabel("energy (J)")
    axes.legend(loc="best", fontsize="small")
    axes.grid(True, alpha=0.3)
    plots.append(("Latency against energy", svg_text(figure)))
    if result.ranking:
        figure = new_figure()
        axes = figure.add_subplot(1, 1, 1)
        names = [s.parameter for s in result.ranking][::-1]
        axes.barh(names, [100 * s.swing for s in result.ranking][::-1], color="#2980b9")
        axes.set_xlabel("end-to-end latency swing over the range (%)")
        axes.grid(True, axis="x", alpha=0.3)
        plots.append(("Sensitivity of the end-to-end time", svg_text(figure)))
    return plots


def sweep_command(args: argparse.Namespace) -> int:
    """``charz sweep WORKLOAD --target T --vary PARAM=LO:HI:N ... [-o DIR]``."""
    from ..sim import PARAMETERS
    from ..sim.sweep import GraphEvaluator, SweepResult, grid, parse_axis, run_configs
    from ..sim.sweep_report import headline, sensitivity_table
    from .markdown import render_table
    from .workload_command import graph_from_args

    if not args.vary:
        raise UsageError(f"charz sweep needs at least one --vary PARAM=LO:HI:N; parameters: {', '.join(sorted(PARAMETERS))}")
    axes = [parse_axis(text, PARAMETERS) for text in args.vary]
    configs = grid(axes)
    graph = graph_from_args(args)
    spec, machine = machine_of(args.target, args.profile)
    check_axis_values(machine, axes)
    evaluate = GraphEvaluator(machine, graph)
    baseline = evaluate({})          # a workload that does not fit fails here, saying what it needs
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if args.jobs is None and len(configs) < PARALLEL_FROM:
        jobs = 1
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
        import json

        print(json.dumps(result.to_json(), indent=1))
        return 0
    for line in headline(result):
        print(line)
    print(render_table(*sensitivity_table(result), markdown=False))
    print(f"sweep report: {os.path.join(args.out_dir, 'sweep.html')} (.json, .md)")
    return 0


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
