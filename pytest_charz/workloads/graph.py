"""The op-graph IR: a workload as a sequence of ops, each with its ``Work``.

A :class:`Graph` is what the models predict op by op, what the simulator schedules and what the
workload suite runs for real. Ops are kept in issue order (the order a runtime would launch
them); each names the ops it depends on, which come before it, and the stream it runs on.
Everything is a frozen value with a versioned JSON form (``formats.GRAPH``).

Op classes (``OP_CLASSES``) are the vocabulary models and reports group by: ``gemm`` (a matrix
product, including linear layers), ``bmm`` (batched matrix products outside attention), ``conv``,
``attention`` (a fused scaled-dot-product attention, or its unfused parts when marked so in
``attrs``), ``elementwise``, ``reduction``, ``softmax``, ``norm``, ``embedding`` (gathers),
``copy``, ``transpose`` (a copy that permutes), ``collective``, ``other``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import FormatError, UsageError
from ..formats import GRAPH
from ..work import DTYPE_BYTES, DTYPES, Work

OP_CLASSES = ("gemm", "bmm", "conv", "attention", "elementwise", "reduction", "softmax", "norm", "embedding",
              "copy", "transpose", "collective", "other")
PHASES = ("prefill", "decode", "train", "forward")
# The bytes per element of each dtype the IR knows: :data:`pytest_charz.work.DTYPE_BYTES`, kept
# below the models (which size an op's output with it); ``graph.DTYPE_BYTES`` is that same table.


def check_op_class(op_class: str) -> str:
    if op_class not in OP_CLASSES:
        raise UsageError(f"op class must be one of {', '.join(OP_CLASSES)}; got {op_class!r}")
    return op_class


@dataclass(frozen=True)
class TensorSpec:
    """A tensor's shape and dtype (no data). ``dtype`` is one of :data:`DTYPE_BYTES`."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        if any(n < 0 for n in self.shape):
            raise UsageError(f"a tensor's dimensions are non-negative, got {self.shape!r}")
        if self.dtype not in DTYPE_BYTES:
            raise UsageError(f"tensor dtype must be one of {', '.join(DTYPE_BYTES)}; got {self.dtype!r}")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TensorSpec":
        return cls(tuple(data["shape"]), str(data["dtype"]))


@dataclass(frozen=True)
class Op:
    """One kernel-level op of a graph.

    ``name`` is unique in its graph (``layers.3.mlp.up_proj``); ``source`` says where it comes
    from (the aten op a capture saw, ``built`` for an analytical builder); ``deps`` are the names
    of earlier ops whose outputs it reads; ``stream`` the stream it is issued on; ``attrs`` free
    facts a model may use (``layer``, ``fused``, ``causal``, ``experts``...).
    """

    name: str
    op_class: str
    work: Work
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    deps: tuple[str, ...] = ()
    stream: int = 0
    source: str = ""
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise UsageError("an op needs a name")
        check_op_class(self.op_class)
        if not isinstance(self.work, Work):
            raise UsageError(f"op {self.name!r}: work must be a Work, got {type(self.work).__name__}")
        if not isinstance(self.stream, int) or self.stream < 0:
            raise UsageError(f"op {self.name!r}: stream must be a non-negative int, got {self.stream!r}")
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "deps", tuple(self.deps))
        object.__setattr__(self, "attrs", dict(self.attrs))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "op_class": self.op_class, "work": self.work.to_json(),
                "inputs": [t.to_json() for t in self.inputs], "outputs": [t.to_json() for t in self.outputs],
                "deps": list(self.deps), "stream": self.stream, "source": self.source, "attrs": dict(self.attrs)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Op":
        return cls(name=str(data["name"]), op_class=str(data["op_class"]), work=Work.from_json(data["work"]),
                   inputs=tuple(TensorSpec.from_json(t) for t in data.get("inputs") or ()),
                   outputs=tuple(TensorSpec.from_json(t) for t in data.get("outputs") or ()),
                   deps=tuple(str(d) for d in data.get("deps") or ()), stream=int(data.get("stream", 0)),
                   source=str(data.get("source", "")), attrs=dict(data.get("attrs") or {}))


@dataclass(frozen=True)
class ClassShare:
    """What one op class adds up to in a graph."""

    op_class: str
    ops: int
    flops: float
    bytes: float
    launches: int
    flops_share: float
    bytes_share: float

    def to_json(self) -> dict[str, Any]:
        return {"op_class": self.op_class, "ops": self.ops, "flops": self.flops, "bytes": self.bytes,
                "launches": self.launches, "flops_share": self.flops_share, "bytes_share": self.bytes_share}


