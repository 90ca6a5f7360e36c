"""Class keys: what key a work is calibrated under (:mod:`.classes` fits one curve per key).

A suite case's variant keys (``gemm:fp32@kernel=..,threads=..``) are carried by no user's Work,
so a model with op-class figures is calibrated per **class key**: ``<op class>:<dtype>``
(:func:`~pytest_charz.models.opclass_costs.op_class_of`,
:func:`~pytest_charz.models.opclass_costs.work_dtype`), with keys of their own for what costs its
own within a class (:func:`class_key`), and the fallbacks a work is fitted and looked up under
(:func:`fallback_keys`, :func:`lookup_keys`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..models.opclass import gemm_dims
from ..models.opclass_costs import GEMM_CLASSES, allocator_of, framework_of, op_class_of, shape_dim, work_dtype

if TYPE_CHECKING:
    from ..work import Work

#: A GEMM whose m or n is at most this is ``gemm.skinny`` (a matrix-vector-like product: a decode
#: step's projections, a small batch's linear layers).
SKINNY_DIM = 16


#: The suffix of a NumPy work's class keys (``copy@numpy:fp32``): NumPy's elementwise, copy and
#: reduction kernels and its allocator are not PyTorch's (a NumPy ``copyto`` into an existing
#: array against a PyTorch ``clone`` that allocates), so those classes are calibrated on NumPy
#: cases apart. A GEMM runs the BLAS either way, and a dispatch case is its framework's own.
NUMPY_SUFFIX = "@numpy"
_SHARED_CLASSES = GEMM_CLASSES | {"dispatch", "wakeup", "allocation", "latency", "transfer", "collective"}


def _framework_suffix(work: "Work") -> str:
    if op_class_of(work) in _SHARED_CLASSES:
        return ""
    return NUMPY_SUFFIX if allocator_of(framework_of(work)) == "numpy" else ""


#: Ops fitted under keys of their own (``<op class>.<function>``, ``shape["function"]``) where the
#: op-class suite has cases of them, because their fixed cost is not their class's:
#: * ``reduction.mean``: a ``mean(-1, keepdim=True)`` of 128 floats took 9.0 us where a ``sum``
#:   of them took 4.0 and an ``add`` 2.9 (PyTorch 2.13 on one thread of a Xeon guest); a norm's
#:   ``pow(2).mean(-1, keepdim=True)`` is one in every layer of a captured Llama;
#: * ``reduction.sum``: a ``sum`` over a dimension (``sum(-1, keepdim=True)``), a reduction with
#:   kept outputs but no division: 1.12 us for one 128-float row where the ``mean`` took 2.52 and
#:   a ``sum`` of the row to one number 0.99 (one Xeon core); a captured Mixtral router's sum of
#:   its two routing weights replayed at 1.16 us, priced 2.46 on the line the means set;
#: * ``copy.cat``: a ``cat`` of a decode step's few hundred bytes took 6-15 us replayed on the Zen
#:   3 guest, where the copy class (a ``clone``) keeps 3 us of fixed cost;
#: * ``attention.math``: ``scaled_dot_product_attention`` of 3-D query, key and value, which
#:   PyTorch's fused kernels do not take (they need 4-D), so it runs the math backend (the scale,
#:   a bmm, a softmax, a bmm): 244 us for 4 heads of 128 x 64 on one Xeon core, 136 us fused;
#: * ``reduction.topk``, ``reduction.cumsum``, ``reduction.histc`` and ``other.sort``: a router's
#:   top-k, an expert count's scan and histogram, the sort of the token ids, each a kernel of its
#:   own (on one Xeon core: topk 2 of 8 x 8 floats 1.90 us, cumsum of 8 int32 1.48, sort of 8
#:   floats 2.54, where a sum of 8 floats took 0.99); pooled with the sums, a captured Mixtral's
#:   histc of 2 floats read +93..+102% replayed, and its sort, an "other" op priced at the bare
#:   dispatch, +266..+290%.
FUNCTION_CLASSES = {"reduction": frozenset({"mean", "sum", "topk", "cumsum", "histc"}), "copy": frozenset({"cat"}),
                    "attention": frozenset({"math"}), "other": frozenset({"sort"})}
#: Keyed classes with a key of their own per mark of a non-contiguous operand
#: (:mod:`pytest_charz.workloads.operands`), ``<class>.<mark>``:
#:
#: * ``strided``: an elementwise op walks a view beside another operand by strides; a cat is not
#:   taken by PyTorch's serial memcpy kernel (it takes contiguous inputs only: ``cat_out_cpu`` in
#:   ATen's TensorShape.cpp), so it copies each input by strides: on a Xeon core a rotary
#:   embedding's cat of two 4 x 32 x 16 halves took 2.1 us, a KV cache append of about as many
#:   contiguous floats 1.4; pooled on one curve, a captured Llama's rotary cats read +32% (a decode
#:   step's) to +74% (a prefill's) and its KV appends -19%.
#: * ``view``: an elementwise op whose one tensor operand is a non-contiguous view (a rotary half's
#:   neg): its output follows the view's rows, so it is neither a contiguous op (a large one pays
#:   for its rows: 17.5 against 11.6 us for 8 x 256 x 64 floats on a Xeon core) nor a strided one
#:   of two layouts (a small one costs about a contiguous op: 0.85 against 0.73 us, the strided
#:   add 1.90).
#: * ``bias``: a product that adds a bias row (``shape["bias"]``: ``addmm(b, x, W)``,
#:   ``linear(x, W, b)``). PyTorch's CPU ``addmm`` first copies the bias, broadcast, into the
#:   output and then runs the GEMM accumulating onto it: timed alone on a Xeon guest (one thread,
#:   medians of 15) the bias cost a linear layer +0.8 us at 1 x 128 x 128 (+21%), +0.9 at
#:   17 x 128 x 128, +1.5 at 32 x 128 x 128 (+12.6%), +2.5 at 32 x 512 x 128, +24 at 128 x 512 x 512
#:   (+5.2%); a captured BERT's and ViT's projections read +9..+22% on the unbiased cases' curve.
OPERAND_CLASSES = {"strided": frozenset({"elementwise", "copy.cat"}), "view": frozenset({"elementwise"}),
                   "bias": frozenset({"gemm", "gemm.linear", "gemm.skinny", "gemm.skinny.linear"})}


def class_key(work: "Work") -> str:
    """``<op class>:<dtype>`` of a work (``gemm:fp32``, ``copy:*``); a transcendental op that
    names its function (``shape["function"]``: ``exp``, ``tanh``...) is ``transcendental.<function>``,
    since each function's math costs its own (``tanh`` ran 2.7x slower per element than ``exp``
    on the development VMs); an op of :data:`FUNCTION_CLASSES` (``reduction.mean``,
    ``reduction.sum``, ``reduction.topk``, ``copy.cat``, ``other.sort``...) is one too; a GEMM
    with m or n of at most
    ``SKINNY_DIM`` is ``gemm.skinny``: the
    library runs it on other kernels than a square product, and its efficiency does not follow
    the square GEMMs' curve over FLOPs (on the Zen 4 guest a 16x1024x2048 product reached 64
    GFLOP/s and an 8x1024x4096 one, of the same FLOPs, 36; a 384-square one, 100). A linear
    layer's product (``shape["linear"]``: x @ W^T, W stored as ``nn.Linear`` keeps it) is
    ``gemm.linear`` / ``gemm.skinny.linear``: the transposed operand takes other kernels at small
    sizes (32x128x512: 37 us as ``a @ b``, 72 us as ``F.linear`` on one Xeon core). An elementwise
    op with a non-contiguous view as an operand (``shape["strided"]``) is ``elementwise.strided``:
    the kernel walks the view by strides (a rotary add of 4 x 32 x 32 floats with a transposed
    query took 1.97 us on a Xeon core, 1.02 contiguous); one whose one tensor operand is such a
    view (``shape["view"]``) is ``elementwise.view``. A NumPy work's
    op class carries ``@numpy`` (``copy@numpy:fp32``). A factory or fill (``shape["fill"]``) is
    ``elementwise.fill`` (:data:`OWN_KERNEL_CLASSES`); a cat with a non-contiguous input is
    ``copy.cat.strided`` (:data:`OPERAND_CLASSES`); a convolution whose stride is its kernel
    (``shape["patch"]``: a ViT's patch embedding) is ``conv.patch``."""
    return f"{_keyed_class(work)}{_framework_suffix(work)}:{work_dtype(work)}"


def _keyed_class(work: "Work", variant: bool = True, marks: bool = True) -> str:
    """The op class part of :func:`class_key` (``variant=False``: a linear layer's as its shape's,
    an op on a non-contiguous view as one on contiguous operands; ``marks=False``: without the
    operand marks of :data:`OPERAND_CLASSES` only)."""
    op_class = op_class_of(work)
    function = work.shape.get("function")
    if op_class == "transcendental" and isinstance(function, str) and function:
        op_class = f"{op_class}.{function}"
    elif function in FUNCTION_CLASSES.get(op_class, ()):
        op_class = f"{op_class}.{function}"
    elif op_class == "elementwise" and work.shape.get("fill"):
        op_class = f"{op_class}.fill"
    elif op_class == "conv" and work.shape.get("patch"):
        op_class = f"{op_class}.patch"
    elif op_class == "attention" and shape_dim(work.shape, "s_q", "seq_q") == 1:
        op_class = f"{op_class}.decode"
    elif op_class == "gemm":
        dims = gemm_dims(work, op_class)
        if dims is not None and min(dims[0], dims[1]) <= SKINNY_DIM:
            op_class = f"{op_class}.skinny"
        if variant and work.shape.get("linear"):
            op_class = f"{op_class}.linear"
    if variant and marks:
        mark = next((mark for mark, classes in OPERAND_CLASSES.items()
                     if op_class in classes and work.shape.get(mark)), None)
        if mark:
            op_class = f"{op_class}.{mark}"
    return op_class


def fallback_keys(work: "Work") -> tuple[str, ...]:
    """The keys a work is fitted under, most specific first: its class key, its op class and
    dtype (every function pooled), its op class (every dtype pooled); a NumPy work's keys carry
    ``@numpy`` (:data:`NUMPY_SUFFIX`), so NumPy and PyTorch cases are fitted apart."""
    suffix, dtype = _framework_suffix(work), work_dtype(work)
    op_class = op_class_of(work) + suffix
    # an op with an operand mark falls back to the same op without it first (a biased linear
    # layer to the linear layers), a linear layer's product to the product of its shape
    # (gemm.skinny), a strided cat to the contiguous cats (a calibration from before the split
    # has only those)
    unmarked = f"{_keyed_class(work, marks=False)}{suffix}:{dtype}"
    shape_key = f"{_keyed_class(work, variant=False)}{suffix}:{dtype}"
    return tuple(dict.fromkeys((class_key(work), unmarked, shape_key, f"{op_class}:{dtype}", op_class)))


#: Keyed classes (:func:`class_key` without framework and dtype) whose cases are fitted under
#: their own key only, never pooled into their op class's keys, because they run other kernels
#: than the class's other cases:
#:
#: * ``attention.math``: a scale, a bmm, a softmax and a bmm, not a fused attention. Pooled, its
#:   five cases (4 heads of 128 x 32: 198 us against 91 fused on a Xeon core) raised the fused
#:   curve: the held-out fused 12 x 512 x 64 attention read 30% under its prediction, 4% apart
#:   (the same measured rounds scored both ways);
#: * ``elementwise.strided``: an operand walked by strides. Pooled, the four strided adds (1.8 us
#:   for 4096 floats against 1.1 contiguous) raised the contiguous curve that a captured op without
#:   a dtype of its own is priced by: the workload suite's contiguous elementwise ops read +48%
#:   instead of +23%.
#:
#: * ``elementwise.fill``: a factory or fill (``torch.arange``, ``torch.zeros``) writes its output
#:   and reads nothing, and its call parses a size and options, not tensors: on a Xeon core a
#:   ``torch.arange(32)`` took 1.07 us where an add of two 32-float tensors took 0.70; a decode
#:   step's position ``arange`` replayed at 1.3-1.4 us against 0.71 priced as an add's dispatch.
#:
#: * ``conv.patch``: a convolution whose stride is its kernel, over the image's 3 channels (a
#:   ViT's patch embedding). PyTorch's CPU convolution pays a fixed cost of about 35 us there
#:   (reorders of a 3-channel input), then runs near its GEMM's rate: on a Xeon core a 3 x 64 x 64
#:   image cut into 16 x 16 patches of 128 channels took 80 us, its GEMM alone 15, and 3 x 3
#:   convolutions of 16-32 channels ran at 130-150 GFLOP/s. Priced on the 3 x 3 curve, a
#:   captured ViT's patch embedding read +208%.
#:
#: * ``attention.decode``: one query row over its keys (a decode step's attention), whose fixed
#:   cost is not a prompt's: on a Xeon core 4 heads of one query over 64 keys of 32 took 5.7 us,
#:   of 32 queries over 32 keys 12.1, where a ViT's 17 x 17 took 9.6; pooled, the curve over
#:   FLOPs ran from the decode case up, and that ViT attention read +79..+104% replayed.
#:
#: * ``copy.cat.strided``: a cat with a non-contiguous input (:data:`OPERAND_CLASSES`), copied
#:   by strides per input; pooled, its cases would raise the contiguous cats' curve.
#:
#: * ``elementwise.view``: a unary op on a non-contiguous view, walked by its rows; pooled, its
#:   large cases would raise the contiguous curve.
#:
#: * ``gemm.bias`` and the other biased products (:data:`OPERAND_CLASSES`): the bias's copy
#:   into the output is a pass of its own; pooled, the biased cases would raise the unbiased
#:   products' curves.
#:
#: * ``reduction.topk``, ``reduction.cumsum``, ``reduction.histc``: a router's top-k, an expert
#:   count's scan and histogram (:data:`FUNCTION_CLASSES`), a selection, a scan and a scatter,
#:   not a reduction's one pass. Pooled, their small cases (1.5-4 us for a few floats) set the
#:   curve of ``reduction:<dtype>`` beside the sums and means: it priced the suite's own plain sums
#:   1.4-4.8x slow (their leave-one-out residuals -0.32 to -1.57) and a held-out mean over the rows
#:   of 2048 x 768 floats, written without a function, -28..-32% (on six sets of three rounds
#:   on a Xeon guest; -2..+5% fitted apart).
#:
#: Such an op of a calibration without these cases is still looked up under its class's keys
#: (:func:`lookup_keys`), and none of their cases sets a memory level's bandwidth.
OWN_KERNEL_CLASSES = frozenset({"attention.math", "attention.decode", "elementwise.strided", "elementwise.view",
                                "elementwise.fill", "conv.patch", "copy.cat.strided", "reduction.topk",
                                "reduction.cumsum", "reduction.histc",
                                *(f"{op_class}.bias" for op_class in OPERAND_CLASSES["bias"])})


def runs_own_kernel(work: "Work") -> bool:
    """Whether ``work``'s keyed class is one of :data:`OWN_KERNEL_CLASSES`."""
    return _keyed_class(work) in OWN_KERNEL_CLASSES


def fitted_keys(work: "Work") -> tuple[str, ...]:
    """The keys a case is fitted under: :func:`fallback_keys`, but only its own for a work that
    :func:`runs_own_kernel`."""
    keys = fallback_keys(work)
    return keys[:1] if runs_own_kernel(work) else keys


def lookup_keys(work: "Work") -> tuple[str, ...]:
    """The keys a work's calibration is looked up by: its own framework's (:func:`fallback_keys`),
    then the other framework's (a calibration with cases of one framework only prices both, as
    one without the split did)."""
    own = fallback_keys(work)
    if op_class_of(work) in _SHARED_CLASSES:
        return own
    suffix = _framework_suffix(work)
    other = tuple(key.replace(NUMPY_SUFFIX, "") if suffix else key.replace(":", NUMPY_SUFFIX + ":", 1)
                  if ":" in key else key + NUMPY_SUFFIX for key in own)
    return tuple(dict.fromkeys((*own, *other)))


def size_amount(op_class: str) -> str:
    """The Work amount a class's efficiency is a function of."""
    if op_class in GEMM_CLASSES:
        return "flops"
    if op_class == "dispatch":
        return "launches"
    if op_class == "latency":
        return "accesses"
    if op_class == "transfer":
        return "transfers"
    return "bytes"


def keyed_class_of(key: str) -> str:
    """The keyed class a class key names, without framework and dtype (``gemm.skinny`` of
    ``gemm.skinny@numpy:fp32``)."""
    return key.split(":", 1)[0].split("@", 1)[0]


def key_size_amount(key: str) -> str:
    """The Work amount a class key's curve is over: its op class's (:func:`size_amount`), but bytes
    for a skinny GEMM's keys (``gemm.skinny``, ``gemm.skinny.linear``). With m or n of at most
    :data:`SKINNY_DIM` a product does at most ``2 * SKINNY_DIM`` FLOPs per element of its larger
    operand, which it streams (and, for ``x @ W^T``, packs) once: its time follows its bytes, not
    its FLOPs. Over FLOPs, the held-out 8 x 4096 x 1024 product sat at the FLOPs of the suite's
    16 x 1024 x 2048 one and was priced at its efficiency, though it streams twice the weight:
    it read -18..-25% on six sets of three rounds on a Xeon guest, -10..-17% over bytes (priced
    past the largest case, its interval widened); the replayed decode steps' skinny products
    moved with it (GPT-2's ``addmm`` 21.5-26.9% -> 19.1-21.5% median, three of those sets)."""
    keyed = keyed_class_of(key)
    if keyed.split(".")[:2] == ["gemm", "skinny"]:
        return "bytes"
    return size_amount(keyed.split(".", 1)[0])
