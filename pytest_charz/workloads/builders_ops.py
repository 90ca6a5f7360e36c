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

Precision (:class:`Precision`, the recipes of :data:`PRECISIONS`): norms and softmax accumulate in
fp32 (their FLOPs are counted as fp32, as PyTorch's and most fused kernels' reductions are), while
their tensors are stored in the activation dtype. ``fp8`` means fp8 gemm weights and gemm inputs
with bf16 outputs, residual stream, attention, norms, embeddings and LM head (a common FP8 serving
recipe: the LM head, the router and the embedding stay in bf16). ``int8-wo`` and ``int4-wo`` are
weight-only recipes: weights stored at 8 or 4 bits (int4 packed two to a byte), activations and
gemm math in bf16. The KV cache is kept in the activation dtype unless a recipe is given another
(``kv``: an fp8 cache, as FP8 serving engines keep it, holds and moves half the bytes of a bf16 one).

A weight-only gemm is one fused kernel that reads the packed weights and dequantizes them in its
main loop (the dequantization hides under the weight read; no FLOPs are added for it) below
:data:`DEQUANT_MATMUL_TOKENS` rows; from that many rows on, a runtime dequantizes the whole weight
to bf16 first (an elementwise op reading the packed weight and writing the bf16 one) and runs a
plain bf16 gemm on it, as vLLM's AWQ linear method does (``FP16_MATMUL_HEURISTIC_CONDITION =
x.shape[:-1].numel() >= 256``, ``AWQLinearMethod.apply``,
https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/layers/quantization/awq.py):
:func:`expand_weight_only` splits such an op in two.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError

from ..work import DTYPE_BYTES, Collective, Work
from .graph import Op, TensorSpec

#: Arithmetic per output element of each elementwise or normalisation kind.
FLOPS_PER_ELEMENT = {"add": 1, "rotary": 3, "silu_mul": 5, "gelu": 8, "gelu_new": 8, "tanh": 4, "rmsnorm": 4,
                     "layernorm": 7, "softmax": 5, "combine": 2, "topk": 2, "adamw": 12, "dequant": 2,
                     "add_rmsnorm": 5, "add_layernorm": 8}
#: Bytes of a token id (int64, as PyTorch embedding lookups take them).
TOKEN_ID_BYTES = DTYPE_BYTES["int64"]


