"""Per-op times of a model's forward without a profiler: each aten op replayed alone where it runs.

:func:`time_ops` runs a callable under a ``TorchDispatchMode``. Each aten call runs once for the
model, then the same call, with the same arguments, is replayed as model code makes it, with no
mode on, in one batch of replays adding up to ``REPLAY_S`` (at least three calls) with the clock
read around the batch (:func:`replayed_s`), and the op is charged the mean per replay: its dispatch
and its kernel, as the runtime suite's dispatch cases time a bare op. As model code makes it: a
``TorchFunctionMode`` sees the Python-level call the model's code made (``a + b`` arrives as
``TensorBase.add``, ``x.pow(2)`` as ``TensorBase.pow``, ``torch.cat``, ``F.silu``), and an aten op
that is the one op of such a call, which wrote nothing, is replayed through that call where it is
a C++ binding (:data:`BINDINGS`; a Python function such as ``F.silu`` is the model's Python around
the binding, module code). Else (a call of several aten ops, a Python function's, or one that
Python did not see) it is replayed through the function of the op's name in ``torch``, ``torch.nn.functional`` or
``torch._C._nn`` where there is one and it returns what the op returned (:func:`model_call`),
else through the op's bound C++ overload. Why the model's own call: an operator passes a shorter
argument parser than the ``torch`` function of its name, so replayed as ``torch.add`` a decode
step's 128-float residual adds read 0.84-0.91 us on a Xeon core, and its ``x.pow(2)`` 1.4 us,
where ``a + b`` takes 0.70 us and ``x.pow(2)`` 1.1. The
first replay is not timed: right after the model's code between ops it pays cold caches and
branch predictors, once per op and not per replay, so a mean over ``REPLAY_S`` charged a share of
it that depended on how many replays fit the window (on a Xeon core, a captured Llama's 32 x 128
linears read 1.27x and its 128-float muls 1.12x their time replayed alone; with one untimed call,
1.01x and 0.99x). The forward pays that cold start once per op, and it stays in what the forward
takes beyond its replayed ops (the runtime suite's model-code cases). Not
charged: the Python module code between ops (module calls, views, argument handling), which the
model's end-to-end time holds; a profiler's cost per event; the mode's own Python. Fused
attention is replayed whole at the function level, as the capture records it (:mod:`.capture`),
with both modes off for its replays. An op that writes into its arguments (in place, ``out=``)
is replayed on copies of what it writes, taken before the model's call, so the model's state
stays as the model left it (:func:`written_copies`); one whose written tensors are too large to
copy ``MIN_REPLAYS`` times within ``COPY_BYTES`` is timed once, at the model's call.

Why not the profiler: on the CPU its time of an aten op held part of the module code's cost and
its own per event, so a 1 us elementwise op of a captured Llama read anywhere from 1.4 to 10 us.
Why not a timer around the call alone: calling the overload from the mode's Python cost 5.3 us
for an add of 512 floats that takes 1.5 us from model code; the replay through the C++ overload
took 1.6. Why copies for an op that writes its arguments: timed once at the model's call, under
both modes, an in-place ``div_`` of two floats read 2.3-2.7 us and an ``index_put_`` 6-9.5 us on
a Zen 5 core, where replayed they take 0.9 and 1.9. Why the ``torch`` function first: the
overload converts a list argument through its generic binding, so a ``cat`` of two 64-float
tensors replayed through it took 6.7 us on a Xeon core, where ``torch.cat`` from model code
took 3.8.

On a GPU, where a call returns before its kernel ends, these are host times only: use the
profiler's device times there. Each op's time is the median over ``passes`` calls of the
callable after one warm-up call; every pass must issue the same ops in the same order.
"""
from __future__ import annotations

import math
import statistics
import time
import types
from typing import Any, Callable

from .aten_costs import aten_name

#: The aten name the capture gives fused attention, replayed as one op here too.
ATTENTION_SOURCE = "aten.scaled_dot_product_attention"
#: Replays of one call add up to at least this long.
REPLAY_S = 50e-6
MIN_REPLAYS = 3
#: Copies of an in-place op's written tensors replayed on: at most this many, and at most
#: ``COPY_BYTES`` of them in all (a KV cache written in place is timed once instead).
MAX_COPIES = 32
COPY_BYTES = 8 << 20


def replayed_s(call: Callable[[], Any]) -> float:
    """Mean seconds per call of ``call`` over a batch of replays adding up to about ``REPLAY_S``,
    after one untimed call (module docstring: the first replay after the model's code pays its
    cold caches). The clock is read around batches, never between two calls: ``MIN_REPLAYS``
    calls tell how many make the window, then one batch of that many is timed. Read after every
    call, as the sampler never does, the clock and the loop's test added 0.14 us to each replay
    of a 0.70 us add on a Xeon core (0.83 us). The held-out suite times its workloads' steps with
    it too."""
    clock = time.perf_counter
    call()
    start = clock()
    for _ in range(MIN_REPLAYS):
        call()
    first = (clock() - start) / MIN_REPLAYS
    if first * MIN_REPLAYS >= REPLAY_S:
        return first
    count = max(MIN_REPLAYS, math.ceil(REPLAY_S / max(first, 1e-9)))
    start = clock()
    for _ in range(count):
        call()
    return (clock() - start) / count


