"""``kernels="eager"``: the ops PyTorch eager launches for transformers' modules.

The fused builders (:mod:`.builders_layers`) model an inference runtime's kernels: one RMSNorm,
one rotary, one SiLU*mul op. Eager PyTorch running the transformers modules (what the workload
suite runs and what :mod:`.capture` records) launches their decompositions instead, each op
reading and writing its tensors in its own dtype:

- RMSNorm: ``_to_copy`` to fp32, ``pow``, ``mean``, ``add`` (eps), ``rsqrt``, ``mul``,
  ``_to_copy`` back, ``mul`` by the weight (the casts only when the activations are not fp32);
- LayerNorm: one ``native_layer_norm`` (which also writes the fp32 mean and rstd of each row);
- rotary: per forward, the cos/sin tables (``arange``, ``add``, casts, ``mul``, ``cat``, ``cos``,
  ``sin``, scalings); per layer ``mul``, ``neg``, ``cat``, ``mul``, ``add`` for q and for k;
- KV cache: ``transformers.DynamicCache`` appends by ``cat``: decode copies the whole cache;
- SwiGLU: ``silu`` then ``mul``; GPT-2's ``gelu_new`` as its eight elementwise ops; GELU one op;
- Mixtral: the ``grouped_mm`` experts path (softmax, top-k, sort, gathers, two grouped gemms,
  the weighting and the scatter back), the grouped gemms reading the routed experts' weights.

FLOPs and bytes follow :mod:`.aten_costs` op by op (elementwise 1 per output element, reductions
1 per input element, ``native_layer_norm`` 7 per element; bytes = every input and output once),
and the op classes are the capture's (``copy`` for ``_to_copy``/``cat``, ``reduction`` for
``mean``/``sum``/``topk``, ``elementwise`` otherwise). Names are ``<module path>.<aten op>#n``
as a capture names them; gemms, attention and residual adds keep the builder's names.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .builders_layers import ROPE_FAMILIES, LayerBuilder, experts_active, vit_tokens
from .builders_ops import Precision, embedding, gemm
from .graph import Op, TensorSpec
from ..work import DTYPE_BYTES, Work

FLOATS = ("fp32", "bf16", "fp16", "fp8", "fp64")
T = TensorSpec


class Emitter:
    """Appends spec-costed ops to ``ops``, numbering names per (module path, aten op)."""

    def __init__(self, p: Precision, ops: list[Op]) -> None:
        self.p, self.ops = p, ops
        self.counts: dict[tuple[str, str], int] = {}

    @property
    def act(self) -> str:
        return self.p.act

    def name(self, path: str, aten: str) -> str:
        n = self.counts.get((path, aten), 0)
        self.counts[(path, aten)] = n + 1
        return f"{path}.{aten}#{n}" if path else f"{aten}#{n}"

    def op(self, path: str, aten: str, op_class: str, ins: Sequence[TensorSpec], outs: Sequence[TensorSpec],
           flops: float = 0.0, deps: Sequence[str] = (), *, layer: int | None = None, bwd: str | None = None,
           accumulate: int = 0, params: float = 0, weight_bytes: float = 0.0,
           attrs: Mapping[str, Any] | None = None) -> str:
        """One aten op: bytes are its inputs and outputs once each; FLOPs in its first floating
        input's dtype (none for integer arithmetic)."""
        moved = float(sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs))
        floating = [t.dtype for t in (*ins, *outs) if t.dtype in FLOATS]
        dtype = floating[0] if floating else None
        name = self.name(path, aten)
        facts: dict[str, Any] = {"params": int(params), "weight_bytes": float(weight_bytes), "aten": aten}
        if layer is not None:
            facts["layer"] = layer
        if bwd:
            facts["eager_bwd"] = bwd
        if accumulate:
            facts["accumulate"] = accumulate
        facts.update(attrs or {})
        shape: dict[str, Any] = {"elements": float(outs[0].numel) if outs else 0.0}
        if not flops and dtype:
            shape["dtype"] = dtype          # a copy's class is calibrated per dtype, as a captured one
        if aten == "cat":
            shape.update(function="cat", inputs=float(len(ins)))     # as the capture records a cat
        work = Work(flops={dtype: float(flops)} if flops and dtype else {}, bytes=moved, launches=1, op=op_class,
                    shape=shape)
        self.ops.append(Op(name=name, op_class=op_class, source="built", deps=tuple(dict.fromkeys(deps)), work=work,
                           inputs=tuple(ins), outputs=tuple(outs), attrs=facts))
        return name

    def unary(self, path: str, aten: str, n: int, deps: Sequence[str], dtype: str | None = None, *,
              layer: int | None = None, bwd: str | None = None, accumulate: int = 0) -> str:
        t = T((n,), dtype or self.act)
        return self.op(path, aten, "elementwise", (t,), (t,), n, deps, layer=layer, bwd=bwd, accumulate=accumulate)

    def binary(self, path: str, aten: str, n: int, other: int, deps: Sequence[str], dtype: str | None = None, *,
               layer: int | None = None, bwd: str | None = None, accumulate: int = 0) -> str:
        t = T((n,), dtype or self.act)
        return self.op(path, aten, "elementwise", (t, T((other,), t.dtype)), (t,), n, deps, layer=layer, bwd=bwd,
                       accumulate=accumulate)

    def cast(self, path: str, n: int, src: str, dst: str, deps: Sequence[str], *, layer: int | None = None,
             accumulate: int = 0) -> str:
        return self.op(path, "_to_copy", "copy", (T((n,), src),), (T((n,), dst),), 0.0, deps, layer=layer,
                       bwd="cast" if src in FLOATS else None, accumulate=accumulate, attrs={"cast": True})

    def rms_norm(self, path: str, rows: int, width: int, dep: str, *, layer: int | None = None,
                 extra_consumers: int = 1) -> str:
        """transformers' LlamaRMSNorm; ``extra_consumers`` other ops read its input (a residual)."""
        act, n = self.act, rows * width
        x = dep
        if act != "fp32":
            x = self.cast(path, n, act, "fp32", (dep,), layer=layer, accumulate=extra_consumers)
        square = self.unary(path, "pow", n, (x,), "fp32", layer=layer, bwd="square",
                            accumulate=1 + (extra_consumers if act == "fp32" else 0))
        mean = self.op(path, "mean", "reduction", (T((n,), "fp32"),), (T((rows,), "fp32"),), n, (square,),
                       layer=layer, bwd="mean")
        eps = self.unary(path, "add", rows, (mean,), "fp32", layer=layer)
        rstd = self.unary(path, "rsqrt", rows, (eps,), "fp32", layer=layer, bwd="rsqrt")
        y = self.binary(path, "mul", n, rows, (x, rstd), "fp32", layer=layer, bwd="mul_bcast")
        if act != "fp32":
            y = self.cast(path, n, "fp32", act, (y,), layer=layer)
        t = T((n,), act)
        return self.op(path, "mul", "elementwise", (T((width,), act), t), (t,), n, (y,), layer=layer,
                       bwd="mul_weight", params=width, weight_bytes=width * DTYPE_BYTES[act])

    def layer_norm(self, path: str, rows: int, width: int, dep: str, *, layer: int | None = None,
                   extra_consumers: int = 0) -> str:
        act, n = self.act, rows * width
        w = T((width,), act)
        return self.op(path, "native_layer_norm", "norm", (T((n,), act), w, w),
                       (T((n,), act), T((rows,), "fp32"), T((rows,), "fp32")), 7.0 * n, (dep,), layer=layer,
                       bwd="layer_norm", accumulate=extra_consumers, params=2 * width,
                       weight_bytes=2 * width * DTYPE_BYTES[act])

    def positions(self, prefix: str, tokens: int) -> str:
        """``cache_position = arange + past length``, made once per forward."""
        first = self.op(prefix, "arange", "elementwise", (), (T((tokens,), "int64"),))
        return self.op(prefix, "add", "elementwise", (T((tokens,), "int64"),), (T((tokens,), "int64"),), 0.0,
                       (first,))

    def rotary_tables(self, path: str, s_q: int, head_dim: int, dep: str) -> str:
        """LlamaRotaryEmbedding's cos and sin for ``s_q`` positions (fp32, cast to the act dtype)."""
        act, half, full = self.act, head_dim // 2, s_q * head_dim
        pos = self.op(path, "_to_copy", "copy", (T((s_q,), "int64"),), (T((s_q,), "fp32"),), 0.0, (dep,),
                      attrs={"cast": True})
        inv = [pos]
        if act != "fp32":
            inv.append(self.cast(path, half, act, "fp32", ()))
        freqs = self.op(path, "mul", "elementwise", (T((s_q,), "fp32"), T((half,), "fp32")),
                        (T((s_q * half,), "fp32"),), s_q * half, inv)
        emb = self.op(path, "cat", "copy", (T((s_q * half,), "fp32"),), (T((full,), "fp32"),), 0.0, (freqs,))
        cos = self.unary(path, "mul", full, (self.unary(path, "cos", full, (emb,), "fp32"),), "fp32")
        sin = self.unary(path, "mul", full, (self.unary(path, "sin", full, (emb,), "fp32"),), "fp32")
        if act == "fp32":
            return sin
        self.cast(path, full, "fp32", act, (cos,))
        return self.cast(path, full, "fp32", act, (sin,))


