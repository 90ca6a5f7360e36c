"""The committed table of published GPU measurements (``measurements.toml``), typed and checked.

Each row is one published figure: what was measured (a GEMM shape and dtype, a STREAM-like copy
of so many bytes, a collective as nccl-tests runs it: op, buffer bytes and ranks, or an LLM serving
run, :class:`~.serving.ServingCase`: model configuration, batch, input and output tokens, tensor
parallelism, precision recipe, runtime), its value and
unit (a collective's is nccl-tests' bus bandwidth), its citation, and its role: ``fitted-on`` when a prior of
the catalogue was fitted on it (``fits`` = ``"<catalogue source key>:<efficiency key>"``),
``held-out`` when it only tests the priors. :func:`load_measurements` is the public loader; a bad
file is a :class:`~pytest_charz.errors.SpecError` naming the file, the field and the value.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..datafile import TableReader
from ..formats import read_toml
from ..work import COLLECTIVE_OPS, DTYPES
from .serving import SERVING_KINDS, SERVING_UNITS, ServingCase, read_serving_case

TABLE_PATH = Path(__file__).with_name("measurements.toml")
KINDS = ("gemm", "stream", "collective", *SERVING_KINDS)
ROLES = ("fitted-on", "held-out")
UNITS = {"gemm": "TFLOP/s", "stream": "GB/s", "collective": "GB/s", **SERVING_UNITS}


@dataclass(frozen=True)
class GemmCase:
    """``C (m x n) = A (m x k) @ B (k x n)`` in ``dtype``."""

    m: int
    n: int
    k: int
    dtype: str


@dataclass(frozen=True)
class StreamCase:
    """A copy-like kernel moving ``bytes`` to and from device memory (all arrays counted)."""

    bytes: float


@dataclass(frozen=True)
class CollectiveCase:
    """A collective ``op`` over ``ranks`` ranks of a buffer of ``bytes`` as nccl-tests counts it."""

    op: str
    bytes: float
    ranks: int


@dataclass(frozen=True)
class PublishedRow:
    """One published measurement. ``value`` is in ``unit`` (TFLOP/s for GEMM, GB/s for a copy,
    ms or tokens/s per GPU for a serving run); ``source`` is the full citation; ``peak`` is the datasheet
    figure (same unit) of a product outside the catalogue, which its fitted fraction is of (a
    collective's: the per-direction peer link rate); ``units`` its compute unit count where a
    fit needs the GEMM schedule of a product outside the catalogue."""

    id: str
    target: str
    kind: str
    role: str
    value: float
    unit: str
    source: str
    case: GemmCase | StreamCase | CollectiveCase | ServingCase
    fits: str = ""
    peak: float | None = None
    note: str = ""
    units: int | None = None

    @property
    def held_out(self) -> bool:
        return self.role == "held-out"

    def measured_time_s(self) -> float:
        """The measured time of the row's case in seconds."""
        case = self.case
        if isinstance(case, GemmCase):
            return 2.0 * case.m * case.n * case.k / (self.value * 1e12)
        if isinstance(case, StreamCase):
            return case.bytes / (self.value * 1e9)
        if isinstance(case, CollectiveCase):
            from ..models.comm import bus_factor

            return case.bytes * bus_factor(case.op, case.ranks) / (self.value * 1e9)
        if isinstance(case, ServingCase):
            return case.measured_time_s(self.value)
        return self.value * 1e-3

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**{k: v for k, v in asdict(self).items() if k != "case"}, self.kind: asdict(self.case)}


class _Reader(TableReader):
    def count(self, data: Mapping[str, Any], key: str, field: str) -> int:
        value = data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise self.fail(f"{field}.{key}", "must be a positive integer", value)
        return value

    def number(self, data: Mapping[str, Any], key: str, field: str) -> float:
        value = data.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise self.fail(f"{field}.{key}", "must be a positive number", value)
        return float(value)

    def case(self, raw: Mapping[str, Any], kind: str,
             field: str) -> GemmCase | StreamCase | CollectiveCase | ServingCase:
        if kind in SERVING_KINDS:
            return read_serving_case(self, raw, kind, field)
        where = f"{field}.{kind}"
        if kind == "gemm":
            data = self.table(raw.get(kind), where, ("m", "n", "k", "dtype"))
            return GemmCase(self.count(data, "m", where), self.count(data, "n", where),
                            self.count(data, "k", where), self.choice(data, "dtype", where, DTYPES))
        if kind == "stream":
            data = self.table(raw.get(kind), where, ("bytes",))
            return StreamCase(self.number(data, "bytes", where))
        data = self.table(raw.get(kind), where, ("op", "bytes", "ranks"))
        return CollectiveCase(self.choice(data, "op", where, COLLECTIVE_OPS), self.number(data, "bytes", where),
                              self.count(data, "ranks", where))

    def rows(self, data: Any) -> tuple[PublishedRow, ...]:
        raw = self.table(data, "", ("sources", "rows"))
        sources = raw["sources"]
        if not isinstance(sources, dict) or not all(isinstance(v, str) and v.strip() for v in sources.values()):
            raise self.fail("sources", "must be a table of non-empty citations", sources)
        rows: list[PublishedRow] = []
        for index, item in enumerate(raw["rows"] if isinstance(raw["rows"], list) else [raw["rows"]]):
            field = f"rows[{index}]"
            if not isinstance(item, dict) or item.get("kind") not in KINDS:
                raise self.fail(f"{field}.kind", f"must be one of {', '.join(KINDS)}",
                                item.get("kind") if isinstance(item, dict) else item)
            kind = str(item["kind"])
            row = self.table(item, field, ("id", "target", "kind", "role", "value", "unit", "source", kind),
                             ("fits", "peak", "note", "units"))
            role = self.choice(row, "role", field, ROLES)
            unit = self.text(row, "unit", field)
            if unit != UNITS[kind]:
                raise self.fail(f"{field}.unit", f"must be {UNITS[kind]!r} for a {kind} row", unit)
            source = self.text(row, "source", field)
            if source not in sources:
                raise self.fail(f"{field}.source", f"must be a key of [sources] ({', '.join(sources)})", source)
            fits = str(row.get("fits", ""))
            if (role == "fitted-on") != bool(fits):
                raise self.fail(f"{field}.fits", "is required on a fitted-on row and only there", fits)
            row_id = self.text(row, "id", field)
            if any(r.id == row_id for r in rows):
                raise self.fail(f"{field}.id", "repeats an earlier row", row_id)
            rows.append(PublishedRow(
                id=row_id, target=self.text(row, "target", field), kind=kind, role=role,
                value=self.number(row, "value", field), unit=unit, source=sources[source],
                case=self.case(row, kind, field), fits=fits,
                peak=self.number(row, "peak", field) if "peak" in row else None,
                note=str(row.get("note", "")),
                units=self.count(row, "units", field) if "units" in row else None))
        return tuple(rows)


def load_measurements(path: str | Path | None = None) -> tuple[PublishedRow, ...]:
    """The published measurements (the packaged table, or the file at ``path``), in file order.

    Public: the simulator's validation reads the same GEMM and LLM rows. Raises
    :class:`~pytest_charz.errors.SpecError` naming the file, the field and the value when the
    file is malformed."""
    if path is None:
        return _packaged()
    return _Reader(Path(path)).rows(read_toml(Path(path)))


@functools.lru_cache(maxsize=1)
def _packaged() -> tuple[PublishedRow, ...]:
    return _Reader(TABLE_PATH).rows(read_toml(TABLE_PATH))
