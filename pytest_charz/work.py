"""Work: what a case does, independent of hardware.

FLOPs per dtype, bytes per memory level, kernel launches, host/device and peer transfers and
collective messages. The common currency of suites, models, workloads and the simulator.

Memory level names are the ones targets use: ``l1``, ``l2``, ``l3`` for caches and ``dram`` for a
device's main memory (DDR on a CPU, HBM/GDDR on an accelerator). Transfer names: ``h2d``, ``d2h``,
``d2d``, ``peer``, ``host`` for host-memory copies on a CPU-only machine, and ``numa`` for copies
between the memories of two NUMA nodes of the host.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import UsageError
from .formats import WORK

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int32")
#: Bytes per element of each dtype a tensor may have: every FLOP dtype of :data:`DTYPES`, plus
#: ``bool`` and the integer index tensors (the op-graph IR's tensors, a model's output sizes).
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int32": 4,
               "int64": 8, "bool": 1, "uint8": 1, "int16": 2}
MEMORY_LEVELS = ("l1", "l2", "l3", "dram")
TRANSFER_KINDS = ("h2d", "d2h", "d2d", "peer", "host", "numa")
#: The collective ops a :class:`Collective` may name (``p2p``: a point-to-point send/receive), the
#: keys of the collective ceilings and what the distributed cases run.
COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "p2p")

def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    """A real number of any numeric type (NumPy's included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _as_amounts(name: str, value: Any, default_key: str, allowed: tuple[str, ...] | None) -> dict[str, float]:
    """``value`` (a number, a mapping or None) as amounts by key; UsageError naming the field and key
    for an unknown key or an amount that is not a finite number >= 0 (NaN, infinity, negative)."""
    if value is None:
        return {}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = {default_key: value}
    if not isinstance(value, Mapping):
        raise UsageError(f"Work.{name} must be a number or a mapping, got {value!r}")
    out: dict[str, float] = {}
    for key, amount in value.items():
        if allowed is not None and key not in allowed:
            raise UsageError(f"Work.{name} key {key!r} is not one of {', '.join(allowed)}")
        if not _is_number(amount) or not math.isfinite(amount) or amount < 0:
            raise UsageError(f"Work.{name}[{key!r}] must be a finite non-negative number, got {amount!r}")
        if amount:
            out[str(key)] = float(amount)
    return out


def _check_shape(shape: Mapping[str, Any] | None) -> dict[str, Any]:
    """``shape`` as a dict; UsageError naming the size that is a number but not a finite one."""
    sizes = dict(shape or {})
    for key, size in sizes.items():
        if _is_number(size) and not math.isfinite(size):
            raise UsageError(f"Work.shape[{key!r}] must be a finite number, got {size!r}")
    return sizes


@dataclass(frozen=True)
class Collective:
    """One collective or point-to-point message: ``op`` over ``ranks`` ranks, ``bytes`` per rank.

    UsageError for bytes that are not a finite number >= 0, or ranks that are not a whole number >= 1."""

    op: str
    bytes: float
    ranks: int

    def __post_init__(self) -> None:
        if not _is_real(self.bytes) or not math.isfinite(self.bytes) or self.bytes < 0:
            raise UsageError(f"Collective {self.op!r}: bytes must be a finite non-negative number, got {self.bytes!r}")
        if not _is_real(self.ranks) or not math.isfinite(self.ranks) or self.ranks < 1 \
                or self.ranks != int(self.ranks):
            raise UsageError(f"Collective {self.op!r}: ranks must be a whole number >= 1, got {self.ranks!r}")

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "bytes": self.bytes, "ranks": self.ranks}