@dataclass(frozen=True)
class Graph:
    """A workload: ``name`` (the model), ``phase`` (:data:`PHASES`), the parameters it was made
    with (``batch``, ``seq``, ``context``, ``dtype``, ``tp``...), and its ops in issue order.

    Checked on construction: op names are unique and every dependency names an earlier op.
    """

    name: str
    phase: str
    ops: tuple[Op, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise UsageError(f"phase must be one of {', '.join(PHASES)}; got {self.phase!r}")
        object.__setattr__(self, "ops", tuple(self.ops))
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "notes", tuple(self.notes))
        seen: set[str] = set()
        for op in self.ops:
            if op.name in seen:
                raise UsageError(f"graph {self.name!r}: two ops are named {op.name!r}")
            missing = [dep for dep in op.deps if dep not in seen]
            if missing:
                raise UsageError(f"graph {self.name!r}: op {op.name!r} depends on {', '.join(missing)}, "
                                 "which is not an earlier op")
            seen.add(op.name)

    def __len__(self) -> int:
        return len(self.ops)

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise UsageError(f"graph {self.name!r} has no op {name!r}")

    # -- totals ---------------------------------------------------------------------------------
    @property
    def total_flops(self) -> float:
        return sum(op.work.total_flops for op in self.ops)

    @property
    def total_bytes(self) -> float:
        return sum(op.work.total_bytes for op in self.ops)

    @property
    def launches(self) -> int:
        return sum(op.work.launches for op in self.ops)

    def flops_by_dtype(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for op in self.ops:
            for dtype, flops in op.work.flops.items():
                out[dtype] = out.get(dtype, 0.0) + flops
        return out

    def collective_bytes(self) -> float:
        """Bytes per rank of every collective of the graph."""
        return sum(c.bytes for op in self.ops for c in op.work.collectives)

    def by_class(self) -> list[ClassShare]:
        """Per op class (in :data:`OP_CLASSES` order, present classes only): ops, FLOPs, bytes,
        launches and the class's share of the graph's FLOPs and bytes."""
        total_flops, total_bytes = self.total_flops, self.total_bytes
        rows = []
        for op_class in OP_CLASSES:
            members = [op for op in self.ops if op.op_class == op_class]
            if not members:
                continue
            flops = sum(op.work.total_flops for op in members)
            moved = sum(op.work.total_bytes for op in members)
            rows.append(ClassShare(op_class, len(members), flops, moved, sum(op.work.launches for op in members),
                                   flops / total_flops if total_flops else 0.0,
                                   moved / total_bytes if total_bytes else 0.0))
        return rows

    def critical_path(self, cost: Callable[[Op], float]) -> tuple[tuple[str, ...], float]:
        """The longest chain of dependent ops under ``cost`` (seconds, FLOPs... per op): its op
        names in order and its total. Ops on one stream also wait for the op before them on that
        stream, as a runtime issues them in order."""
        finish: dict[str, float] = {}
        previous: dict[str, str | None] = {}
        last_on_stream: dict[int, str] = {}
        for op in self.ops:
            waits = list(op.deps)
            if op.stream in last_on_stream:
                waits.append(last_on_stream[op.stream])
            before = max(waits, key=lambda name: finish[name], default=None)
            previous[op.name] = before
            finish[op.name] = (finish[before] if before is not None else 0.0) + float(cost(op))
            last_on_stream[op.stream] = op.name
        if not finish:
            return (), 0.0
        end = max(finish, key=lambda name: finish[name])
        path: list[str] = []
        node: str | None = end
        while node is not None:
            path.append(node)
            node = previous[node]
        return tuple(reversed(path)), finish[end]

    # -- JSON -----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {**GRAPH.stamp(), "name": self.name, "phase": self.phase, "params": dict(self.params),
                "notes": list(self.notes),
                "totals": {"ops": len(self.ops), "flops": self.total_flops, "bytes": self.total_bytes,
                           "launches": self.launches, "flops_by_dtype": self.flops_by_dtype(),
                           "collective_bytes": self.collective_bytes()},
                "by_class": [row.to_json() for row in self.by_class()],
                "ops": [op.to_json() for op in self.ops]}

    @classmethod
    def from_json(cls, data: Any, source: str = "a graph") -> "Graph":
        document = GRAPH.check(data, source)
        try:
            return cls(name=str(document["name"]), phase=str(document["phase"]),
                       ops=tuple(Op.from_json(op) for op in document["ops"]),
                       params=dict(document.get("params") or {}), notes=tuple(document.get("notes") or ()))
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise FormatError(f"{source} is malformed: {exc!r}") from None


def check_dtype(dtype: str, allowed: Iterable[str] = DTYPES) -> str:
    """``dtype`` if it is one of ``allowed`` (Work's dtype names), else a UsageError naming them."""
    options = tuple(allowed)
    if dtype not in options:
        raise UsageError(f"dtype must be one of {', '.join(options)}; got {dtype!r}")
    return dtype


def sequential(ops: Sequence[Op]) -> tuple[Op, ...]:
    """``ops`` chained one after the other (each depends on the one before), as a single-stream
    program without explicit dependencies runs them."""
    from dataclasses import replace

    chained = []
    for index, op in enumerate(ops):
        deps = op.deps if op.deps or index == 0 else (ops[index - 1].name,)
        chained.append(replace(op, deps=deps))
    return tuple(chained)
