"""One transformer layer as ops, for every family: pre-norm decoders (Llama, Mistral, Mixtral,
GPT-2), the pre-norm ViT encoder and the post-norm BERT encoder.

Op names are the module paths of the transformers model (``model.layers.3.self_attn.q_proj``),
so a captured graph (``<module path>.<aten op>#n``) matches a built one by prefix. Ops that are
not modules (residual adds, rotary embedding, KV cache writes, all-reduces) are named under the
module that performs them.

Tensor parallelism (Megatron-style): q/k/v and the MLP's first projections are column parallel
(each rank holds ``1/tp`` of the heads and of the intermediate width), the attention output and
MLP down projections row parallel, each followed by an all-reduce of the ``tokens x hidden``
activations. When ``tp`` exceeds the K/V heads, each rank holds one K/V head (replicated).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .builders_ops import (
    Precision,
    attention,
    cache_write,
    collective,
    elementwise,
    expand_weight_only,
    gemm,
    norm,
)
from .graph import Op
from .model_configs import ModelConfig

#: Module paths per family, relative to the layer (``{layer}`` is its path).
NAMES: dict[str, dict[str, str]] = {
    "llama": {"layer": "model.layers.{i}", "in_norm": "input_layernorm", "attn": "self_attn",
              "q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
              "post_norm": "post_attention_layernorm", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
              "act": "mlp.act_fn", "down": "mlp.down_proj", "mlp": "mlp"},
    "gpt2": {"layer": "transformer.h.{i}", "in_norm": "ln_1", "attn": "attn", "qkv": "attn.c_attn",
             "o": "attn.c_proj", "post_norm": "ln_2", "up": "mlp.c_fc", "act": "mlp.act", "down": "mlp.c_proj",
             "mlp": "mlp"},
    "bert": {"layer": "encoder.layer.{i}", "attn": "attention.self", "q": "attention.self.query",
             "k": "attention.self.key", "v": "attention.self.value", "o": "attention.output.dense",
             "attn_out_norm": "attention.output.LayerNorm", "up": "intermediate.dense",
             "act": "intermediate.intermediate_act_fn", "down": "output.dense", "out_norm": "output.LayerNorm",
             "mlp": "output"},
    "vit": {"layer": "layers.{i}", "in_norm": "layernorm_before", "attn": "attention", "q": "attention.q_proj",
            "k": "attention.k_proj", "v": "attention.v_proj", "o": "attention.o_proj",
            "post_norm": "layernorm_after", "up": "mlp.fc1", "act": "mlp.activation_fn", "down": "mlp.fc2",
            "mlp": "mlp"},
}
NAMES["mistral"] = NAMES["llama"]
NAMES["mixtral"] = {**NAMES["llama"], "router": "mlp.gate", "experts": "mlp.experts"}
ROPE_FAMILIES = ("llama", "mistral", "mixtral")


@dataclass(frozen=True)
class LayerShape:
    """The sizes one layer runs at, per tensor-parallel rank.

    ``s_q`` new tokens per sequence attend to ``s_kv`` keys (``s_q`` + cached ones, capped by a
    sliding window); ``cache`` says whether the new K/V are written to a KV cache.
    """

    batch: int
    s_q: int
    s_kv: int
    tp: int
    fused: bool
    causal: bool
    cache: bool
    window: int | None = None
    decode_kernel: str | None = "grouped"

    @property
    def tokens(self) -> int:
        return self.batch * self.s_q


def heads_per_rank(config: ModelConfig, tp: int) -> tuple[int, int]:
    """(query heads, K/V heads) each rank holds; K/V heads are replicated when tp exceeds them."""
    return config.num_heads // tp, max(1, config.num_kv_heads // tp)


def experts_active(tokens: int, experts: int, top_k: int) -> float:
    """Expected experts receiving at least one of ``tokens`` tokens, each routed to ``top_k`` of
    ``experts`` distinct experts uniformly: ``E * (1 - (1 - k/E)^T)`` (exactly ``k`` for T = 1)."""
    if top_k >= experts:
        return float(experts)
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


class LayerBuilder:
    """Appends the ops of layer ``i`` of ``config`` to ``ops``; :meth:`build` returns the name of
    the op whose output is the layer's output."""

    def __init__(self, config: ModelConfig, p: Precision, shape: LayerShape, ops: list[Op]) -> None:
        self.config, self.p, self.shape, self.ops = config, p, shape, ops
        self.names = NAMES[config.family]
        # Llama-style models have no biases; GPT-2, BERT and ViT have one on every linear layer
        # (ViT's q/k/v biases follow qkv_bias).
        self.bias = config.family in ("gpt2", "bert", "vit")
        self.qkv_bias = self.bias and bool(config.get("qkv_bias", True))
        self.norm_kind = "rmsnorm" if config.family in ROPE_FAMILIES else "layernorm"
        self.heads, self.kv_heads = heads_per_rank(config, shape.tp)
        self.inter = config.intermediate_size // shape.tp

    def _add(self, op: Op) -> str:
        """Append ``op`` (a weight-only gemm as the kernels a runtime runs for it); the name of the
        op whose output is its output."""
        for kernel in expand_weight_only(op, self.p):
            self.ops.append(kernel)
        return op.name

    def _path(self, i: int, key: str) -> str:
        return f"{self.names['layer'].format(i=i)}.{self.names[key]}"

    def _all_reduce(self, after: str, i: int) -> str:
        if self.shape.tp == 1:
            return after
        bytes_per_rank = self.shape.tokens * self.config.hidden_size * self.p.act_bytes
        return self._add(collective(f"{after}.all_reduce", "all-reduce", bytes_per_rank, self.shape.tp, (after,),
                                    layer=i))

    def _residual(self, name: str, deps: tuple[str, ...], i: int) -> str:
        return self._add(elementwise(name, "add", self.shape.tokens * self.config.hidden_size, 2, self.p, deps,
                                     layer=i))

    def _norm(self, i: int, key: str, dep: str, feeds_column_parallel: bool = False) -> str:
        """The norm ``key`` of layer ``i`` over ``dep``; returns the name of its output op."""
        attrs: dict[str, Any] = {"feeds_column_parallel": True} if feeds_column_parallel else {}
        return self._add(norm(self._path(i, key), self.norm_kind, self.shape.tokens, self.config.hidden_size, self.p,
                              (dep,), layer=i, attrs=attrs))

    def build(self, i: int, x: str) -> str:
        if self.config.family == "bert":
            attended = self.attention_block(i, x, x)
            normed = self._norm(i, "attn_out_norm", self._residual(f"{self._path(i, 'o')}.residual",
                                                                   (attended, x), i))
            mlp_out = self.mlp_block(i, normed)
            added = self._residual(f"{self._path(i, 'down')}.residual", (mlp_out, normed), i)
            return self._norm(i, "out_norm", added)
        layer = self.names["layer"].format(i=i)
        normed = self._norm(i, "in_norm", x, feeds_column_parallel=True)
        attended = self.attention_block(i, normed, x)
        mid = self._residual(f"{layer}.attn_residual", (attended, x), i)
        normed = self._norm(i, "post_norm", mid, feeds_column_parallel=True)
        mlp_out = self.moe_block(i, normed) if self.config.family == "mixtral" else self.mlp_block(i, normed)
        return self._residual(f"{layer}.mlp_residual", (mlp_out, mid), i)

    def attention_block(self, i: int, x: str, residual: str) -> str:
        """q/k/v projections, rotary embedding, cache write, attention, output projection and its
        all-reduce; returns the last op's name."""
        cfg, p, s = self.config, self.p, self.shape
        hidden, d = cfg.hidden_size, cfg.head_dim
        m = s.tokens
        q_width, kv_width = self.heads * d, self.kv_heads * d
        if "qkv" in self.names:  # GPT-2's c_attn: one gemm for q, k and v
            qkv = self._add(gemm(self._path(i, "qkv"), m, q_width + 2 * kv_width, hidden, p, (x,), layer=i,
                                 bias=self.qkv_bias))
            q = k = v = qkv
        else:
            q = self._add(gemm(self._path(i, "q"), m, q_width, hidden, p, (x,), layer=i, bias=self.qkv_bias))
            k = self._add(gemm(self._path(i, "k"), m, kv_width, hidden, p, (x,), layer=i, bias=self.qkv_bias))
            v = self._add(gemm(self._path(i, "v"), m, kv_width, hidden, p, (x,), layer=i, bias=self.qkv_bias))
        attn = f"{self.names['layer'].format(i=i)}.{self.names['attn']}"
        if cfg.family in ROPE_FAMILIES:
            q, k = self._rotary(i, attn, q, k)
        deps = tuple(dict.fromkeys((q, k, v)))
        if s.cache:
            deps = self._cache_write(i, attn, deps)
        parts = attention(attn, s.batch, self.heads, self.kv_heads, s.s_q, s.s_kv, d, p, deps, layer=i,
                          fused=s.fused, causal=s.causal, window=s.window, decode_kernel=s.decode_kernel)
        for op in parts:
            self._add(op)
        out = self._add(gemm(self._path(i, "o"), m, hidden, q_width, p, (parts[-1].name,), layer=i, bias=self.bias,
                             params=hidden * q_width + (hidden if self.bias else 0)))
        return self._all_reduce(out, i)

    def _rotary(self, i: int, attn: str, q: str, k: str) -> tuple[str, str]:
        """The rotary embedding of q and k: one fused op (cos/sin tables: s_q positions of
        head_dim each, read once); returns the ops whose outputs are the rotated q and k."""
        s, d = self.shape, self.config.head_dim
        width = (self.heads + self.kv_heads) * d
        q = k = self._add(elementwise(f"{attn}.rotary", "rotary", s.tokens * width, 1, self.p,
                                      tuple(dict.fromkeys((q, k))), layer=i,
                                      extra_read_bytes=2 * s.s_q * d * self.p.act_bytes))
        return q, k

    def _cache_write(self, i: int, attn: str, deps: tuple[str, ...]) -> tuple[str, ...]:
        """The new K/V written to the cache; returns what attention depends on."""
        kv_width = self.kv_heads * self.config.head_dim
        return (self._add(cache_write(f"{attn}.kv_cache_write", self.shape.tokens, kv_width, self.p, deps,
                                      layer=i)),)

    def _act(self, i: int, kind: str, deps: tuple[str, ...], elements: int, name: str | None = None) -> str:
        """The MLP activation (``silu_mul`` over gate and up, or a GELU over one input)."""
        inputs = 2 if kind == "silu_mul" else 1
        return self._add(elementwise(name or self._path(i, "act"), kind, elements, inputs, self.p, deps, layer=i))

    def mlp_block(self, i: int, x: str) -> str:
        """Gated (SwiGLU: gate, up, silu*mul, down) or plain (fc, GELU, proj) MLP and its all-reduce."""
        cfg, p, m = self.config, self.p, self.shape.tokens
        hidden = cfg.hidden_size
        if cfg.family in ROPE_FAMILIES:
            gate = self._add(gemm(self._path(i, "gate"), m, self.inter, hidden, p, (x,), layer=i))
            up = self._add(gemm(self._path(i, "up"), m, self.inter, hidden, p, (x,), layer=i))
            act = self._act(i, "silu_mul", (gate, up), m * self.inter)
        else:
            up = self._add(gemm(self._path(i, "up"), m, self.inter, hidden, p, (x,), layer=i, bias=self.bias))
            kind = "gelu_new" if cfg.get("hidden_act") == "gelu_new" else "gelu"
            act = self._act(i, kind, (up,), m * self.inter)
        down = self._add(gemm(self._path(i, "down"), m, hidden, self.inter, p, (act,), layer=i, bias=self.bias,
                              params=hidden * self.inter + (hidden if self.bias else 0)))
        return self._all_reduce(down, i)

    def moe_block(self, i: int, x: str) -> str:
        """Mixtral's sparse MoE: router gemm, top-k, grouped expert gemms over the routed tokens
        (``tokens * top_k`` rows; the weights of the experts that receive tokens are read), the
        weighted combine of each token's ``top_k`` outputs, and the all-reduce."""
        cfg, p, m = self.config, self.p, self.shape.tokens
        hidden, experts, top_k = cfg.hidden_size, cfg.num_experts, cfg.experts_per_token
        routed = m * top_k
        active = experts_active(m, experts, top_k)
        facts = {"experts": experts, "top_k": top_k, "experts_active": active,
                 "tokens_per_expert": routed / experts, "grouped": True}
        router = self._add(gemm(self._path(i, "router"), m, experts, hidden, p, (x,), layer=i, high_precision=True))
        topk = self._add(elementwise(f"{self._path(i, 'router')}.topk", "topk", m * experts, 0, p, (router,),
                                     layer=i, attrs={"top_k": top_k}))
        experts_path = self._path(i, "experts")
        gate_up = self._add(gemm(f"{experts_path}.gate_up_proj", routed, 2 * self.inter, hidden, p, (x, topk),
                                 layer=i, weight_copies=active, params=experts * 2 * self.inter * hidden,
                                 attrs=facts))
        act = self._add(elementwise(f"{experts_path}.act_fn", "silu_mul", routed * self.inter, 2, p, (gate_up,),
                                    layer=i))
        down = self._add(gemm(f"{experts_path}.down_proj", routed, hidden, self.inter, p, (act,), layer=i,
                              weight_copies=active, params=experts * hidden * self.inter, attrs=facts))
        combine = self._add(elementwise(f"{experts_path}.combine", "combine", m * hidden, top_k, p, (down, topk),
                                        layer=i))
        return self._all_reduce(combine, i)


def vit_tokens(config: ModelConfig) -> int:
    """Patches plus the class token of a ViT input image."""
    return (int(config.get("image_size")) // int(config.get("patch_size"))) ** 2 + 1


def padded(value: int, tp: int) -> int:
    """``value`` split over ``tp`` ranks, rounded up (a vocabulary is padded to divide)."""
    return math.ceil(value / tp)
