"""The target catalogue: one TOML file per product, validated on load, resolved by name or alias.

``load_spec(path)`` turns one file into a :class:`TargetSpec` or raises :class:`SpecError` naming
the file, the field path (``compute.peak_flops.bf16.value``) and the bad value. ``catalogue()``
loads the packaged directory once; ``resolve(name)`` finds a target by id or alias (``cpu`` and
``host`` give the host spec derived at run time); ``match_visible(device)`` finds the target whose
recognition rules fit a detected device.

File schema (mirrors ``spec.py``)::

    notes = ["..."]                      # optional
    [identity]  id, name, vendor, kind, backend,
                aliases?, match_name?, pci_device_ids?, architecture?
    [sources]   key = "full citation"
    [compute]   units = FIGURE, unit_name, clock_base_mhz? = FIGURE, clock_boost_mhz? = FIGURE
    [compute.peak_flops]         dtype = FIGURE   (dense)
    [compute.vector_peak_flops]  dtype = FIGURE   (optional)
    [[memory]]  name, label, scope, capacity_bytes?, bandwidth_bytes_per_s?, latency_ns?
    [host_link] name, bandwidth_bytes_per_s (per direction), latency_us?, count?
    [[peer_links]] same as host_link
    [power]     tdp_w?, idle_w?
    [priors]    launch_us?, host_link_latency_us?, peer_link_latency_us?,       (optional:
                host_link_bandwidth_bytes_per_s?, peer_link_bandwidth_bytes_per_s?  spec-only
    [priors.latency_ns]            level = FIGURE                                  predictions,
    [priors.bandwidth_bytes_per_s] level = FIGURE                                  targets/priors.py)
    [priors.efficiency]  gemm_<dtype>|dram|host_link|peer_link = FIGURE (a fraction in (0, 1])
    [priors.gemm_tile_us]          dtype = FIGURE (the GEMM's fixed time per output tile, us)

where FIGURE is ``{ value = <positive number>, source = "<key of [sources]>" }``.
"""
from __future__ import annotations

import difflib
import functools
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..datafile import TableReader, join_field, load_named_files
from ..formats import read_toml
from ..errors import SpecError, UsageError
from ..work import DTYPES, MEMORY_LEVELS
from .spec import PRIOR_SCALARS, Compute, Figure, Identity, Link, MemoryLevel, Power, Priors, TargetSpec

if TYPE_CHECKING:
    from ..devices.base import VisibleDevice


CATALOGUE_DIR = Path(__file__).with_name("catalogue")
KINDS = ("gpu", "asic", "cpu")
SCOPES = ("unit", "device", "socket", "system")
HOST_NAMES = ("cpu", "host")
_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_PCI_PATTERN = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")
EFFICIENCY_KEYS = (*(f"gemm_{dtype}" for dtype in DTYPES), "dram", "host_link", "peer_link")


