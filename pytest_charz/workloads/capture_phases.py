"""Capture a transformers model's prefill, decode, train step or encoder forward as a Graph.

:func:`capture_phase` builds the inputs a phase needs on the model's device (``meta`` included)
and captures them with :mod:`.capture`:

* ``prefill``: one forward of ``input_ids`` (batch, seq) with ``use_cache=True``;
* ``decode``: one forward of ONE new token per sequence over a ``transformers.DynamicCache``
  already holding ``context`` tokens per layer (filled with key/value tensors outside the
  capture, so no prefill is recorded); HF's DynamicCache appends by ``cat``, recorded as ``copy``
  ops, and attention runs over ``context + 1`` keys;
* ``train``: a forward on (batch, seq) with ``labels``, ``loss.backward()`` and one
  ``torch.optim.AdamW(foreach=False)`` step (its state made before the capture, so only the
  update is recorded), the step's ops named ``optimizer.*``;
* ``forward``: one forward without a cache (encoders: BERT's ``input_ids``, ViT's
  ``pixel_values`` of the config's image size, where ``seq`` is ignored).

The forward's Python calls are counted as :func:`~.capture.capture` counts them (each forward
op's ``shape["python_calls"]``), so the model code of the same forward is priced the same from
either; a train step's backward and optimizer ops carry none (no forward code runs there).

Mixture-of-experts routing (Mixtral): the router's ``topk`` picks experts from values that meta
tensors do not have, and transformers' default ("eager") experts loop calls ``nonzero`` on the
routing mask, which cannot run on meta (and on a real device runs only the experts the data
picked). The capture therefore switches the experts to transformers' ``grouped_mm``
implementation for its duration: every token runs exactly ``top_k`` experts, so the FLOPs are
the same for any routing; which experts and how many tokens each gets is not visible, the
grouped gemms read every expert's weights (all ``num_local_experts`` "run"), an upper bound on
the bytes of a real decode step. Each grouped gemm carries ``attrs["routing"]`` saying so.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from ..errors import UsageError
from .capture import graph_of, recording, work_dtype
from .graph import Graph, check_dtype

__all__ = ["capture_phase", "TORCH_DTYPE_NAMES"]

#: Work dtype name -> torch dtype attribute, for the ``dtype`` argument.
TORCH_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}
_PHASES = ("prefill", "decode", "train", "forward")
ROUTING_NOTE = ("not visible on meta: FLOPs count tokens*top_k token-expert pairs (exact for any routing); "
                "weight bytes count all experts, an upper bound")


def _check_size(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{name} must be a positive int, got {value!r}")
    return value


def _is_causal_lm(model: Any) -> bool:
    can_generate = getattr(model, "can_generate", None)
    return bool(can_generate()) if callable(can_generate) else False


def _decode_cache(model: Any, batch: int, context: int, dtype: Any, device: Any) -> Any:
    import torch
    from transformers import DynamicCache

    config = model.config.get_text_config(decoder=True)
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    cache = DynamicCache(config=model.config)
    for layer in range(config.num_hidden_layers):
        # Random values on a real device (never zeros); meta tensors have none.
        key = torch.randn(batch, kv_heads, context, head_dim, dtype=dtype, device=device)
        value = torch.randn(batch, kv_heads, context, head_dim, dtype=dtype, device=device)
        cache.update(key, value, layer)
    return cache


@contextlib.contextmanager
def _unpacked_sequences() -> Iterator[None]:
    """Without a cache, transformers looks for packed sequences in ``position_ids`` with a
    data-dependent ``.all()`` (which meta tensors cannot answer). The phases here make one
    sequence per row, so the answer is known: none are packed."""
    try:
        from transformers import masking_utils
    except ImportError:  # an older transformers without the check
        yield
        return
    original = getattr(masking_utils, "find_packed_sequence_indices", None)
    if original is None:
        yield
        return
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


def _token_ids(model: Any, batch: int, seq: int, device: Any) -> Any:
    import torch

    vocab = model.config.get_text_config(decoder=True).vocab_size
    generator = torch.Generator().manual_seed(0)  # deterministic ids keep real-device routing reproducible
    return torch.randint(0, vocab, (batch, seq), generator=generator).to(device)


def capture_phase(model: Any, phase: str, batch: int, seq: int | None = None, context: int | None = None,
                  dtype: str | None = None, *, name: str | None = None, lr: float = 1e-4) -> Graph:
    """The Graph of one ``phase`` of a transformers ``model`` (see the module docstring).

    ``batch`` sequences; ``seq`` prompt/training tokens (prefill, train, forward), ``context``
    cached tokens (decode); ``dtype`` (``fp32``, ``bf16``, ``fp16``) converts the model in place
    first (default: keep its dtype). ``name`` names the graph (default: the config's
    ``name_or_path`` or the model's class). The graph's params record batch, seq, context, dtype
    and phase.
    """
    import torch

    if phase not in _PHASES:
        raise UsageError(f"phase must be one of {', '.join(_PHASES)}; got {phase!r}")
    _check_size("batch", batch)
    causal_lm = _is_causal_lm(model)
    if phase in ("prefill", "decode", "train") and not causal_lm:
        raise UsageError(f"phase {phase!r} needs a causal language model; {type(model).__name__} supports 'forward'")
    if phase == "decode":
        _check_size("context", context)
        seq = 1
    elif model.main_input_name != "pixel_values":
        _check_size("seq", seq)
    if dtype is not None:
        check_dtype(dtype, TORCH_DTYPE_NAMES)
        model.to(getattr(torch, TORCH_DTYPE_NAMES[dtype]))
    param = next(model.parameters())
    device, torch_dtype = param.device, param.dtype
    config = model.config
    moe = hasattr(config, "_experts_implementation") and hasattr(config, "num_local_experts")
    saved_experts = getattr(config, "_experts_implementation", None)
    was_training = model.training
    notes: list[str] = []
    try:
        if moe:
            # The eager experts loop is data-dependent (nonzero over the routing mask).
            config._experts_implementation = "grouped_mm"
            notes.append(f"MoE routing {ROUTING_NOTE}; {config.num_local_experts} experts, "
                         f"top {config.num_experts_per_tok} per token")
        ops = _run_phase(model, phase, batch, seq or 0, context or 0, device, torch_dtype, causal_lm, lr, moe)
    finally:
        if moe:
            config._experts_implementation = saved_experts
        model.train(was_training)
    params = {"phase": phase, "batch": batch, "seq": seq, "context": context, "dtype": work_dtype(torch_dtype)}
    if moe:
        params["experts"] = config.num_local_experts
        params["top_k"] = config.num_experts_per_tok
    graph_name = name or getattr(config, "name_or_path", "") or type(model).__name__
    return graph_of(ops, graph_name, phase, params, notes)


def _run_phase(model: Any, phase: str, batch: int, seq: int, context: int, device: Any, torch_dtype: Any,
               causal_lm: bool, lr: float, moe: bool) -> Any:
    import torch

    inputs: dict[str, Any] = {}
    if model.main_input_name == "pixel_values":
        size = getattr(model.config, "image_size", 224)
        channels = getattr(model.config, "num_channels", 3)
        inputs["pixel_values"] = torch.randn(batch, channels, size, size, dtype=torch_dtype, device=device)
    else:
        inputs["input_ids"] = _token_ids(model, batch, seq, device)
    if causal_lm:
        inputs["use_cache"] = phase in ("prefill", "decode")
    if phase == "decode":
        import inspect

        # transformers 5.x renames past_key_values to cache (the old name warns)
        key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        inputs[key] = _decode_cache(model, batch, context, torch_dtype, device)
    optimizer = None
    if phase == "train":
        model.train()
        inputs["labels"] = inputs["input_ids"]
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=lr, foreach=False, fused=False)
        for p in trainable:  # the state AdamW makes on its first step, made here so it is not recorded
            optimizer.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),
                                  "exp_avg_sq": torch.zeros_like(p)}
        model.zero_grad(set_to_none=True)
    else:
        model.eval()
    with recording(model) as recorder, _unpacked_sequences():
        if moe:
            recorder.grouped_attrs = {"routing": ROUTING_NOTE}
        # the forward's Python calls counted as capture() counts them (its ops' python_calls, the
        # model code's figure per call): a graph of the same forward prices the same either way
        if optimizer is None:
            with torch.no_grad(), recorder.paths.counting():
                model(**inputs)
            recorder.python_calls_after()
        else:
            with torch.enable_grad():
                with recorder.paths.counting():
                    loss = model(**inputs).loss
                recorder.python_calls_after()
                loss.backward()
            recorder.paths.override, recorder.extra_attrs = "optimizer", {"optimizer": True}
            recorder.host_scalars_fold = True  # AdamW's step counter is a host-side CPU scalar
            optimizer.step()
            recorder.paths.override, recorder.extra_attrs, recorder.host_scalars_fold = None, {}, False
    if optimizer is not None:
        model.zero_grad(set_to_none=True)
        optimizer.state.clear()
    return recorder