@dataclass(frozen=True)
class Precision:
    """Which dtype each part of a model uses for one precision recipe.

    ``weight``/``gemm_in``: gemm weights (their storage dtype) and inputs; ``gemm_flops``: the
    dtype of gemm FLOPs; ``act``: everything stored between ops (residual stream, gemm outputs,
    norms, attention, embeddings, LM head); ``reduce_flops``: norms and softmax; ``kv``: the KV
    cache (empty: the activation dtype); ``weight_bits``: bits per weight when fewer than the
    storage dtype's (int4 packed two to an int8 byte; 0: the dtype's own); ``weight_only``: the
    weights are dequantized to ``gemm_in`` for the math (module docstring).
    """

    name: str
    weight: str
    gemm_in: str
    gemm_flops: str
    act: str
    reduce_flops: str
    kv: str = ""
    weight_bits: int = 0
    weight_only: bool = False

    @property
    def act_bytes(self) -> int:
        return DTYPE_BYTES[self.act]

    @property
    def kv_dtype(self) -> str:
        """The KV cache's dtype."""
        return self.kv or self.act

    @property
    def kv_bytes(self) -> int:
        return DTYPE_BYTES[self.kv_dtype]

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes one gemm weight occupies (0.5 for packed int4)."""
        return self.weight_bits / 8.0 if self.weight_bits else float(DTYPE_BYTES[self.weight])


PRECISIONS = {
    "fp32": Precision("fp32", "fp32", "fp32", "fp32", "fp32", "fp32"),
    "bf16": Precision("bf16", "bf16", "bf16", "bf16", "bf16", "fp32"),
    "fp16": Precision("fp16", "fp16", "fp16", "fp16", "fp16", "fp32"),
    "fp8": Precision("fp8", "fp8", "fp8", "fp8", "bf16", "fp32"),
    "int8-wo": Precision("int8-wo", "int8", "bf16", "bf16", "bf16", "fp32", weight_only=True),
    "int4-wo": Precision("int4-wo", "int8", "bf16", "bf16", "bf16", "fp32", weight_bits=4, weight_only=True),
}
#: The dtypes a KV cache may be kept in (``build(kv_dtype=...)``).
KV_DTYPES = ("fp8", "bf16", "fp16", "fp32")
#: Queries per sequence up to which fused attention is a decode kernel: paged attention (vLLM),
#: masked multi-head attention (TensorRT-LLM) and FlashDecoding split the cached keys across
#: thread blocks and stream them, a reduction over ``s_kv`` with the few queries held in
#: registers, not a tiled matrix product whose rows a 64- or 128-query tile would pad ("Flash-
#: Decoding for long-context inference", T. Dao, D. Haziza, F. Massa, G. Sizov, PyTorch blog,
#: 2023-10-13, https://pytorch.org/blog/flash-decoding/). Its shape therefore names
#: ``decode_queries`` rather than ``s_q``: the core prices its FLOPs at the plain rate and its
#: cache read at the memory's, never through a GEMM's tile efficiency.
DECODE_ATTENTION_QUERIES = 1
#: How a decode step's attention kernel reads a grouped-query cache (:func:`attention`):
#: ``grouped``, each K/V head once for its group of query heads (TensorRT-LLM's XQA kernel, "New
#: XQA-kernel provides 2.4x more Llama-70B throughput within the same latency budget",
#: TensorRT-LLM docs/source/blogs/XQA-kernel.md, 2023; FlashInfer; FlashDecoding), or
#: ``per-head``, one thread block per query head and sequence, each loading the K/V head it
#: uses (TensorRT-LLM's masked multi-head attention before XQA: ``mmha_launch_kernel_ex``
#: launches ``grid{num_heads, batch_size}``, cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention).
#: The head is the grid's x, so the blocks of one group's query heads are launched next to each
#: other and run together: the first read of a K/V line comes from DRAM, the group's other heads
#: find it in L2. The cache crosses DRAM once, as a grouped kernel's does, and L2
#: ``heads / kv_heads`` times.
DECODE_KERNELS = ("grouped", "per-head")
#: Rows from which a weight-only gemm dequantizes its weight first (module docstring).
DEQUANT_MATMUL_TOKENS = 256


def precision(name: str, kv_dtype: str | None = None) -> Precision:
    """The recipe ``name`` of :data:`PRECISIONS`, its KV cache in ``kv_dtype`` when given;
    UsageError naming the valid ones."""
    if name not in PRECISIONS:
        raise UsageError(f"dtype (precision) must be one of {', '.join(PRECISIONS)}; got {name!r}")
    if kv_dtype is None:
        return PRECISIONS[name]
    if kv_dtype not in KV_DTYPES:
        raise UsageError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}; got {kv_dtype!r}")
    return replace(PRECISIONS[name], kv=kv_dtype)


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
    ``params`` the parameters the op owns (default one weight and its bias). A weight-only
    recipe's weight is read at its bits (``attrs["bytes_per_param"]``); a gemm of
    :data:`DEQUANT_MATMUL_TOKENS` rows or more is marked ``attrs["dequantize_first"]`` for
    :func:`expand_weight_only`.
    """
    weight_dtype = p.act if high_precision else p.weight
    in_dtype = p.act if high_precision else p.gemm_in
    flops_dtype = p.act if high_precision else p.gemm_flops
    per_param = float(DTYPE_BYTES[weight_dtype]) if high_precision else p.weight_bytes_per_param
    weight_bytes = weight_copies * (n * k * per_param + (n * p.act_bytes if bias else 0))
    moved = weight_bytes + m * k * DTYPE_BYTES[in_dtype] + m * n * p.act_bytes
    owned = params if params is not None else n * k + (n if bias else 0)
    extra = dict(attrs or {})
    if weight_copies != 1.0:
        extra["weight_copies"] = weight_copies
    stored_k = k
    if p.weight_only and not high_precision:
        extra["bytes_per_param"] = per_param
        stored_k = math.ceil(k * per_param / DTYPE_BYTES[weight_dtype])  # int4: two weights per byte
        if m >= DEQUANT_MATMUL_TOKENS:
            extra["dequantize_first"] = True
    return Op(name=name, op_class=op_class, source="built", deps=tuple(deps),
              work=Work(flops={flops_dtype: 2.0 * m * n * k}, bytes=moved, launches=1, op=op_class,
                        shape={"m": m, "n": n, "k": k, **({"linear": 1} if op_class == "gemm" else {})}),
              inputs=(TensorSpec((m, k), in_dtype), TensorSpec((n, stored_k), weight_dtype)),
              outputs=(TensorSpec((m, n), p.act),), attrs=_attrs(layer, owned, weight_bytes, extra))


