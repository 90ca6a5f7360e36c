"""The op constructors of the analytical builders: gemms, norms, elementwise ops, attention,
embeddings, cache writes and collectives, each with its FLOPs, bytes and launches.

Counting rules (all bytes go to ``dram``; each operand is assumed to move once, no cache reuse):

- gemm ``(m, k) @ (k, n)``: ``2*m*n*k`` FLOPs; bytes = weight ``n*k`` + bias ``n`` + input ``m*k``
  + output ``m*n``, each in its own dtype.
- attention over ``b`` sequences, ``h`` query heads, ``s_q`` queries, ``s_kv`` keys, head size
  ``d``: ``4*b*h*s_q*s_kv*d`` matmul FLOPs plus ``5*b*h*s_q*s_kv`` softmax FLOPs (max, subtract,
  exp, sum, divide). The FULL score matrix is counted, also under a causal mask: that is what a
  fused kernel without block skipping (and every unfused implementation) executes. The masked
  half is recorded as ``attrs["flops_causal_half"]`` (pairs ``j <= i``) for models that want it.
- elementwise and norm ops: elements times :data:`FLOPS_PER_ELEMENT` of their kind; bytes = every
  input read once and the output written once.

Precision (:class:`Precision`): norms and softmax accumulate in fp32 (their FLOPs are counted as
fp32, as PyTorch's and most fused kernels' reductions are), while their tensors are stored in the
activation dtype. fp8 means fp8 gemm weights and gemm inputs with bf16 outputs, residual stream,
attention, KV cache, norms, embeddings and LM head (a common FP8 serving recipe: the LM head, the
router and the embedding stay in bf16).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..work import DTYPE_BYTES, Collective, Work
from .graph import Op, TensorSpec

#: Arithmetic per output element of each elementwise or normalisation kind.
FLOPS_PER_ELEMENT = {"add": 1, "rotary": 3, "silu_mul": 5, "gelu": 8, "gelu_new": 8, "tanh": 4, "rmsnorm": 4,
                     "layernorm": 7, "softmax": 5, "combine": 2, "topk": 2, "adamw": 12}
#: Bytes of a token id (int64, as PyTorch embedding lookups take them).
TOKEN_ID_BYTES = DTYPE_BYTES["int64"]


@dataclass(frozen=True)
class Precision:
    """Which dtype each part of a model uses for one requested dtype.

    ``weight``/``gemm_in``: gemm weights and inputs; ``gemm_flops``: the dtype of gemm FLOPs;
    ``act``: everything stored between ops (residual stream, gemm outputs, KV cache, norms,
    attention, embeddings, LM head); ``reduce_flops``: norms and softmax.
    """

    name: str
    weight: str
    gemm_in: str
    gemm_flops: str
    act: str
    reduce_flops: str

    @property
    def act_bytes(self) -> int:
        return DTYPE_BYTES[self.act]


PRECISIONS = {
    "fp32": Precision("fp32", "fp32", "fp32", "fp32", "fp32", "fp32"),
    "bf16": Precision("bf16", "bf16", "bf16", "bf16", "bf16", "fp32"),
    "fp16": Precision("fp16", "fp16", "fp16", "fp16", "fp16", "fp32"),
    "fp8": Precision("fp8", "fp8", "fp8", "fp8", "bf16", "fp32"),
}


def _attrs(layer: int | None, params: float, weight_bytes: float, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {"params": int(params), "weight_bytes": float(weight_bytes)}
    if layer is not None:
        attrs["layer"] = layer
    attrs.update(extra or {})
    return attrs


def gemm(name: str, m: int, n: int, k: int, p: Precision, deps: Iterable[str], *, layer: int | None = None,
         bias: bool = False, high_precision: bool = False, weight_copies: float = 1.0,
         params: float | None = None, op_class: str = "gemm", attrs: Mapping[str, Any] | None = None) -> Op:
    """A linear layer ``(m, k) -> (m, n)`` with an ``(n, k)`` weight (and an ``n`` bias).

    ``high_precision`` keeps weight and input in the activation dtype (LM head, MoE router).
    ``weight_copies`` is how many such weights are read (the active experts of a grouped gemm);
    ``params`` the parameters the op owns (default one weight and its bias).
    """
    weight_dtype = p.act if high_precision else p.weight
    in_dtype = p.act if high_precision else p.gemm_in
    flops_dtype = p.act if high_precision else p.gemm_flops
    weight_bytes = weight_copies * (n * k * DTYPE_BYTES[weight_dtype] + (n * p.act_bytes if bias else 0))
    moved = weight_bytes + m * k * DTYPE_BYTES[in_dtype] + m * n * p.act_bytes
    owned = params if params is not None else n * k + (n if bias else 0)
    return Op(name=name, op_class=op_class, source="built", deps=tuple(deps),
              work=Work(flops={flops_dtype: 2.0 * m * n * k}, bytes=moved, launches=1, op=op_class, shape={"m": m, "n": n, "k": k}),
              inputs=(TensorSpec((m, k), in_dtype), TensorSpec((n, k), weight_dtype)),
              outputs=(TensorSpec((m, n), p.act),), attrs=_attrs(layer, owned, weight_bytes, attrs))


def elementwise(name: str, kind: str, elements: int, inputs: int, p: Precision, deps: Iterable[str], *,
                layer: int | None = None, extra_read_bytes: float = 0.0, attrs: Mapping[str, Any] | None = None) -> Op:
    """An elementwise op of ``kind`` writing ``elements`` values and reading ``inputs`` tensors of
    that size (plus ``extra_read_bytes``, e.g. rotary cos/sin tables)."""
    moved = (inputs + 1) * elements * p.act_bytes + extra_read_bytes
    return Op(name=name, op_class="elementwise", source="built", deps=tuple(deps),
              work=Work(flops={p.act: float(FLOPS_PER_ELEMENT[kind] * elements)}, bytes=moved, launches=1,
                        op="elementwise", shape={"elements": elements}),
              outputs=(TensorSpec((elements,), p.act),), attrs=_attrs(layer, 0, 0.0, {"kind": kind, **(attrs or {})}))


def norm(name: str, kind: str, rows: int, width: int, p: Precision, deps: Iterable[str], *,
         layer: int | None = None, attrs: Mapping[str, Any] | None = None) -> Op:
    """An RMSNorm (``kind="rmsnorm"``, weight only) or LayerNorm (weight and bias) over ``width``."""
    params = width if kind == "rmsnorm" else 2 * width
    weight_bytes = params * p.act_bytes
    return Op(name=name, op_class="norm", source="built", deps=tuple(deps),
              work=Work(flops={p.reduce_flops: float(FLOPS_PER_ELEMENT[kind] * rows * width)},
                        bytes=2 * rows * width * p.act_bytes + weight_bytes, launches=1, op="norm",
                        shape={"rows": rows, "width": width}),
              inputs=(TensorSpec((rows, width), p.act),), outputs=(TensorSpec((rows, width), p.act),),
              attrs=_attrs(layer, params, weight_bytes, {"kind": kind, **(attrs or {})}))


def embedding(name: str, rows: int, table_rows: int, width: int, p: Precision, deps: Iterable[str] = (), *,
              ids: bool = True, attrs: Mapping[str, Any] | None = None) -> Op:
    """A gather of ``rows`` rows of a ``(table_rows, width)`` table: only the gathered rows move."""
    moved = 2 * rows * width * p.act_bytes + (rows * TOKEN_ID_BYTES if ids else 0)
    return Op(name=name, op_class="embedding", source="built", deps=tuple(deps),
              work=Work(bytes=moved, launches=1, op="embedding", shape={"rows": rows, "width": width}),
              outputs=(TensorSpec((rows, width), p.act),),
              attrs=_attrs(None, table_rows * width, rows * width * p.act_bytes, attrs))


def cache_write(name: str, tokens: int, width: int, p: Precision, deps: Iterable[str], *, layer: int) -> Op:
    """The new keys and values (``tokens`` rows of ``width`` each) copied into the KV cache."""
    moved = 2 * 2 * tokens * width * p.act_bytes  # K and V, each read once and written once
    return Op(name=name, op_class="copy", source="built", deps=tuple(deps),
              work=Work(bytes=moved, launches=1, op="copy", shape={"tokens": tokens, "width": width}),
              outputs=(TensorSpec((2, tokens, width), p.act),), attrs=_attrs(layer, 0, 0.0, {"kv_cache": True}))


def collective(name: str, op: str, bytes_per_rank: float, ranks: int, deps: Iterable[str], *,
               layer: int | None = None) -> Op:
    """A collective of ``bytes_per_rank`` over ``ranks`` tensor-parallel ranks."""
    return Op(name=name, op_class="collective", source="built", deps=tuple(deps),
              work=Work(launches=1, op="collective", collectives=(Collective(op, float(bytes_per_rank), ranks),)),
              attrs=_attrs(layer, 0, 0.0, {"collective": op}))


def _flops(*parts: Mapping[str, float]) -> dict[str, float]:
    """FLOPs by dtype summed over ``parts`` (an fp32 model's matmul and softmax FLOPs share a key)."""
    total: dict[str, float] = {}
    for part in parts:
        for dtype, amount in part.items():
            total[dtype] = total.get(dtype, 0.0) + amount
    return total


def _causal_pairs(s_q: int, s_kv: int, window: int | None) -> int:
    """Query-key pairs under a causal mask (query ``i`` sees the ``s_kv - s_q + i + 1`` first keys,
    the last ``window`` of them at most)."""
    first, last = s_kv - s_q + 1, s_kv  # keys visible to the first and the last query
    if window is None or window >= last:
        return (first + last) * (last - first + 1) // 2
    if window <= first:
        return window * (last - first + 1)
    below = (first + window) * (window - first + 1) // 2
    return below + window * (last - window)


def attention(prefix: str, batch: int, heads: int, kv_heads: int, s_q: int, s_kv: int, head_dim: int,
              p: Precision, deps: Iterable[str], *, layer: int, fused: bool, causal: bool,
              window: int | None = None) -> list[Op]:
    """Scaled-dot-product attention: one fused op, or (``fused=False``) a score bmm, a softmax and
    a value bmm with the scores stored between them. Same FLOPs either way; the unfused form
    moves the ``batch*heads*s_q*s_kv`` score matrix twice more and launches three kernels."""
    scores = batch * heads * s_q * s_kv
    matmul_flops = 4.0 * scores * head_dim
    softmax_flops = float(FLOPS_PER_ELEMENT["softmax"] * scores)
    q_bytes = batch * s_q * heads * head_dim * p.act_bytes
    kv_bytes = batch * s_kv * kv_heads * head_dim * p.act_bytes  # K (or V); GQA heads are broadcast
    facts: dict[str, Any] = {"layer": layer, "fused": fused, "causal": causal, "s_q": s_q, "s_kv": s_kv,
                             "heads": heads, "kv_heads": kv_heads, "params": 0, "weight_bytes": 0.0,
                             "kv_cache_read_bytes": 2.0 * kv_bytes}
    if causal:
        pairs = batch * heads * _causal_pairs(s_q, s_kv, window)
        facts["flops_causal_half"] = pairs * (4.0 * head_dim + FLOPS_PER_ELEMENT["softmax"])
    if window is not None:
        facts["sliding_window"] = window
    shape = {"batch": batch, "heads": heads, "kv_heads": kv_heads, "s_q": s_q, "s_kv": s_kv, "head_dim": head_dim}
    q_spec = TensorSpec((batch, heads, s_q, head_dim), p.act)
    kv_spec = TensorSpec((batch, kv_heads, s_kv, head_dim), p.act)
    if fused:
        return [Op(name=f"{prefix}.attention", op_class="attention", source="built", deps=tuple(deps),
                   work=Work(flops=_flops({p.act: matmul_flops}, {p.reduce_flops: softmax_flops}),
                             bytes=2 * q_bytes + 2 * kv_bytes, launches=1, op="attention", shape=shape),
                   inputs=(q_spec, kv_spec, kv_spec), outputs=(q_spec,), attrs=facts)]
    score_bytes = scores * p.act_bytes
    score_spec = TensorSpec((batch, heads, s_q, s_kv), p.act)
    # The score pass reads K, the value pass reads V: each half of the cache once.
    first = Op(name=f"{prefix}.scores", op_class="bmm", source="built", deps=tuple(deps),
               work=Work(flops={p.act: matmul_flops / 2}, bytes=q_bytes + kv_bytes + score_bytes, launches=1,
                         op="bmm", shape=shape),
               inputs=(q_spec, kv_spec), outputs=(score_spec,),
               attrs={**facts, "part": "scores", "kv_cache_read_bytes": float(kv_bytes)})
    soft = Op(name=f"{prefix}.softmax", op_class="softmax", source="built", deps=(first.name,),
              work=Work(flops={p.reduce_flops: softmax_flops}, bytes=2 * score_bytes, launches=1, op="softmax",
                        shape=shape),
              inputs=(score_spec,), outputs=(score_spec,), attrs={**facts, "part": "softmax", "kv_cache_read_bytes": 0.0})
    values = Op(name=f"{prefix}.context", op_class="bmm", source="built", deps=(soft.name, *deps),
                work=Work(flops={p.act: matmul_flops / 2}, bytes=score_bytes + kv_bytes + q_bytes, launches=1,
                          op="bmm", shape=shape),
                inputs=(score_spec, kv_spec), outputs=(q_spec,),
                attrs={**facts, "part": "values", "kv_cache_read_bytes": float(kv_bytes)})
    return [first, soft, values]