class EagerLayerBuilder(LayerBuilder):
    """:class:`LayerBuilder` with transformers' eager decompositions (see the module docstring)."""

    def __init__(self, config: Any, p: Precision, shape: Any, ops: list[Op], emit: Emitter, tables: str = "",
                 phase: str = "prefill") -> None:
        super().__init__(config, p, shape, ops)
        self.emit, self.tables, self.phase = emit, tables, phase
        self.tables_deps = (tables,) if tables else ()

    def _norm(self, i: int, key: str, dep: str, feeds_column_parallel: bool = False) -> str:
        rows, width = self.shape.tokens, self.config.hidden_size
        if self.norm_kind == "rmsnorm":
            return self.emit.rms_norm(self._path(i, key), rows, width, dep, layer=i, extra_consumers=1)
        # pre-norm layers: the input also feeds the residual; BERT's post-norms feed the next block twice
        return self.emit.layer_norm(self._path(i, key), rows, width, dep, layer=i, extra_consumers=1)

    def _rotary(self, i: int, attn: str, q: str, k: str) -> tuple[str, str]:
        s, d = self.shape, self.config.head_dim
        table = s.s_q * d
        out = []
        for src, heads in ((q, self.heads), (k, self.kv_heads)):
            n = s.tokens * heads * d
            e = self.emit
            a = e.binary(attn, "mul", n, table, (src, *self.tables_deps), layer=i, bwd="mul_const", accumulate=1)
            neg = e.unary(attn, "neg", n // 2, (src,), layer=i)
            half = T((n // 2,), self.p.act)
            rot = e.op(attn, "cat", "copy", (half, half), (T((n,), self.p.act),), 0.0, (neg, src), layer=i,
                       bwd="rotate_half")
            b = e.binary(attn, "mul", n, table, (rot, *self.tables_deps), layer=i, bwd="mul_const")
            out.append(e.op(attn, "add", "elementwise", (T((n,), self.p.act),) * 2, (T((n,), self.p.act),), n,
                            (a, b), layer=i))
        return out[0], out[1]

    def _cache_write(self, i: int, attn: str, deps: tuple[str, ...]) -> tuple[str, ...]:
        s, width = self.shape, self.kv_heads * self.config.head_dim
        old = (s.s_kv - s.s_q) * s.batch * width
        new, act = s.tokens * width, self.p.act
        names = [self.emit.op(attn, "cat", "copy", (T((old,), act), T((new,), act)), (T((old + new,), act),), 0.0,
                              deps, layer=i, attrs={"kv_cache": True}) for _ in "kv"]
        if self.phase == "prefill" and self.config.get("sliding_window") is not None \
                and self.config.family == "mistral":
            names.append(self.emit.op(attn, "_to_copy", "copy", (T((), "int64"),), (T((), "int64"),), layer=i))
        return tuple(names)

    def _act(self, i: int, kind: str, deps: tuple[str, ...], elements: int, name: str | None = None) -> str:
        e, n, path = self.emit, elements, name or self._path(i, "act")
        if kind == "silu_mul":
            mlp = path.rsplit(".", 1)[0]
            silu = e.unary(path, "silu", n, deps[:1], layer=i, bwd="silu")
            return e.binary(mlp, "mul", n, n, (silu, *deps[1:]), layer=i, bwd="mul")
        if kind == "gelu":
            return e.unary(path, "gelu", n, deps, layer=i, bwd="gelu")
        # gelu_new: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        half = e.unary(path, "mul", n, deps, layer=i, bwd="mul_const", accumulate=2)
        cube = e.unary(path, "pow", n, deps, layer=i, bwd="cube")
        scaled = e.unary(path, "mul", n, (cube,), layer=i, bwd="mul_const")
        inner = e.binary(path, "add", n, n, (scaled,) + deps, layer=i)
        tanh = e.unary(path, "tanh", n, (e.unary(path, "mul", n, (inner,), layer=i, bwd="mul_const"),), layer=i,
                       bwd="tanh")
        return e.binary(path, "mul", n, n, (half, e.unary(path, "add", n, (tanh,), layer=i)), layer=i, bwd="mul")

    def moe_block(self, i: int, x: str) -> str:
        """transformers' ``grouped_mm`` experts path; the grouped gemms read the weights of the
        experts that receive tokens (the capture reads all of them: see :mod:`.capture_phases`)."""
        cfg, p, m, e, act = self.config, self.p, self.shape.tokens, self.emit, self.p.act
        hidden, experts, top_k = cfg.hidden_size, cfg.num_experts, cfg.experts_per_token
        routed = m * top_k
        router_path, path = self._path(i, "router"), self._path(i, "experts")
        logits = self._add(gemm(router_path, m, experts, hidden, p, (x,), layer=i, high_precision=True))
        if act != "fp32":
            logits = e.cast(router_path, m * experts, act, "fp32", (logits,), layer=i)
        soft = e.op(router_path, "_softmax", "softmax", (T((m * experts,), "fp32"),), (T((m * experts,), "fp32"),),
                    5.0 * m * experts, (logits,), layer=i, bwd="softmax")
        top = e.op(router_path, "topk", "reduction", (T((m * experts,), "fp32"),),
                   (T((routed,), "fp32"), T((routed,), "int64")), m * experts, (soft,), layer=i, bwd="topk")
        total = e.op(router_path, "sum", "reduction", (T((routed,), "fp32"),), (T((m,), "fp32"),), routed, (top,),
                     layer=i)
        weights = e.binary(router_path, "div", routed, m, (top, total), "fp32", layer=i, bwd="div")
        ids = T((routed,), "int64")
        order = e.op(path, "sort", "other", (ids,), (ids, ids), 0.0, (top,), layer=i)
        tok = e.op(path, "floor_divide", "elementwise", (ids,), (ids,), 0.0, (order,), layer=i)
        xs = e.op(path, "index", "embedding", (ids, T((routed * hidden,), act)), (T((routed * hidden,), act),),
                  0.0, (x, tok), layer=i, bwd="gather", attrs={"gather": True})
        ws = e.op(path, "index", "embedding", (ids, T((routed,), "fp32")), (T((routed,), "fp32"),), 0.0,
                  (weights, order), layer=i, bwd="gather", attrs={"gather": True})
        counts = e.op(path, "histc", "reduction", (T((routed,), "int32"),), (T((experts,), "int32"),), routed,
                      (e.op(path, "_to_copy", "copy", (ids,), (T((routed,), "int32"),), 0.0, (order,), layer=i),),
                      layer=i)
        offs = e.op(path, "cumsum", "reduction", (T((experts,), "int32"),), (T((experts,), "int32"),), experts,
                    (counts,), layer=i)
        active = experts_active(m, experts, top_k)
        facts = {"experts": experts, "top_k": top_k, "experts_active": active,
                 "tokens_per_expert": routed / experts, "grouped": True}
        gate_up = self._add(gemm(f"{path}.gate_up_proj", routed, 2 * self.inter, hidden, p, (xs, offs), layer=i,
                                 weight_copies=active, params=experts * 2 * self.inter * hidden, attrs=facts))
        h = self._act(i, "silu_mul", (gate_up, gate_up), routed * self.inter, name=f"{path}.act_fn")
        down = self._add(gemm(f"{path}.down_proj", routed, hidden, self.inter, p, (h,), layer=i,
                              weight_copies=active, params=experts * hidden * self.inter, attrs=facts))
        n = routed * hidden
        scaled = e.op(path, "mul", "elementwise", (T((n,), act), T((routed,), "fp32")), (T((n,), "fp32"),), n,
                      (down, ws), layer=i, bwd="mul_bcast")
        spots = e.op(path, "index_put", "embedding", (ids, ids, ids), (ids,), 0.0,
                     (e.op(path, "arange", "elementwise", (), (ids,), layer=i), order), layer=i)
        back = e.op(path, "index", "embedding", (ids, T((n,), "fp32")), (T((n,), "fp32"),), 0.0, (scaled, spots), layer=i,
                    bwd="gather", attrs={"gather": True})
        out = e.op(path, "sum", "reduction", (T((n,), "fp32"),), (T((m * hidden,), "fp32"),), n, (back,), layer=i)
        if act != "fp32":
            out = e.cast(path, m * hidden, "fp32", act, (out,), layer=i)
        return self._all_reduce(out, i)


def eager_embed(config: Any, e: Emitter, batch: int, s_q: int) -> tuple[str, str]:
    """The embedding ops of an eager forward; returns (the first layer's input, the rotary
    tables op or "")."""
    p, hidden, m = e.p, config.hidden_size, batch * s_q
    family = config.family
    if family == "vit":
        channels, patch = int(config.get("num_channels")), int(config.get("patch_size"))
        tokens = vit_tokens(config)
        conv = gemm("embeddings.patch_embeddings.projection", batch * (tokens - 1), hidden,
                    channels * patch * patch, p, (), bias=True, op_class="conv")
        e.ops.append(conv)
        act = p.act
        joined = e.op("embeddings", "cat", "copy", (T((batch * hidden,), act), T((conv.outputs[0].numel,), act)),
                      (T((m * hidden,), act),), 0.0, (conv.name,), params=hidden)
        out = e.op("embeddings", "add", "elementwise", (T((m * hidden,), act), T((tokens * hidden,), act)),
                   (T((m * hidden,), act),), m * hidden, (joined,), params=tokens * hidden)
        return out, ""
    if family == "bert":
        positions = int(config.get("max_position_embeddings"))
        ids = T((m,), "int64")
        token_types = e.op("embeddings", "gather", "embedding", (T((positions,), "int64"), ids, ids), (ids,))
        e.ops.append(embedding("embeddings.word_embeddings", m, config.vocab_size, hidden, p))
        words = "embeddings.word_embeddings"
        e.ops.append(embedding("embeddings.token_type_embeddings", m, int(config.get("type_vocab_size")), hidden, p,
                               (token_types,)))
        x = e.binary("embeddings", "add", m * hidden, m * hidden, (words, "embeddings.token_type_embeddings"))
        e.ops.append(embedding("embeddings.position_embeddings", m, positions, hidden, p))
        x = e.binary("embeddings", "add", m * hidden, m * hidden, (x, "embeddings.position_embeddings"))
        return e.layer_norm("embeddings.LayerNorm", m, hidden, x), ""
    if family == "gpt2":
        e.ops.append(embedding("transformer.wte", m, config.vocab_size, hidden, p))
        pos = e.positions("transformer", s_q)
        e.ops.append(embedding("transformer.wpe", m, int(config.get("max_position_embeddings")), hidden, p,
                               (pos,), ids=True))
        x = e.binary("transformer", "add", m * hidden, m * hidden, ("transformer.wte", "transformer.wpe"))
        return x, ""
    e.ops.append(embedding("model.embed_tokens", m, config.vocab_size, hidden, p))
    pos = e.positions("model", s_q)
    tables = e.rotary_tables("model.rotary_emb", s_q, config.head_dim, pos) if family in ROPE_FAMILIES else ""
    return "model.embed_tokens", tables
