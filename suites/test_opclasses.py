"""Op-class microbenchmarks: one PyTorch op per case, so every op class of the workload IR is
calibrated from measurements of this machine (``pytest_charz.models.opclass``).

Classes and what each case runs (fp32, on the host CPU through PyTorch's eager ops, with the
threads PyTorch is given): ``elementwise`` (``torch.add``, of a transposed view: ``elementwise.strided``, ``torch.neg`` of a half sliced from rows: ``elementwise.view``, and the factories ``torch.arange`` and ``torch.zeros``: ``elementwise.fill``), ``transcendental`` (``torch.exp``, ``tanh``, ``gelu``, ``sigmoid``, ``silu``, ``x.pow(2)``, ``rsqrt``, ``x.cos()``, ``x.sin()``),
``reduction`` (``torch.sum``, and ``torch.mean`` and ``torch.sum`` over each row), ``softmax`` and ``norm`` (``layer_norm``) over rows,
``transpose`` (a transposed copy), ``copy`` (``Tensor.copy_``, and ``torch.cat`` of a KV cache's append and of rotary halves), ``gemm`` (square, skinny and small
inner dimension ``torch.mm``, and linear layers' ``F.linear``), ``bmm``, ``conv`` (``conv2d`` 3x3), ``attention``
(``scaled_dot_product_attention``) and ``embedding`` (a row gather). Sizes span small (dispatch
bound) to past the last-level cache, a factor of 4 or less apart (elementwise sizes) so that a
case left out of its class's fit is still predicted between near neighbours: the class intervals
come from those leave-one-out residuals (``pytest_charz.calibration.classes``). The held-out workloads (``suites/test_heldout.py``) use
other shapes and compositions, so a calibration on these cases is tested on work it never saw.

Every Work is counted by hand from the op's definition: bytes are the minimal traffic (each
input read once, the output written once) at the memory level the working set fits in
(``_sizes.fits_level``), FLOPs as the workload IR counts them (``pytest_charz.workloads.aten_costs``).
Each case checks its result against NumPy or float64 before it is timed.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from _sizes import set_torch_threads
from pytest_charz import Work

FP32 = 4
ELEMENTS = (1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22)
ROWS_WIDTH = ((8, 256), (32, 384), (64, 512), (256, 1024), (512, 1024), (4096, 1024))
#: A mean over each row (a norm's moment, ``x.pow(2).mean(-1, keepdim=True)``): from one row of
#: a decode step to a prefill's thousands.
MEAN_ROWS = ((1, 128), (1, 1024), (16, 1024), (256, 1024), (4096, 1024))
#: A softmax's and a layer norm's row as a decode step has it, one token of a small model's width
#: (a router's softmax, a layer's norms), a decade below ``ROWS_WIDTH``: without it a captured
#: Mixtral router's softmax of 8 floats was priced on the line through 8 x 256 and 32 x 384, 2.7
#: decades above it (-36% replayed on a Xeon core). Not one row of 1024 as well: the curve is over
#: bytes, and one row of 1024 floats (16 KiB) beside 8 rows of 256 (18 KiB) costs less by the
#: rows' own work, which pulled the norm curve under a BERT's and a ViT's norms of a few rows
DECODE_ROWS = ((1, 128),)
#: Layer norms of many narrow rows, at ``DECODE_ROWS``' width: beside ``ROWS_WIDTH``'s rows of
#: 256-1024 they separate a norm's cost per row (its moments' fold and loop setup) from its cost
#: per element, which one curve over bytes cannot (``torch.layer_norm`` of 512 x 128 floats took
#: 33 us, of 64 x 1024 (the same elements) 18 us, on a Xeon core; pytest_charz.models.layernorm_costs).
NORM_NARROW_ROWS = ((64, 128), (512, 128))
#: ``cat`` as model code makes it, (heads, length, head dim) of one sequence: a KV cache's append
#: (``cat([past, new], dim=-2)``, past of ``length`` positions, one new) and a rotary embedding's
#: halves (``cat((-x[..., d/2:], x[..., :d/2]), dim=-1)`` of a ``length``-token query), from a small
#: model's decode step to a prefill's. A cat's cost follows the contiguous chunks it copies, which a
#: 1-D cat of two halves does not have (3.8 us for 64 + 64 floats, a decode step's KV append of the
#: same bytes 5.2, on one Xeon core). The second half is a view by strides, which PyTorch's serial
#: cat kernel does not take: the halves are the strided cats' cases (``copy.cat.strided``).
CAT_KV = ((4, 8, 32), (4, 32, 32), (8, 256, 64), (8, 2048, 64), (32, 1024, 128))
CAT_HALVES = ((4, 1, 32), (4, 32, 32), (8, 256, 64), (32, 512, 128))
SQUARE = (64, 96, 128, 192, 256, 384, 512, 1024)
#: m, n, k of ``a @ b`` with few rows: weights from DRAM (1 x 1024 x 1024 reads 4 MiB) and, as a
#: small model's decode step has them (``addmm(bias, x, W)`` of GPT-2's ``Conv1D``), weights held
#: in the caches, where the time is the op's dispatch and a pass over the weight, not a DRAM stream
SKINNY = ((1, 128, 128), (1, 512, 512), (4, 512, 128), (1, 1024, 1024), (4, 2048, 1024), (16, 1024, 2048))
SMALL_K = ((1024, 1024, 16), (512, 512, 64))
#: m, n, k of linear layers (``F.linear(x, W)``, W stored (n, k) as ``nn.Linear`` keeps it): a
#: decode step's projections and a short prompt's, where the transposed weight takes other kernels
#: than ``a @ b`` (32x128x512: 72 us against 37 on one Xeon core). ``x`` is ``(1, m, k)``, the
#: ``(batch, tokens, hidden)`` a model's ``nn.Linear`` is called on: the 3-D input's fold to rows
#: and back costs a decode-sized linear 0.7-1.1 us more than a 2-D one (1x128x128: 3.5 against
#: 2.7 us on a Xeon core), which left a captured model's replayed linears 48% (1x128x128) to 83%
#: (1x64x128) slower than the 2-D cases calibrated
LINEAR = ((1, 128, 128), (1, 512, 512), (4, 512, 128), (16, 1024, 1024), (32, 128, 128), (32, 128, 512),
          (32, 512, 128), (128, 512, 512))
#: m, n, k of linear layers with a bias (``F.linear(x, W, b)``, as BERT's, ViT's and GPT-2's
#: layers have one): PyTorch copies the bias into the output, broadcast, before the GEMM adds onto
#: it, a pass of its own (+1.5 us, 12.6%, at 32 x 128 x 128 on a Xeon core); calibrated apart
#: (``gemm.linear.bias``)
LINEAR_BIAS = ((32, 128, 128), (32, 128, 512), (32, 512, 128), (128, 512, 512))
BMM = ((16, 64, 64, 64), (32, 128, 128, 32), (8, 256, 256, 64))
CONV = ((1, 8, 16, 64, 64), (1, 16, 32, 32, 32), (1, 32, 64, 32, 32), (4, 64, 64, 16, 16))   # batch, c_in, c_out, h, w
#: batch, c_out, image side, patch side of a patch embedding (stride = kernel) over 3 channels:
#: a ViT stem, whose convolution runs other kernels than a 3 x 3 one (``conv.patch``)
PATCH_CONV = ((1, 32, 32, 4), (1, 64, 64, 8), (1, 192, 128, 16), (1, 384, 224, 16))
#: batch, heads, query length, key length, head dim: a decode step's single query over its cache
#: and a short prompt's, where a fused attention's fixed cost is most of its time, up to a prefill's
ATTENTION = ((1, 4, 1, 64, 32), (1, 8, 1, 1024, 64), (1, 4, 32, 32, 32), (1, 4, 128, 128, 32), (1, 4, 256, 256, 64),
             (2, 8, 256, 256, 64))
#: heads, length, head dim of ``scaled_dot_product_attention`` on 3-D query, key and value (an
#: unbatched call): PyTorch's fused kernels need 4-D inputs, so these run the math backend (a
#: scale, a bmm, a softmax, a bmm), which costs its own (244 us for 4 heads of 128 x 64 on one Xeon
#: core, 136 us fused) and is calibrated apart (``attention.math``)
ATTENTION_MATH = ((4, 32, 32), (8, 64, 32), (4, 128, 32), (4, 256, 64), (12, 256, 64))
#: heads, tokens, head dim of an add whose first operand is a (tokens, heads, head dim) tensor
#: transposed to heads, as attention code holds a query before its rotary embedding: the kernel walks
#: a view by strides (``elementwise.strided``), not as one contiguous run
STRIDED = ((2, 8, 64), (2, 32, 64), (2, 128, 64), (8, 256, 64))
#: The same heads, tokens, head dim for a unary op on a view (``elementwise.view``): the neg of a
#: rotary half sliced from rows twice as long (``-x[..., d:]``). Its output follows the view's
#: rows, so a small one costs about a contiguous op (0.85 against 0.73 us for 4 x 32 x 16 floats
#: on a Xeon core, where a strided add of that size took 1.90 against 1.10); a large one pays for
#: its rows as the strided add does (17.5 against 11.6 us for 8 x 256 x 64, the add 25.7 against
#: 16.3)
#: rows gathered, width: from a decode step's one token (its embedding row, 1 KiB with its id:
#: priced from 64 rows up it read +46% replayed, extrapolated two decades) to a prefill's
GATHER = ((1, 128), (8, 256), (64, 256), (256, 256), (1024, 256), (8192, 512))
#: Elements of the factories a model's code calls for positions and masks (``torch.arange`` of
#: int64, ``torch.zeros`` of fp32): they write and read nothing, and parse a size, not tensors
#: (``elementwise.fill``)
FILL_ELEMENTS = (64, 1 << 10, 1 << 14, 1 << 18)
FILL_FUNCTIONS = ("arange", "zeros")
TABLE_ROWS = 32768
TRANSPOSE = (64, 128, 256, 512, 1024, 2048)
#: Transcendental functions the workload IR meets besides exp, each with its own cost per element:
#: activations, and an RMS norm's square (``x.pow(2)``: ``pow`` with a number exponent, which
#: PyTorch's argument parsing and dispatch make cost more than an add's, 1.1 against 0.7 us for
#: 128 floats on a Xeon core) and reciprocal square root (``torch.rsqrt`` of its row moments),
#: and a rotary embedding's ``cos`` and ``sin`` of its position angles, called as the model's code
#: calls them (``emb.cos()``): priced on the pooled transcendental curve, a captured Llama's read
#: -26% replayed.
FUNCTIONS = ("tanh", "gelu", "sigmoid", "silu", "pow", "rsqrt", "cos", "sin")
#: A mixture-of-experts layer's routing, as a decode step to a prefill has it (each a kernel of
#: its own, calibrated apart: ``calibration.class_keys.FUNCTION_CLASSES``): the router's top-2 of
#: (tokens, experts) logits, the count of tokens per expert (a histogram of the chosen expert ids
#: as floats, one bin per expert) and its scan into int32 offsets (``cumsum(dtype=torch.int32)``),
#: the sort of the chosen ids (int64, as the router's indices are), and a mask's scan into int64
#: positions (a bool ``cumsum``). A model's scans cast as they go, which costs its own: on one Xeon
#: core a captured Mixtral's 4-float scan to int32 replayed at 1.67 us where a float scan of 8
#: took 1.05
TOPK = ((1, 4), (1, 8), (4, 8), (16, 8), (64, 64), (256, 256))
HISTC = ((4, 4), (32, 8), (256, 8), (4096, 64), (65536, 64))
SCAN_ELEMENTS = (8, 32, 128, 1024, 16384)
SORT_ELEMENTS = (8, 32, 128, 1024, 16384)


def level_of(size_plan: Any, working_set_bytes: float) -> str:
    """The smallest cache of the plan holding the working set (capacities as the spec gives them)."""
    return next((c.name for c in size_plan.caches if working_set_bytes <= c.capacity_bytes), "dram")


def _cases() -> list[Any]:
    cases = [pytest.param(("elementwise", (n,)), id=f"add-{n}") for n in ELEMENTS]
    cases += [pytest.param(("strided", s), id=f"add-strided-{s[0]}x{s[1]}x{s[2]}") for s in STRIDED]
    cases += [pytest.param(("view", s), id=f"neg-half-{s[0]}x{s[1]}x{s[2]}") for s in STRIDED]
    cases += [pytest.param(("fill", (n, function)), id=f"{function}-{n}") for function in FILL_FUNCTIONS
              for n in FILL_ELEMENTS]
    cases += [pytest.param(("transcendental", (n,)), id=f"exp-{n}") for n in ELEMENTS]
    cases += [pytest.param(("transcendental", (n, function)), id=f"{function}-{n}")
              for function in FUNCTIONS for n in ELEMENTS[::2]]
    cases += [pytest.param(("reduction", (n,)), id=f"sum-{n}") for n in ELEMENTS]
    cases += [pytest.param(("reduction", (function, *rw)), id=f"{function}-rows-{rw[0]}x{rw[1]}")
              for function in ("mean", "sum") for rw in MEAN_ROWS]
    cases += [pytest.param(("routing", ("topk", *tw)), id=f"topk2-{tw[0]}x{tw[1]}") for tw in TOPK]
    cases += [pytest.param(("routing", ("histc", *nb)), id=f"histc-{nb[0]}x{nb[1]}bins") for nb in HISTC]
    cases += [pytest.param(("routing", ("cumsum", n, dtype)), id=f"cumsum-{dtype}-{n}")
              for dtype in ("fp32-int32", "bool-int64") for n in SCAN_ELEMENTS]
    cases += [pytest.param(("routing", ("sort", n, "int64")), id=f"sort-int64-{n}") for n in SORT_ELEMENTS]
    cases += [pytest.param(("copy", (n,)), id=f"copy-{n}") for n in ELEMENTS]
    cases += [pytest.param(("cat", ("kv", *c)), id=f"cat-kv-{'x'.join(map(str, c))}") for c in CAT_KV]
    cases += [pytest.param(("cat", ("halves", *c)), id=f"cat-halves-{'x'.join(map(str, c))}") for c in CAT_HALVES]
    cases += [pytest.param(("softmax", rw), id=f"softmax-{rw[0]}x{rw[1]}") for rw in DECODE_ROWS + ROWS_WIDTH]
    cases += [pytest.param(("norm", rw), id=f"layernorm-{rw[0]}x{rw[1]}")
              for rw in DECODE_ROWS + NORM_NARROW_ROWS + ROWS_WIDTH]
    cases += [pytest.param(("transpose", (n,)), id=f"transpose-{n}") for n in TRANSPOSE]
    cases += [pytest.param(("gemm", (n, n, n)), id=f"mm-{n}") for n in SQUARE]
    cases += [pytest.param(("gemm", mnk), id=f"mm-{mnk[0]}x{mnk[1]}x{mnk[2]}") for mnk in SKINNY + SMALL_K]
    cases += [pytest.param(("linear", mnk), id=f"linear-{mnk[0]}x{mnk[1]}x{mnk[2]}") for mnk in LINEAR]
    cases += [pytest.param(("linear", (*mnk, "bias")), id=f"linear-bias-{mnk[0]}x{mnk[1]}x{mnk[2]}")
              for mnk in LINEAR_BIAS]
    cases += [pytest.param(("bmm", b), id=f"bmm-{b[0]}x{b[1]}x{b[2]}x{b[3]}") for b in BMM]
    cases += [pytest.param(("conv", c), id=f"conv3x3-{'x'.join(map(str, c))}") for c in CONV]
    cases += [pytest.param(("conv", ("patch", *c)), id=f"conv-patch-{'x'.join(map(str, c))}") for c in PATCH_CONV]
    cases += [pytest.param(("attention", a), id=f"sdpa-{'x'.join(map(str, a))}") for a in ATTENTION]
    cases += [pytest.param(("attention", ("math", *a)), id=f"sdpa-math-{'x'.join(map(str, a))}") for a in ATTENTION_MATH]
    cases += [pytest.param(("embedding", g), id=f"gather-{g[0]}x{g[1]}") for g in GATHER]
    return cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "opclass_case" in metafunc.fixturenames:
        metafunc.parametrize("opclass_case", _cases())


def build(torch: Any, op_class: str, dims: tuple[Any, ...], rng: np.random.Generator,
          size_plan: Any) -> tuple[Callable[[], Any], Callable[[], None], Work]:
    """(timed call, check of its result, Work) of one op-class case."""
    # Inputs from PyTorch's generator, seeded from the case's: NumPy's normals took 1.7 s of a
    # quick run for the large tensors.
    generator = torch.Generator().manual_seed(int(rng.integers(2**63)))

    def tensor(*shape: int) -> Any:
        return torch.randn(shape, generator=generator)

    def close(actual: Any, expected: np.ndarray, tolerance: float = 1e-4) -> None:
        got = actual.double().numpy()
        scale = float(np.abs(expected).max()) or 1.0
        assert float(np.abs(got - expected).max()) <= tolerance * scale, f"{op_class} {dims}: result differs"

    def work(flops: float, moved: float, op: str, shape: dict[str, Any], working_set: float | None = None) -> Work:
        level = level_of(size_plan, moved if working_set is None else working_set)
        return Work(flops={"fp32": flops} if flops else None, bytes={level: moved}, launches=1, op=op,
                    shape={**shape, "dtype": "fp32", "framework": "torch"})

    if op_class == "transcendental" and len(dims) == 2:
        n, function = dims
        a = tensor(n)
        if function == "rsqrt":
            a = a.abs() + 0.5       # a norm's moments: positive
        call = {"tanh": torch.tanh, "gelu": torch.nn.functional.gelu, "sigmoid": torch.sigmoid,
                "silu": torch.nn.functional.silu, "pow": lambda x: x.pow(2), "rsqrt": torch.rsqrt,
                "cos": lambda x: x.cos(), "sin": lambda x: x.sin()}[function]
        a64 = a.double()
        # y = f(a): read a, write y; one transcendental per element
        return (lambda: call(a)), (lambda: close(call(a), call(a64).numpy())), work(
            n, 2 * n * FP32, "elementwise", {"elements": n, "transcendental": 1, "function": function})
    if op_class == "cat":
        kind, heads, length, d = dims
        if kind == "kv":
            past, new = tensor(1, heads, length, d), tensor(1, heads, 1, d)
            parts, axis, elements = (past, new), -2, heads * (length + 1) * d
        else:
            # as a rotary embedding's rotate_half joins them: the negated half a new tensor, the
            # other a view of x by strides (two views of equal strides would share one iterator)
            x = tensor(1, heads, length, d)
            parts, axis, elements = (-x[..., d // 2:], x[..., :d // 2]), -1, heads * length * d
        # c = cat(parts): read every part, write the joined tensor; a half sliced from x is a view
        # by strides, which PyTorch's serial cat kernel does not take (copy.cat.strided)
        fn_cat: Callable[[], Any] = lambda: torch.cat(parts, dim=axis)  # noqa: E731
        expected_cat = np.concatenate([p.numpy() for p in parts], axis=axis)
        strided = {"strided": 1} if any(not p.is_contiguous() for p in parts) else {}
        assert bool(strided) == (kind == "halves")
        return fn_cat, (lambda: close(fn_cat(), expected_cat)), work(
            0, 2 * elements * FP32, "copy", {"elements": elements, "function": "cat", "inputs": 2, **strided})
    if op_class == "reduction" and len(dims) == 3:
        function, rows, width = dims
        x = tensor(rows, width)
        # m = mean(x, -1, keepdim=True) (sum: the same without the division): read x once, write
        # one value per row; one add per element
        reduce = getattr(torch, function)
        fn_rows: Callable[[], Any] = lambda: reduce(x, -1, keepdim=True)  # noqa: E731
        expected_rows = getattr(x.double().numpy(), function)(-1, keepdims=True)
        return fn_rows, (lambda: close(fn_rows(), expected_rows, 1e-3)), work(
            rows * width, (rows * width + rows) * FP32, "reduction",
            {"elements": rows * width, "function": function, "outputs": rows, "rows": rows, "width": width})
    if op_class == "routing":
        return _routing(torch, dims, generator, close, work)
    if op_class == "strided":
        heads, tokens, d = dims
        n = heads * tokens * d
        view, b = tensor(tokens, heads, d).transpose(0, 1), tensor(heads, tokens, d)
        assert not view.is_contiguous()
        # c = view + b: read both, write c; one FLOP per element
        fn_strided: Callable[[], Any] = lambda: torch.add(view, b)  # noqa: E731
        return fn_strided, lambda: close(fn_strided(), view.numpy() + b.numpy()), work(
            n, 3 * n * FP32, "elementwise", {"elements": n, "strided": 1})
    if op_class == "view":
        heads, tokens, d = dims
        n = heads * tokens * d
        half = tensor(heads, tokens, 2 * d)[..., d:]
        assert not half.is_contiguous()
        # c = -half: read the half, write c; one FLOP per element
        fn_view: Callable[[], Any] = lambda: torch.neg(half)  # noqa: E731
        return fn_view, lambda: close(fn_view(), -half.numpy()), work(
            n, 2 * n * FP32, "elementwise", {"elements": n, "view": 1})
    if op_class == "fill":
        n, function = dims
        if function == "arange":
            # positions: n int64 written, nothing read; int64 has no FLOP dtype, so the work
            # names none, as a captured arange's does
            fn_fill: Callable[[], Any] = lambda: torch.arange(n)  # noqa: E731
            expected_fill, itemsize, dtype = np.arange(n, dtype=np.float64), 8, "int64"
        else:
            fn_fill = lambda: torch.zeros(n)  # noqa: E731
            expected_fill, itemsize, dtype = np.zeros(n), FP32, "fp32"
        level = level_of(size_plan, n * itemsize)
        return fn_fill, (lambda: close(fn_fill(), expected_fill)), Work(
            bytes={level: n * itemsize}, launches=1, op="elementwise",
            shape={"elements": n, "fill": 1, "dtype": dtype, "framework": "torch"})
    if op_class in ("elementwise", "transcendental", "reduction", "copy"):
        (n,) = dims
        a, b = tensor(n), tensor(n)
        # Outputs are allocated by the op, as in a model's code (no out=): the allocation is part
        # of what an eager op costs.
        if op_class == "elementwise":
            # c = a + b: read a and b, write c; one FLOP per element
            fn: Callable[[], Any] = lambda: torch.add(a, b)  # noqa: E731
            check = lambda: close(fn(), a.numpy() + b.numpy())  # noqa: E731
            w = work(n, 3 * n * FP32, "elementwise", {"elements": n})
        elif op_class == "transcendental":
            # c = exp(a): read a, write c; one transcendental per element
            fn = lambda: torch.exp(a)  # noqa: E731
            check = lambda: close(fn(), np.exp(a.numpy().astype(np.float64)))  # noqa: E731
            w = work(n, 2 * n * FP32, "elementwise", {"elements": n, "transcendental": 1, "function": "exp"})
        elif op_class == "reduction":
            # s = sum(a): read a once; one add per element
            fn = lambda: torch.sum(a)  # noqa: E731
            check = lambda: close(fn(), a.double().sum().numpy(), 1e-3)  # noqa: E731
            w = work(n, n * FP32, "reduction", {"elements": n})
        else:
            # c = clone(a): read a, write c
            fn = lambda: a.clone()  # noqa: E731
            check = lambda: close(fn(), a.numpy())  # noqa: E731
            w = work(0, 2 * n * FP32, "copy", {"elements": n})
        return fn, check, w
    if op_class in ("softmax", "norm"):
        rows, width = dims
        x = tensor(rows, width)
        weight, bias = tensor(width), tensor(width)
        if op_class == "softmax":
            # read x once, write y once (the IR's minimal bytes); 5 FLOPs per element (aten_costs)
            fn = lambda: torch.softmax(x, dim=-1)  # noqa: E731
            x64 = x.double().numpy()
            expected = np.exp(x64 - x64.max(-1, keepdims=True))
            expected /= expected.sum(-1, keepdims=True)
            return fn, lambda: close(fn(), expected), work(5 * rows * width, 2 * rows * width * FP32, "softmax",
                                                           {"rows": rows, "width": width})
        # layer norm: read x, weight and bias once, write y; 5 FLOPs per element + 1 each for weight, bias.
        # Through the binding a model's op replays (nn.LayerNorm's F.layer_norm calls it): the
        # functional's own Python (0.6-0.8 us) is the model code's, priced with the module's
        fn = lambda: torch.layer_norm(x, (width,), weight, bias)  # noqa: E731
        x64 = x.double().numpy()
        expected = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
        expected = expected * weight.double().numpy() + bias.double().numpy()
        return fn, lambda: close(fn(), expected, 1e-3), work(7 * rows * width, (2 * rows + 2) * width * FP32, "norm",
                                                             {"rows": rows, "width": width})
    if op_class == "transpose":
        (n,) = dims
        a = tensor(n, n)
        # a^T made contiguous: read a, write the copy (one of the two sides strided)
        return (lambda: a.t().contiguous()), (lambda: close(a.t().contiguous(), a.numpy().T)), work(
            0, 2 * n * n * FP32, "transpose", {"rows": n, "width": n})
    if op_class == "gemm":
        m, n, k = dims
        a, b = tensor(m, k), tensor(k, n)
        # C = A B: 2mnk FLOPs; read A and B, write C
        return (lambda: torch.mm(a, b)), (lambda: close(torch.mm(a, b), a.double().numpy() @ b.double().numpy(), 1e-3)), work(
            2.0 * m * n * k, (m * k + k * n + m * n) * FP32, "gemm", {"m": m, "n": n, "k": k})
    if op_class == "linear":
        m, n, k, *biased = dims
        x, weight = tensor(1, m, k), tensor(n, k)
        bias = tensor(n) if biased else None
        fn = lambda: torch.nn.functional.linear(x, weight, bias)  # noqa: E731
        expected_linear = x.double().numpy() @ weight.double().numpy().T
        if bias is not None:
            expected_linear = expected_linear + bias.double().numpy()
        # y = x W^T (+ b) over the (1, m) rows of x: 2mnk FLOPs (a bias's adds are not counted,
        # as the capture counts them); read x, W (and b), write y
        return fn, (lambda: close(fn(), expected_linear, 1e-3)), work(
            2.0 * m * n * k, (m * k + k * n + m * n + (n if biased else 0)) * FP32, "gemm",
            {"m": m, "n": n, "k": k, "linear": 1, **({"bias": 1} if biased else {})})
    if op_class == "bmm":
        batch, m, n, k = dims
        a, b = tensor(batch, m, k), tensor(batch, k, n)
        return (lambda: torch.bmm(a, b)), (lambda: close(torch.bmm(a, b), a.double().numpy() @ b.double().numpy(), 1e-3)), work(
            2.0 * batch * m * n * k, batch * (m * k + k * n + m * n) * FP32, "bmm", {"m": m, "n": n, "k": k, "batch": batch})
    if op_class == "conv" and dims[0] == "patch":
        _, batch, cout, side, patch = dims
        x, weight = tensor(batch, 3, side, side), tensor(cout, 3, patch, patch)
        fn = lambda: torch.nn.functional.conv2d(x, weight, stride=patch)  # noqa: E731
        reference = torch.nn.functional.conv2d(x.double(), weight.double(), stride=patch).numpy()
        # 2 * output elements * 3 * patch^2 FLOPs; read x (every pixel once) and the weights, write y
        outputs = batch * cout * (side // patch) ** 2
        flops = 2.0 * outputs * 3 * patch * patch
        moved = (batch * 3 * side * side + cout * 3 * patch * patch + outputs) * FP32
        return fn, lambda: close(fn(), reference, 1e-3), work(flops, moved, "conv", {
            "batch": batch, "in_channels": 3, "out_channels": cout, "kernel_h": patch, "kernel_w": patch,
            "groups": 1, "patch": 1})
    if op_class == "conv":
        batch, cin, cout, h, w = dims
        x, weight = tensor(batch, cin, h, w), tensor(cout, cin, 3, 3)
        fn = lambda: torch.nn.functional.conv2d(x, weight, padding=1)  # noqa: E731
        reference = torch.nn.functional.conv2d(x.double(), weight.double(), padding=1).numpy()
        # 2 * output elements * c_in * 9 FLOPs; read x and the weights, write y (same h, w: padding 1)
        flops = 2.0 * batch * cout * h * w * cin * 9
        moved = (batch * cin * h * w + cout * cin * 9 + batch * cout * h * w) * FP32
        return fn, lambda: close(fn(), reference, 1e-3), work(flops, moved, "conv", {
            "batch": batch, "in_channels": cin, "out_channels": cout, "kernel_h": 3, "kernel_w": 3, "groups": 1})
    if op_class == "attention" and dims[0] == "math":
        _, heads, length, d = dims
        q, k_, v = tensor(heads, length, d), tensor(heads, length, d), tensor(heads, length, d)
        fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k_, v)  # noqa: E731
        reference = torch.nn.functional.scaled_dot_product_attention(q.double(), k_.double(), v.double()).numpy()
        # as a fused attention counts it: 4 h s^2 d FLOPs; read q, k, v, write the output
        return fn, lambda: close(fn(), reference, 1e-3), work(
            4.0 * heads * length * length * d, 4 * heads * length * d * FP32, "attention",
            {"batch": 1, "heads": heads, "s_q": length, "s_kv": length, "d": d, "function": "math"})
    if op_class == "attention":
        batch, heads, s_q, s_kv, d = dims
        q, k_, v = tensor(batch, heads, s_q, d), tensor(batch, heads, s_kv, d), tensor(batch, heads, s_kv, d)
        fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k_, v)  # noqa: E731
        reference = torch.nn.functional.scaled_dot_product_attention(q.double(), k_.double(), v.double()).numpy()
        # 4 b h s_q s_kv d FLOPs (QK^T and PV, the full score matrix); read q, k, v, write the output
        return fn, lambda: close(fn(), reference, 1e-3), work(
            4.0 * batch * heads * s_q * s_kv * d, 2 * batch * heads * (s_q + s_kv) * d * FP32, "attention",
            {"batch": batch, "heads": heads, "s_q": s_q, "s_kv": s_kv, "d": d})
    rows, width = dims
    table = tensor(TABLE_ROWS, width)
    ids = torch.from_numpy(rng.integers(0, TABLE_ROWS, rows))
    fn = lambda: torch.nn.functional.embedding(ids, table)  # noqa: E731
    # read the gathered rows and the ids (8 bytes each), write the output rows
    moved = 2 * rows * width * FP32 + 8 * rows
    return fn, lambda: close(fn(), table.numpy()[ids.numpy()]), work(0, moved, "embedding",
                                                                     {"rows": rows, "width": width})


def _routing(torch: Any, dims: tuple[Any, ...], generator: Any, close: Callable[..., None],
             work: Callable[..., Work]) -> tuple[Callable[[], Any], Callable[[], None], Work]:
    """(call, check, Work) of a mixture-of-experts routing op (``TOPK``, ``HISTC``, ``SCAN_ELEMENTS``,
    ``SORT_ELEMENTS``); its Work as the capture counts it (``workloads.aten_costs``): the input's
    elements as FLOPs of a float input, inputs and outputs as bytes, the function named."""
    function = dims[0]
    if function == "topk":
        rows, width = dims[1:]
        x = torch.randn((rows, width), generator=generator)
        fn: Callable[[], Any] = lambda: torch.topk(x, 2, dim=-1)  # noqa: E731
        expected = np.sort(x.double().numpy(), axis=-1)[:, ::-1][:, :2]
        # read x, write 2 values (fp32) and 2 indices (int64) per row
        return fn, (lambda: close(fn().values, expected)), work(
            rows * width, rows * width * FP32 + rows * 2 * (FP32 + 8), "reduction",
            {"elements": rows * width, "function": "topk", "outputs": rows * 2})
    if function == "histc":
        n, bins = dims[1:]
        ids = torch.randint(0, bins, (n,), generator=generator).float()
        fn = lambda: torch.histc(ids, bins=bins, min=0, max=bins - 1)  # noqa: E731
        expected = np.bincount(ids.numpy().astype(np.int64), minlength=bins).astype(np.float64)
        # read the ids (as floats), write one count per bin
        return fn, (lambda: close(fn(), expected)), work(n, (n + bins) * FP32, "reduction",
                                                         {"elements": n, "function": "histc", "outputs": bins})
    n, dtype = dims[1:]
    if function == "cumsum":
        if dtype == "fp32-int32":   # counts per expert, as histc gives them, to int32 offsets
            values = torch.randint(0, 8, (n,), generator=generator).float()
            fn = lambda: torch.cumsum(values, dim=0, dtype=torch.int32)  # noqa: E731
            moved, dtype = n * (FP32 + 4), "fp32"
        else:                        # a mask to int64 positions
            values = torch.randint(0, 2, (n,), generator=generator).bool()
            fn = lambda: values.cumsum(-1)  # noqa: E731
            moved, dtype = n * (1 + 8), "int64"
        expected = np.cumsum(values.double().numpy())
        shape = {"elements": n, "function": "cumsum", "outputs": n}
        op = "reduction"
    else:
        values = torch.randint(0, 64, (n,), generator=generator)
        fn = lambda: values.sort()  # noqa: E731
        expected = np.sort(values.double().numpy())
        moved = n * 8 + n * (8 + 8)       # read the ids, write them sorted and their indices
        shape = {"elements": n, "function": "sort"}
        op = "other"
    check = (lambda: close(fn()[0] if function == "sort" else fn(), expected, 1e-3))
    if dtype == "fp32":         # a float input's elements count as FLOPs (aten_costs)
        return fn, check, work(n, moved, op, shape)
    # an integer op does no FLOPs the IR counts (aten_costs.NO_FLOP_DTYPES)
    counted = work(0, moved, op, shape)
    return fn, check, Work(bytes=dict(counted.bytes), launches=1, op=op, shape={**counted.shape, "dtype": dtype})


#: Quick runs keep every case (``benchmarks/heldout_workloads.py`` calibrates on a quick run),
#: on a short budget.
@pytest.mark.charz(noise=0.025, max_time=0.3, quick={"max_time": 0.06})
def test_opclass_cpu(charz: Any, device: Any, size_plan: Any, opclass_case: tuple[str, tuple[Any, ...]]) -> None:
    if device.backend != "cpu":
        pytest.skip(f"op-class microbenchmarks of the host CPU; the bound device is {device.backend}")
    torch = pytest.importorskip("torch", reason="the op-class microbenchmarks run PyTorch ops")
    set_torch_threads(torch)
    op_class, dims = opclass_case
    with torch.inference_mode():
        fn, check, work = build(torch, op_class, dims, charz.rng, size_plan)
        fn()
        check()
        charz.measure(fn, work=work)


#: NumPy ops into preallocated outputs (``out=``, ``copyto``), as NumPy code that reuses its
#: buffers runs them: NumPy's kernels, dispatch and allocator are not PyTorch's, so its op classes
#: are calibrated on these apart (``pytest_charz.calibration.classes.NUMPY_SUFFIX``).
NUMPY_ELEMENTS = ELEMENTS[::2]
NUMPY_TRANSPOSE = TRANSPOSE[::2]


def _numpy_cases() -> list[Any]:
    cases = [pytest.param(("elementwise", n), id=f"numpy-add-{n}") for n in NUMPY_ELEMENTS]
    cases += [pytest.param(("copy", n), id=f"numpy-copy-{n}") for n in NUMPY_ELEMENTS]
    cases += [pytest.param(("transpose", n), id=f"numpy-transpose-{n}") for n in NUMPY_TRANSPOSE]
    return cases


def build_numpy(op_class: str, n: int, rng: np.random.Generator,
                size_plan: Any) -> tuple[Callable[[], Any], Callable[[], None], Work]:
    """(timed call, check of its result, Work) of one NumPy case; every output preallocated."""
    def work(flops: float, moved: float, op: str, shape: dict[str, Any]) -> Work:
        return Work(flops={"fp32": flops} if flops else None, bytes={level_of(size_plan, moved): moved}, launches=1,
                    op=op, shape={**shape, "dtype": "fp32", "framework": "numpy", "out": 1})

    if op_class == "transpose":
        a = rng.standard_normal((n, n)).astype(np.float32)
        out = np.empty_like(a)
        # out = a^T: read a, write out (one side strided)
        return (lambda: np.copyto(out, a.T)), (lambda: np.testing.assert_array_equal(out, a.T)), work(
            0, 2 * n * n * FP32, "transpose", {"rows": n, "width": n})
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(a)
    if op_class == "elementwise":
        # out = a + b: read a and b, write out; one FLOP per element
        return (lambda: np.add(a, b, out=out)), (lambda: np.testing.assert_array_equal(out, a + b)), work(
            n, 3 * n * FP32, "elementwise", {"elements": n})
    # out = a: read a, write out
    return (lambda: np.copyto(out, a)), (lambda: np.testing.assert_array_equal(out, a)), work(
        0, 2 * n * FP32, "copy", {"elements": n})


@pytest.mark.parametrize("numpy_case", _numpy_cases())
@pytest.mark.charz(noise=0.025, max_time=0.3, quick={"max_time": 0.06})
def test_opclass_numpy_cpu(charz: Any, device: Any, size_plan: Any, numpy_case: tuple[str, int]) -> None:
    if device.backend != "cpu":
        pytest.skip(f"op-class microbenchmarks of the host CPU; the bound device is {device.backend}")
    op_class, n = numpy_case
    fn, check, work = build_numpy(op_class, n, charz.rng, size_plan)
    fn()
    check()
    charz.measure(fn, work=work)
