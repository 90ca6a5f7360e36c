"""Capture a PyTorch module as a :class:`~.graph.Graph` of aten ops.

:func:`capture` runs the module once under a ``TorchDispatchMode`` and records every aten op it
issues, each costed from shapes alone by :mod:`.aten_costs` (so a 70B model captures on the
``meta`` device, without its memory). What becomes an op:

* every kernel-level aten op, one launch each, named ``<module path>.<aten op>#n`` after the
  innermost module running it (the forward hooks' module path; in a backward pass the module
  whose backward is running, from autograd grad hooks), ``source`` the aten op;
* not views, metadata or allocations (``view``, ``transpose``, ``expand``, ``empty``...): they
  are folded away, and an op reading a view depends on whoever wrote the viewed storage;
* ``torch.nn.functional.scaled_dot_product_attention`` as ONE ``attention`` op (and one for its
  backward), whatever kernel or decomposition the device would pick: on ``meta`` and CPU torch
  would otherwise decompose it differently. Its FLOPs count the full score matrix; causal
  attention has ``attrs["causal"] = True`` and the triangle's count in ``attrs["causal_flops"]``.

Each forward op's Work counts ``shape["module_calls"]``, the ``nn.Module`` calls the host entered
since the op before it (the root's included), and an op the root module's own ``forward`` issues
is marked ``shape["root_op"]``. :func:`capture` also counts ``shape["python_calls"]``, the Python
function calls the model's code made since the op before (the last op's count takes those after
it too; the recorder's own left out: :class:`.capture_paths.PythonCalls`). A bare aten op of the
root's ``forward`` (no module call before it: a chain of ops in one ``forward``) pays the
framework's bare dispatch; every other op pays eager module code's per-op cost
(``dispatch:torch-module``, :func:`pytest_charz.models.opclass_costs.host_framework`) and, for
each module call it begins and each Python call before it, ``dispatch:torch-module-call`` and
``dispatch:torch-module-python`` where the profile measured them.

Bytes are ``{"dram": inputs + outputs}``: each distinct input view counted once, gathers counting
only the rows they read. ``deps`` name the ops that last wrote the storages an op reads.

Data-dependent ops (``nonzero``, ``.item()``) cannot run on ``meta``: the capture stops with a
:class:`~pytest_charz.errors.UsageError` naming the aten op and the module path. On a real
device they run, and the graph's notes say that it follows the input data.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, ContextManager, Iterator, Mapping, Sequence

from ..errors import UsageError
from ..work import DTYPES, Work
from .aten_costs import DATA_DEPENDENT, NO_FLOP_DTYPES, TORCH_DTYPES, AtenCost, aten_cost, attention_cost, base_name
from .capture_paths import ModulePaths, tensors_in as _tensors
from .graph import Graph, Op, TensorSpec, check_dtype
from .operands import operand_marks

__all__ = ["capture", "Recorder", "spec_of", "work_dtype"]


def work_dtype(torch_dtype: Any) -> str:
    """The IR's name of a torch dtype (``torch.bfloat16`` -> ``bf16``; every float8 -> ``fp8``)."""
    name = str(torch_dtype).replace("torch.", "")
    if name.startswith("float8"):
        return "fp8"
    if name not in TORCH_DTYPES:
        raise UsageError(f"capture cannot record tensors of dtype {name}; known: {', '.join(TORCH_DTYPES)}, float8*")
    return TORCH_DTYPES[name]


def spec_of(tensor: Any) -> TensorSpec:
    return TensorSpec(tuple(tensor.shape), work_dtype(tensor.dtype))


def _storage_key(tensor: Any) -> int | None:
    try:
        return int(tensor.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError):  # sparse or other storage-less tensors
        return None