def expand_weight_only(op: Op, p: Precision) -> list[Op]:
    """``[op]``, or for a weight-only gemm marked ``dequantize_first`` the two kernels a runtime
    runs instead: the weight dequantized to ``p.gemm_in`` (packed bytes read, bf16 written), then
    a plain gemm reading the bf16 weight (module docstring). The gemm keeps the op's name, params
    and packed weight tensor (what the device holds), so the memory need is unchanged."""
    if not op.attrs.get("dequantize_first"):
        return [op]
    m, n, k = (int(op.work.shape[key]) for key in ("m", "n", "k"))
    copies = float(op.attrs.get("weight_copies", 1.0) or 1.0)
    packed = float(op.attrs["weight_bytes"])
    elements = int(round(copies * n * k))
    unpacked = elements * DTYPE_BYTES[p.gemm_in]
    dequant = Op(name=f"{op.name}.dequantize", op_class="elementwise", source="built", deps=op.deps,
                 work=Work(flops={p.act: float(FLOPS_PER_ELEMENT["dequant"] * elements)}, bytes=packed + unpacked,
                           launches=1, op="elementwise", shape={"elements": elements}),
                 outputs=(TensorSpec((elements,), p.gemm_in),),
                 attrs=_attrs(op.attrs.get("layer"), 0, 0.0, {"kind": "dequant"}))
    moved = op.work.total_bytes - packed + unpacked
    work = Work(flops=dict(op.work.flops), bytes=moved, launches=1, op=op.work.op, shape=dict(op.work.shape))
    attrs = {key: value for key, value in op.attrs.items() if key != "dequantize_first"}
    return [dequant, replace(op, work=work, deps=(*op.deps, dequant.name), attrs={**attrs, "dequantized": True})]


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


def add_norm(name: str, kind: str, rows: int, width: int, p: Precision, deps: Iterable[str], *,
             layer: int | None = None, attrs: Mapping[str, Any] | None = None) -> Op:
    """A residual add fused into the norm after it (``kind`` ``rmsnorm`` or ``layernorm``), as
    serving engines run them: reads the branch output and the residual, writes the new residual
    and the normalised rows (vLLM's ``fused_add_rms_norm``)."""
    params = width if kind == "rmsnorm" else 2 * width
    weight_bytes = params * p.act_bytes
    spec = TensorSpec((rows, width), p.act)
    return Op(name=name, op_class="norm", source="built", deps=tuple(deps),
              work=Work(flops={p.reduce_flops: float(FLOPS_PER_ELEMENT[f"add_{kind}"] * rows * width)},
                        bytes=4 * rows * width * p.act_bytes + weight_bytes, launches=1, op="norm",
                        shape={"rows": rows, "width": width}),
              inputs=(spec, spec), outputs=(spec, spec),
              attrs=_attrs(layer, params, weight_bytes, {"kind": f"add_{kind}", "fused_residual": True,
                                                          **(attrs or {})}))


def rotary_cache_write(name: str, tokens: int, q_width: int, kv_width: int, positions: int, head_dim: int,
                       p: Precision, deps: Iterable[str], *, layer: int) -> Op:
    """The rotary embedding of q and k and the K/V cache write in one kernel, as a serving
    engine's attention preprocessing runs them: reads the fused q/k/v projection and the cos/sin
    tables, writes the rotated queries and the new K and V into the cache (in its dtype)."""
    read = tokens * (q_width + 2 * kv_width) * p.act_bytes + 2 * positions * head_dim * p.act_bytes
    written = tokens * q_width * p.act_bytes + 2 * tokens * kv_width * p.kv_bytes
    return Op(name=name, op_class="elementwise", source="built", deps=tuple(deps),
              work=Work(flops={p.act: float(FLOPS_PER_ELEMENT["rotary"] * tokens * (q_width + kv_width))},
                        bytes=float(read + written), launches=1, op="elementwise",
                        shape={"elements": tokens * (q_width + 2 * kv_width)}),
              outputs=(TensorSpec((tokens, q_width), p.act), TensorSpec((2, tokens, kv_width), p.kv_dtype)),
              attrs=_attrs(layer, 0, 0.0, {"kind": "rotary", "kv_cache": True, "kv_dtype": p.kv_dtype}))


def embedding(name: str, rows: int, table_rows: int, width: int, p: Precision, deps: Iterable[str] = (), *,
              ids: bool = True, attrs: Mapping[str, Any] | None = None) -> Op:
    """A gather of ``rows`` rows of a ``(table_rows, width)`` table: only the gathered rows move."""
    moved = 2 * rows * width * p.act_bytes + (rows * TOKEN_ID_BYTES if ids else 0)
    return Op(name=name, op_class="embedding", source="built", deps=tuple(deps),
              work=Work(bytes=moved, launches=1, op="embedding", shape={"rows": rows, "width": width}),
              outputs=(TensorSpec((rows, width), p.act),),
              attrs=_attrs(None, table_rows * width, rows * width * p.act_bytes, attrs))


