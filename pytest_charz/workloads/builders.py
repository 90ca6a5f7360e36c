"""Analytical op graphs of published models: ``build(model, phase, ...) -> Graph``.

Decoder LLMs (llama, mistral, mixtral, gpt2) build in three phases:

- ``prefill``: ``batch`` sequences of ``seq`` new tokens (after ``context`` cached ones, 0 by
  default: a chunked prefill when given), K/V written to the cache, logits for every token (what
  a transformers forward computes);
- ``decode``: one new token per sequence against ``context`` cached tokens: the cache is read
  (``context + 1`` positions, the new one included) and the new K/V written; with a sliding
  window (Mistral) the cache is a rolling buffer of ``window`` positions;
- ``train``: the forward over ``seq`` tokens, a softmax cross-entropy loss, the backward pass and
  an AdamW step (:mod:`.builders_train`).

Encoders (bert, vit) build in phase ``forward`` (BERT over ``seq`` tokens; ViT over its image's
patches and class token, so ``seq`` is not given).

Counting rules and dtypes are those of :mod:`.builders_ops`: the full attention score matrix is
counted (also under the causal mask; ``attrs["flops_causal_half"]`` holds the masked count), and
norms and softmax accumulate in fp32. ``tp`` builds the graph of one tensor-parallel rank: its
share of weights, FLOPs and bytes, with the all-reduces after the attention output and MLP down
projections (:mod:`.builders_layers`). The LM head is vocabulary parallel, its logits gathered
(one ``all-gather``); the embedding table is replicated (a lookup reads only the looked-up rows).
Op names are the transformers module paths; ``attrs["params"]`` the parameters each op owns.

``kernels`` says which kernels the graph models. ``"fused"`` (the default): an inference
runtime's fused kernels, one op per RMSNorm/LayerNorm, rotary embedding, SiLU*mul or GELU and
KV-cache write. ``"serving"`` (:mod:`.builders_serving`): a serving engine's, which also fuse q/k/v
into one gemm, gate and up into one, each residual add into the next norm, and the rotary
embedding with the cache write. ``"eager"`` (:mod:`.builders_eager`): PyTorch eager running transformers'
modules, what the workload suite runs and what :mod:`.capture` records: the decomposed ops
(RMSNorm's fp32 upcast, pow, mean, rsqrt...; rotary's mul, neg, cat, add; DynamicCache's ``cat``,
which copies the whole cache at each decode step; ``silu`` and ``mul``; autograd's backward ops
and ``AdamW(foreach=False)``'s eight ops per parameter tensor), each costed as the capture costs
it, so the two agree op class by op class (on one device: ``tp=1``).

``dtype`` names a precision recipe (:data:`.builders_ops.PRECISIONS`: ``fp32``, ``bf16``,
``fp16``, ``fp8``, ``int8-wo``, ``int4-wo``) and ``kv_dtype`` the KV cache's dtype (default the
activations'; ``fp8`` as FP8 serving engines keep it): weights, cache and traffic follow them,
and so does the memory check of :mod:`.capacity`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .builders_layers import (
    NAMES,
    LayerBuilder,
    LayerShape,
    heads_per_rank,
    padded,
    vit_tokens,
)
from .builders_ops import (
    DECODE_KERNELS,
    KV_DTYPES,
    PRECISIONS,
    Precision,
    collective,
    elementwise,
    embedding,
    gemm,
    norm,
    precision,
)
from .builders_serving import ServingLayerBuilder, check_serving_family
from .builders_eager import EagerLayerBuilder, Emitter, eager_embed
from .builders_train import backward_ops, eager_backward, eager_loss, eager_optimizer, optimizer_ops
from .graph import Graph, Op
from .model_configs import DECODER_FAMILIES, ModelConfig, load_config

DECODER_PHASES = ("prefill", "decode", "train")
#: What ``build(kernels=...)`` models: an inference runtime's fused kernels, eager PyTorch, or a
#: serving engine's (:mod:`.builders_serving`).
KERNELS = ("fused", "eager", "serving")
ENCODER_PHASES = ("forward",)
NOTES = ("attention FLOPs count the full score matrix (causal half in attrs flops_causal_half)",
         ("norms and softmax accumulate in fp32; activations, KV cache and norm weights are stored in the "
          "activation dtype (bf16 when dtype is fp8)"),
         "bytes: every operand of every op moves to or from dram once (no cache reuse between ops)")


def phases(config: str | ModelConfig) -> tuple[str, ...]:
    """The phases ``config`` builds in."""
    return DECODER_PHASES if load_config(config).is_decoder else ENCODER_PHASES


def _positive_int(name: str, value: Any, what: str = "") -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{name} must be a positive integer{what}, got {value!r}")
    return value


def check_phase(config: ModelConfig, phase: str) -> str:
    valid = phases(config)
    if phase not in valid:
        raise UsageError(f"phase of {config.id} ({config.family}) must be one of {', '.join(valid)}; got {phase!r}")
    return phase


def check_tp(config: ModelConfig, tp: Any) -> int:
    """``tp`` if it shards the heads, K/V heads and MLP of ``config`` evenly."""
    _positive_int("tp", tp)
    heads, kv_heads, inter = config.num_heads, config.num_kv_heads, config.intermediate_size
    valid = [n for n in range(1, heads + 1) if heads % n == 0 and inter % n == 0 and (kv_heads % n == 0 or n % kv_heads == 0)]
    if tp not in valid:
        raise UsageError(f"tp={tp} does not shard {config.id} ({heads} heads, {kv_heads} K/V heads, intermediate "
                         f"{inter}) evenly; valid: {', '.join(map(str, valid))}")
    return tp


def _tokens(config: ModelConfig, phase: str, seq: Any, context: Any) -> tuple[int, int]:
    """(new tokens per sequence, cached tokens before them), checked for the phase."""
    if config.family == "vit":
        if seq is not None or context is not None:
            raise UsageError(f"{config.id} takes no seq or context: its {vit_tokens(config)} tokens follow from "
                             f"image_size and patch_size; got seq={seq!r}, context={context!r}")
        return vit_tokens(config), 0
    if phase == "decode":
        if seq not in (None, 1):
            raise UsageError(f"decode adds one token per sequence; seq must be omitted or 1, got {seq!r}")
        if context is None:
            raise UsageError("decode needs context, the number of cached tokens (a positive integer)")
        return 1, _positive_int("context", context, " for decode")
    if seq is None:
        raise UsageError(f"{phase} needs seq, the tokens per sequence (a positive integer)")
    _positive_int("seq", seq, f" for {phase}")
    if context is not None and (phase != "prefill" or not isinstance(context, int) or isinstance(context, bool)
                                or context < 0):
        raise UsageError(f"context is only for prefill (a non-negative integer of cached tokens) and decode; "
                         f"got context={context!r} for {phase}")
    return seq, context or 0


def _check_positions(config: ModelConfig, positions: int) -> None:
    # Learned position tables end at max_position_embeddings; RoPE models only leave their
    # trained range, which a builder can still count.
    limit = config.get("max_position_embeddings")
    if config.family in ("gpt2", "bert") and positions > limit:
        raise UsageError(f"{config.id} has {limit} learned positions; seq + context = {positions} exceeds them")


def _embed(config: ModelConfig, p: Precision, m: int, tp: int) -> list[Op]:
    """The input embedding ops, the last one's output being the first layer's input."""
    hidden = config.hidden_size
    if config.family in ("llama", "mistral", "mixtral"):
        return [embedding("model.embed_tokens", m, config.vocab_size, hidden, p)]
    if config.family == "gpt2":
        positions = config.get("max_position_embeddings")
        return [embedding("transformer.wte", m, config.vocab_size, hidden, p),
                embedding("transformer.wpe", m, positions, hidden, p),
                elementwise("transformer.embed_add", "add", m * hidden, 2, p, ("transformer.wte", "transformer.wpe"))]
    if config.family == "bert":
        names = ("embeddings.word_embeddings", "embeddings.position_embeddings", "embeddings.token_type_embeddings")
        rows = (config.vocab_size, config.get("max_position_embeddings"), config.get("type_vocab_size"))
        ops = [embedding(name, m, table, hidden, p) for name, table in zip(names, rows)]
        ops.append(elementwise("embeddings.add", "add", m * hidden, 3, p, names))
        ops.append(norm("embeddings.LayerNorm", "layernorm", m, hidden, p, ("embeddings.add",)))
        return ops
    # ViT: the patch projection is a stride-p convolution, i.e. a gemm over patches.
    channels, patch = int(config.get("num_channels")), int(config.get("patch_size"))
    tokens = vit_tokens(config)
    batch = m // tokens
    patches = batch * (tokens - 1)
    conv = gemm("embeddings.patch_embeddings.projection", patches, hidden, channels * patch * patch, p, (),
                bias=True, op_class="conv")
    add = elementwise("embeddings.add_position", "add", m * hidden, 1, p, (conv.name,),
                      extra_read_bytes=tokens * hidden * p.act_bytes,
                      attrs={"params": tokens * hidden + hidden})  # position table and class token
    return [conv, add]


def _head(config: ModelConfig, p: Precision, phase: str, m: int, batch: int, tp: int, x: str,
          final_norm: Op | None = None, serving: bool = False) -> list[Op]:
    """Final norm and LM head (decoders) or final norm and pooler (encoders); ``final_norm``
    replaces a decoder's final norm (a serving engine's, with the residual add fused in);
    ``serving``: a serving engine's head, over each sequence's last position in a prefill."""
    hidden = config.hidden_size
    if config.family in ("bert", "vit"):
        ops: list[Op] = []
        if config.family == "vit":
            ops.append(norm("layernorm", "layernorm", m, hidden, p, (x,)))
            x = "layernorm"
        # The pooler reads the first token of each sequence.
        ops.append(gemm("pooler.dense", batch, hidden, hidden, p, (x,), bias=True))
        ops.append(elementwise("pooler.activation", "tanh", batch * hidden, 1, p, ("pooler.dense",)))
        return ops
    final = "transformer.ln_f" if config.family == "gpt2" else "model.norm"
    kind = "layernorm" if config.family == "gpt2" else "rmsnorm"
    vocab = padded(config.vocab_size, tp)
    tied = config.tied_embeddings
    # A serving engine's prefill samples the next token from each sequence's last position only:
    # it gathers those rows before the head (TensorRT-LLM unless gather_all_token_logits, vLLM's
    # logits processor), so the head multiplies batch rows, not batch x prompt. A model's forward
    # as transformers runs it (the other kernels) computes every position's logits.
    logits = batch if phase == "prefill" and serving else m
    head = gemm("lm_head", logits, vocab, hidden, p, (final,), high_precision=True,
                params=0 if tied else vocab * hidden, attrs={"tied": tied, "logits_tokens": logits})
    ops = [final_norm if final_norm is not None else norm(final, kind, m, hidden, p, (x,)), head]
    if tp > 1 and phase != "train":  # training computes a vocabulary-parallel loss instead
        ops.append(collective("lm_head.all_gather", "all-gather", logits * vocab * p.act_bytes, tp, ("lm_head",)))
    return ops


def _loss(config: ModelConfig, p: Precision, m: int, tp: int, x: str) -> list[Op]:
    vocab = padded(config.vocab_size, tp)
    ops = [elementwise("loss", "softmax", m * vocab, 1, p, (x,))]
    if tp > 1:  # vocabulary-parallel cross-entropy: all-reduce each token's max and sum (fp32)
        ops.append(collective("loss.all_reduce", "all-reduce", 2 * m * 4, tp, ("loss",)))
    return ops


def _eager_head(config: ModelConfig, e: Emitter, m: int, batch: int, x: str) -> None:
    """Final norm and LM head or pooler, as eager PyTorch launches them."""
    hidden, p = config.hidden_size, e.p
    if config.family in ("bert", "vit"):
        if config.family == "vit":
            x = e.layer_norm("layernorm", m, hidden, x)
        e.ops.append(gemm("pooler.dense", batch, hidden, hidden, p, (x,), bias=True))
        e.unary("pooler.activation", "tanh", batch * hidden, ("pooler.dense",))
        return
    if config.family == "gpt2":
        final = e.layer_norm("transformer.ln_f", m, hidden, x)
    else:
        final = e.rms_norm("model.norm", m, hidden, x, extra_consumers=0)
    vocab, tied = config.vocab_size, config.tied_embeddings
    e.ops.append(gemm("lm_head", m, vocab, hidden, p, (final,), high_precision=True,
                      params=0 if tied else vocab * hidden, attrs={"tied": tied, "logits_tokens": m}))


def check_kernels(kernels: Any) -> str:
    if kernels not in KERNELS:
        raise UsageError(f"kernels must be one of {', '.join(KERNELS)}; got {kernels!r}")
    return kernels


def build(name_or_config: str | ModelConfig, phase: str, batch: int = 1, seq: int | None = None,
          context: int | None = None, dtype: str | None = None, tp: int = 1, fused_attention: bool = True,
          num_layers: int | None = None, kernels: str = "fused", kv_dtype: str | None = None,
          decode_kernel: str = "grouped") -> Graph:
    """The op graph of one tensor-parallel rank of a model in ``phase``.

    ``dtype`` defaults to the config's (``fp32``, ``bf16``, ``fp16`` or ``fp8``); ``num_layers``
    builds fewer (or more) layers than published; ``fused_attention=False`` splits attention into
    a score bmm, a softmax and a value bmm. Raises :class:`UsageError` naming the bad argument and
    what is valid. ``kernels`` picks the kernels modelled: ``"fused"`` (an inference runtime's
    fused norm, rotary and activation kernels) or ``"eager"`` (the decomposed ops eager PyTorch
    launches for transformers' modules, :mod:`.builders_eager`; one device only, ``tp=1``) or
    ``"serving"`` (a serving engine's, :mod:`.builders_serving`). ``dtype`` is a precision recipe
    (module docstring) and ``kv_dtype`` (one of :data:`.builders_ops.KV_DTYPES`) the KV cache's.
    ``decode_kernel`` (:data:`.builders_ops.DECODE_KERNELS`): how a decode step's attention
    kernel reads a grouped-query cache (once per K/V head, or once per query head); eager
    kernels have none (PyTorch's scaled-dot-product attention, as its capture records it).
    """
    check_kernels(kernels)
    config = load_config(name_or_config)
    check_phase(config, phase)
    dtype = config.default_dtype if dtype is None else dtype
    if dtype not in PRECISIONS:
        raise UsageError(f"dtype must be one of {', '.join(PRECISIONS)}; got {dtype!r}")
    if kv_dtype is not None and kv_dtype not in KV_DTYPES:
        raise UsageError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}; got {kv_dtype!r}")
    if kernels == "eager" and (PRECISIONS[dtype].weight_only or (kv_dtype or PRECISIONS[dtype].act) != PRECISIONS[dtype].act):
        raise UsageError(f"kernels='eager' runs transformers' modules in one dtype; dtype={dtype!r} with "
                         f"kv_dtype={kv_dtype!r} needs kernels='fused' or 'serving'")
    if kernels == "serving":
        check_serving_family(config)
    if phase == "train" and (kernels == "serving" or PRECISIONS[dtype].weight_only or kv_dtype is not None):
        raise UsageError(f"train builds a training step: kernels='serving', weight-only recipes and kv_dtype are "
                         f"for inference; got kernels={kernels!r}, dtype={dtype!r}, kv_dtype={kv_dtype!r}")
    if decode_kernel not in DECODE_KERNELS:
        raise UsageError(f"decode_kernel must be one of {', '.join(DECODE_KERNELS)}; got {decode_kernel!r}")
    _positive_int("batch", batch)
    check_tp(config, tp)
    if num_layers is not None:
        config = config.replace_fields(num_hidden_layers=_positive_int("num_layers", num_layers))
    s_q, cached = _tokens(config, phase, seq, context)
    _check_positions(config, s_q + cached)
    p = precision(dtype, kv_dtype)
    window = config.get("sliding_window")
    s_kv = s_q + cached
    if phase == "decode" and window is not None:
        s_kv = min(s_kv, window)  # the rolling-buffer cache holds the last `window` positions
    shape = LayerShape(batch=batch, s_q=s_q, s_kv=s_kv, tp=tp, fused=fused_attention,
                       causal=config.is_decoder and phase != "decode", cache=phase in ("prefill", "decode"),
                       window=window if phase != "decode" else None,
                       decode_kernel=None if kernels == "eager" else decode_kernel)
    m = shape.tokens
    if kernels == "eager":
        if tp != 1:
            raise UsageError(f"kernels='eager' models one device (tp=1); got tp={tp}")
        ops: list[Op] = []
        emit = Emitter(p, ops)
        x, tables = eager_embed(config, emit, batch, s_q)
        layers: LayerBuilder = EagerLayerBuilder(config, p, shape, ops, emit, tables, phase)
    else:
        ops = _embed(config, p, m, tp)
        layers = (ServingLayerBuilder if kernels == "serving" else LayerBuilder)(config, p, shape, ops)
        x = ops[-1].name
    for i in range(config.num_layers):
        x = layers.build(i, x)
    if kernels == "eager":
        _eager_head(config, emit, m, batch, x)
        if phase == "train":
            eager_loss(emit, batch, s_q, config.vocab_size)
            forward = list(ops)
            eager_backward(forward, emit)
            eager_optimizer(forward, emit)
    else:
        final = layers.final_norm("model.norm", x) if isinstance(layers, ServingLayerBuilder) else None
        ops.extend(_head(config, p, phase, m, batch, tp, x, final, serving=kernels == "serving"))
    if kernels != "eager" and phase == "train":
        forward = list(ops)
        ops.extend(_loss(config, p, m, tp, "lm_head"))
        backward = backward_ops(forward, ops[-1].name, p, m, config.hidden_size, tp)
        ops.extend(backward)
        ops.extend(optimizer_ops(forward, backward, p))
    if kernels != "eager":
        ops = streamed_weights(ops)
    heads, kv_heads = heads_per_rank(config, tp)
    params = {"model": config.id, "family": config.family, "batch": batch, "seq": s_q, "context": cached,
              "dtype": dtype, "kv_dtype": p.kv_dtype, "tp": tp, "fused_attention": fused_attention,
              "num_layers": config.num_layers, "kernels": kernels, "decode_kernel": decode_kernel,
              "heads_per_rank": heads, "kv_heads_per_rank": kv_heads}
    return Graph(name=config.id, phase=phase, ops=tuple(ops), params=params, notes=NOTES)


def streamed_weights(ops: list[Op]) -> list[Op]:
    """``ops`` with every weight-reading op's working set (``shape["working_set_bytes"]``) set to
    the weights of the whole graph: an inference runtime reads each weight once per pass, and
    between two reads of a layer's weight every other layer's weight goes through the caches,
    so its bytes come from DRAM even where one layer's weight alone would fit the last-level
    cache (a decode step of a 70B model at tp 2 reads 42 MB of q/k/v weights per layer, under an
    H100's 50 MB L2, 80 times over). Ops that read no weight keep their own working set (the
    activations the previous op just wrote)."""
    total = sum(float(op.attrs.get("weight_bytes", 0.0)) for op in ops)
    out = []
    for op in ops:
        if float(op.attrs.get("weight_bytes", 0.0)) > 0.0 and "working_set_bytes" not in op.work.shape:
            op = replace(op, work=replace(op.work, shape={**op.work.shape,
                                                          "working_set_bytes": max(total, op.work.total_bytes)}))
        out.append(op)
    return out


def graph_parameters(graph: Graph) -> int:
    """Parameters the graph's rank owns (each counted once: a tied LM head owns none)."""
    return sum(int(op.attrs.get("params", 0)) for op in graph.ops)


def weight_bytes(graph: Graph) -> float:
    """Bytes of weights the graph's ops read (a lookup reads only its rows; MoE only active experts)."""
    return sum(float(op.attrs.get("weight_bytes", 0.0)) for op in graph.ops)


def layer_prefix(config: str | ModelConfig, layer: int) -> str:
    """The module path of layer ``layer`` (``model.layers.3``), the prefix of its ops' names."""
    return NAMES[load_config(config).family]["layer"].format(i=layer)


__all__ = ["DECODER_FAMILIES", "DECODER_PHASES", "ENCODER_PHASES", "KERNELS", "KV_DTYPES", "PRECISIONS", "build", "check_tp", "graph_parameters",
           "layer_prefix", "phases", "weight_bytes"]
