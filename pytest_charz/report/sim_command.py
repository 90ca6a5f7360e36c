"""``charz sim NAME --target T [--phase ... --tp N] [--trace out.json] [--set name=value]``:
a workload graph simulated on a target, its latency, throughput, energy and bottleneck.

The graph comes from the same options as ``charz workload`` (:func:`.workload_command.graph_from_args`),
the machine from the catalogue (or ``--profile``), what-if figures from ``--set`` (the names of
``pytest_charz.sim.PARAMETERS``). The ops are priced by the one prediction core, loaded from
``--target``, ``--model``, ``--profile`` and ``--calibration`` by
:func:`pytest_charz.prediction.load_predictor` exactly as ``charz workload predict`` loads it (a
profile or calibration of another target is a usage error, never a mislabelled result).
``--trace`` writes Chrome trace-event JSON for Perfetto.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from ..errors import UsageError
from ..units import format_bandwidth, format_time
from .workload_command import check_host_dispatch_us, graph_from_args


def add_sim_options(parser: Any) -> None:
    """The options of ``charz sim`` beyond the graph's (:func:`.workload_command.add_graph_options`)."""
    parser.add_argument("--target", required=True, help="target id or alias (charz targets)")
    parser.add_argument("--profile", default=None, help="capability profile JSON of the target (measured figures)")
    parser.add_argument("--calibration", default=None,
                        help="calibration file of the model on the target (charz calibrate) that prices the ops")
    parser.add_argument("--model", default=None, help="model that prices the ops (default: the calibration's, "
                                                      "else the default model)")
    parser.add_argument("--trace", default=None, help="write the timeline as Chrome trace-event JSON (Perfetto)")
    parser.add_argument("--graph-replay", action="store_true", help="replay the ops as one captured graph")
    parser.add_argument("--queue-depth", type=int, default=None, help="launches the host may run ahead by")
    parser.add_argument("--host-dispatch-us", type=float, default=None, help="host time per op, in us")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="what-if machine parameter (repeatable), e.g. memory_bandwidth=4.8e12")


def parse_settings(pairs: list[str]) -> dict[str, float]:
    """``["name=value", ...]`` as a mapping of floats, each checked against its parameter
    (:func:`pytest_charz.sim.parameters.check_parameter_value`: NaN and infinity are refused);
    UsageError naming the malformed pair or the parameter."""
    from ..sim.parameters import check_parameter_value

    values: dict[str, float] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        try:
            if not sep:
                raise ValueError
            number = float(raw)
        except ValueError:
            raise UsageError(f"--set takes NAME=NUMBER, got {pair!r}") from None
        try:
            values[name.strip()] = check_parameter_value(name.strip(), number)
        except UsageError as exc:
            raise UsageError(f"--set {pair}: {exc}") from None
    return values


def figures_given(settings: Mapping[str, float], host_dispatch_us: float | None) -> list[str]:
    """The what-if figures of the command line as the user wrote them (``--set NAME=VALUE``,
    ``--host-dispatch-us US``), to name in an error about what they produced."""
    given = [f"--set {name}={value:g}" for name, value in settings.items()]
    if host_dispatch_us is not None:
        given.append(f"--host-dispatch-us {host_dispatch_us:g}")
    return given


def check_finite_result(result: Any, given: list[str]) -> None:
    """UsageError unless the simulated latency is finite and the energy finite or unknown (NaN):
    a figure given far outside any machine's (``--set l2_bandwidth=1e-300``) overflows the
    simulator, and an infinite latency is no answer. The error names the figures ``given``."""
    bad = [(what, value) for what, value in (("latency", result.latency_s), ("energy", result.energy_j))
           if math.isinf(value) or (what == "latency" and math.isnan(value))]
    if not bad:
        return
    what, value = bad[0]
    raise UsageError(f"the simulated {what} is {value}, not a figure: "
                     + (f"the figures given ({', '.join(given)}) are beyond what the simulator can compute "
                        "with; give figures of the order of a real machine's" if given
                        else "the target's figures are beyond what the simulator can compute with"))


def base_machine_from_args(args: Any) -> Any:
    """The simulated machine of ``args``' target (or profile), priced by the core of its target,
    model, profile and calibration (each checked against the others), before any ``--set``."""
    from ..prediction import load_predictor, read_profile
    from ..sim import Machine
    from ..targets.catalogue import resolve

    spec = resolve(args.target)
    profile = read_profile(args.profile) if args.profile else None
    predictor = load_predictor(spec, getattr(args, "model", None), profile, getattr(args, "calibration", None))
    return Machine.from_profile(profile, spec, predictor) if profile is not None \
        else Machine.from_spec(spec, predictor)


def machine_from_args(args: Any) -> Any:
    """The simulated machine ``args`` ask for: :func:`base_machine_from_args` with the ``--set``
    figures."""
    settings = parse_settings(args.set)
    return base_machine_from_args(args).with_params(settings)


