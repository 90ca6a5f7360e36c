"""Published LLM serving figures (rows of kind ``serving-throughput``, ``serving-latency`` and
``serving-ttft``) and their scoring: the same conditions (model, batch, prompt and output lengths,
tensor parallelism, precision recipe and KV cache dtype, runtime) built and predicted spec-only.

* ``serving-throughput`` (``tokens/s/GPU``): a static batch, as TensorRT-LLM's
  ``gptSessionBenchmark`` runs it: ``batch`` prompts of ``input`` tokens prefilled at once, then
  ``output - 1`` decode steps of the whole batch; the figure is ``batch * output`` tokens over that
  time, per GPU (``tp`` of them). Scored as the prefill plus ``output - 1`` decode steps at the
  middle context (``input + output // 2``: a decode step's cost is linear in its context).
* ``serving-latency`` (``ms``): the end-to-end time of one such batch, as a latency benchmark
  (vLLM's ``benchmark_latency``) runs it: the prefill plus ``output - 1`` decode steps, scored
  as a throughput run is.
* ``serving-ttft`` (``ms``): the time to the first token of one request of ``batch`` prompts of
  ``input`` tokens: its prefill.

Held-out only: these figures test the predictions end to end; nothing is fitted on them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import UsageError

if TYPE_CHECKING:
    from ..datafile import TableReader
    from ..workloads.graph import Graph
    from .table import PublishedRow

#: Row kinds and their units.
SERVING_UNITS = {"serving-throughput": "tokens/s/GPU", "serving-latency": "ms", "serving-ttft": "ms"}
SERVING_KINDS = tuple(SERVING_UNITS)
FIELDS = ("model", "batch", "input", "output", "tp", "precision")
OPTIONAL = ("kv_dtype", "runtime", "decode_kernel", "engine")


@dataclass(frozen=True)
class ServingCase:
    """One serving run: ``batch`` prompts of ``input`` tokens, ``output`` tokens each, on ``tp``
    GPUs, under the precision recipe ``precision`` with the KV cache in ``kv_dtype`` (empty: the
    activations'), issued by the runtime profile ``runtime`` with the decode attention kernel
    ``decode_kernel``; ``engine`` names the software that measured it."""

    metric: str
    model: str
    batch: int
    input: int
    output: int
    tp: int
    precision: str
    kv_dtype: str = ""
    runtime: str = "serving"
    decode_kernel: str = "grouped"
    engine: str = ""

    def measured_time_s(self, value: float) -> float:
        """The measured time of the run in seconds: ``value`` is tokens/s per GPU or ms."""
        if SERVING_UNITS[self.metric] == "ms":
            return value * 1e-3
        return self.batch * self.output / (value * self.tp)


def read_serving_case(reader: "TableReader", raw: Mapping[str, Any], kind: str, field: str) -> ServingCase:
    """The case table of a row of ``kind`` (its key is the kind: ``serving-ttft = {...}``),
    checked; a SpecError names the field."""
    from ..workloads.builders_ops import DECODE_KERNELS, KV_DTYPES, PRECISIONS
    from ..workloads.runtime import RUNTIME_PROFILES

    where = f"{field}.{kind}"
    data = reader.table(raw.get(kind), where, FIELDS, OPTIONAL)
    counts = {}
    for key in ("batch", "input", "output", "tp"):
        value = data[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise reader.fail(f"{where}.{key}", "must be a positive integer", value)
        counts[key] = value
    if kind == "serving-ttft" and counts["output"] != 1:
        raise reader.fail(f"{where}.output", "must be 1 for a first-token latency", counts["output"])
    kv = str(data.get("kv_dtype", ""))
    if kv and kv not in KV_DTYPES:
        raise reader.fail(f"{where}.kv_dtype", f"must be one of {', '.join(KV_DTYPES)}", kv)
    return ServingCase(kind, reader.text(data, "model", where), counts["batch"], counts["input"], counts["output"],
                       counts["tp"], reader.choice(data, "precision", where, tuple(PRECISIONS)), kv,
                       reader.choice(data, "runtime", where, tuple(RUNTIME_PROFILES)) if "runtime" in data
                       else "serving",
                       reader.choice(data, "decode_kernel", where, DECODE_KERNELS) if "decode_kernel" in data
                       else "grouped",
                       str(data.get("engine", "")))


def serving_graphs(case: ServingCase) -> tuple["Graph", "Graph | None", int]:
    """The prefill graph of ``case``, its middle decode step (None for a first-token latency) and
    how many decode steps the run makes (module docstring)."""
    from ..workloads.builders import build
    from ..workloads.runtime import runtime_profile

    profile = runtime_profile(case.runtime)
    kernels = profile.kernels if profile is not None and profile.kernels else "fused"
    options: dict[str, Any] = {"dtype": case.precision, "tp": case.tp, "kv_dtype": case.kv_dtype or None,
                               "kernels": kernels, "decode_kernel": case.decode_kernel}
    prefill = build(case.model, "prefill", batch=case.batch, seq=case.input, **options)
    if case.metric == "serving-ttft" or case.output == 1:
        return prefill, None, 0
    decode = build(case.model, "decode", batch=case.batch, context=case.input + case.output // 2, **options)
    return prefill, decode, case.output - 1


@functools.lru_cache(maxsize=128)
def serving_time_s(case: ServingCase, target: str) -> tuple[float, tuple[str, ...]]:
    """Spec-only time of the run of ``case`` on ``target`` by ``predict_graph`` (module
    docstring) and the uncovered ops' reasons (empty when complete). Raises UsageError (a
    CapacityError when it does not fit). A pure function of the case and the catalogue's
    target, so it is kept per case (the table's report and its acceptance score each row)."""
    from ..prediction import load_predictor
    from ..workloads.predict import predict_graph

    predictor = load_predictor(target)
    prefill, decode, steps = serving_graphs(case)
    first = predict_graph(prefill, predictor=predictor, runtime=case.runtime)
    total, missing = first.latency_s, [reason for _, reason in first.uncovered]
    if decode is not None:
        step = predict_graph(decode, predictor=predictor, runtime=case.runtime)
        total += steps * step.latency_s
        missing.extend(reason for _, reason in step.uncovered)
    return total, tuple(missing)


def score_serving_row(row: "PublishedRow") -> Any:
    """A serving row against its spec-only prediction: a :class:`.score.ScoredRow`."""
    from .score import ScoredRow

    case = row.case
    if not isinstance(case, ServingCase):
        raise UsageError(f"row {row.id!r} is not a serving row")
    measured = row.measured_time_s()
    try:
        predicted, missing = serving_time_s(case, row.target)
    except UsageError as exc:
        return ScoredRow(row, measured, None, (), str(exc))
    if missing:
        return ScoredRow(row, measured, None, (), f"uncovered ops: {missing[0]}")
    from ..workloads.engines import engine_step_source
    from ..workloads.runtime import runtime_profile

    priors = [f"serving: {case.precision}, runtime {case.runtime}, the priors of every op (see the GEMM and copy rows)"]
    profile = runtime_profile(case.runtime)
    if profile is not None and profile.engine is not None:
        priors.append(engine_step_source(profile.engine))
    return ScoredRow(row, measured, predicted, tuple(priors))
