"""What one aten op costs: its op class, FLOPs and useful sizes, from shapes alone.

The formulas :mod:`.capture` applies to every aten op it records. They read only shapes,
dtypes and scalar arguments, never tensor data, so they work on the ``meta`` device.

FLOP conventions (one multiply-add is 2 FLOPs):

* matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``, ``_grouped_mm``):
  ``2*m*n*k`` (times the batch); a bias addition is not counted as FLOPs, but a product with a
  bias (``addmm`` of a broadcast row, ``linear`` with one) carries ``shape["bias"]``.
* ``convolution``: ``2 * output elements * in_channels/groups * kernel elements``; its backward
  counts that once per gradient it computes (input, weight).
* fused attention (``_scaled_dot_product_*_attention``): ``2*b*h*s_q*s_kv*(d_qk + d_v)``, i.e.
  ``4*b*h*s_q*s_kv*d``, for the FULL score matrix even when causal; the backward counts
  ``2*b*h*s_q*s_kv*(3*d_qk + 2*d_v)``. Causal attention is marked ``causal=True`` and the FLOPs
  of the unmasked (lower-triangular, top-left aligned as torch's ``is_causal``) part are in
  ``attrs["causal_flops"]`` for models that want the half count.
* elementwise: 1 per output element (transcendentals too, marked ``transcendental`` with their
  ``function`` in the Work's shape); fills and factories (``zeros``, ``fill_``, ``arange``) 0,
  marked ``fill``.
* reductions: 1 per input element; softmax 5 per element (backward 4); norms per element
  (layer norm 5, plus 1 each for weight and bias; rms norm 3 plus 1 for weight; backward 2x).
  Softmax and layer and RMS norms give the length of their rows (``width``: the softmax's
  dimension, the normalised shape's elements); an RMS norm is marked ``norm="rms"``.
* gathers and copies: 0 FLOPs (scatter-adds 1 per source element).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

#: torch dtype name (``str(torch.float32)`` without ``torch.``) -> Work / TensorSpec dtype name.
TORCH_DTYPES = {"float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "int8": "int8",
                "int32": "int32", "int64": "int64", "bool": "bool", "uint8": "uint8", "int16": "int16",
                "complex64": "complex64", "complex128": "complex128"}
#: Dtypes whose arithmetic counts no FLOPs (index and mask arithmetic).
NO_FLOP_DTYPES = frozenset({"int64", "bool", "uint8", "int16", "complex64", "complex128"})

#: Metadata-only and allocation ops: they make no op (their outputs alias their inputs or hold nothing yet).
FOLDED = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "t", "transpose", "permute", "squeeze",
    "unsqueeze", "slice", "select", "alias", "detach", "as_strided", "empty", "empty_like", "empty_strided",
    "new_empty", "new_empty_strided", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "lift_fresh",
    "lift_fresh_copy", "split", "split_with_sizes", "chunk", "unbind", "narrow", "diagonal", "unfold", "view_as",
    "view_as_real", "view_as_complex", "resolve_conj", "resolve_neg", "_local_scalar_dense", "is_same_size",
    "_to_dense", "conj", "_conj", "_neg_view", "numpy_T", "mT", "movedim", "expand_as", "set_", "resize_",
    "_assert_async", "_assert_tensor_metadata", "_functional_assert_async", "record_stream", "_nested_tensor_size",
})
GEMMS = frozenset({"mm", "addmm", "_scaled_mm", "_addmm_activation", "_grouped_mm"})
BMMS = frozenset({"bmm", "baddbmm"})
#: ``conv1d``/``conv2d``/``conv3d`` reach the capture whole under ``torch.inference_mode``, as
#: ``linear`` does (elsewhere the dispatcher lowers them to ``convolution`` first).
CONVS = frozenset({"convolution", "_convolution", "cudnn_convolution", "_slow_conv2d_forward",
                   "convolution_overrideable", "mkldnn_convolution", "_nnpack_spatial_convolution",
                   "conv1d", "conv2d", "conv3d"})
ATTENTION = frozenset({"_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                       "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
                       "_scaled_dot_product_fused_attention_overrideable", "scaled_dot_product_attention"})
ATTENTION_BACKWARD = frozenset(name + "_backward" for name in ATTENTION)
SOFTMAX = {"_softmax": 5, "_safe_softmax": 5, "_log_softmax": 5, "softmax": 5, "log_softmax": 5,
           "_softmax_backward_data": 4, "_log_softmax_backward_data": 4}
NORMS = frozenset({"layer_norm", "rms_norm", "group_norm", "native_layer_norm", "native_layer_norm_backward", "native_batch_norm",
                   "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "native_batch_norm_backward",
                   "native_group_norm", "native_group_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward"})
REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "std_mean",
                        "linalg_vector_norm", "norm", "argmax", "argmin", "logsumexp", "any", "all", "cumsum",
                        "cumprod", "topk", "nll_loss_forward", "nll_loss2d_forward", "aminmax", "count_nonzero",
                        "histc", "kthvalue", "median", "mode"})
#: Reductions that run kernels of their own, not TensorIterator's reduction, whatever their dim:
#: a top-k selection, a scan, a histogram. Their Work names the function (``shape["function"]``).
OWN_KERNEL_REDUCTIONS = frozenset({"topk", "cumsum", "cumprod", "histc", "kthvalue", "median", "mode"})
GATHERS = frozenset({"embedding", "index_select", "index", "gather", "take", "_embedding_bag"})
SCATTERS = frozenset({"embedding_dense_backward", "index_add", "index_put", "_index_put_impl", "scatter",
                      "scatter_add", "scatter_reduce", "index_copy", "index_fill", "masked_scatter",
                      "nll_loss_backward", "nll_loss2d_backward", "index_select_backward"})
COPIES = frozenset({"clone", "copy", "copy_", "_to_copy", "contiguous", "cat", "stack", "repeat",
                    "repeat_interleave", "expand_copy", "permute_copy", "transpose_copy", "view_copy", "flip",
                    "roll", "constant_pad_nd", "_unsafe_index", "select_backward", "slice_backward", "_copy_from",
                    "_copy_from_and_resize"})
FILLS = frozenset({"zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "fill", "zero", "new_zeros",
                   "new_ones", "new_full", "arange", "scalar_tensor", "eye", "linspace", "rand", "randn",
                   "randint", "normal", "uniform", "bernoulli", "rand_like", "randn_like", "randperm"})
TRANSCENDENTAL = frozenset({"exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "tanh",
                            "sigmoid", "silu", "gelu", "erf", "erfc", "erfinv", "rsqrt", "sqrt", "pow", "softplus",
                            "mish", "elu", "selu", "celu", "logit", "atan", "atan2", "asin", "acos", "sinh", "cosh",
                            "silu_backward", "gelu_backward", "tanh_backward", "sigmoid_backward", "mish_backward",
                            "softplus_backward", "elu_backward", "_foreach_sqrt", "_foreach_exp", "reciprocal"})
#: Ops whose outputs depend on tensor values in shape or control flow; a graph that contains one
#: follows its input data (see :mod:`.capture`).
DATA_DEPENDENT = frozenset({"nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive",
                            "_local_scalar_dense", "equal", "is_nonzero", "bincount"})


@dataclass(frozen=True)
class AtenCost:
    """What one recorded aten op costs: its op class, FLOPs (of the op's input dtype), useful
    sizes for ``Work.shape`` and facts for ``Op.attrs``."""

    op_class: str
    flops: float = 0.0
    shape: Mapping[str, float] = field(default_factory=dict)
    attrs: Mapping[str, Any] = field(default_factory=dict)


def base_name(func: Any) -> str:
    """``aten.mm.default`` -> ``mm``; in-place variants keep no underscore (``add_`` -> ``add``)."""
    name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
    if name.endswith("_") and not name.endswith("__") and name.rstrip("_") and name != "copy_":
        name = name[:-1]
    return name


def aten_name(text: str) -> str:
    """``aten.mm.default`` / ``aten::add_`` / ``add`` -> ``mm`` / ``add`` / ``add``: an aten op's
    name from its text (a capture's source, a profiler's event), in-place variants as
    :func:`base_name` gives them."""
    parts = str(text).replace("::", ".").split(".")
    name = parts[1] if parts[0] == "aten" and len(parts) > 1 else parts[0]
    return name[:-1] if name.endswith("_") and not name.endswith("__") and name != "copy_" else name


def argument(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """The value of the argument ``name`` of an aten call, positional or keyword."""
    if name in kwargs:
        return kwargs[name]
    for index, arg in enumerate(func._schema.arguments):
        if arg.name == name:
            return args[index] if index < len(args) else default
    return default


def _numel(shape: Sequence[int]) -> int:
    return math.prod(int(n) for n in shape)


def attention_cost(q: Sequence[int], k: Sequence[int], v: Sequence[int], causal: bool, backward: bool = False,
                   masked: bool = False) -> AtenCost:
    """Cost of a fused attention over ``q`` (b, h, s_q, d), ``k`` (b, h_kv, s_kv, d) and ``v``
    (b, h_kv, s_kv, d_v): the full score matrix (see the module docstring), with the causal part
    in ``attrs["causal_flops"]``."""
    *lead, s_q, d_qk = (int(n) for n in q)
    s_kv, d_v = int(k[-2]), int(v[-1])
    batch_heads = _numel(lead)
    per_pair = 2 * (3 * d_qk + 2 * d_v) if backward else 2 * (d_qk + d_v)
    flops = batch_heads * s_q * s_kv * per_pair
    shape: dict[str, Any] = {"batch": int(lead[0]) if lead else 1, "heads": int(lead[-1]) if len(lead) > 1 else 1,
             "kv_heads": int(k[-3]) if len(k) > 2 else 1, "seq_q": s_q, "seq_kv": s_kv, "head_dim": d_qk}
    # PyTorch's fused kernels take 4-D query, key and value; a 3-D call runs the math backend
    # (scale, bmm, softmax, bmm), whose calibration key is its own (class_keys.FUNCTION_CLASSES)
    fused = len(tuple(q)) == 4
    if not fused:
        shape["function"] = "math"
    attrs: dict[str, Any] = {"causal": bool(causal), "fused": fused}
    if backward:
        attrs["backward"] = True
    if masked:
        attrs["masked"] = True  # an explicit mask: which entries it hides is data, not counted
    if causal:
        # torch's is_causal keeps the top-left-aligned lower triangle of the (s_q, s_kv) scores.
        pairs = s_q * (s_q + 1) // 2 if s_q <= s_kv else s_kv * (s_kv + 1) // 2 + (s_q - s_kv) * s_kv
        attrs["causal_flops"] = float(batch_heads * pairs * per_pair)
    return AtenCost("attention", float(flops), shape, attrs)


def _gemm(name: str, shapes: list[tuple[int, ...]], out: list[tuple[int, ...]]) -> AtenCost:
    if name == "_grouped_mm":
        a, b = shapes[0], shapes[1]
        n, k = out[0][-1], a[-1]
        # 2D x 2D (a weight gradient): the groups split the contraction, so each row of a is used once
        rows = a[0] if len(a) == 2 and len(b) == 2 else _numel(out[0][:-1])
        return AtenCost("gemm", 2.0 * rows * k * n, {"m": rows, "n": n, "k": k, "groups": b[0] if len(b) == 3 else 1},
                        {"grouped": True})
    a, b = (shapes[1], shapes[2]) if name == "addmm" or name == "_addmm_activation" else (shapes[0], shapes[1])
    m, k, n = a[0], a[1], b[1]
    return AtenCost("gemm", 2.0 * m * n * k, {"m": m, "n": n, "k": k})


#: Composite ops that reach the capture whole where autograd is off (``torch.inference_mode``):
#: elsewhere the dispatcher decomposes them into ``addmm``/``mm``/``bmm`` first.
COMPOSITE_PRODUCTS = frozenset({"linear", "matmul"})


def _composite_product(name: str, shapes: list[tuple[int, ...]], out: list[tuple[int, ...]]) -> AtenCost:
    """``linear(x, W)``: x (..., k) by W^T (k, n), 2 m n k with m the rows of x (bias not
    counted, as for ``addmm``); ``matmul(a, b)``: a GEMM when b is a matrix, else a batched
    product over the output's leading dimensions."""
    a, b = shapes[0], shapes[1]
    k = a[-1]
    if name == "linear":
        m, n = _numel(a[:-1]), b[0]
        return AtenCost("gemm", 2.0 * m * n * k, {"m": m, "n": n, "k": k, "linear": 1})
    n = b[-1] if len(b) >= 2 else 1
    if len(b) <= 2:
        m = _numel(a[:-1])
        return AtenCost("gemm", 2.0 * m * n * k, {"m": m, "n": n, "k": k})
    batch, m = _numel(out[0][:-2]) if out else 1, a[-2]
    return AtenCost("bmm", 2.0 * batch * m * n * k, {"batch": batch, "m": m, "n": n, "k": k})


def _is_bias(tensor: Any, out_shapes: list[tuple[int, ...]]) -> bool:
    """Whether a product's added operand is a bias: one value per output column, broadcast over the
    rows (``addmm(b, x, W)`` with ``b`` of shape ``(n,)``, ``linear(x, W, b)``), not a whole ``C``."""
    if tensor is None or not hasattr(tensor, "dim") or not out_shapes or not out_shapes[0]:
        return False
    n = out_shapes[0][-1]
    return (tensor.dim() == 1 and tuple(tensor.shape) == (n,)) or (
        tensor.dim() == 2 and tensor.shape[-1] == n and (tensor.shape[0] == 1 or tensor.stride(0) == 0))


def _conv(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_shape: Sequence[int],
          backward: bool) -> AtenCost:
    """``out_shape`` is the convolution's output (for the backward: the gradient of it)."""
    offset = 1 if backward else 0  # convolution_backward(grad_output, input, weight, ...)
    x, w = tuple(args[offset].shape), tuple(args[offset + 1].shape)
    transposed = bool(argument(func, args, kwargs, "transposed", False))
    groups = int(argument(func, args, kwargs, "groups", 1) or 1)
    if transposed:  # each input point meets the whole filter
        per_pass = 2.0 * x[0] * _numel(x[2:]) * _numel(w)
    else:  # each output point: in_channels/groups * kernel elements multiply-adds
        per_pass = 2.0 * _numel(out_shape) * _numel(w[1:])
    shape = {"batch": x[0], "in_channels": x[1], "out_channels": w[1] * groups if transposed else w[0],
             "kernel": _numel(w[2:]), "groups": groups}
    stride = argument(func, args, kwargs, "stride", 1)
    strides = tuple(int(v) for v in stride) if isinstance(stride, (list, tuple)) else (int(stride),) * len(w[2:])
    if not transposed and not backward and _numel(w[2:]) > 1 and strides == tuple(int(d) for d in w[2:]):
        # its stride is its kernel: non-overlapping patches (a ViT's patch embedding)
        shape["patch"] = 1
    if backward:
        mask = argument(func, args, kwargs, "output_mask", [True, True, True])
        return AtenCost("conv", per_pass * (int(bool(mask[0])) + int(bool(mask[1]))), shape, {"backward": True})
    return AtenCost("conv", per_pass, shape)


def aten_cost(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any], inputs: Sequence[Any],
              outputs: Sequence[Any]) -> AtenCost | None:
    """The cost of one aten call, or None when it is folded away (a view, metadata or an
    allocation). ``inputs``/``outputs`` are the call's tensor arguments and results."""
    name = base_name(func)
    if name in FOLDED or getattr(func, "is_view", False):
        return None
    in_shapes = [tuple(t.shape) for t in inputs]
    out_shapes = [tuple(t.shape) for t in outputs]
    out_elems = float(sum(_numel(s) for s in out_shapes))
    in_elems = float(sum(_numel(s) for s in in_shapes))
    first_out = {"elements": out_elems}
    if name in GEMMS:
        cost = _gemm(name, in_shapes, out_shapes)
        marks = {"bias": 1} if name in ("addmm", "_addmm_activation") and _is_bias(inputs[0], out_shapes) else {}
        weight = inputs[-1] if name in ("mm", "addmm") and inputs else None
        if weight is not None and weight.dim() == 2 and not weight.is_contiguous() and weight.t().is_contiguous():
            # x @ W^T with W stored (n, k), as nn.Linear keeps it: a linear layer lowered to mm
            marks["linear"] = 1
        return AtenCost(cost.op_class, cost.flops, {**cost.shape, **marks}, cost.attrs) if marks else cost
    if name in COMPOSITE_PRODUCTS and len(in_shapes) >= 2 and len(in_shapes[0]) >= 2 and len(in_shapes[1]) >= 1:
        cost = _composite_product(name, in_shapes, out_shapes)
        if name == "linear" and len(inputs) >= 3 and _is_bias(inputs[2], out_shapes):
            return AtenCost(cost.op_class, cost.flops, {**cost.shape, "bias": 1}, cost.attrs)
        return cost
    if name == "dropout" and not argument(func, args, kwargs, "train", True):
        return None  # evaluation: the input itself
    if name in BMMS:
        a, b = (in_shapes[1], in_shapes[2]) if name == "baddbmm" else (in_shapes[0], in_shapes[1])
        batch, m, k, n = a[0], a[1], a[2], b[2]
        return AtenCost("bmm", 2.0 * batch * m * n * k, {"batch": batch, "m": m, "n": n, "k": k})
    if name in CONVS:
        return _conv(func, args, kwargs, out_shapes[0], backward=False)
    if name == "convolution_backward":
        return _conv(func, args, kwargs, tuple(args[0].shape), backward=True)
    if name in ATTENTION or name in ATTENTION_BACKWARD:
        backward = name in ATTENTION_BACKWARD
        q, k, v = (in_shapes[1], in_shapes[2], in_shapes[3]) if backward else (in_shapes[0], in_shapes[1], in_shapes[2])
        causal = bool(argument(func, args, kwargs, "is_causal", False))
        return attention_cost(q, k, v, causal, backward=backward)
    if name in SOFTMAX:
        # the row a pass finds in cache: the softmax dimension's length
        dim = argument(func, args, kwargs, "dim", -1)
        rows_of = out_shapes[0] if out_shapes and out_shapes[0] else (1,)
        width = int(rows_of[int(dim) if isinstance(dim, int) and -len(rows_of) <= int(dim) < len(rows_of) else -1])
        return AtenCost("softmax", SOFTMAX[name] * out_elems, {**first_out, "width": width})
    if name in NORMS:
        elems = float(_numel(in_shapes[1] if name.endswith("_backward") else in_shapes[0]))
        per = 3.0 if "rms" in name else 5.0
        affine = sum(1 for t in inputs[1:3] if t is not None and t.dim() >= 1)
        flops = elems * (per + affine) * (2.0 if name.endswith("_backward") else 1.0)
        kind = next(k for k in ("rms", "layer", "batch", "group") if k in name)
        shape: dict[str, Any] = {"elements": elems}
        normalized = argument(func, args, kwargs, "normalized_shape") if kind in ("rms", "layer") else None
        if isinstance(normalized, (list, tuple)) and normalized:
            shape["width"] = _numel(normalized)      # one row: the normalised dimensions
        if kind == "rms":
            shape["norm"] = "rms"                    # one reduction per element (opclass.NORM_REDUCTIONS)
        return AtenCost("norm", flops, shape, {"kind": kind})
    if name in REDUCTIONS:
        shape = {"elements": in_elems}
        dim = argument(func, args, kwargs, "dim", None)
        if dim not in (None, [], ()) or name in OWN_KERNEL_REDUCTIONS:
            # over a dimension (TensorIterator's reduction with kept outputs), not to one scalar,
            # or a reduction of a kernel of its own at any dim: its function names a class key of
            # its own where calibrated (class_keys.FUNCTION_CLASSES)
            shape.update(function=name, outputs=out_elems)
        return AtenCost("reduction", float(_numel(in_shapes[0])) if in_shapes else in_elems, shape)
    if name in GATHERS:
        return AtenCost("embedding", 0.0, first_out, {"gather": True})
    if name in SCATTERS:
        src = float(_numel(in_shapes[-1])) if in_shapes else 0.0
        adds = name in ("embedding_dense_backward", "index_add", "scatter_add", "index_put", "_index_put_impl")
        return AtenCost("embedding", src if adds else 0.0, {"elements": src}, {"scatter": True})
    if name in COPIES:
        permutes = any(not t.is_contiguous() for t in inputs) and all(t.is_contiguous() for t in outputs) \
            and name in ("clone", "copy_", "copy", "contiguous", "_to_copy")
        attrs = {"cast": True} if name == "_to_copy" and inputs and outputs and inputs[0].dtype != outputs[0].dtype else {}
        if name == "cat":
            # a concatenation of a list of tensors: its function names a class key of its own where
            # calibrated (class_keys.FUNCTION_CLASSES), its inputs counted
            return AtenCost("copy", 0.0, {**first_out, "function": "cat", "inputs": float(len(inputs))}, attrs)
        return AtenCost("transpose" if permutes else "copy", 0.0, first_out, attrs)
    if name in FILLS:
        # a factory or fill writes its output and reads nothing: its Work says so, and it is
        # calibrated apart (calibration.class_keys: ``elementwise.fill``)
        return AtenCost("elementwise", 0.0, {**first_out, "fill": 1})
    if name in DATA_DEPENDENT or name in ("sort", "argsort", "multinomial"):
        # a sort names its function: a class key of its own where calibrated
        named = {"function": name} if name in ("sort", "argsort") else {}
        return AtenCost("other", 0.0, {**first_out, **named}, {"data_dependent": name in DATA_DEPENDENT})
    if name.startswith("_foreach_"):
        return AtenCost("elementwise", out_elems or in_elems, first_out, {"foreach": True})
    if not outputs:
        return AtenCost("other", 0.0, {}, {})
    if name in TRANSCENDENTAL:
        # bound by its math: its Work says so, and names its function, whose cost is its own
        # (calibration.class_keys: ``transcendental.<function>`` where the suite calibrated it)
        return AtenCost("elementwise", out_elems, {**first_out, "transcendental": 1, "function": name})
    return AtenCost("elementwise", out_elems, first_out)
