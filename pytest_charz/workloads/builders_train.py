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
from typing import Any

from ..work import DTYPE_BYTES, Work
from .builders_ops import FLOPS_PER_ELEMENT, Precision, collective
from .graph import Op, TensorSpec

FP32_BYTES = DTYPE_BYTES["fp32"]
FLOAT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "fp64")


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


# -- kernels="eager": autograd's own backward ops and torch.optim.AdamW(foreach=False) ----------
def _spec(n: float, dtype: str) -> TensorSpec:
    return TensorSpec((int(n),), dtype)


def _recipe(op: Op, kind: str, floating: list[TensorSpec]) -> list[tuple[str, str, tuple, tuple, float]]:
    """The backward ops autograd runs for one eager forward op: (aten, class, ins, outs, FLOPs)."""
    x = floating[0]
    n, d = x.numel, x.dtype
    full, out = _spec(n, d), op.outputs[0] if op.outputs else x
    if kind == "cast":
        src = op.inputs[0]
        return [("_to_copy", "copy", (_spec(src.numel, out.dtype),), (src,), 0.0)]
    if kind in ("square", "cube", "rsqrt"):
        return [("pow", "elementwise", (full,), (full,), n), ("mul", "elementwise", (full,), (full,), n),
                ("mul", "elementwise", (full, full), (full,), n)]
    if kind == "mean":
        return [("div", "elementwise", (full,), (full,), n)]
    if kind == "mul_bcast":
        small = op.inputs[1]
        return [("mul", "elementwise", (full, full), (full,), n), ("mul", "elementwise", (full, small), (full,), n),
                ("sum", "reduction", (full,), (small,), n)]
    if kind == "mul_weight":
        w, n = op.inputs[0], op.inputs[1].numel
        full = _spec(n, op.inputs[1].dtype)
        return [("mul", "elementwise", (full, w), (full,), n), ("mul", "elementwise", (full, full), (full,), n),
                ("sum", "reduction", (full,), (w,), n)]
    if kind == "mul_const":
        return [("mul", "elementwise", op.inputs, (out,), out.numel)]
    if kind == "mul":
        return [("mul", "elementwise", (out, out), (out,), out.numel)] * 2
    if kind == "rotate_half":
        half, whole = op.inputs[0], out
        return [("neg", "elementwise", (half,), (half,), half.numel), ("slice_backward", "copy", (half,), (whole,), 0.0),
                ("slice_backward", "copy", (half,), (whole,), 0.0), ("add", "elementwise", (whole, whole), (whole,),
                                                                     whole.numel)]
    if kind in ("silu", "gelu", "tanh"):
        return [(f"{kind}_backward", "elementwise", (out, x), (out,), out.numel)]
    if kind == "layer_norm":
        y, mean, rstd = op.outputs
        w = op.inputs[1]
        return [("native_layer_norm_backward", "norm", (y, x, mean, rstd, w, w), (x, w, w), 14.0 * n)]
    if kind == "softmax":
        return [("_softmax_backward_data", "softmax", (out, out), (out,), 4.0 * out.numel)]
    if kind == "log_softmax":
        return [("_log_softmax_backward_data", "softmax", (out, out), (out,), 4.0 * out.numel)]
    if kind == "nll":
        logits, labels = op.inputs
        scalar = TensorSpec((), "fp32")
        return [("nll_loss_backward", "embedding", (scalar, logits, labels, scalar), (logits,), 0.0)]
    if kind == "topk":
        values, ids = op.outputs
        return [("value_selecting_reduction_backward", "embedding", (values, ids), (x,), 0.0)]
    if kind == "div":
        small = op.inputs[1]
        return [("div", "elementwise", (out, small), (out,), out.numel), ("mul", "elementwise", (out, out), (out,),
                                                                         out.numel),
                ("sum", "reduction", (out,), (small,), out.numel)]
    if kind == "gather":
        rows = op.inputs[1]
        return [("new_zeros", "elementwise", (), (rows,), 0.0),
                ("index_put", "embedding", (out, op.inputs[0]), (rows,), float(out.numel))]
    raise ValueError(f"no eager backward recipe {kind!r}")


def _has_bias(op: Op) -> bool:
    if op.op_class not in ("gemm", "conv"):
        return False
    k, n = op.inputs[0].shape[1], op.outputs[0].shape[1]
    copies = float(op.attrs.get("experts_active", 1.0))
    return float(op.attrs["weight_bytes"]) > copies * n * k * DTYPE_BYTES[op.inputs[1].dtype] + 0.5