@dataclass(frozen=True, init=False)
class Work:
    """What one execution of a case does.

    ``flops`` and ``bytes`` accept a number (FLOPs of ``dtype``; bytes moved to/from ``dram``) or
    a mapping by dtype / memory level. ``op`` names the op class (``gemm``, ``fma``, ``stream``,
    ``chase``, ``copy``, ``launch``, ...) and ``shape`` its sizes, for models that care.

    Every amount is checked where it enters: a negative, NaN or infinite FLOP count, byte count,
    transfer or size is a UsageError naming the field and key, never a silently wrong prediction.
    """

    flops: Mapping[str, float]
    bytes: Mapping[str, float]
    launches: int
    transfers: Mapping[str, float]
    collectives: tuple[Collective, ...]
    op: str
    shape: Mapping[str, float]
    accesses: int

    def __init__(
        self,
        flops: float | Mapping[str, float] | None = None,
        bytes: float | Mapping[str, float] | None = None,  # noqa: A002 - the field's name in the field
        *,
        dtype: str = "fp32",
        launches: int = 0,
        transfers: Mapping[str, float] | None = None,
        collectives: tuple[Collective, ...] = (),
        op: str = "",
        shape: Mapping[str, float] | None = None,
        accesses: int = 0,
    ) -> None:
        if dtype not in DTYPES:
            raise UsageError(f"Work dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
        if not isinstance(launches, int) or launches < 0:
            raise UsageError(f"Work.launches must be a non-negative int, got {launches!r}")
        if not isinstance(accesses, int) or accesses < 0:
            raise UsageError(f"Work.accesses must be a non-negative int, got {accesses!r}")
        object.__setattr__(self, "flops", _as_amounts("flops", flops, dtype, DTYPES))
        object.__setattr__(self, "bytes", _as_amounts("bytes", bytes, "dram", MEMORY_LEVELS))
        object.__setattr__(self, "transfers", _as_amounts("transfers", transfers, "h2d", TRANSFER_KINDS))
        object.__setattr__(self, "launches", launches)
        object.__setattr__(self, "collectives", tuple(collectives))
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "shape", _check_shape(shape))
        # Dependent memory accesses (pointer chase): latency-bound work counted in loads.
        object.__setattr__(self, "accesses", accesses)

    def __hash__(self) -> int:
        return hash(repr(self.to_json()))

    @property
    def total_flops(self) -> float:
        return sum(self.flops.values())

    @property
    def total_bytes(self) -> float:
        return sum(self.bytes.values())

    def intensity(self, level: str = "dram") -> float:
        """Arithmetic intensity in FLOP per byte of ``level`` (inf when no bytes move there)."""
        moved = self.bytes.get(level, 0.0)
        return self.total_flops / moved if moved else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {
            **WORK.stamp(),
            "flops": dict(self.flops),
            "bytes": dict(self.bytes),
            "launches": self.launches,
            "transfers": dict(self.transfers),
            "collectives": [c.to_json() for c in self.collectives],
            "op": self.op,
            "shape": dict(self.shape),
            "accesses": self.accesses,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Work":
        data = WORK.check_nested(data, "a Work")
        return cls(
            data.get("flops") or {},
            data.get("bytes") or {},
            launches=int(data.get("launches", 0)),
            transfers=data.get("transfers") or {},
            collectives=tuple(Collective(**c) for c in data.get("collectives", ())),
            op=data.get("op", ""),
            shape=data.get("shape") or {},
            accesses=int(data.get("accesses", 0)),
        )

def achieved_rates(work: Work, time_s: float) -> dict[str, dict[str, float]]:
    """Rates achieved by ``work`` done in ``time_s``: FLOP/s per dtype, bytes/s per level and link."""
    if not time_s > 0:
        return {"flop_per_s": {}, "bytes_per_s": {}, "transfer_bytes_per_s": {}}
    rates: dict[str, dict[str, float]] = {
        "flop_per_s": {k: v / time_s for k, v in work.flops.items()},
        "bytes_per_s": {k: v / time_s for k, v in work.bytes.items()},
        "transfer_bytes_per_s": {k: v / time_s for k, v in work.transfers.items()},
    }
    if work.accesses:
        rates["latency_s"] = {"access": time_s / work.accesses}
    if work.launches:
        rates["per_launch_s"] = {"launch": time_s / work.launches}
    return rates
