"""Reading a capability profile into :class:`~.ceilings.Ceilings` figures: the names, units and
keys of the contract in :mod:`.ceilings`' docstring, checked, every figure with its source."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..errors import FormatError, UsageError
from ..formats import PROFILE
from ..targets.spec import Figure
from ..work import COLLECTIVE_OPS, DTYPES, MEMORY_LEVELS, TRANSFER_KINDS
from .ceilings import FIGURE_MAPS, check_figure

if TYPE_CHECKING:
    from .opclass_costs import OpCosts

# -- capability profile reading ------------------------------------------------------------------
_UNIT_SCALE: dict[str, dict[str, float]] = {
    "flops": {"FLOP/s": 1.0, "OP/s": 1.0, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15,
              "GOP/s": 1e9, "TOP/s": 1e12},
    "bandwidth": {"B/s": 1.0, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12, "MiB/s": 2.0**20,
                  "GiB/s": 2.0**30, "TiB/s": 2.0**40},
    "capacity": {"B": 1.0, "bytes": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30,
                 "KB": 1e3, "MB": 1e6, "GB": 1e9},
    "latency": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9},
    "launch": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9},
    "compute_units": {"": 1.0, "units": 1.0},
}
# quantity -> (Ceilings field, allowed keys); None = no key (a scalar figure)
_QUANTITIES: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "flops": ("peak_flops", DTYPES),
    "gemm": ("peak_flops", DTYPES),
    "bandwidth": ("bandwidth_bytes_per_s", MEMORY_LEVELS),
    "capacity": ("capacity_bytes", MEMORY_LEVELS),
    "latency": ("latency_s", MEMORY_LEVELS),
    "transfer": ("link_bandwidth_bytes_per_s", TRANSFER_KINDS),
    "collective": ("collective_bandwidth_bytes_per_s", COLLECTIVE_OPS),
    "launch": ("launch_overhead_s", None),
    "compute_units": ("compute_units", None),
}


def _scaled(entry: Mapping[str, Any], key: str, quantity: str, unit: str | None) -> float | None:
    raw = entry.get(key)
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise FormatError(f"profile ceiling {entry.get('name')!r}: {key} must be a number, got {raw!r}")
    scales = _UNIT_SCALE[quantity]
    if unit is None:
        return float(raw)
    if unit not in scales:
        raise FormatError(
            f"profile ceiling {entry.get('name')!r}: unit {unit!r} is not one of {', '.join(map(repr, scales))}"
        )
    return float(raw) * scales[unit]


def _checked_profile(profile: Any) -> Mapping[str, Any]:
    """``profile`` checked as a ``formats.PROFILE`` document (kind, version, migrations).

    A mapping without ``kind`` is the minimal contract of the module docstring (hand-written
    what-if ceilings): only its version is checked, against the same format's version.
    """
    if isinstance(profile, Mapping) and "kind" not in profile:
        if profile.get("version") != PROFILE.version:
            raise FormatError(f"capability profile version {profile.get('version')!r} is not supported "
                              f"(this pytest-charz reads version {PROFILE.version})")
        return profile
    return PROFILE.check(profile, "capability profile")


def read_profile_figures(profile: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`Ceilings` fields a capability profile gives (contract in :mod:`.ceilings`)."""
    profile = _checked_profile(profile)
    target = profile.get("target") or {}
    target_id = str(target.get("id", ""))
    default_source = f"measured: capability profile of {target_id or 'an unnamed target'}"
    out: dict[str, Any] = {name: {} for name in FIGURE_MAPS}
    out.update(target_id=target_id, kind=str(target.get("kind", "")), origin=f"profile:{target_id}")
    if target.get("compute_units") is not None:
        try:
            out["compute_units"] = check_figure(
                "compute_units", Figure(target["compute_units"], f"{default_source}: target"))
        except UsageError as exc:
            raise FormatError(f"capability profile target: {exc}") from exc
    seen: set[str] = set()
    for entry in profile.get("ceilings") or ():
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if not isinstance(name, str):
            raise FormatError(f"profile ceiling without a name: {entry!r}")
        if name in seen:
            raise FormatError(f"profile ceiling {name!r} appears twice")
        seen.add(name)
        quantity, _, key = name.partition(":")
        if quantity not in _QUANTITIES:
            continue
        field_name, keys = _QUANTITIES[quantity]
        if quantity == "flops" and key.endswith(":vector"):
            field_name, key = "vector_peak_flops", key[: -len(":vector")]
        if (keys is None) != (key == "") or (keys is not None and key not in keys):
            raise FormatError(f"profile ceiling {name!r}: {key!r} is not a known "
                              f"{'key' if keys is None else ' / '.join(keys)}")
        source = str(entry.get("source") or f"{default_source}: {name}")
        try:
            if quantity in ("transfer", "collective"):
                prefix = "link" if quantity == "transfer" else "collective"
                found = {field_name: _scaled(entry, "bandwidth", "bandwidth", entry.get("unit")),
                         f"{prefix}_latency_s": _scaled(entry, "latency_s", "latency", None)}
                if quantity == "collective":
                    found["collective_ranks"] = _scaled(entry, "ranks", "compute_units", None)
                for target, number in found.items():
                    if number is not None:
                        out[target][key] = check_figure(target, Figure(number, source), key)
                continue
            value = _scaled(entry, "value", "flops" if quantity == "gemm" else quantity, entry.get("unit"))
            if value is None:
                continue
            figure = check_figure(field_name, Figure(value, source), key)
        except UsageError as exc:
            raise FormatError(f"profile ceiling {name!r}: {exc}") from exc
        if field_name == "peak_flops":
            # flops:<dtype> (FMA chains) is the vector peak, gemm:<dtype> what the vendor GEMM
            # reached; a matrix op's ceiling is the higher of the two.
            if quantity == "flops":
                out["vector_peak_flops"].setdefault(key, figure)
            current = out["peak_flops"].get(key)
            if current is None or figure.value > current.value:
                out["peak_flops"][key] = figure
            continue
        if keys is None:
            out[field_name] = figure
        else:
            out[field_name][key] = figure
    return out