def cache_write(name: str, tokens: int, width: int, p: Precision, deps: Iterable[str], *, layer: int) -> Op:
    """The new keys and values (``tokens`` rows of ``width`` each) copied into the KV cache: read in
    the activation dtype, written in the cache's (an fp8 cache quantizes them on the way)."""
    moved = 2 * tokens * width * (p.act_bytes + p.kv_bytes)  # K and V, each read once and written once
    return Op(name=name, op_class="copy", source="built", deps=tuple(deps),
              work=Work(bytes=moved, launches=1, op="copy", shape={"tokens": tokens, "width": width}),
              outputs=(TensorSpec((2, tokens, width), p.kv_dtype),),
              attrs=_attrs(layer, 0, 0.0, {"kv_cache": True, "kv_dtype": p.kv_dtype}))


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
              window: int | None = None, decode_kernel: str | None = "grouped") -> list[Op]:
    """Scaled-dot-product attention: one fused op, or (``fused=False``) a score bmm, a softmax and
    a value bmm with the scores stored between them. Same FLOPs either way; the unfused form
    moves the ``batch*heads*s_q*s_kv`` score matrix twice more and launches three kernels.

    ``decode_kernel`` (a decode step's fused attention in an inference runtime,
    :data:`DECODE_KERNELS`): ``grouped`` reads each K/V head once for the query heads that share
    it; ``per-head`` runs one thread block per query head, each loading its K/V head, so a
    grouped-query cache is read once from DRAM and ``heads / kv_heads - 1`` times more from L2,
    by the group's other heads (the cache it holds is the same; :data:`DECODE_KERNELS`); None:
    no decode kernel, the step's attention is the same product as a prefill's (PyTorch's
    ``scaled_dot_product_attention``, as eager code and its capture run it)."""
    scores = batch * heads * s_q * s_kv
    matmul_flops = 4.0 * scores * head_dim
    softmax_flops = float(FLOPS_PER_ELEMENT["softmax"] * scores)
    q_bytes = batch * s_q * heads * head_dim * p.act_bytes
    kv_bytes = batch * s_kv * kv_heads * head_dim * p.kv_bytes  # K (or V), in the cache's dtype; GQA broadcast
    facts: dict[str, Any] = {"layer": layer, "fused": fused, "causal": causal, "s_q": s_q, "s_kv": s_kv,
                             "heads": heads, "kv_heads": kv_heads, "params": 0, "weight_bytes": 0.0,
                             "kv_cache_read_bytes": 2.0 * kv_bytes, "kv_dtype": p.kv_dtype}
    if causal:
        pairs = batch * heads * _causal_pairs(s_q, s_kv, window)
        facts["flops_causal_half"] = pairs * (4.0 * head_dim + FLOPS_PER_ELEMENT["softmax"])
    if window is not None:
        facts["sliding_window"] = window
    shape = {"batch": batch, "heads": heads, "kv_heads": kv_heads, "s_q": s_q, "s_kv": s_kv, "head_dim": head_dim}
    q_spec = TensorSpec((batch, heads, s_q, head_dim), p.act)
    kv_spec = TensorSpec((batch, kv_heads, s_kv, head_dim), p.kv_dtype)
    kv_moved = 2 * kv_bytes
    kv_reread = 0.0  # bytes the kernel reads again from L2 (a Work drops a zero amount)
    if fused and s_q <= DECODE_ATTENTION_QUERIES and decode_kernel is not None:
        # A decode step's attention: a split-KV kernel streaming the cache (no query tile to fill).
        if decode_kernel not in DECODE_KERNELS:
            raise UsageError(f"decode_kernel must be one of {', '.join(DECODE_KERNELS)}; got {decode_kernel!r}")
        shape = {"batch": batch, "heads": heads, "kv_heads": kv_heads, "decode_queries": s_q, "s_kv": s_kv,
                 "head_dim": head_dim}
        facts["decode_kernel"] = decode_kernel
        if decode_kernel == "per-head":
            # the other query heads of a group re-read its K/V head: their blocks are launched
            # next to each other (x is the head), so the repeats find the lines in L2
            kv_reread = kv_moved * (heads / kv_heads - 1.0)
    if fused:
        return [Op(name=f"{prefix}.attention", op_class="attention", source="built", deps=tuple(deps),
                   work=Work(flops=_flops({p.act: matmul_flops}, {p.reduce_flops: softmax_flops}),
                             bytes={"dram": 2 * q_bytes + kv_moved, "l2": kv_reread}, launches=1, op="attention",
                             shape=shape),
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
