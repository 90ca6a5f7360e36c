"""``kernels="serving"``: the kernels a serving engine (vLLM, TensorRT-LLM) runs for a decoder layer.

Beside the fused norm, rotary and activation kernels of :mod:`.builders_layers`, a serving engine
merges what its model code can:

- **fused QKV**: one ``qkv_proj`` gemm for q, k and v (vLLM's ``QKVParallelLinear``; TensorRT-LLM's
  single ``qkv`` linear of its attention layer);
- **fused gate-up**: one ``gate_up_proj`` gemm for the MLP's gate and up projections, then one
  SiLU*mul kernel (vLLM's ``MergedColumnParallelLinear``; TensorRT-LLM's ``--use_fused_mlp``,
  which its performance notes of v0.6 describe as one matmul followed by a separate SwiGLU kernel,
  https://github.com/NVIDIA/TensorRT-LLM/blob/v0.6.1/docs/source/performance.md, "Known Issues");
- **fused residual + norm**: each residual add runs inside the norm after it (vLLM's
  ``fused_add_rms_norm``), the last one inside the final norm;
- **attention preprocessing**: the rotary embedding and the K/V cache write in one kernel before
  the flash (prefill) or paged (decode) attention kernel (TensorRT-LLM's GPT attention plugin,
  vLLM's rotary + ``reshape_and_cache``).

Op names follow vLLM's module paths (``self_attn.qkv_proj``, ``mlp.gate_up_proj``); FLOPs, bytes,
parameters and the memory need are those of the unfused layer, only the kernels (launches and the
intermediate tensors that no longer go through DRAM) differ. Decoders with rotary embeddings
(Llama, Mistral, Mixtral) build so.
"""
from __future__ import annotations

from .builders_layers import ROPE_FAMILIES, LayerBuilder
from .builders_ops import add_norm, attention, gemm, norm, rotary_cache_write
from .graph import Op
from .model_configs import ModelConfig

#: Families whose layers :class:`ServingLayerBuilder` builds.
SERVING_FAMILIES = ROPE_FAMILIES


class ServingLayerBuilder(LayerBuilder):
    """Appends a serving engine's kernels for layer ``i``; :meth:`build` returns the op whose
    output is the layer's branch output (the residual add is left to the next norm:
    :meth:`final_norm` closes the last one)."""

    residual: str | None = None

    def _fused_norm(self, i: int | None, name: str, x: str) -> str:
        """The norm before a block: plain on the embedding, else with the pending residual add."""
        if self.residual is None:
            self.residual = x
            return self._add(norm(name, self.norm_kind, self.shape.tokens, self.config.hidden_size, self.p, (x,),
                                  layer=i, attrs={"feeds_column_parallel": True}))
        fused = self._add(add_norm(name, self.norm_kind, self.shape.tokens, self.config.hidden_size, self.p,
                                   (x, self.residual), layer=i, attrs={"feeds_column_parallel": True}))
        self.residual = fused
        return fused

    def build(self, i: int, x: str) -> str:
        normed = self._fused_norm(i, self._path(i, "in_norm"), x)
        attended = self.attention_block(i, normed, x)
        normed = self._fused_norm(i, self._path(i, "post_norm"), attended)
        return self.moe_block(i, normed) if self.config.family == "mixtral" else self.mlp_block(i, normed)

    def final_norm(self, name: str, x: str) -> Op:
        """The final norm, with the last layer's residual add fused into it."""
        if self.residual is None:
            return norm(name, self.norm_kind, self.shape.tokens, self.config.hidden_size, self.p, (x,))
        return add_norm(name, self.norm_kind, self.shape.tokens, self.config.hidden_size, self.p, (x, self.residual))

    def attention_block(self, i: int, x: str, residual: str) -> str:
        cfg, p, s = self.config, self.p, self.shape
        hidden, d = cfg.hidden_size, cfg.head_dim
        m = s.tokens
        q_width, kv_width = self.heads * d, self.kv_heads * d
        attn = f"{self.names['layer'].format(i=i)}.{self.names['attn']}"
        qkv = self._add(gemm(f"{attn}.qkv_proj", m, q_width + 2 * kv_width, hidden, p, (x,), layer=i))
        prep = self._add(rotary_cache_write(f"{attn}.rotary_kv_cache_write", m, q_width, kv_width, s.s_q, d, p,
                                            (qkv,), layer=i))
        parts = attention(attn, s.batch, self.heads, self.kv_heads, s.s_q, s.s_kv, d, p, (prep,), layer=i,
                          fused=True, causal=s.causal, window=s.window, decode_kernel=s.decode_kernel)
        for op in parts:
            self._add(op)
        out = self._add(gemm(self._path(i, "o"), m, hidden, q_width, p, (parts[-1].name,), layer=i,
                             params=hidden * q_width))
        return self._all_reduce(out, i)

    def mlp_block(self, i: int, x: str) -> str:
        p, m, hidden = self.p, self.shape.tokens, self.config.hidden_size
        mlp = f"{self.names['layer'].format(i=i)}.{self.names['mlp']}"
        gate_up = self._add(gemm(f"{mlp}.gate_up_proj", m, 2 * self.inter, hidden, p, (x,), layer=i))
        act = self._act(i, "silu_mul", (gate_up,), m * self.inter)
        down = self._add(gemm(self._path(i, "down"), m, hidden, self.inter, p, (act,), layer=i,
                              params=hidden * self.inter))
        return self._all_reduce(down, i)


def check_serving_family(config: ModelConfig) -> None:
    """UsageError unless ``config`` is a decoder the serving kernels build."""
    from ..errors import UsageError

    if config.family not in SERVING_FAMILIES:
        raise UsageError(f"kernels='serving' builds decoders with rotary embeddings ({', '.join(SERVING_FAMILIES)}); "
                         f"{config.id} is {config.family}: use kernels='fused'")