def whatif_line(base: Any, settings: Mapping[str, float], host_dispatch_us: float | None) -> str | None:
    """``what-if: memory_bandwidth 4.8 TB/s (was 3.35 TB/s), host dispatch 2 us``: the figures the
    command line changed, each beside the machine's own; None when nothing was changed."""
    from ..sim.parameters import format_parameter

    changed = [f"{name} {format_parameter(name, value)} (was {format_parameter(name, base.param(name))})"
               for name, value in settings.items()]
    if host_dispatch_us is not None:
        changed.append(f"host dispatch {format_time(host_dispatch_us * 1e-6)} per op")
    return "what-if: " + ", ".join(changed) if changed else None


def result_lines(result: Any) -> list[str]:
    """What ``charz sim`` prints for a :class:`~pytest_charz.sim.SimResult`."""
    params = ", ".join(f"{k}={result.params[k]}" for k in ("batch", "seq", "context", "tp", "dtype")
                       if k in result.params)
    lines = [f"{result.workload} {result.phase} ({params}) simulated on {result.target}"]
    throughput = f", {result.tokens_per_s:.4g} tokens/s" if result.tokens_per_s is not None else ""
    lines.append(f"latency: {format_time(result.latency_s)}{throughput}, {result.bound}-bound (host dispatch "
                 f"{format_time(result.host_s)}, device critical path {format_time(result.device_s)})")
    lines.append(f"priced by: {result.model}")
    if result.energy_j == result.energy_j:
        per_token = f", {result.joules_per_token:.3g} J/token" if result.joules_per_token is not None else ""
        lines.append(f"energy: {result.energy_j:.4g} J over {result.devices} device(s), average "
                     f"{result.average_power_w:.4g} W{per_token} (clock {result.clock_mhz:.4g} MHz)")
    else:
        lines.append("energy: unknown (no power figures for this target)")
    busy = result.bottleneck_detail.busy_s
    lines.append(f"bottleneck: {result.bottleneck} (busy {format_time(busy.get(result.bottleneck, 0.0))}, "
                 f"{100 * result.utilization.get(result.bottleneck, 0.0):.1f}% of the time)")
    lines.append("utilization: " + ", ".join(f"{name} {100 * value:.1f}%" for name, value
                                             in sorted(result.utilization.items(), key=lambda item: -item[1])
                                             if value > 0.0005))
    path = result.bottleneck_detail.critical_path_s
    lines.append(f"critical path ({result.bottleneck_detail.critical_path_ops} ops): "
                 + ", ".join(f"{name} {format_time(seconds)}" for name, seconds in list(path.items())[:5]))
    lines.extend(result.notes)
    return lines


def sim_command(args: Any, emit: Callable[[str], None] = print) -> int:
    """Simulate the graph ``args`` ask for; print the summary (or JSON with ``--json``) and
    write the trace when ``--trace`` is given. Exit status 0.

    Every figure is checked before anything is simulated (``--set``, ``--host-dispatch-us``:
    finite, in range; ``--trace``: a file path, not a directory), and a result that is not a
    finite figure is a UsageError naming what was given, never ``inf`` or ``NaN`` printed."""
    from ..formats import atomic_write_json, check_output_file, dumps_json
    from ..sim import SimOptions, simulate_graph
    from ..sim.defaults import LAUNCH_QUEUE_DEPTH
    from ..sim.runtime import with_runtime_profile

    check_host_dispatch_us(args.host_dispatch_us)
    if args.trace:
        check_output_file(args.trace, "--trace")
    graph = graph_from_args(args)
    settings = parse_settings(args.set)
    base = base_machine_from_args(args)
    machine = base.with_params(settings)
    options = SimOptions(graph_replay=args.graph_replay,
                         launch_queue_depth=args.queue_depth if args.queue_depth is not None else LAUNCH_QUEUE_DEPTH,
                         trace=args.trace is not None,
                         host_dispatch_s=None if args.host_dispatch_us is None else args.host_dispatch_us * 1e-6)
    options = with_runtime_profile(options, getattr(args, "runtime", None), graph)
    given = figures_given(settings, args.host_dispatch_us)
    try:
        result = simulate_graph(graph, machine, options)
    except UsageError as exc:
        # An op priced out of range names the record, not the figure that put it there.
        raise UsageError(f"{exc} (what-if figures given: {', '.join(given)})" if given else str(exc)) from None
    check_finite_result(result, given)
    if args.trace:
        atomic_write_json(args.trace, {"kind": "charz-sim-trace", "version": 1, "displayTimeUnit": "ns",
                                       "traceEvents": result.trace_events()})
    if args.json:
        emit(dumps_json({**result.to_json(), "ops": []} if not args.all_ops else result.to_json(), "charz sim --json"))
        return 0
    lines = result_lines(result)
    changed = whatif_line(base, settings, args.host_dispatch_us)
    for line in lines[:1] + ([changed] if changed else []) + lines[1:]:
        emit(line)
    if args.trace:
        dram = machine.param("memory_bandwidth")
        emit(f"trace: {args.trace} ({len(result.ops)} ops; DRAM {format_bandwidth(dram)})")
    return 0