class _Reader(TableReader):
    """Validates one parsed target file; every error names the file, the field path and the value."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.sources: Mapping[str, str] = {}

    def figure(self, data: Mapping[str, Any], key: str, field: str,
               required: bool = True) -> Figure | None:
        if key not in data:
            if required:
                raise SpecError(f"{self.path}: {join_field(field, key)} is missing")
            return None
        where = join_field(field, key)
        raw = self.table(data[key], where, ("value", "source"))
        value = raw["value"]
        if (not isinstance(value, (int, float)) or isinstance(value, bool)
                or not math.isfinite(value) or value <= 0):
            raise self.fail(f"{where}.value", "must be a positive number", value)
        source = raw["source"]
        if not isinstance(source, str) or source not in self.sources:
            known = ", ".join(sorted(self.sources)) or "none"
            raise self.fail(f"{where}.source", f"must be a key of [sources] ({known})", source)
        return Figure(float(value), source)

    def figures(self, data: Any, field: str) -> dict[str, Figure]:
        raw = self.table(data, field, (), DTYPES)
        out: dict[str, Figure] = {}
        for dtype in raw:
            figure = self.figure(raw, dtype, field)
            assert figure is not None
            out[dtype] = figure
        return out

    def link(self, data: Any, field: str) -> Link:
        raw = self.table(data, field, ("name", "bandwidth_bytes_per_s"), ("latency_us", "count"))
        count = raw.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise self.fail(f"{field}.count", "must be a positive integer", count)
        bandwidth = self.figure(raw, "bandwidth_bytes_per_s", field)
        assert bandwidth is not None
        return Link(name=self.text(raw, "name", field), bandwidth_bytes_per_s=bandwidth,
                    latency_us=self.figure(raw, "latency_us", field, required=False), count=count)

    def identity(self, data: Any) -> Identity:
        raw = self.table(data, "identity", ("id", "name", "vendor", "kind", "backend"),
                         ("aliases", "match_name", "pci_device_ids", "architecture"))
        target_id = self.text(raw, "id", "identity")
        if not _ID_PATTERN.match(target_id):
            raise self.fail("identity.id", "must be lower case letters, digits, '.', '-', '_'",
                            target_id)
        aliases = self.texts(raw, "aliases", "identity")
        for index, alias in enumerate(aliases):
            if not _ID_PATTERN.match(alias) or alias in HOST_NAMES:
                raise self.fail(f"identity.aliases[{index}]",
                                "must be a lower case name other than 'cpu' or 'host'", alias)
        patterns = self.texts(raw, "match_name", "identity")
        for index, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise self.fail(f"identity.match_name[{index}]",
                                f"is not a valid regular expression ({exc})", pattern) from None
        pci_ids = self.texts(raw, "pci_device_ids", "identity")
        for index, pci_id in enumerate(pci_ids):
            if not _PCI_PATTERN.match(pci_id):
                raise self.fail(f"identity.pci_device_ids[{index}]",
                                "must be 'vendor:device' in lower-case hex, like '10de:2330'",
                                pci_id)
        return Identity(
            id=target_id, name=self.text(raw, "name", "identity"),
            vendor=self.text(raw, "vendor", "identity"),
            kind=self.choice(raw, "kind", "identity", KINDS),
            backend=self.text(raw, "backend", "identity"), aliases=aliases,
            match_name=patterns, pci_device_ids=pci_ids,
            architecture=self.text(raw, "architecture", "identity", default=""),
        )

    def compute(self, data: Any) -> Compute:
        raw = self.table(data, "compute", ("units", "unit_name", "peak_flops"),
                         ("clock_base_mhz", "clock_boost_mhz", "vector_peak_flops"))
        units = self.figure(raw, "units", "compute")
        assert units is not None
        return Compute(
            units=units, unit_name=self.text(raw, "unit_name", "compute"),
            clock_base_mhz=self.figure(raw, "clock_base_mhz", "compute", required=False),
            clock_boost_mhz=self.figure(raw, "clock_boost_mhz", "compute", required=False),
            peak_flops=self.figures(raw["peak_flops"], "compute.peak_flops"),
            vector_peak_flops=self.figures(raw.get("vector_peak_flops", {}),
                                           "compute.vector_peak_flops"),
        )

    def memory(self, data: Any) -> tuple[MemoryLevel, ...]:
        if not isinstance(data, list) or not data:
            raise self.fail("memory", "must be a non-empty array of tables ([[memory]])", data)
        levels: list[MemoryLevel] = []
        for index, item in enumerate(data):
            field = f"memory[{index}]"
            raw = self.table(item, field, ("name", "label", "scope"),
                             ("capacity_bytes", "bandwidth_bytes_per_s", "latency_ns"))
            name = self.choice(raw, "name", field, MEMORY_LEVELS)
            if any(level.name == name for level in levels):
                raise self.fail(f"{field}.name", "repeats an earlier level", name)
            levels.append(MemoryLevel(
                name=name, label=self.text(raw, "label", field),
                scope=self.choice(raw, "scope", field, SCOPES),
                capacity_bytes=self.figure(raw, "capacity_bytes", field, required=False),
                bandwidth_bytes_per_s=self.figure(raw, "bandwidth_bytes_per_s", field,
                                                  required=False),
                latency_ns=self.figure(raw, "latency_ns", field, required=False),
            ))
        return tuple(levels)

    def priors(self, data: Any) -> Priors:
        raw = self.table(data, "priors", (), (*PRIOR_SCALARS, "latency_ns", "bandwidth_bytes_per_s", "efficiency",
                                              "gemm_tile_us"))
        maps: dict[str, dict[str, Figure]] = {}
        for name, keys in (("latency_ns", MEMORY_LEVELS), ("bandwidth_bytes_per_s", MEMORY_LEVELS),
                           ("efficiency", EFFICIENCY_KEYS), ("gemm_tile_us", DTYPES)):
            table = self.table(raw.get(name, {}), f"priors.{name}", (), keys)
            maps[name] = {key: figure for key in table
                          if (figure := self.figure(table, key, f"priors.{name}")) is not None}
        for key, figure in maps["efficiency"].items():
            if figure.value > 1:
                raise self.fail(f"priors.efficiency.{key}.value", "must be a fraction in (0, 1]", figure.value)
        fields: dict[str, Any] = {name: self.figure(raw, name, "priors", required=False) for name in PRIOR_SCALARS}
        fields.update(maps)
        return Priors(**fields)

    def spec(self, data: dict[str, Any]) -> TargetSpec:
        raw = self.table(data, "", ("identity", "sources", "compute", "memory"),
                         ("host_link", "peer_links", "power", "notes", "priors"))
        sources = raw["sources"]
        if not isinstance(sources, dict) or not sources:
            raise self.fail("sources", "must be a non-empty table of citations", sources)
        for key, citation in sources.items():
            if not isinstance(citation, str) or not citation.strip():
                raise self.fail(f"sources.{key}", "must be a non-empty citation string", citation)
        self.sources = dict(sources)
        peer_raw = raw.get("peer_links", [])
        if not isinstance(peer_raw, list):
            raise self.fail("peer_links", "must be an array of tables ([[peer_links]])", peer_raw)
        power = None
        if "power" in raw:
            power_raw = self.table(raw["power"], "power", (), ("tdp_w", "idle_w"))
            power = Power(tdp_w=self.figure(power_raw, "tdp_w", "power", required=False),
                          idle_w=self.figure(power_raw, "idle_w", "power", required=False))
        return TargetSpec(
            identity=self.identity(raw["identity"]),
            compute=self.compute(raw["compute"]),
            memory=self.memory(raw["memory"]),
            host_link=self.link(raw["host_link"], "host_link") if "host_link" in raw else None,
            peer_links=tuple(self.link(item, f"peer_links[{index}]")
                             for index, item in enumerate(peer_raw)),
            power=power, sources=self.sources, origin=str(self.path),
            notes=self.texts(raw, "notes", "") if "notes" in raw else (),
            priors=self.priors(raw["priors"]) if "priors" in raw else None,
        )


def load_spec(path: str | Path) -> TargetSpec:
    """Parse and validate one target file; :class:`SpecError` names file, field and value."""
    path = Path(path)
    data = read_toml(path)
    return _Reader(path).spec(data)


def load_catalogue(directory: str | Path) -> dict[str, TargetSpec]:
    """Load every ``*.toml`` in ``directory``; ids and aliases must be unique across files."""
    return load_named_files(directory, load_spec, lambda spec: (spec.id, *spec.identity.aliases),
                            taken={name: "the host CPU" for name in HOST_NAMES})


@functools.lru_cache(maxsize=1)
def catalogue() -> dict[str, TargetSpec]:
    """The packaged catalogue, by id (loaded once per process)."""
    return load_catalogue(CATALOGUE_DIR)


def resolve(name: str, specs: Mapping[str, TargetSpec] | None = None) -> TargetSpec:
    """The target named ``name`` (id or alias, any case); ``cpu``/``host`` give the host spec.

    An unknown name raises :class:`UsageError` listing the known ids and the nearest match.
    """
    specs = catalogue() if specs is None else specs
    wanted = name.strip().lower()
    if wanted in HOST_NAMES:
        from .host import host_spec

        return host_spec()
    by_name: dict[str, str] = {}
    for spec in specs.values():
        by_name[spec.id] = spec.id
        for alias in spec.identity.aliases:
            by_name[alias.lower()] = spec.id
    if wanted in by_name:
        return specs[by_name[wanted]]
    known = ["cpu", *sorted(specs)]
    candidates = {**by_name, **{host: "cpu" for host in HOST_NAMES}}
    # Only names that are really close (and, of those, the ones about as close as the closest):
    # a name like nothing known gets no suggestion.
    scores = sorted(((difflib.SequenceMatcher(None, wanted, name).ratio(), name) for name in candidates),
                    reverse=True)
    nearest = list(dict.fromkeys(candidates[name] for score, name in scores
                                 if score >= 0.6 and score >= scores[0][0] - 0.1))
    hint = f"; did you mean {' or '.join(map(repr, nearest))}?" if nearest else ""
    raise UsageError(f"unknown target {name!r}; known targets: {', '.join(known)}{hint}")


def _pci_parts(text: str) -> tuple[str | None, str] | None:
    """(vendor, device) in lower-case hex from '10de:2330', '0x2330', '2330' or NVML's
    '0x233010DE' (device in the high half, vendor in the low half)."""
    cleaned = text.strip().lower()
    if ":" in cleaned:
        vendor, _, device = cleaned.partition(":")
        vendor, device = vendor.removeprefix("0x"), device.removeprefix("0x")
        return (vendor.zfill(4), device.zfill(4)) if vendor and device else None
    cleaned = cleaned.removeprefix("0x")
    if not re.fullmatch(r"[0-9a-f]{1,8}", cleaned):
        return None
    if len(cleaned) > 4:
        cleaned = cleaned.zfill(8)
        return cleaned[4:], cleaned[:4]
    return None, cleaned.zfill(4)


def _pci_matches(spec: TargetSpec, visible_id: str | None) -> bool:
    parts = _pci_parts(visible_id) if visible_id else None
    if parts is None:
        return False
    vendor, device = parts
    for known in spec.identity.pci_device_ids:
        known_vendor, _, known_device = known.partition(":")
        if known_device == device and vendor in (None, known_vendor):
            return True
    return False


def match_visible(visible: VisibleDevice,
                  specs: Mapping[str, TargetSpec] | None = None) -> TargetSpec | None:
    """The catalogue target whose rules fit a detected device, or None when none does.

    A CPU device is the host (its spec is derived, not catalogued). Otherwise candidates share
    the device's backend; a PCI device id listed by exactly one target decides, else the driver
    name is matched (case-insensitively) against each target's ``match_name`` regexes. A name
    that fits several targets is a catalogue defect and raises :class:`SpecError`.
    """
    if visible.backend == "cpu":
        from .host import host_spec

        return host_spec()
    specs = catalogue() if specs is None else specs
    candidates = [spec for spec in specs.values() if spec.identity.backend == visible.backend]
    by_pci = [spec for spec in candidates if _pci_matches(spec, visible.pci_device_id)]
    if len(by_pci) == 1:
        return by_pci[0]
    pool = by_pci or candidates
    by_name = [spec for spec in pool
               if any(re.search(pattern, visible.name, re.IGNORECASE)
                      for pattern in spec.identity.match_name)]
    if len(by_name) > 1:
        ids = ", ".join(spec.id for spec in by_name)
        raise SpecError(f"device name {visible.name!r} fits several targets ({ids}); "
                        "their match_name rules must be made exclusive")
    return by_name[0] if by_name else None
