"""How an op's operands change what it costs beyond its bytes: the marks a captured op's Work
carries in its shape, read by the op-class model's dispatch figures
(:func:`pytest_charz.models.opclass_costs.framework_of`) and class keys
(:func:`pytest_charz.calibration.class_keys.class_key`).

* ``scalar_operand``: a Python number where an elementwise op takes a tensor (``x * 0.5``:
  ``mul.Tensor``), or a 0-dim tensor, beside a tensor. PyTorch wraps it on every call and, where
  the wrapped number is not of the op's dtype (a Python float is wrapped as a double, an int as an
  int64), casts it: ``dispatch:torch-scalar``. A number the op takes as a number
  (``x.pow(2)``: ``pow.Tensor_Scalar``) is not wrapped.
* ``scalar_uncast``: that number is of the op's own dtype (a Python int beside an int64 position
  or index): wrapped, not cast (``dispatch:torch-scalar-uncast``). On a Xeon core an int64
  tensor plus an int took 1.03 us, an fp32 tensor plus a float or an int 1.67, two tensors 0.66.
* ``broadcast``: two tensor operands of different shapes (``x * rsqrt(var)``, ``weight * x``):
  the iterator computes the broadcast shape and strides on every call (``dispatch:torch-broadcast``).
* ``strided``: a non-contiguous view beside another tensor operand (a query transposed to heads
  times its rotary cos): the iterator walks the two in different orders, row by row, not as one
  vector run (on a Xeon core a rotary add of two 4 x 32 x 32 tensors, one a transposed view, took
  1.97 us, 1.02 with both contiguous). A ``cat`` with a non-contiguous input (a rotary embedding's halves
  ``x[..., d/2:]``, a ViT's patches transposed to tokens) leaves PyTorch's serial memcpy kernel,
  which takes contiguous inputs only, for a strided copy per input (``cat_out_cpu`` in ATen's
  ``TensorShape.cpp``): on a Xeon core a cat of two 4 x 32 x 16 halves took 2.1 us, a KV append of
  about as many floats 1.4.
* ``view``: an elementwise op's one tensor operand is a non-contiguous view (a rotary half's
  ``neg``, ``-x[..., d/2:]``): its output follows the view's rows, so a small one costs about a
  contiguous op (a neg of 4 x 32 x 16 floats sliced from rows of 32: 0.85 us on a Xeon core,
  0.73 contiguous, where the strided add of that size took 1.90 against 1.10), a large one pays
  for its rows (8 x 256 x 64: 17.5 against 11.6 us). Priced on the strided adds, a captured
  Llama's negs read -24..-32%; they are calibrated on cases of their own (``elementwise.view``).
"""
from __future__ import annotations

from typing import Any, Sequence

from .aten_costs import AtenCost

__all__ = ["operand_marks"]


def _wrapped_dtype(operand: Any) -> Any:
    """The dtype a scalar operand has in the op: a 0-dim tensor's own, else the dtype PyTorch
    wraps a Python number as (int64 for an int, float64 for a float)."""
    import torch

    if isinstance(operand, torch.Tensor):
        return operand.dtype
    return torch.int64 if isinstance(operand, int) else torch.float64


def operand_marks(cost: AtenCost, func: Any, args: Sequence[Any], tensor_args: Sequence[Any],
                  outputs: Sequence[Any]) -> dict[str, int]:
    """The marks (module docstring) of one aten op ``func`` called on ``args``, whose tensors are
    ``tensor_args`` and outputs ``outputs``, costed as ``cost``."""
    import torch

    elementwise = cost.op_class == "elementwise"
    operands = list(zip(args[:2], func._schema.arguments[:2]))
    numbers = [a for a, spec in operands
               if (isinstance(a, (int, float)) and not isinstance(a, bool) and str(spec.type) == "Tensor")
               or (isinstance(a, torch.Tensor) and a.dim() == 0)]
    tensors = [a for a, _ in operands if isinstance(a, torch.Tensor) and a.dim()]
    marks: dict[str, int] = {}
    if elementwise and numbers and tensors:
        marks["scalar_operand"] = 1
        if outputs and all(_wrapped_dtype(a) == outputs[0].dtype for a in numbers):
            marks["scalar_uncast"] = 1
    elif elementwise and len(tensors) == 2 and outputs and any(
            tuple(t.shape) != tuple(outputs[0].shape) for t in tensors):
        marks["broadcast"] = 1
    walked = tensors if elementwise else tensor_args if cost.shape.get("function") == "cat" else []
    walked = [a for a in walked if a.numel() > 1]
    if any(not a.is_contiguous() for a in walked):
        # one elementwise operand walks its own rows; two walk in each other's orders
        marks["view" if elementwise and len(walked) == 1 else "strided"] = 1
    return marks