class Recorder:
    """Records aten ops into :class:`Op` values while active (see the module docstring)."""

    def __init__(self, paths: ModulePaths, host_scalars_fold: bool = False) -> None:
        self.paths = paths
        self.ops: list[Op] = []
        self.data_dependent: dict[str, int] = {}
        self._writers: dict[int, tuple[Any, tuple[str, ...]]] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self._quiet = 0
        # Host-side 0-d CPU arithmetic (an optimizer's step counter) is no device kernel.
        self.host_scalars_fold = host_scalars_fold
        self.extra_attrs: dict[str, Any] = {}
        #: Facts for grouped gemms (MoE experts), set by the phase capture.
        self.grouped_attrs: dict[str, Any] = {}

    # -- naming and data flow ---------------------------------------------------------------
    def _name(self, op_name: str) -> str:
        path = self.paths.current()
        n = self._counts.get((path, op_name), 0)
        self._counts[(path, op_name)] = n + 1
        return f"{path}.{op_name}#{n}" if path else f"{op_name}#{n}"

    def _deps(self, inputs: Sequence[Any]) -> tuple[str, ...]:
        deps: dict[str, None] = {}
        for tensor in inputs:
            entry = self._writers.get(_storage_key(tensor) or -1)
            if entry is not None and not entry[0].expired():
                deps.update(dict.fromkeys(entry[1]))
        return tuple(deps)

    def _wrote(self, name: str, outputs: Sequence[Any]) -> None:
        from torch.multiprocessing.reductions import StorageWeakRef

        for tensor in outputs:
            key = _storage_key(tensor)
            if key is None:
                continue
            storage = tensor.untyped_storage()
            entry = self._writers.get(key)
            whole = tensor.numel() * tensor.element_size() >= storage.nbytes()
            if entry is None or entry[0].expired() or whole:
                self._writers[key] = (StorageWeakRef(storage), (name,))
            elif name not in entry[1]:  # a partial write (a slice of a cache): earlier writers still count
                self._writers[key] = (entry[0], entry[1] + (name,))

    # -- recording ------------------------------------------------------------------------------
    def record(self, op_name: str, source: str, cost: AtenCost, inputs: Sequence[Any], outputs: Sequence[Any],
               gather: bool = False, written: Sequence[Any] | None = None, inplace: bool = False,
               marks: Mapping[str, int] | None = None) -> Op:
        """Append one op reading ``inputs`` and writing ``outputs`` (tensors); ``inplace``: it
        writes into tensors it was given (an in-place op, ``out=``), so it allocates none, which
        its Work says (``shape["inplace"]``, read by the op-class model's fresh-page term);
        ``marks``: what its operands make it cost beyond its bytes, into its Work's shape
        (:func:`.operands.operand_marks`)."""
        import torch

        seen: dict[tuple[Any, ...], Any] = {}
        for tensor in inputs:
            key = (_storage_key(tensor), tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()))
            seen.setdefault(key, tensor)
        distinct = list(seen.values())
        out_bytes = sum(t.numel() * t.element_size() for t in outputs)
        if gather:  # a gather reads the rows it writes plus its indices, not the whole table
            index_bytes = sum(t.numel() * t.element_size() for t in distinct if not t.is_floating_point())
            moved = index_bytes + 2 * out_bytes
        else:
            moved = sum(t.numel() * t.element_size() for t in distinct) + out_bytes
        floating = [t for t in distinct if t.is_floating_point()] or distinct or list(outputs)
        dtype = work_dtype(floating[0].dtype) if floating else "fp32"
        flops = {dtype: cost.flops} if cost.flops and dtype in DTYPES and dtype not in NO_FLOP_DTYPES else {}
        name = self._name(op_name)
        attrs = {**cost.attrs, **self.extra_attrs}
        if cost.attrs.get("grouped") and self.grouped_attrs:
            attrs.update(self.grouped_attrs)
        if torch._C._current_graph_task_id() != -1:
            attrs["backward"] = True
        shape = dict(cost.shape)
        if not flops and dtype in DTYPES and "dtype" not in shape:
            # a copy, a gather, a fill: bytes only, so the dtype its class is calibrated per
            # (opclass_costs.work_dtype) is stated, as the suite's cases state it
            shape["dtype"] = dtype
        if "backward" not in attrs:
            # nn.Module calls the host entered since the previous op: none for a bare aten op
            # of a forward (its bare dispatch), each one's Python for the first op of a call
            shape["module_calls"] = self.paths.take_calls()
            python_calls = self.paths.take_python_calls()
            if python_calls is not None:
                shape["python_calls"] = python_calls
            if self.paths.in_root():
                shape["root_op"] = 1         # issued by the root's own forward
        if inplace:
            shape["inplace"] = 1
        shape.update(marks or {})
        op = Op(name=name, op_class=cost.op_class,
                work=Work(flops, {"dram": moved}, launches=1, op=cost.op_class, shape=shape),
                inputs=tuple(spec_of(t) for t in distinct), outputs=tuple(spec_of(t) for t in outputs),
                deps=self._deps(distinct), source=source, attrs=attrs)
        self.ops.append(op)
        self._wrote(name, outputs if written is None else written)
        return op

    def python_calls_after(self) -> None:
        """The model code's Python calls after its last op (its outputs wrapped, its cache
        handed back) added to the last forward op's: the forward's whole Python is counted, and
        nothing after it (a backward's or an optimizer's ops carry no count)."""
        python_calls = self.paths.take_python_calls()
        self.paths.python = None
        forward = [i for i, op in enumerate(self.ops) if "python_calls" in op.work.shape]
        if not python_calls or not forward:
            return
        op = self.ops[forward[-1]]
        shape = {**op.work.shape, "python_calls": op.work.shape["python_calls"] + python_calls}
        self.ops[forward[-1]] = replace(op, work=replace(op.work, shape=shape))

    def stopped(self, what: str, exc: BaseException | None = None) -> UsageError:
        path = self.paths.current() or "<root>"
        because = f": {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}" if exc else ""
        return UsageError(f"capture stopped at aten op {what} in module {path!r}{because}. Capture needs ops whose "
                          "output shapes follow from input shapes (run it on a real device, or replace the "
                          "data-dependent code)")

    def dispatch(self, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        import torch

        name = base_name(func)
        tensor_args = _tensors((args, kwargs))
        if name in DATA_DEPENDENT and any(t.device.type == "meta" for t in tensor_args):
            raise self.stopped(str(func))
        try:
            out = _run_on_meta(func, args, kwargs) if name == "_grouped_mm" else func(*args, **kwargs)
        except UsageError:
            raise
        except Exception as exc:  # an op without a meta kernel, a bad shape...
            raise self.stopped(str(func), exc) from exc
        if self._quiet:
            return out
        outputs = _tensors(out)
        if self.host_scalars_fold and all(t.dim() == 0 and t.device.type == "cpu" for t in tensor_args + outputs):
            return out
        if name in DATA_DEPENDENT or (name == "index" and any(t.dtype == torch.bool for t in tensor_args)):
            # a boolean-mask index runs nonzero inside the kernel, out of the dispatcher's sight
            self.data_dependent[name] = self.data_dependent.get(name, 0) + 1
        cost = aten_cost(func, args, kwargs, tensor_args, outputs)
        if cost is None:
            return out
        mutated = [a for a, spec in zip(args, func._schema.arguments) if spec.alias_info is not None
                   and spec.alias_info.is_write and hasattr(a, "shape")]
        # copy_ overwrites its destination without reading it
        reads = [t for t in tensor_args if not (name == "copy_" and t is args[0])]
        self.record(name, str(func), cost, reads, outputs or mutated, gather=cost.attrs.get("gather", False),
                    written=(outputs + mutated) or None, inplace=bool(mutated),
                    marks=operand_marks(cost, func, args, tensor_args, outputs))
        return out

    def quiet(self) -> "_Quiet":
        return _Quiet(self)

    def attention(self, func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """Run ``F.scaled_dot_product_attention`` recording one ``attention`` op (and one for its
        backward, through an autograd Function that recomputes it quietly)."""
        import torch

        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
        bound = dict(zip(names, args), **kwargs)
        q, k, v = bound.pop("query"), bound.pop("key"), bound.pop("value")
        if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
            return _attention_function().apply(self, func, bound, q, k, v)
        return self.attention_forward(func, bound, q, k, v)

    def attention_forward(self, func: Callable[..., Any], bound: Mapping[str, Any], q: Any, k: Any, v: Any) -> Any:
        with self.quiet():
            out = func(q, k, v, **bound)
            if out.dim() == 4:
                # The fused kernels (flash, CPU flash) write (b, s, h, d) memory; the math
                # decomposition on meta writes (b, h, s, d). One layout for all devices keeps the
                # copies after attention the same on meta and real devices.
                out = out.transpose(1, 2).contiguous().transpose(1, 2)
        mask = bound.get("attn_mask")
        cost = attention_cost(tuple(q.shape), tuple(k.shape), tuple(v.shape), bool(bound.get("is_causal", False)),
                              masked=mask is not None)
        inputs = [q, k, v] + ([mask] if mask is not None else [])
        self.record("scaled_dot_product_attention", "aten.scaled_dot_product_attention", cost, inputs, [out])
        return out

    def attention_backward(self, func: Callable[..., Any], bound: Mapping[str, Any], q: Any, k: Any, v: Any,
                           grad_out: Any) -> tuple[Any, Any, Any]:
        import torch

        with self.quiet(), torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            grads = torch.autograd.grad(func(*leaves, **bound), leaves, grad_out)
            # Each gradient laid out like its input, as the fused backward kernels write them,
            # so the ops after it are the same on every device.
            grads = tuple(torch.empty_strided(x.shape, x.stride(), dtype=g.dtype, device=g.device).copy_(g)
                          for x, g in zip((q, k, v), grads))
        cost = attention_cost(tuple(q.shape), tuple(k.shape), tuple(v.shape), bool(bound.get("is_causal", False)),
                              backward=True, masked=bound.get("attn_mask") is not None)
        self.record("scaled_dot_product_attention_backward", "aten.scaled_dot_product_attention_backward", cost,
                    [grad_out, q, k, v], list(grads))
        return grads[0], grads[1], grads[2]


class _Quiet:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def __enter__(self) -> None:
        self.recorder._quiet += 1

    def __exit__(self, *exc: Any) -> None:
        self.recorder._quiet -= 1


def _run_on_meta(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``_grouped_mm``'s meta kernel accepts bf16 only; its output shape is (rows of a, n of b)."""
    import torch

    a, b = args[0], args[1]
    if a.device.type != "meta":
        return func(*args, **kwargs)
    rows = a.shape[:-1] if b.dim() == 3 and a.dim() == 2 else (a.shape[0], a.shape[-2]) if a.dim() == 3 else a.shape[:-1]
    out_dtype = kwargs.get("out_dtype") or a.dtype
    if a.dim() == 2 and b.dim() == 2:  # (m, k) x (k, n) per group -> (groups, m, n)
        offs = kwargs.get("offs", args[2] if len(args) > 2 else None)
        groups = offs.shape[0] if offs is not None else 1
        return torch.empty((groups, a.shape[0], b.shape[-1]), dtype=out_dtype, device="meta")
    return torch.empty((*rows, b.shape[-1]), dtype=out_dtype, device="meta")


_ATTENTION_FUNCTION: Any = None


def _attention_function() -> Any:
    """An autograd Function whose forward and backward are each one recorded attention op."""
    global _ATTENTION_FUNCTION
    if _ATTENTION_FUNCTION is None:
        import torch

        class RecordedAttention(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, recorder: Recorder, func: Any, bound: Any, q: Any, k: Any, v: Any) -> Any:
                ctx.recorder, ctx.func, ctx.bound = recorder, func, bound
                ctx.save_for_backward(q, k, v)
                return recorder.attention_forward(func, bound, q, k, v)

            @staticmethod
            def backward(ctx: Any, grad_out: Any) -> Any:
                q, k, v = ctx.saved_tensors
                return (None, None, None, *ctx.recorder.attention_backward(ctx.func, ctx.bound, q, k, v, grad_out))

        _ATTENTION_FUNCTION = RecordedAttention
    return _ATTENTION_FUNCTION


def recording(root: Any, host_scalars_fold: bool = False, root_name: str = "") -> "ContextManager[Recorder]":
    """A context manager recording every aten op run inside it, ops named after ``root``'s modules."""
    import contextlib

    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    sdpa = torch.nn.functional.scaled_dot_product_attention

    @contextlib.contextmanager
    def manager() -> Iterator[Recorder]:
        paths = ModulePaths(root, root_name)
        recorder = Recorder(paths, host_scalars_fold)

        class Functions(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                if func is sdpa and not recorder._quiet:
                    return recorder.attention(func, args, kwargs or {})
                if paths.python is None:
                    return func(*args, **(kwargs or {}))
                with paths.python.resumed(func):
                    return func(*args, **(kwargs or {}))

        class Dispatch(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                return recorder.dispatch(func, args, kwargs or {})

        with paths, Functions(), Dispatch():
            yield recorder

    return manager()  # type: ignore[return-value]


def capture(module: Any, *example_inputs: Any, name: str | None = None, phase: str = "forward",
            params: Mapping[str, Any] | None = None, **kwargs: Any) -> Graph:
    """The aten-level :class:`Graph` of one call ``module(*example_inputs, **kwargs)``.

    Runs the module once (under ``torch.no_grad`` unless an input requires grad), on whatever
    device its tensors are on; on ``meta`` no data is read or allocated. ``name`` names the graph
    (default: the module's class name), ``phase`` is one of :data:`~.graph.PHASES`, ``params``
    are recorded in the graph. Raises :class:`UsageError` naming the aten op and module path when
    an op cannot run (no meta kernel, data-dependent output).
    """
    import torch

    grad = any(t.requires_grad for t in _tensors((example_inputs, kwargs)))
    with recording(module) as recorder, torch.set_grad_enabled(grad):
        with recorder.paths.counting():
            module(*example_inputs, **kwargs)
        recorder.python_calls_after()
    return graph_of(recorder, name or type(module).__name__, phase, params or {})


def graph_of(recorder: Recorder, name: str, phase: str, params: Mapping[str, Any],
             notes: Sequence[str] = ()) -> Graph:
    """The recorded ops as a Graph, with a note when the capture saw data-dependent ops."""
    extra = list(notes)
    if recorder.data_dependent:
        seen = ", ".join(f"{op} x{n}" for op, n in sorted(recorder.data_dependent.items()))
        extra.append(f"data-dependent ops ran ({seen}): this graph follows the values of the example inputs")
    if "dtype" in params and params["dtype"] is not None:
        check_dtype(str(params["dtype"]))
    return Graph(name=name, phase=phase, ops=tuple(recorder.ops), params=dict(params), notes=tuple(extra))