def _replayed_on(call: Callable[..., Any], copies: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> float:
    """Mean seconds per call of ``call`` over the argument sets ``copies``, one call each, the
    first untimed (as :func:`replayed_s`); ``copies`` holds two or more."""
    clock = time.perf_counter
    (first_args, first_kwargs), timed = copies[0], copies[1:]
    call(*first_args, **first_kwargs)
    start = clock()
    for args, kwargs in timed:
        call(*args, **kwargs)
    return (clock() - start) / len(timed)


def written_copies(func: Any, args: Any, kwargs: Any) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Argument sets of the aten op ``func`` for its replays, each with its own clone of every
    tensor the op writes (the schema's written arguments), as many as fit ``MAX_COPIES`` and
    ``COPY_BYTES``; empty when fewer than ``MIN_REPLAYS`` fit or a written argument is not a
    tensor. Taken before the op runs, each copy holds what the model's call found."""
    import torch

    written = []
    for position, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        key: int | str = argument.name if argument.kwarg_only or position >= len(args) else position
        value = kwargs.get(key) if isinstance(key, str) else args[key]
        if not isinstance(value, torch.Tensor):
            return []
        written.append((key, value))
    size = sum(value.element_size() * value.numel() for _, value in written)
    count = min(MAX_COPIES, COPY_BYTES // max(size, 1))
    if not written or count < MIN_REPLAYS:
        return []
    copies = []
    for _ in range(count):
        positional, named = list(args), dict(kwargs)
        for key, value in written:
            if isinstance(key, str):
                named[key] = value.clone()
            else:
                positional[key] = value.clone()
        copies.append((tuple(positional), named))
    return copies


#: The kinds of a C++ binding: a tensor method or operator (``TensorBase.add``), ``torch.cat``,
#: ``torch._C._nn.linear``. A Python function the model calls (``F.layer_norm``, ``F.embedding``)
#: is not replayed whole: its Python (0.9 us of argument checks for a 128-wide layer norm or an
#: embedding on a Xeon core) is model code, charged with the module code, as a module call is.
BINDINGS = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
            types.MethodWrapperType)


class _Call:
    """One Python-level torch call of the model's code (a ``TorchFunctionMode`` sees it: ``a + b``
    as ``TensorBase.add``, ``F.silu``, ``torch.cat``) and the aten ops it dispatched that wait for
    their replays: ``(index in the pass's list, aten op, args, kwargs, output)``."""

    def __init__(self, func: Any, args: Any, kwargs: Any) -> None:
        self.func, self.args, self.kwargs = func, args, kwargs
        self.pending: list[tuple[int, Any, Any, Any, Any]] = []
        self.wrote = False


def one_pass(fn: Callable[[], Any]) -> list[tuple[str, float]]:
    """``(aten op, seconds)`` of every aten call of one ``fn()``, in call order."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

    sdpa = torch.nn.functional.scaled_dot_product_attention
    clock = time.perf_counter
    timed: list[tuple[str, float]] = []
    inside = [0]
    calls: list[_Call] = []

    def replay_pending(call: _Call) -> None:
        # one aten op of a call that wrote nothing: replayed through the call itself, as the
        # model's code made it; else each op through the function model code finds it by
        if len(call.pending) == 1 and not call.wrote and isinstance(call.func, BINDINGS):
            index, func, _, _, _ = call.pending[0]
            timed[index] = (str(func), replayed_s(bound_call(call.func, call.args, call.kwargs)))
            return
        for index, func, args, kwargs, out in call.pending:
            timed[index] = (str(func), replayed_s(model_call(func, args, kwargs, out)))

    class Functions(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if inside[0]:
                return func(*args, **kwargs)
            if func is not sdpa:
                # the mode is off while this runs: a call made inside this one is not seen here
                call = _Call(func, args, kwargs)
                calls.append(call)
                try:
                    out = func(*args, **kwargs)
                finally:
                    calls.pop()
                with _disable_current_modes():
                    replay_pending(call)
                return out
            inside[0] += 1
            try:
                out = func(*args, **kwargs)
                # replayed with no mode on: under the dispatch mode each aten op inside the fused
                # attention went through its Python (a decode step's 15 us attention read 28 us)
                with _disable_current_modes():
                    timed.append((ATTENTION_SOURCE, replayed_s(lambda: func(*args, **kwargs))))
            finally:
                inside[0] -= 1
            return out

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if inside[0]:
                return func(*args, **kwargs)
            bound = getattr(func, "_op", func)
            if func._schema.is_mutable:
                if calls:
                    calls[-1].wrote = True
                with _disable_current_modes():
                    copies = written_copies(func, args, kwargs)
                start = clock()
                out = bound(*args, **kwargs)
                once = clock() - start
                if not copies:
                    timed.append((str(func), once))
                    return out
                with _disable_current_modes():
                    first_args, first_kwargs = copies[0]
                    call = model_function(func, first_args, first_kwargs, out)
                    timed.append((str(func), _replayed_on(call, copies[1:])))
                return out
            out = bound(*args, **kwargs)
            if calls:
                # timed when the model's call returns, once it is known what else that call did
                calls[-1].pending.append((len(timed), func, args, kwargs, out))
                timed.append((str(func), 0.0))
                return out
            call = model_call(func, args, kwargs, out)
            with _disable_current_modes():
                timed.append((str(func), replayed_s(call)))
            return out

    with Functions(), Dispatch():
        fn()
    return timed


def bound_call(func: Callable[..., Any], args: Any, kwargs: Any) -> Callable[[], Any]:
    """``func(*args, **kwargs)`` as a call of no arguments, its arguments bound without unpacking
    them on each call where there are at most three and no keywords (``f(*args)`` cost 0.015-0.08
    us more than ``f(a, b)`` on a Xeon core, a tenth of a 0.7 us add)."""
    if not kwargs:
        if len(args) == 1:
            (a,) = args
            return lambda: func(a)
        if len(args) == 2:
            a, b = args
            return lambda: func(a, b)
        if len(args) == 3:
            a, b, c = args
            return lambda: func(a, b, c)
    return lambda: func(*args, **kwargs)


def model_call(func: Any, args: Any, kwargs: Any, out: Any) -> Callable[[], Any]:
    """The call model code makes for the aten op ``func`` with ``args``: ``torch.<name>`` (its
    Python argument parser, as ``torch.cat`` from model code) when that function exists and,
    called once with no mode on, returns what the op returned (``out``: the same tensors' shapes,
    dtypes and values); else the op's bound C++ overload."""
    return bound_call(model_function(func, args, kwargs, out), args, kwargs)


def model_function(func: Any, args: Any, kwargs: Any, out: Any) -> Callable[..., Any]:
    """The function :func:`model_call` calls: ``torch.<name>`` when, called once on ``args``
    with no mode on, it returns what ``out`` holds; else the op's bound C++ overload."""
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    bound = getattr(func, "_op", func)
    name = func.overloadpacket.__name__
    # where model code finds the op: torch.cat, F.linear (torch.nn.functional), or the binding
    # a functional wrapper calls (torch._C._nn.silu); the bound overload only when none returns
    # what the op did. F.linear replayed as its overload took 3.7-3.8 us on a Xeon core, against
    # 2.9 us as model code calls it: a captured model's decode-sized linears read +48-83%.
    for namespace in (torch, torch.nn.functional, torch._C._nn):
        api = getattr(namespace, name, None) if not name.startswith("_") else None
        if not callable(api):
            continue
        try:
            with _disable_current_modes():
                again = api(*args, **kwargs)
        except Exception:  # noqa: BLE001 - not this op's Python signature: the overload it is
            again = None
        if _same_result(torch, out, again):
            return api
    return bound


def _same_result(torch: Any, out: Any, again: Any) -> bool:
    if isinstance(out, torch.Tensor):
        return (isinstance(again, torch.Tensor) and out.shape == again.shape and out.dtype == again.dtype
                and bool(torch.equal(out, again)))
    if isinstance(out, (tuple, list)):
        return isinstance(again, (tuple, list)) and len(out) == len(again) and all(
            _same_result(torch, a, b) for a, b in zip(out, again))
    return False


def time_ops(fn: Callable[[], Any], passes: int = 5) -> list[tuple[str, float]]:
    """``(aten op, seconds)`` in call order, each the median over ``passes`` calls of ``fn`` after
    a warm-up call (module docstring)."""
    if passes < 1:
        raise ValueError(f"passes must be at least 1, got {passes}")
    one_pass(fn)
    runs = [one_pass(fn) for _ in range(passes)]
    names = [name for name, _ in runs[0]]
    if any([name for name, _ in run] != names for run in runs):
        raise RuntimeError("the timed passes issued different aten ops")
    return [(name, statistics.median(run[i][1] for run in runs)) for i, name in enumerate(names)]


def match_ops(graph: Any, events: list[tuple[str, float]]) -> tuple[dict[str, float], int]:
    """Timed aten ops (:func:`time_ops`, or a profiler's events) matched to a captured graph's ops
    by aten name and order: the k-th timed op named ``mm`` is the k-th captured op whose source is
    ``mm``; what matches no captured op (a view, a folded op) is left out. Returns seconds by op
    name and the number of captured ops no timed op matched."""
    queues: dict[str, list[float]] = {}
    for name, seconds in events:
        queues.setdefault(aten_name(name), []).append(seconds)
    times: dict[str, float] = {}
    unmatched = 0
    for op in graph.ops:
        queue = queues.get(aten_name(op.source or op.name.rsplit(".", 1)[-1].split("#")[0]))
        if queue:
            times[op.name] = queue.pop(0)
        else:
            unmatched += 1
    return times, unmatched
