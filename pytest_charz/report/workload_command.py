"""``charz workload list | show NAME | predict NAME --target T``: the known models, one model's
op graph (FLOPs, bytes, intensity per op and per op class) and its predicted latency op by op.

Graphs come from :func:`pytest_charz.workloads.builders.build`, predictions from
:func:`pytest_charz.workloads.predict.predict_graph` (the core loaded from ``--target``,
``--model``, ``--profile`` and ``--calibration`` by :func:`pytest_charz.prediction.load_predictor`,
as ``charz sim`` loads it; a graph that does not fit the device's DRAM is refused with what it
needs and what there is, as ``charz sim`` refuses it); this module checks the arguments,
collapses repeated layers into one row per op name pattern (``layers.*.mlp.up_proj x80``) and prints.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from ..errors import UsageError
from ..units import format_bytes, format_time
from .markdown import render_table

if TYPE_CHECKING:
    from ..workloads.graph import Graph
    from ..workloads.predict import GraphPrediction

#: A graph with more ops than this prints one row per op name pattern (``--all-ops`` to list all).
COLLAPSE_ABOVE_OPS = 40
#: Tokens of a prefill or encoder pass, and cached tokens of a decode step, when not given.
DEFAULT_TOKENS = 1024
_CAPTURE_COUNTER = re.compile(r"#\d+$")


# -- arguments ------------------------------------------------------------------------------------
def add_graph_options(parser: Any) -> None:
    """The options that choose a graph of a model (shared by ``show`` and ``predict``).

    Phase and dtype are checked by :func:`graph_from_args` rather than by argparse choices, so a
    bad value is a ``charz: error:`` like every other usage error.
    """
    parser.add_argument("name", help="model name (charz workload list)")
    parser.add_argument("--phase", default=None, help="prefill, decode, train or forward (default: the model's)")
    parser.add_argument("--batch", type=int, default=1, help="batch size (default: 1)")
    parser.add_argument("--seq", type=int, default=None,
                        help=f"tokens per sequence of a prefill or forward pass (default: {DEFAULT_TOKENS})")
    parser.add_argument("--context", type=int, default=None,
                        help=f"tokens already in the KV cache of a decode step (default: {DEFAULT_TOKENS})")
    parser.add_argument("--dtype", default=None, help="bf16, fp16, fp32... (default: the model's)")
    parser.add_argument("--precision", default=None,
                        help="precision recipe: fp8, int8-wo, int4-wo, bf16, fp16, fp32 (replaces --dtype)")
    parser.add_argument("--kv-dtype", default=None, help="KV cache dtype: fp8, bf16, fp16, fp32 (default: the "
                                                         "activations')")
    parser.add_argument("--runtime", default=None, help="how the graph is issued: eager, graphs (CUDA graph "
                                                        "replay), serving (a compiled serving engine's fused "
                                                        "kernels) or vllm (its fused kernels, decode replayed, "
                                                        "the engine's host work per step)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (default: 1)")
    parser.add_argument("--unfused", action="store_true", help="attention as its parts, not one fused kernel")
    parser.add_argument("--num-layers", type=int, default=None, help="build only this many layers")
    parser.add_argument("--all-ops", action="store_true", help="one row per op, never collapse layers")
    parser.add_argument("--json", action="store_true", help="print the JSON document instead of tables")


def check_host_dispatch_us(value: float | None) -> float | None:
    """``--host-dispatch-us`` if it is absent or a finite number >= 0; UsageError otherwise."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise UsageError(f"--host-dispatch-us must be a finite number of microseconds >= 0, got {value}")
    return value


