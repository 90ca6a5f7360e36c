"""A serving engine's host work per step, which the step pays in series with its forward pass.

Between two forward passes a Python serving engine schedules the next batch, prepares its inputs
on the host and copies them over, samples the next tokens from the logits and processes the
outputs (detokenizes, checks stop conditions); with tensor parallelism the driver also hands the
step to its workers and waits for them. It waits for each step's sampled tokens before scheduling
the next, so none of that overlaps the device's work: a step takes its forward pass plus this
host time, as Vidur's simulator composes it (``ExecutionTime.total_time`` = model time + CPU
overhead, microsoft/vidur ``vidur/entities/execution_time.py``).

The figures are Vidur's measurements of vLLM's scheduler running on an A100 (below), not fitted
on any serving figure this project scores. They are kept per tensor-parallel degree and batch;
between the measured batches the time is interpolated linearly, below the smallest it is the
smallest's, above the largest it follows the last interval's slope, and a degree that was not
measured takes the largest measured degree below it (tp 8 takes tp 4's).
"""
from __future__ import annotations

import bisect
from typing import Mapping

from ..errors import UsageError

__all__ = ["ENGINES", "VIDUR_A100_SOURCE", "engine_step_s", "engine_step_source"]

VIDUR_A100_SOURCE = (
    "Vidur's vLLM CPU-overhead profile (microsoft/vidur, data/profiling/a100/cpu_overheads.csv, "
    "meta-llama/Llama-2-7b-hf rows: medians of SCHEDULE + SAMPLER_E2E + PREPARE_INPUTS_E2E + "
    "PROCESS_MODEL_OUTPUTS + RAY_COMM_TIME per step, the CPU overhead its simulator adds to each "
    "step), less the sampler's logits GEMM")
#: Vidur's vLLM host time per step in ms, per tensor-parallel degree: (batch, ms) pairs, each the
#: sum of the medians of the five columns :data:`VIDUR_A100_SOURCE` names on the Llama-2-7B rows
#: (fp16, dummy weights, 256-token prompts, vLLM's scheduler) measured on an A100 host. At
#: degrees 2 and 4 about 3 ms of each step is RAY_COMM_TIME, the driver's round trip to its Ray
#: workers (Vidur's residual: the step's wall time less the operations it timed).
VLLM_STEP_MS: Mapping[int, tuple[tuple[int, float], ...]] = {
    1: ((8, 2.127), (16, 3.011), (24, 3.764), (32, 4.928), (40, 5.479), (48, 6.436), (56, 7.149), (64, 8.048)),
    2: ((8, 5.457), (16, 6.373), (24, 7.783), (32, 8.525), (40, 10.708), (48, 12.478), (56, 13.948), (64, 15.138)),
    4: ((8, 5.640), (16, 7.215), (24, 8.644), (32, 10.451), (40, 12.523), (48, 15.124), (56, 15.892), (64, 17.492)),
}
#: The sampler's end to end holds the logits GEMM (Vidur's model time leaves the head out), which
#: a graph here prices as its ``lm_head`` op: Llama-2-7B's 32000 x 4096 fp16 output embedding, read
#: once per step from the A100's DRAM at its 2.039 TB/s (NVIDIA A100 datasheet, SXM4 80GB), split
#: over the tensor-parallel degree, is taken out of the measured step.
VIDUR_LOGITS_BYTES = 32000 * 4096 * 2
VIDUR_DRAM_BYTES_PER_S = 2.039e12
#: Engines with a measured host time per step: the name a runtime profile gives, the source of
#: its figures and their table.
ENGINES: Mapping[str, tuple[str, Mapping[int, tuple[tuple[int, float], ...]]]] = {
    "vllm": (VIDUR_A100_SOURCE, VLLM_STEP_MS)}


def _interpolated(points: tuple[tuple[int, float], ...], batch: float) -> float:
    sizes = [size for size, _ in points]
    if batch <= sizes[0]:
        return points[0][1]
    index = min(bisect.bisect_left(sizes, batch), len(points) - 1)
    (b0, v0), (b1, v1) = points[index - 1], points[index]
    return v0 + (v1 - v0) * (batch - b0) / (b1 - b0)


def engine_step_s(engine: str, batch: int, tp: int) -> float:
    """The host time in seconds ``engine`` takes per step of ``batch`` sequences on ``tp`` GPUs
    (module docstring). UsageError for an engine without figures or a batch or degree below 1."""
    if engine not in ENGINES:
        raise UsageError(f"no host time per step is known for engine {engine!r}; known: {', '.join(ENGINES)}")
    if batch < 1 or tp < 1:
        raise UsageError(f"an engine step needs a batch and a tensor-parallel degree of at least 1; got {batch}, {tp}")
    _, table = ENGINES[engine]
    degree = max((d for d in table if d <= tp), default=min(table))
    step_ms = _interpolated(table[degree], batch)
    logits_ms = VIDUR_LOGITS_BYTES / degree / VIDUR_DRAM_BYTES_PER_S * 1e3
    return (step_ms - logits_ms) * 1e-3


def engine_step_source(engine: str) -> str:
    """Where ``engine``'s host time per step comes from, as a prediction cites it."""
    return f"{engine} host time per step: {ENGINES[engine][0]}"
