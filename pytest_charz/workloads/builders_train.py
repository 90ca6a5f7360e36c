"""The training step's second half: the backward pass and the optimizer step, derived from the
forward ops a builder made.

Backward, op by op in reverse order: twice the forward FLOPs (a gemm computes the input gradient
and the weight gradient, each a gemm of the forward's size; attention's backward does four
score-sized matmuls against the forward's two, not counting the score recomputation a fused
kernel adds) and twice the forward bytes (it reads what the forward read plus the incoming
gradient, and writes the gradients of inputs and weights). A gemm's backward is two launches.
Gradients are kept in the activation dtype.

Tensor parallelism: the backward of a row-parallel all-reduce is the identity, and the input
gradient of the column-parallel projections is all-reduced before the norm that fed them, so a
layer has two all-reduces in backward as in forward.

Optimizer: AdamW, one fused elementwise op per layer (and one for the parameters outside the
layers) over the parameters each rank holds: ``12`` fp32 FLOPs per parameter; it reads the
gradient, the fp32 master weight and both fp32 moments, and writes them back with the model's
copy of the weight (the master weight *is* that copy in fp32 training).
"""
from __future__ import annotations

from dataclasses import replace

from ..work import Work
from .builders_ops import FLOPS_PER_ELEMENT, Precision, collective
from .graph import DTYPE_BYTES, Op

FP32_BYTES = DTYPE_BYTES["fp32"]


def _scaled(work: Work, launches: int) -> Work:
    return Work(flops={dtype: 2 * amount for dtype, amount in work.flops.items()},
                bytes={level: 2 * amount for level, amount in work.bytes.items()},
                launches=launches, op=work.op, shape=work.shape)


def backward_ops(forward: list[Op], after: str, p: Precision, tokens: int, hidden: int, tp: int) -> list[Op]:
    """The backward ops of ``forward`` (in reverse order, chained after op ``after``)."""
    ops: list[Op] = []
    previous = after
    for op in reversed(forward):
        if op.op_class == "collective":
            continue  # its gradient passes through unchanged
        layer = op.attrs.get("layer")
        if tp > 1 and op.attrs.get("feeds_column_parallel"):
            reduce = collective(f"{op.name}.backward.all_reduce", "all-reduce", tokens * hidden * p.act_bytes, tp,
                                (previous,), layer=layer)
            ops.append(reduce)
            previous = reduce.name
        launches = 2 if op.op_class in ("gemm", "bmm", "conv") else op.work.launches
        attrs = {"backward_of": op.name, "params": 0, "weight_bytes": 2 * float(op.attrs.get("weight_bytes", 0.0))}
        if layer is not None:
            attrs["layer"] = layer
        for key in ("fused", "causal", "experts_active", "part"):
            if key in op.attrs:
                attrs[key] = op.attrs[key]
        back = replace(op, name=f"{op.name}.backward", work=_scaled(op.work, launches), deps=(previous,),
                       inputs=op.outputs + op.inputs, outputs=op.inputs, attrs=attrs)
        ops.append(back)
        previous = back.name
    return ops


def optimizer_ops(forward: list[Op], backward: list[Op], p: Precision) -> list[Op]:
    """One AdamW op per layer and one for the rest, each after its last gradient is ready."""
    params: dict[int | None, int] = {}
    for op in forward:
        params[op.attrs.get("layer")] = params.get(op.attrs.get("layer"), 0) + int(op.attrs.get("params", 0))
    ready: dict[int | None, str] = {}
    for op in backward:
        ready[op.attrs.get("layer")] = op.name  # the last backward op of each layer wins
    last = backward[-1].name
    # Read gradient, master weight and two moments; write the last three back, and in mixed
    # precision also the model's own (bf16, fp16, fp8) copy of the weight.
    model_copy = 0 if p.act == "fp32" else DTYPE_BYTES[p.weight]
    per_param = DTYPE_BYTES[p.act] + 2 * 3 * FP32_BYTES + model_copy
    ops = []
    for layer, count in params.items():
        if not count:
            continue
        name = "optimizer.rest" if layer is None else f"optimizer.layers.{layer}"
        attrs = {"params": 0, "weight_bytes": 0.0, "optimizer": "adamw", "parameters": count}
        if layer is not None:
            attrs["layer"] = layer
        ops.append(Op(name=name, op_class="elementwise", source="built", deps=(ready.get(layer, last),),
                      work=Work(flops={"fp32": float(FLOPS_PER_ELEMENT["adamw"] * count)}, bytes=per_param * count,
                                launches=1, op="elementwise", shape={"elements": count}),
                      attrs=attrs))
    return ops