def read_op_costs(profile: Mapping[str, Any]) -> "OpCosts":
    """The op-class figures of a capability profile (:class:`~.opclass_costs.OpCosts`): the
    measured library GEMM per dtype (``gemm:<dtype>``), host dispatch per framework
    (``dispatch:<framework>``, seconds), transcendental (``exp``) and reduction throughput
    (``transcendental:<dtype>``, ``transcendental.<function>:<dtype>``, ``reduction:<dtype>``,
    ``layernorm:<dtype>``, elements/s), a layer
    norm's seconds per row (``layernorm-row:<dtype>``) and seconds per fresh page of a
    framework's allocations (``fresh-page:<framework>``). Other ceilings are ignored; a malformed figure of these is a FormatError."""
    from .model_code import MODULE_COLD
    from .opclass_costs import FRAMEWORKS, OpCosts

    profile = _checked_profile(profile)
    target = (profile.get("target") or {}).get("id") or "an unnamed target"
    maps: dict[str, dict[str, Figure]] = {"gemm_flops_per_s": {}, "dispatch_s": {}, "transcendental_per_s": {},
                                          "fresh_page_s": {}, "reduction_per_s": {},
                                          "layernorm_per_s": {}, "layernorm_row_s": {}, "function_per_s": {}}
    wanted = {"gemm": ("gemm_flops_per_s", DTYPES, "flops"), "dispatch": ("dispatch_s", FRAMEWORKS, "latency"),
              "transcendental": ("transcendental_per_s", DTYPES, ""),
              "fresh-page": ("fresh_page_s", FRAMEWORKS, "latency"),
              "reduction": ("reduction_per_s", DTYPES, ""), "layernorm": ("layernorm_per_s", DTYPES, ""),
              "layernorm-row": ("layernorm_row_s", DTYPES, "latency")}
    for entry in profile.get("ceilings") or ():
        name = entry.get("name") if isinstance(entry, Mapping) else None
        quantity, _, key = str(name).partition(":")
        kind, _, function = quantity.partition(".")
        if kind == "transcendental" and function:   # another function's own: transcendental.<function>:<dtype>
            if not function.isidentifier() or key not in DTYPES:
                continue
            field_name, key, scale = "function_per_s", f"{function}:{key}", ""
        elif quantity in wanted and key in wanted[quantity][1]:
            field_name, _, scale = wanted[quantity]
        else:
            continue
        unit = entry.get("unit")
        # the model code's cold ops are seconds per second of their own time (unit "s/s")
        value = entry.get("value") if not scale or key == MODULE_COLD else _scaled(entry, "value", scale, unit)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise FormatError(f"profile ceiling {name!r}: value must be a positive number, got {value!r}")
        source = str(entry.get("source") or f"measured: capability profile of {target}: {name}")
        maps[field_name][key] = Figure(float(value), source)
    return OpCosts(**maps)
