"""Does a workload fit the device? Weights, KV cache and activations of one rank against DRAM.

``predict_graph`` and the simulator both refuse a graph that does not fit, with this one check:

* **weights**: every op's owned parameters (``attrs["params"]``) at the dtype of its weight
  tensor (a GEMM's second input; otherwise its output's dtype), or at ``attrs["bytes_per_param"]``
  where a recipe stores them in fewer bits than that dtype (int4 packed two to a byte);
* **KV cache**: the keys and values attention reads (``attrs["kv_cache_read_bytes"]``), per layer,
  in the cache's dtype (an fp8 cache needs half a bf16 one's bytes);
* **activations**: the largest input-plus-output footprint of one op (weights excluded): what must
  be live at once in an inference step. Training graphs also keep activations for the backward
  pass and optimizer states, which this does not count (their need is a lower bound).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..units import format_bytes
from .graph import DTYPE_BYTES, Graph


class CapacityError(UsageError):
    """The workload needs more DRAM per device than the device has; the message gives both."""


@dataclass(frozen=True)
class MemoryNeed:
    """Bytes one device holds for a graph."""

    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.activation_bytes


def memory_need(graph: Graph) -> MemoryNeed:
    """The per-device memory need of ``graph`` (module docstring)."""
    weights = kv_cache = activations = 0.0
    for op in graph.ops:
        params = float(op.attrs.get("params", 0) or 0)
        weight_input = op.inputs[1] if op.op_class in ("gemm", "conv") and len(op.inputs) > 1 else None
        if params:
            dtype = weight_input.dtype if weight_input is not None else (op.outputs[0].dtype if op.outputs else "fp32")
            weights += params * float(op.attrs.get("bytes_per_param") or DTYPE_BYTES[dtype])
        kv_cache += float(op.attrs.get("kv_cache_read_bytes", 0.0) or 0.0)
        footprint = sum(t.nbytes for t in op.outputs) + sum(t.nbytes for t in op.inputs if t is not weight_input)
        activations = max(activations, float(footprint))
    return MemoryNeed(weights, kv_cache, activations)


def check_fits(graph: Graph, capacity_bytes: float | None, device: str, need: MemoryNeed | None = None) -> MemoryNeed:
    """The need of ``graph`` (``need`` when already counted); :class:`CapacityError` when it
    exceeds ``capacity_bytes``, the DRAM of one ``device`` (no check when that is unknown)."""
    need = need if need is not None else memory_need(graph)
    if capacity_bytes is not None and need.total_bytes > capacity_bytes:
        tp = graph.params.get("tp", 1)
        raise CapacityError(
            f"{graph.name} {graph.phase} (tp={tp}) needs {format_bytes(need.total_bytes)} per device (weights "
            f"{format_bytes(need.weights_bytes)}, KV cache {format_bytes(need.kv_cache_bytes)}, activations "
            f"{format_bytes(need.activation_bytes)}) but {device} has {format_bytes(capacity_bytes)} of DRAM; "
            "raise tp, shorten the context, lower the batch"
            + (" or keep the KV cache in fp8 (--kv-dtype fp8)" if graph.params.get("kv_dtype") not in (None, "fp8")
               and need.kv_cache_bytes else ""))
    return need