def eager_backward(forward: list[Op], emit: Any) -> list[Op]:
    """The backward ops of an eager forward (its loss included), in reverse order: each gemm's
    two gemms (and its bias's sum), attention's backward with the copies of its gradients, each
    decomposed op's autograd formula, the adds that accumulate a gradient read by several ops,
    and the embedding tables' dense gradients."""
    start = len(emit.ops)
    act = emit.act
    tied = any(op.name == "lm_head" and op.attrs.get("tied") for op in forward)
    fused_qkv = any(op.name.endswith("attn.c_attn") for op in forward)
    for op in reversed(forward):
        layer = op.attrs.get("layer")
        deps = (emit.ops[-1].name,)
        kind = op.attrs.get("eager_bwd")
        floating = [t for t in op.inputs if t.dtype in FLOAT_DTYPES] or list(op.outputs)
        if op.op_class in ("gemm", "conv"):
            (m, k), w_dtype = op.inputs[0].shape, op.inputs[1].dtype
            n = op.outputs[0].shape[1]
            copies = float(op.attrs.get("experts_active", 1.0))
            w = _spec(copies * n * k, w_dtype)
            grad = _spec(m * n, act)
            flops = op.work.total_flops
            facts = {"backward": True, **({"grouped": True} if op.attrs.get("grouped") else {})}
            emit.op(op.name, "mm", "gemm", (grad, op.inputs[0]), (w,), flops, deps, layer=layer, attrs=facts)
            emit.op(op.name, "mm", "gemm", (grad, w), (op.inputs[0],), flops, deps, layer=layer, attrs=facts)
            if _has_bias(op):
                emit.op(op.name, "sum", "reduction", (grad,), (_spec(n, act),), m * n, deps, layer=layer)
        elif op.op_class == "attention":
            q, kv = op.inputs[0], op.inputs[1]
            shape = op.work.shape
            flops = 10.0 * shape["batch"] * shape["heads"] * shape["s_q"] * shape["s_kv"] * shape["head_dim"]
            emit.op(op.name.rsplit(".", 1)[0], "scaled_dot_product_attention_backward", "attention",
                    (q, q, kv, kv), (q, kv, kv), flops, deps, layer=layer, attrs={"backward": True})
            path = op.name.rsplit(".", 1)[0]
            if fused_qkv:
                emit.op(path, "cat", "copy", (q, kv, kv), (_spec(q.numel + 2 * kv.numel, act),), 0.0, deps, layer=layer)
            else:
                for _ in "kv":
                    emit.op(path, "clone", "transpose", (kv,), (kv,), 0.0, deps, layer=layer)
        elif op.op_class == "embedding" and op.attrs.get("params"):
            table = _spec(op.attrs["params"], act)
            ids = _spec(op.work.shape["rows"], "int64")
            emit.op(op.name, "embedding_dense_backward", "embedding", (op.outputs[0], ids), (table,), 0.0, deps)
            if tied and op.name in ("model.embed_tokens", "transformer.wte"):
                emit.op(op.name, "add", "elementwise", (table, table), (table,), table.numel, deps)
        elif kind:
            for aten, op_class, ins, outs, flops in _recipe(op, kind, floating):
                emit.op(op.name.rsplit(".", 1)[0], aten, op_class, ins, outs, flops, deps, layer=layer,
                        attrs={"backward": True})
        for _ in range(int(op.attrs.get("accumulate", 0))):
            x = floating[0]
            emit.op(op.name.rsplit(".", 1)[0], "add", "elementwise", (x, x), (x,), x.numel, deps, layer=layer)
    return emit.ops[start:]


def eager_optimizer(forward: list[Op], emit: Any) -> list[Op]:
    """``torch.optim.AdamW(foreach=False)``: eight ops per parameter tensor, state in the model's
    dtype (mul, lerp, mul, addcmul, sqrt, div, add, addcdiv)."""
    start = len(emit.ops)
    steps = (("mul", 1), ("lerp", 2), ("mul", 1), ("addcmul", 2), ("sqrt", 1), ("div", 1), ("add", 1),
             ("addcdiv", 3))
    for op in forward:
        params = int(op.attrs.get("params", 0))
        if not params:
            continue
        if op.attrs.get("aten") == "native_layer_norm":
            tensors = [params // 2, params // 2]
        elif _has_bias(op):
            n = op.outputs[0].shape[1]
            tensors = [params - n, n]
        else:
            tensors = [params]
        for count in tensors:
            t = _spec(count, emit.act)
            for aten, reads in steps:
                emit.op("optimizer", aten, "elementwise", (t,) * reads, (t,), count, (emit.ops[-1].name,),
                        layer=op.attrs.get("layer"), attrs={"optimizer": True})
    return emit.ops[start:]


def eager_loss(emit: Any, batch: int, seq: int, vocab: int) -> None:
    """transformers' ForCausalLMLoss: fp32 logits, shifted labels, log-softmax and NLL."""
    m, act = batch * seq, emit.act
    logits = emit.ops[-1].name
    if act != "fp32":
        logits = emit.cast("", m * vocab, act, "fp32", (logits,))
    emit.op("", "constant_pad_nd", "copy", (_spec(m, "int64"),), (_spec(batch * (seq + 1), "int64"),))
    full = _spec(m * vocab, "fp32")
    soft = emit.op("", "_log_softmax", "softmax", (full,), (full,), 5.0 * m * vocab, (logits,), bwd="log_softmax")
    scalar = TensorSpec((), "fp32")
    loss = emit.op("", "nll_loss_forward", "reduction", (full, _spec(m, "int64")), (scalar, scalar), m * vocab,
                   (soft,), bwd="nll")
    emit.op("", "ones_like", "elementwise", (scalar,), (scalar,), 0.0, (loss,))