def check_positive_count(name: str, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise UsageError(f"--{name} must be a positive integer, got {value}")
    return value


def graph_from_args(args: Any) -> "Graph":
    """The graph ``args`` ask for (name, phase, batch, seq, context, dtype, tp, unfused)."""
    from ..workloads.builders import build
    from ..workloads.graph import PHASES, check_dtype
    from ..workloads.model_configs import load_config

    config = load_config(args.name)          # an unknown name: UsageError with the nearest known one
    if args.phase is not None and args.phase not in PHASES:
        raise UsageError(f"--phase must be one of {', '.join(PHASES)}; got {args.phase!r}")
    if args.dtype is not None:
        check_dtype(args.dtype)
    for option in ("batch", "seq", "context", "tp", "num_layers"):
        check_positive_count(option.replace("_", "-"), getattr(args, option, None))
    phase = args.phase or ("decode" if config.is_decoder else "forward")
    seq, context = default_tokens(config, phase, args.seq, args.context)
    recipe = recipe_from_args(args)
    return build(config, phase, batch=args.batch, seq=seq, context=context, dtype=recipe["dtype"],
                 tp=args.tp, fused_attention=not args.unfused, num_layers=getattr(args, "num_layers", None),
                 kernels=recipe["kernels"], kv_dtype=recipe["kv_dtype"])


def recipe_from_args(args: Any) -> dict[str, Any]:
    """``--precision`` (else ``--dtype``), ``--kv-dtype`` and the kernels ``--runtime`` implies,
    checked: ``{"dtype", "kv_dtype", "kernels"}``."""
    from ..workloads.builders_ops import KV_DTYPES, PRECISIONS
    from ..workloads.runtime import runtime_profile

    precision = getattr(args, "precision", None)
    if precision is not None and precision not in PRECISIONS:
        raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    kv_dtype = getattr(args, "kv_dtype", None)
    if kv_dtype is not None and kv_dtype not in KV_DTYPES:
        raise UsageError(f"--kv-dtype must be one of {', '.join(KV_DTYPES)}; got {kv_dtype!r}")
    profile = runtime_profile(getattr(args, "runtime", None))
    kernels = profile.kernels if profile is not None and profile.kernels else "fused"
    return {"dtype": precision or args.dtype, "kv_dtype": kv_dtype, "kernels": kernels}


def default_tokens(config: Any, phase: str, seq: int | None, context: int | None) -> tuple[int | None, int | None]:
    """``seq`` and ``context`` with the command's defaults filled in: a decode step after
    :data:`DEFAULT_TOKENS` cached tokens, other phases over that many tokens, both capped by the
    model's position table; a ViT's tokens follow from its image and patch sizes (none given)."""
    if config.family == "vit":
        return seq, context
    limit = int(config.get("max_position_embeddings") or DEFAULT_TOKENS + 1)
    if phase == "decode":
        return seq, context if context is not None else min(DEFAULT_TOKENS, limit - 1)
    return (seq if seq is not None else min(DEFAULT_TOKENS, limit)), context


# -- collapsing repeated layers -------------------------------------------------------------------
def op_pattern(name: str) -> str:
    """An op name with its layer indices as ``*`` and a capture's counter dropped:
    ``layers.3.mlp.up_proj`` -> ``layers.*.mlp.up_proj``, ``h.0.attn.mm#12`` -> ``h.*.attn.mm``."""
    return ".".join("*" if part.isdigit() else part for part in _CAPTURE_COUNTER.sub("", name).split("."))


@dataclass(frozen=True)
class OpGroup:
    """Ops sharing a name pattern, in the order of the first one's appearance."""

    label: str
    members: tuple[int, ...]    # indices into the graph's ops


def group_ops(names: Sequence[str], collapse: bool) -> list[OpGroup]:
    """Rows of a per-op table: one per op, or one per name pattern when ``collapse``."""
    if not collapse:
        return [OpGroup(name, (index,)) for index, name in enumerate(names)]
    groups: dict[str, list[int]] = {}
    for index, name in enumerate(names):
        groups.setdefault(op_pattern(name), []).append(index)
    return [OpGroup(pattern if len(members) == 1 else f"{pattern} x{len(members)}", tuple(members))
            for pattern, members in groups.items()]


def should_collapse(op_count: int, all_ops: bool) -> bool:
    return not all_ops and op_count > COLLAPSE_ABOVE_OPS


# -- formatting -----------------------------------------------------------------------------------
def format_count(value: float, unit: str) -> str:
    """A plain amount with an SI prefix: ``1.5 TFLOP``."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def format_share(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def format_intensity(flops: float, moved: float) -> str:
    return f"{flops / moved:.3g}" if moved else "-"


def _graph_title(graph: "Graph") -> str:
    shown = ", ".join(f"{key}={value}" for key, value in graph.params.items()
                      if value is not None and not isinstance(value, (dict, list)))
    return f"{graph.name} {graph.phase}" + (f" ({shown})" if shown else "")


#: The graph parameters a latency depends on most, in the order a header names them.
SHAPE_KEYS = ("batch", "seq", "context", "dtype", "tp")


def shape_summary(params: Mapping[str, Any]) -> str:
    """``batch 1, seq 1, context 4096, dtype bf16, tp 1``: what a latency was asked for."""
    return ", ".join(f"{key} {params[key]}" for key in SHAPE_KEYS if params.get(key) is not None)


def _most_common(values: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return max(counts, key=lambda value: counts[value]) if counts else ""


# -- the commands ---------------------------------------------------------------------------------
def list_models(emit: Callable[[str], None]) -> int:
    from ..workloads.model_configs import known_models, load_config

    rows = []
    for name in known_models():
        config = load_config(name)
        rows.append([name, *(str(getattr(config, field, "-")) for field in
                             ("family", "num_layers", "hidden_size", "num_heads", "vocab_size"))])
    emit(render_table(["model", "family", "layers", "hidden", "heads", "vocab"], rows, markdown=False))
    return 0


def show_graph(graph: "Graph", all_ops: bool, emit: Callable[[str], None]) -> int:
    """Per-op (or per-pattern) FLOPs, bytes and intensity, the totals and the by-class table."""
    total_flops, total_bytes = graph.total_flops, graph.total_bytes
    rows = []
    for group in group_ops([op.name for op in graph.ops], should_collapse(len(graph.ops), all_ops)):
        members = [graph.ops[index] for index in group.members]
        flops = sum(op.work.total_flops for op in members)
        moved = sum(op.work.total_bytes for op in members)
        rows.append([group.label, _most_common(op.op_class for op in members), format_count(flops, "FLOP"),
                     format_bytes(moved), format_intensity(flops, moved),
                     format_share(flops / total_flops if total_flops else 0.0),
                     format_share(moved / total_bytes if total_bytes else 0.0)])
    emit(_graph_title(graph))
    emit(render_table(["op", "class", "FLOPs", "bytes", "FLOP/B", "% FLOPs", "% bytes"], rows, markdown=False))
    emit(f"total: {len(graph.ops)} ops, {format_count(total_flops, 'FLOP')}, {format_bytes(total_bytes)}, "
         f"{format_intensity(total_flops, total_bytes)} FLOP/B, {graph.launches} launches")
    class_rows = [[row.op_class, row.ops, format_count(row.flops, "FLOP"), format_bytes(row.bytes),
                   format_intensity(row.flops, row.bytes), format_share(row.flops_share),
                   format_share(row.bytes_share)] for row in graph.by_class()]
    emit(render_table(["class", "ops", "FLOPs", "bytes", "FLOP/B", "% FLOPs", "% bytes"], class_rows,
                      markdown=False))
    return 0


def prediction_lines(result: "GraphPrediction", all_ops: bool,
                     params: Mapping[str, Any] | None = None) -> list[str]:
    """The text ``charz workload predict`` prints for ``result``; ``params`` (the graph's) puts
    its batch, sequence, context, dtype and tensor-parallel degree in the header."""
    rows = []
    groups = group_ops([op.name for op in result.ops], should_collapse(len(result.ops), all_ops))
    for group in groups:
        members = [result.ops[index] for index in group.members]
        total_s = sum(op.time_s for op in members)
        rows.append([group.label, _most_common(op.op_class for op in members),
                     format_time(total_s / len(members)), format_time(total_s),
                     _most_common(op.bound or "not covered" for op in members),
                     format_share(sum(op.share for op in members))])
    shape = shape_summary(params or {})
    lines = [f"{result.graph} {result.phase} on {result.target} ({result.model}, ceilings {result.ceilings_origin})"
             + (f": {shape}" if shape else ""),
             render_table(["op", "class", "time/op", "time", "bound", "share"], rows, markdown=False)]
    lines.append(render_table(["class", "ops", "time", "share"],
                              [[row.op_class, row.ops, format_time(row.time_s), format_share(row.share)]
                               for row in result.by_class], markdown=False))
    runtime = "asynchronous" if result.asynchronous else "synchronous"
    if result.graph_replay:
        issued = f"one replayed graph of {len(result.ops)} ops, dispatched in {format_time(result.host_dispatch_s)}"
    else:
        issued = f"{len(result.ops)} ops dispatched at {format_time(result.host_dispatch_s)} each"
    engine = f" + the engine's step, {format_time(result.engine_step_s)}" if result.engine_step_s else ""
    lines.append(f"host: {issued}{engine} = {format_time(result.host_s)} ({runtime} runtime; "
                 f"{result.host_dispatch_source})")
    if result.engine_step_s:
        lines.append(f"engine step: {result.engine_step_source}")
    lines.append(f"device: critical path {format_time(result.device_s)}, busy {format_time(result.busy_s)}, "
                 f"launch {format_time(result.launch_overhead_s)} per op ({result.launch_overhead_source})")
    top = ", ".join(f"{row.op_class} {format_share(row.share)}" for row in result.by_class[:3])
    lines.append(f"time goes to: {top}")
    if result.uncovered:
        reasons: dict[str, list[str]] = {}
        for name, reason in result.uncovered:
            reasons.setdefault(reason, []).append(name)
        lines.append(f"not covered by {result.model}: {len(result.uncovered)} op(s); their kernel time is missing, "
                     "the latency is a lower bound")
        lines.extend(f"  {len(names)} op(s), e.g. {names[0]}: {reason}" for reason, names in reasons.items())
    throughput = f", {result.tokens_per_s:.4g} tokens/s" if result.tokens_per_s is not None else ""
    lines.append(f"end-to-end: {format_time(result.latency_s)}{throughput}, {result.bound}-bound"
                 + (f" (the device idles {format_time(result.device_idle_s)} waiting for dispatch)"
                    if result.bound == "host" else ""))
    return lines


def workload_command(args: Any) -> int:
    """``charz workload list|show|predict``: print tables (or JSON with ``--json``); exit status 0."""
    action = args.action
    if action == "list":
        return list_models(print)
    from ..formats import dumps_json

    graph = graph_from_args(args)
    if action == "show":
        if args.json:
            print(dumps_json(graph.to_json(), "charz workload show --json"))
            return 0
        return show_graph(graph, args.all_ops, print)
    from ..workloads.predict import predict_graph

    check_host_dispatch_us(args.host_dispatch_us)
    result = predict_graph(graph, target=args.target, model=args.model, profile=args.profile,
                           calibration=getattr(args, "calibration", None),
                           host_dispatch_s=None if args.host_dispatch_us is None else args.host_dispatch_us * 1e-6,
                           runtime=getattr(args, "runtime", None))
    if args.json:
        print(dumps_json(result.to_json(), "charz workload predict --json"))
        return 0
    for line in prediction_lines(result, args.all_ops, graph.params):
        print(line)
    return 0
